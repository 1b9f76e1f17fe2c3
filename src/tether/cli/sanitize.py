"""Text from a model, a tool or an imported file made safe for a terminal: every control character (C0 but
newline and tab, DEL, C1) shown escaped, so no escape sequence in a transcript can clear the screen, set
the title, write the clipboard or plant a hyperlink. Also the same guard for JSON printed by the CLI."""

from __future__ import annotations

import re

# C0 but \t and \n, then DEL and the C1 block (U+0080-U+009F: 8-bit CSI, OSC, ST... which some terminals
# obey even in UTF-8), then the bidirectional embeddings, overrides and isolates (U+202A-U+202E,
# U+2066-U+2069), which reorder what follows them on screen: a command shown for approval could read as
# another ("Trojan Source"). \r\n comes first so that a Windows line ending stays a line ending, while a
# lone \r, which moves the cursor back to overwrite the line, is shown.
_CONTROL = re.compile("\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\r\n":
        return "\n"
    if char == "\r":
        return "\\r"
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with each control character written out as Python would (``\\x1b``, ``\\x07``, ``\\r``), so a
    terminal shows it instead of obeying it. Newlines and tabs stay, a ``\\r\\n`` becomes ``\\n``; everything
    else (any script, emoji, combining marks) is left as it is. For people only: `--json` keeps the text."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(_escaped, text)


# In UTF-8, U+0080-U+009F are exactly the two-byte sequences C2 80-C2 9F, and C2 only ever leads a character;
# U+202A-U+202E are E2 80 AA-AE, U+2066-U+2069 are E2 81 A6-A9.
_JSON_RAW = re.compile(b"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def escape_json_controls(data: bytes) -> bytes:
    """UTF-8 JSON with DEL, the C1 controls and the bidirectional overrides, which JSON allows raw inside
    strings, written as ``\\u`` escapes: the decoded value is the same, and printing it to a terminal obeys
    nothing (the encoder already escapes C0)."""
    return _JSON_RAW.sub(lambda m: b"\\u%04x" % ord(m.group().decode()), data)
