"""Bringing sessions in and taking them out: tether's own JSON format (`tether_json`) now; Claude Code,
Codex and opencode transcripts join it here, each a module that reads its format into the store."""

from __future__ import annotations

from .tether_json import FORMAT, VERSION, SessionExport, export_json, import_file, import_json, parse_export

__all__ = ["FORMAT", "VERSION", "SessionExport", "export_json", "import_file", "import_json", "parse_export"]
