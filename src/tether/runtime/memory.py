"""Memory notes: facts that should outlive a session ("the tests need `make db` first", "the user wants
British spelling"), for one project or for the user everywhere. Kept in the store as sessions of their own,
one per scope (``memory notes: PROJECT`` and ``memory notes (user)``, with no directory, so that no
``--continue`` picks them): a note is a user message there, with who wrote it (the model or a person), when,
and from which session; forgetting one is a marker after it (the journal is append-only: a forgotten note
stays in the history, out of the prompt and the lists). So `tether recall` finds notes as it finds anything
said, and every face reads them through this module: the `memory` tool, `tether memory`, the server.

Every run's system prompt gets the notes of its project and the user's, newest first, within ``[memory]
max_tokens``."""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any, ClassVar, Literal

import msgspec

from .. import markers
from ..context.tokens import get_counter
from ..errors import InvalidInput, NotFound, ToolError
from ..ids import check_id, new_id
from ..messages import Message, TextPart
from ..store.protocols import Journal
from ..tools.base import ToolContext, ToolOutput

Scope = Literal["project", "user"]
MEMORY_KEY = "memory"
"""``metadata["memory"]``: on a notes session, ``{"scope", "project"?}``; on a note, ``{"id", "scope", "by",
"session"?, "at"}``."""
FORGET_MARKER = markers.FORGET_MARKER
"""A note forgotten (`markers.MemoryForget`)."""
DEFAULT_MAX_TOKENS = 2_000
MAX_NOTE_CHARS = 4_000
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class Note(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One note: its id (``mem_...``), text, scope, who wrote it (``model`` or ``user``), when, from which
    session, for which project."""

    id: str
    text: str
    scope: Scope
    by: str
    at: float
    session: str | None = None
    project: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}


def notes_session_id(scope: Scope, project: str | None) -> str:
    """The id of the session holding the notes of `scope` (the same every time: derived, not drawn)."""
    key = "user" if scope == "user" else f"project\0{project}"
    digest = int.from_bytes(hashlib.sha256(f"tether-memory\0{key}".encode()).digest()[:17], "big")
    chars = [_ALPHABET[(digest >> (5 * i)) & 31] for i in range(25)]
    return check_id("ses_0" + "".join(chars), "session id")


def _project(workspace: str | os.PathLike[str] | None) -> str:
    if workspace is None:
        raise InvalidInput("a project note needs the project's directory")
    return os.path.realpath(workspace)


async def _notes_session(store: Journal, scope: Scope, project: str | None, *, create: bool) -> str | None:
    sid = notes_session_id(scope, project)
    try:
        await store.get_session(sid)
        return sid
    except NotFound:
        if not create:
            return None
    title = "memory notes (user)" if scope == "user" else f"memory notes: {project}"
    meta: dict[str, Any] = {MEMORY_KEY: {"scope": scope, **({"project": project} if project else {})}}
    try:
        await store.create_session(id=sid, title=title, metadata=meta)
    except InvalidInput:  # made by another writer in the meantime
        await store.get_session(sid)
    return sid


async def remember(
    store: Journal,
    text: str,
    *,
    scope: Scope = "project",
    workspace: str | os.PathLike[str] | None = None,
    by: str = "user",
    session: str | None = None,
) -> Note:
    """Keep a note; returns it with its id."""
    text = text.strip()
    if not text:
        raise InvalidInput("a note needs some text")
    if len(text) > MAX_NOTE_CHARS:
        raise InvalidInput(f"a note is at most {MAX_NOTE_CHARS:,} characters (this one has {len(text):,})")
    if scope not in ("project", "user"):
        raise InvalidInput(f"scope must be project or user, not {scope!r}")
    project = _project(workspace) if scope == "project" else None
    sid = await _notes_session(store, scope, project, create=True)
    assert sid is not None
    note = Note(id=new_id("mem"), text=text, scope=scope, by=by, at=time.time(), session=session, project=project)
    meta = {MEMORY_KEY: {k: v for k, v in note.as_dict().items() if k != "text"}}
    await store.append(sid, [Message(role="user", parts=[TextPart(text)], metadata=meta)])
    return note


async def notes(
    store: Journal, workspace: str | os.PathLike[str] | None, *, scopes: tuple[Scope, ...] = ("project", "user")
) -> list[Note]:
    """The notes kept (not forgotten) for the project of `workspace` and the user, newest first."""
    out: list[Note] = []
    for scope in scopes:
        if scope == "project" and workspace is None:
            continue
        project = _project(workspace) if scope == "project" else None
        sid = await _notes_session(store, scope, project, create=False)
        if sid is None:
            continue
        kept: dict[str, Note] = {}
        async for entry in store.iter_entries(sid):
            body = entry.body
            if (forgotten := markers.read(body, markers.MemoryForget)) is not None:
                kept.pop(forgotten.id, None)
            elif isinstance(body, Message) and isinstance(body.metadata.get(MEMORY_KEY), dict):
                m = body.metadata[MEMORY_KEY]
                kept[str(m.get("id"))] = Note(
                    id=str(m.get("id")), text=body.text, scope=scope, by=str(m.get("by", "?")),
                    at=float(m.get("at", entry.created_at)), session=m.get("session"), project=project,
                )  # fmt: skip
        out.extend(kept.values())
    return sorted(out, key=lambda n: n.at, reverse=True)


async def forget(store: Journal, note_id: str, workspace: str | os.PathLike[str] | None, *, by: str = "user") -> Note:
    """Forget a note of the project or the user (`NotFound` when there is no such note)."""
    for note in await notes(store, workspace):
        if note.id == note_id:
            sid = notes_session_id(note.scope, note.project)
            await store.append(sid, [markers.to_marker(markers.MemoryForget(id=note_id, by=by, at=time.time()))])
            return note
    raise NotFound(f"no memory note {note_id!r} here (tether memory list shows them)")


def prompt_block(found: list[Note], max_tokens: int = DEFAULT_MAX_TOKENS) -> tuple[str, int]:
    """The notes for a system prompt, newest first, as many as fit in `max_tokens`; and how many fit."""
    if not found or max_tokens <= 0:
        return "", 0
    counter = get_counter()
    head = "# Memory notes\n\nKept from earlier sessions (the `memory` tool adds and forgets them):"
    used = counter.count(head)
    lines: list[str] = []
    for note in found:
        day = time.strftime("%Y-%m-%d", time.gmtime(note.at))
        line = f"- {note.text} ({note.scope}, {day}, {note.id})"
        cost = counter.count(line) + 1
        if used + cost > max_tokens:
            break
        lines.append(line)
        used += cost
    if not lines:
        return "", 0
    more = len(found) - len(lines)
    tail = f"\n({more} older notes not shown: `memory` with action list)" if more else ""
    return head + "\n" + "\n".join(lines) + tail, len(lines)


class MemoryTool:
    """`memory`: remember, list or forget notes for this project or the user (it writes to the store: it asks
    first unless a rule allows it, ``--allow memory``)."""

    name = "memory"
    description = (
        "Keep facts that should outlive this session, for this project (scope project) or for the user "
        "everywhere (scope user): action remember with text, list, or forget with id. Notes are shown to "
        "every later session's model; keep them short, true and useful, and never put secrets in them."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["remember", "list", "forget"]},
            "text": {"type": "string", "description": "The note (remember)"},
            "scope": {"type": "string", "enum": ["project", "user"], "description": "Default: project"},
            "id": {"type": "string", "description": "The note's id (forget)"},
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    read_only = False
    bulk = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        action = args["action"]
        try:
            if action == "remember":
                text = ctx.redactor.text(str(args.get("text") or ""))
                note = await remember(
                    ctx.store,
                    text,
                    scope=args.get("scope") or "project",
                    workspace=ctx.workspace,
                    by="model",
                    session=ctx.session_id,
                )
                return ToolOutput(f"remembered {note.id} ({note.scope})", metadata={"note": note.id})
            if action == "list":
                found = await notes(ctx.store, ctx.workspace)
                if not found:
                    return ToolOutput("no notes")
                return ToolOutput("\n".join(f"{n.id} ({n.scope}, by {n.by}): {n.text}" for n in found))
            note = await forget(ctx.store, str(args.get("id") or ""), ctx.workspace, by="model")
            return ToolOutput(f"forgot {note.id}: {note.text}")
        except (InvalidInput, NotFound) as exc:
            raise ToolError(str(exc)) from None
