"""`tether trust [DIR]`: accept what a workspace's `.tether/config.toml` grants (its allow rules, an
``accept-edits`` mode), after reading what changed since you last did (see `tether.runtime.trust`)."""

from __future__ import annotations

import click
from rich.console import Console

from ..paths import canonical_directory
from ..runtime import audit
from ..runtime.configuration import load_project_permissions, project_config_path
from ..runtime.trust import accept, grants, pending_change
from .common import with_store
from .render import shown


@click.command("trust")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--show", "show_only", is_flag=True, help="Only show what would be accepted.")
def trust(directory: str | None, show_only: bool) -> None:
    """Accept the permissions of a workspace's .tether/config.toml (default: this directory).

    A project's own allow rules and mode grant nothing until you accept them here or at a run's prompt; a
    change to them (by anyone, a model included) waits for you again. Deny and ask rules apply always."""
    out = Console(highlight=False, soft_wrap=True)
    workspace = canonical_directory(directory)
    path = project_config_path(workspace)
    project = load_project_permissions(workspace)
    if project is None:
        out.print(f"No {shown(str(path))}: nothing to accept.")
        return
    change = pending_change(workspace, path, project)
    if change is None:
        granted = grants(project)
        what = ", ".join(granted["allow"]) or "nothing"
        out.print(f"{shown(str(path))} is accepted as it is (it allows {shown(what)}).")
        return
    out.print(f"{shown(str(path))} lets more through than you last accepted here:")
    for line in change.diff():
        out.print(f"  {shown(line)}")
    if show_only:
        return
    accept(workspace, project)
    with_store(audit.flush)  # the trail's record of it, now rather than with the next run's
    out.print("Accepted: runs in this workspace apply these permissions until the file grants more.")
