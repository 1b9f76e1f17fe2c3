"""The terminal sanitizer alone: every class of control character comes out escaped (and only once), text
in any script comes out as it went in, and JSON keeps its value while losing its raw DEL and C1 bytes."""

from __future__ import annotations

import json

import pytest

from tether.cli.render import StreamEscaper
from tether.cli.sanitize import escape_controls, escape_json_controls

CONTROLS = [
    # what a transcript could carry, what the terminal must be shown instead
    ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # CSI: clear the screen, cursor home
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),  # CSI SGR
    ("\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\", "\\x1b]8;;http://evil\\x1b\\click\\x1b]8;;\\x1b\\"),  # OSC 8
    ("\x1b]52;c;ZXZpbA==\x07", "\\x1b]52;c;ZXZpbA==\\x07"),  # OSC 52: write the clipboard
    ("\x1b]0;EVIL TITLE\x07", "\\x1b]0;EVIL TITLE\\x07"),  # OSC 0: the window title
    ("ding\x07", "ding\\x07"),  # BEL
    ("abc\x08\x08XY", "abc\\x08\\x08XY"),  # backspaces that would print aXY
    ("progress 10%\rDONE", "progress 10%\\rDONE"),  # a lone CR overwrites the line
    ("\x9b2J\x9d0;title\x9c", "\\x9b2J\\x9d0;title\\x9c"),  # C1: 8-bit CSI, OSC, ST
    ("\x85\x80\x9f", "\\x85\\x80\\x9f"),  # the rest of C1, NEL among them
    ("del\x7f", "del\\x7f"),  # DEL
    ("\x00\x0b\x0c\x1c\x1f", "\\x00\\x0b\\x0c\\x1c\\x1f"),  # NUL, VT, FF, the separators
]


@pytest.mark.parametrize(("raw", "escaped"), CONTROLS)
def test_every_class_of_control_is_shown_escaped(raw: str, escaped: str) -> None:
    assert escape_controls(raw) == escaped
    assert all(ch in "\n\t" or ch.isprintable() for ch in escape_controls(raw))


def test_every_c0_c1_and_del_but_newline_and_tab_is_escaped() -> None:
    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)]:
        char = chr(code)
        out = escape_controls(f"a{char}b")
        if char in "\n\t":
            assert out == f"a{char}b"
        elif char == "\r":
            assert out == "a\\rb"
        else:
            assert out == f"a\\x{code:02x}b", hex(code)


def test_newlines_tabs_and_line_ending_crlf_stay_line_endings() -> None:
    assert escape_controls("one\n\ttwo\n") == "one\n\ttwo\n"
    assert escape_controls("windows\r\nline\r\n") == "windows\nline\n"
    # only the CR that ends a line is a line ending; the one before it overwrites
    assert escape_controls("a\r\r\nb") == "a\\r\nb"


@pytest.mark.parametrize(
    "text",
    [
        "plain ASCII, punctuation: [bold] {x} \\ / ~",
        "emoji 👩‍💻🚀 and flags 🇫🇷",  # a ZWJ sequence and regional indicators
        "CJK 漢字かなカナ한국어",
        "combining: e\u0301 a\u0308 n\u0303",
        "RTL: שלום עולם and مرحبا بالعالم",
        "no-break\u00a0space, soft\u00adhyphen, é (Latin-1, just past C1)",
        "",
    ],
)
def test_ordinary_unicode_is_untouched(text: str) -> None:
    assert escape_controls(text) == text


def test_escaping_is_not_repeated_on_escaped_text() -> None:
    once = escape_controls("\x1b[2J\x07")
    assert escape_controls(once) == once == "\\x1b[2J\\x07"


def test_a_stream_in_pieces_is_escaped_like_the_whole() -> None:
    text = "progress\r10%\r\ndone\x1b[2J\r"
    for cut in range(len(text) + 1):
        stream = StreamEscaper()
        pieces = stream.feed(text[:cut]) + stream.feed(text[cut:]) + stream.flush()
        assert pieces == escape_controls(text), cut
    # a CR at the end of a piece waits for the next: it may be half of a line ending
    stream = StreamEscaper()
    assert stream.feed("line\r") == "line"
    assert stream.feed("\nnext") == "\nnext"
    assert stream.flush() == ""


def test_json_keeps_its_value_and_loses_raw_del_and_c1() -> None:
    value = {"text": "\x1b]0;T\x07 \x9b2J \x7f é 漢 👩‍💻", "\x85key": ["\x9d"]}
    data = json.dumps(value, ensure_ascii=False).encode()
    safe = escape_json_controls(data)
    assert json.loads(safe) == value
    assert not any(0x80 <= ord(ch) <= 0x9F for ch in safe.decode())
    assert b"\x7f" not in safe and b"\\u009b" in safe and b"\\u007f" in safe
    # characters past C1 keep their bytes
    assert "é 漢 👩‍💻".encode() in safe


def test_bidirectional_overrides_are_shown_not_obeyed() -> None:
    """U+202E and its kin reorder what follows on screen: a command shown for approval could read as another
    ("Trojan Source"). Right-to-left text itself is left alone."""
    shown = escape_controls("rm -rf ~ \u202e# tsil elif eht\u202c and \u2066x\u2069; שלום")
    assert shown == "rm -rf ~ \\u202e# tsil elif eht\\u202c and \\u2066x\\u2069; שלום"
    raw = json.dumps({"cmd": "a\u202eb\u2067c"}, ensure_ascii=False).encode()
    escaped = escape_json_controls(raw)
    assert b"\xe2\x80\xae" not in escaped and b"\\u202e" in escaped and b"\\u2067" in escaped
    assert json.loads(escaped) == json.loads(raw)
