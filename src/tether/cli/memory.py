"""`tether memory`: the notes kept for a project and for you, shown to every run's model (see
`tether.runtime.memory`): list them, add one, remove one."""

from __future__ import annotations

import os
import time

import click

from ..store.protocols import Journal
from .common import console, echo_json, wants_json, with_store
from .sanitize import escape_controls as shown


def _workspace(directory: str | None) -> str:
    return os.path.realpath(directory or os.getcwd())


@click.group("memory")
def memory() -> None:
    """Memory notes: facts kept for this project (or for you everywhere) and shown to every later run.

    The model keeps them with its `memory` tool (which asks first unless --allow memory); you keep them here."""


@memory.command("list")
@click.option("--dir", "directory", metavar="DIR", help="The project (default: the current directory).")
@click.option("--json", "json_flag", is_flag=True, help="Print JSON.")
def list_command(directory: str | None, json_flag: bool) -> None:
    """The notes of this project and yours, newest first."""
    from ..runtime.memory import notes

    async def go(store: Journal) -> list[dict[str, object]]:
        return [n.as_dict() for n in await notes(store, _workspace(directory))]

    found = with_store(go)
    if wants_json(json_flag):
        echo_json(found)
        return
    out = console()
    if not found:
        out.print("No memory notes. Add one: tether memory add 'the tests need `make db` first'")
        return
    for n in found:
        day = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(n["at"])))  # type: ignore[arg-type]
        out.print(
            f"{n['id']} {n['scope']}, by {n['by']}, {day}\n  {shown(str(n['text']))}",
            highlight=False,
        )


@memory.command("add")
@click.argument("text")
@click.option("--user", "for_user", is_flag=True, help="A note for you everywhere, not only this project.")
@click.option("--dir", "directory", metavar="DIR", help="The project (default: the current directory).")
def add(text: str, for_user: bool, directory: str | None) -> None:
    """Keep a note."""
    from ..runtime.memory import remember

    async def go(store: Journal) -> str:
        note = await remember(store, text, scope="user" if for_user else "project", workspace=_workspace(directory))
        return note.id

    click.echo(f"remembered {with_store(go)}")


@memory.command("rm")
@click.argument("note_id")
@click.option("--dir", "directory", metavar="DIR", help="The project (default: the current directory).")
def rm(note_id: str, directory: str | None) -> None:
    """Forget a note (it leaves the prompts and the lists; the history keeps it)."""
    from ..runtime.memory import forget

    async def go(store: Journal) -> None:
        await forget(store, note_id, _workspace(directory))

    with_store(go)
    click.echo(f"forgot {note_id}")
