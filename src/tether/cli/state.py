"""What the `tether` group and every subcommand share, kept apart from the rest of the CLI's shared code so
that `tether --help` loads nothing else: the group's options (the store URL, `--json`, `--debug`) and the two ways a
command fails cleanly (one line on stderr; exit 1 for an error, 2 for an option that cannot be used)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click


@dataclass
class CliState:
    """The group-level options, stored on the click context for subcommands to read."""

    store_url: str | None = None
    json: bool = False
    debug: bool = False


def cli_state() -> CliState:
    ctx = click.get_current_context(silent=True)
    state = ctx.find_object(CliState) if ctx is not None else None
    return state or CliState()


def wants_json(flag: bool) -> bool:
    """A command's own `--json` or the global one."""
    return flag or cli_state().json


class CliError(click.ClickException):
    """A `TetherError` on its way out: printed as one line, no traceback."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        # The message may quote a provider's answer, a file or a stored title. Imported here: `--help` loads
        # this module and nothing it does not need.
        from .sanitize import escape_controls

        click.echo(f"error: {escape_controls(self.format_message())}", err=True)


class OptionError(CliError):
    """An option that cannot be used (an unknown tool or model, a bad configuration file, a session that is
    not there), found before anything was done: a usage error."""

    exit_code = 2
