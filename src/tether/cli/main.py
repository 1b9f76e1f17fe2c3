"""The `tether` command: a click group whose subcommands live in their own modules and are imported only
when run, so `tether --help` stays fast. Expected errors (`TetherError`) end as one line on stderr, exit 1
(`--debug` shows their traceback too); usage errors exit 2, as click makes them."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from .. import __version__
from ..errors import TetherError
from .state import CliError, CliState

COMMANDS: list[tuple[str, str, str]] = [
    # name       "module:attribute" of a click command    summary shown by `tether --help` without importing it
    ("sessions", "tether.cli.sessions:sessions", "List, show, fork, delete, export and import sessions."),
    ("import", "tether.cli.importing:import_command", "Import sessions from Claude Code, Codex or a tether export."),
    ("run", "tether.cli.run:run", "Run the agent on a prompt until it is done."),
    ("chat", "tether.cli.chat:chat", "Talk with the agent interactively."),
    ("models", "tether.cli.models:models", "List known models and the configured providers."),
    ("recall", "tether.cli.recall:recall_command", "Find what was said in earlier sessions."),
    ("rlm", "tether.cli.rlm:rlm", "Answer a question about a file too large for the model's window."),
    ("context", "tether.cli.context:context", "Show what the model would see at a session's next step."),
    ("compact", "tether.cli.compact:compact", "Compact a session now (or undo the latest compaction)."),
    ("doctor", "tether.cli.doctor:doctor", "Check the tether home, the database, the configuration and the extras."),
    ("backup", "tether.cli.backup:backup", "Copy the database to a file, safely, while tether may be running."),
    ("serve", "tether.cli.serve:serve", "Serve the sessions over HTTP: REST, live events (SSE), OpenAPI."),
    ("share", "tether.cli.share:share", "Share a session as a read-only web link; list or revoke links."),
    ("memory", "tether.cli.memory:memory", "Memory notes kept for a project or for you: list, add, rm."),
    ("mcp", "tether.cli.mcp:mcp", "MCP servers: list, add, remove, test; serve tether's sessions over MCP."),
    ("trust", "tether.cli.trust:trust", "Accept the permissions a workspace's .tether/config.toml grants."),
    ("archive", "tether.cli.archive:archive", "Move sessions to an S3-compatible bucket, or bring them back."),
    ("audit", "tether.cli.audit:audit", "Who did what: the audit trail of tool calls, approvals, sessions, shares."),
]
"""The subcommands. Adding one is one line here and a module under `tether.cli`."""

_LAZY = {name: (target, summary) for name, target, summary in COMMANDS}


class TetherGroup(click.Group):
    """Loads registered subcommands on first use and turns expected errors into a clean exit."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in _LAZY:
            return command
        module_name, _, attribute = _LAZY[cmd_name][0].partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{_LAZY[cmd_name][0]} is not a click command")
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                command = self.commands[name]
                if command.hidden:
                    continue
                rows.append((name, command.get_short_help_str(formatter.width)))
            else:
                rows.append((name, _LAZY[name][1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TetherError as e:
            state = ctx.find_object(CliState)
            if state is not None and state.debug:
                import traceback

                traceback.print_exception(e, file=sys.stderr)
            raise CliError(" ".join(str(e).split()) or type(e).__name__) from e


@click.group(cls=TetherGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="tether")
@click.option(
    "--store",
    "store_url",
    envvar="TETHER_STORE",
    metavar="URL",
    help="Where sessions are kept: sqlite:///path/to.db, a file path, memory://, or "
    "postgresql://user:password@host:port/database (the postgres extra). "
    "[env: TETHER_STORE; default: tether.db under TETHER_HOME]",
)
@click.option("--json", "json_output", is_flag=True, help="Print machine-readable JSON where a command supports it.")
@click.option("--debug", is_flag=True, help="Log at debug level, and show the traceback of an error.")
@click.pass_context
def cli(ctx: click.Context, store_url: str | None, json_output: bool, debug: bool) -> None:
    """tether: durable, resumable, searchable sessions for AI coding agents."""
    if debug:
        import logging

        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    ctx.obj = CliState(store_url=store_url or None, json=json_output, debug=debug)


def main() -> None:
    cli(prog_name="tether")
