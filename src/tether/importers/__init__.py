"""Bringing sessions in and taking them out: tether's own JSON format (`tether_json`), Claude Code
transcripts (`claude_code`), Codex rollouts (`codex`) and opencode's stores (`opencode`), each a module that
reads its format into the store (`opencode_sources` reads opencode's stores); `sources` finds each tool's
files and detects a file's format; `watch` repeats an import as the tools write; `claude_code_export` and
`codex_export` write a session in those tools' formats, and `continuation` takes such an export back (what
the tool added goes to the original session, not a copy)."""

from __future__ import annotations

from .tether_json import FORMAT, VERSION, SessionExport, export_json, import_file, import_json, parse_export

__all__ = ["FORMAT", "VERSION", "SessionExport", "export_json", "import_file", "import_json", "parse_export"]
