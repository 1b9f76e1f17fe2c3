"""pydantic-ai and tether: a tether history as pydantic-ai `ModelMessage`s and back, and an agent's messages
kept in a tether session.

    from tether.integrations.pydantic_ai import load_messages, save_messages

    history = await load_messages(store, "chat-7")            # [] for a session not written yet
    result = await agent.run("next question", message_history=history)
    await save_messages(store, "chat-7", result.new_messages())

A pydantic-ai message becomes one or more journal entries: a request's system prompts, user prompts and tool
returns become system, user and tool messages (consecutive parts of one role in one message), a response
becomes an assistant message (text, thinking with its signature, tool calls, usage, model); tether's
tools (`sessions show`, `recall`, `context`, `compact`, export) read them. The first entry of each also
keeps the message's JSON (pydantic-ai's own `ModelMessagesTypeAdapter` form), so `load_messages` gives back
exactly what `save_messages` took, parts tether has no meaning for included. Entries that tether wrote itself
(or imported) are translated. Needs the extra ``pydantic-ai`` (``pydantic-ai-slim``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .. import markers
from ..errors import InvalidInput, MissingExtra, SessionNotFound
from ..ids import is_valid_id
from ..importers.jsonl import source_session_id
from ..messages import (
    Compaction,
    Entry,
    EntryBody,
    FilePart,
    ImagePart,
    Marker,
    Message,
    Part,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from ..paths import canonical_directory
from ..store.protocols import Journal
from ..store.reverts import active_until

try:
    from pydantic_ai import messages as pai
    from pydantic_ai.usage import RequestUsage
except ModuleNotFoundError as e:  # pragma: no cover - the extra is installed where tests run
    if (e.name or "").split(".")[0] in ("pydantic_ai", "pydantic", "pydantic_core"):
        raise MissingExtra("pydantic-ai", e.name or "pydantic_ai") from e
    raise

META_KEY = "pydantic_ai"
"""On the first entry of a message: ``{"message": <its JSON>, "entries": N}`` (the message is N entries);
on the others ``{"continues": True}``."""
MESSAGE_MARKER = markers.PYDANTIC_AI_MARKER
"""A message with no part that tether has a meaning for (`markers.PydanticAiMessage`)."""
SOURCE = "pydantic-ai"
"""The tool name a session key is derived under, and the `agent` of the sessions `save_messages` creates."""

_adapter = pai.ModelMessagesTypeAdapter


def session_id_for(key: str) -> str:
    """The tether session of `key`: `key` itself when it is a tether id (``ses_...``), else the session derived
    from it (the same every time)."""
    if not isinstance(key, str) or not key:
        raise InvalidInput("a session key must be a non-empty string")
    return key if is_valid_id(key) else source_session_id(SOURCE, key)


# --- pydantic-ai -> tether -----------------------------------------------------------------------------


def _user_parts(content: str | Sequence[Any]) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(text=content)]
    parts: list[Part] = []
    for item in content:
        if isinstance(item, str):
            parts.append(TextPart(text=item))
        elif isinstance(item, pai.TextContent):
            parts.append(TextPart(text=item.content))
        elif isinstance(item, pai.BinaryContent):
            if item.is_image:
                parts.append(ImagePart(media_type=item.media_type, data=item.data))
            else:
                parts.append(FilePart(media_type=item.media_type, data=item.data))
        elif isinstance(item, pai.ImageUrl):
            parts.append(ImagePart(media_type=item.media_type, uri=item.url))
        elif isinstance(item, pai.FileUrl):
            parts.append(FilePart(media_type=item.media_type, uri=item.url))
    return parts


def _request_messages(request: pai.ModelRequest) -> list[Message]:
    """A request's parts as tether messages, one per run of parts of one role."""
    out: list[Message] = []

    def add(role: Role, parts: list[Part]) -> None:
        if not parts:
            return
        if out and out[-1].role == role:
            out[-1].parts.extend(parts)
        else:
            out.append(Message(role=role, parts=parts))

    for part in request.parts:
        if isinstance(part, pai.SystemPromptPart):
            add("system", [TextPart(text=part.content)])
        elif isinstance(part, pai.UserPromptPart):
            add("user", _user_parts(part.content))
        elif isinstance(part, pai.ToolReturnPart):
            error = part.outcome in ("failed", "denied", "interrupted", "retried")
            result = ToolResultPart(
                call_id=part.tool_call_id,
                content=part.model_response_str(wrap_if_error=False),  # tether's results carry is_error
                is_error=error,
                name=part.tool_name,
            )
            add("tool", [result])
        elif isinstance(part, pai.RetryPromptPart):  # deprecated, but a caller may still build one
            if part.tool_name is not None:
                result = ToolResultPart(
                    call_id=part.tool_call_id, content=part.model_response(), is_error=True, name=part.tool_name
                )
                add("tool", [result])
            else:
                add("user", [TextPart(text=part.model_response())])
        elif isinstance(part, pai.RetryFeedbackPart):
            add("user", [TextPart(text=part.model_response())])
    return out


def _response_message(response: pai.ModelResponse) -> Message | None:
    parts: list[Part] = []
    for part in response.parts:
        if isinstance(part, pai.TextPart):
            parts.append(TextPart(text=part.content))
        elif isinstance(part, pai.ThinkingPart):
            parts.append(ThinkingPart(text=part.content, signature=part.signature, provider=part.provider_name))
        elif isinstance(part, pai.ToolCallPart):
            if isinstance(part.args, str):
                parts.append(ToolCallPart.from_raw(part.tool_call_id, part.tool_name, part.args))
            else:
                parts.append(ToolCallPart(id=part.tool_call_id, name=part.tool_name, arguments=part.args or {}))
    if not parts:
        return None
    u = response.usage
    usage = Usage(
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cache_read_tokens=u.cache_read_tokens,
        cache_write_tokens=u.cache_write_tokens,
    )
    return Message(
        role="assistant",
        parts=parts,
        model=response.model_name,
        provider=response.provider_name,
        usage=usage if usage.input_tokens or usage.output_tokens else None,
        finish_reason=response.finish_reason,
    )


def to_entries(messages: Sequence[pai.ModelMessage]) -> list[tuple[EntryBody, float | None]]:
    """The journal entries of pydantic-ai messages, each with the time of its message (None: unknown).
    Every message's first entry keeps the message's JSON; a message with no part that tether reads becomes a
    marker holding it."""
    out: list[tuple[EntryBody, float | None]] = []
    for message in messages:
        if not isinstance(message, pai.ModelRequest | pai.ModelResponse):
            raise InvalidInput(f"not a pydantic-ai message (ModelRequest or ModelResponse): {type(message).__name__}")
    dumped = _adapter.dump_python(list(messages), mode="json")
    for message, raw in zip(messages, dumped, strict=True):
        if isinstance(message, pai.ModelRequest):
            bodies: list[EntryBody] = list(_request_messages(message))
            stamp = message.timestamp
        else:
            response = _response_message(message)
            bodies = [response] if response is not None else []
            stamp = message.timestamp
        when = stamp.timestamp() if isinstance(stamp, datetime) else None
        if not bodies:
            out.append((markers.to_marker(markers.PydanticAiMessage(message=raw)), when))
            continue
        for i, body in enumerate(bodies):
            assert isinstance(body, Message)
            body.metadata[META_KEY] = {"message": raw, "entries": len(bodies)} if i == 0 else {"continues": True}
            out.append((body, when))
    return out


# --- tether -> pydantic-ai -----------------------------------------------------------------------------


def _translate(message: Message, tool_names: dict[str, str]) -> pai.ModelMessage | None:
    """A tether message that keeps no pydantic-ai JSON, as pydantic-ai's. `tool_names` (call id -> name, of
    the calls before it) names a result that does not say its tool."""
    if message.role == "assistant":
        parts: list[pai.ModelResponsePart] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                parts.append(pai.TextPart(content=part.text))
            elif isinstance(part, ThinkingPart):
                parts.append(pai.ThinkingPart(content=part.text, signature=part.signature, provider_name=part.provider))
            elif isinstance(part, ToolCallPart):
                args: str | dict[str, Any] = part.raw_arguments if part.raw_arguments is not None else part.arguments
                parts.append(pai.ToolCallPart(tool_name=part.name, args=args, tool_call_id=part.id))
        if not parts:
            return None
        usage = RequestUsage()
        if message.usage is not None:
            usage = RequestUsage(
                input_tokens=message.usage.input_tokens,
                output_tokens=message.usage.output_tokens,
                cache_read_tokens=message.usage.cache_read_tokens,
                cache_write_tokens=message.usage.cache_write_tokens,
            )
        return pai.ModelResponse(parts=parts, usage=usage, model_name=message.model, provider_name=message.provider)
    request: list[pai.ModelRequestPart] = []
    if message.role == "system":
        request.append(pai.SystemPromptPart(content=message.text))
    elif message.role == "user":
        content: list[pai.UserContent] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                content.append(part.text)
            elif isinstance(part, ImagePart | FilePart):
                if part.data is not None:
                    content.append(pai.BinaryContent(data=part.data, media_type=part.media_type))
                elif part.uri is not None and isinstance(part, ImagePart):
                    content.append(pai.ImageUrl(url=part.uri))
                elif part.uri is not None:
                    content.append(pai.DocumentUrl(url=part.uri, media_type=part.media_type))
        if not content:
            return None
        only_text = len(content) == 1 and isinstance(content[0], str)
        request.append(pai.UserPromptPart(content=content[0] if only_text else content))  # type: ignore[arg-type]
    else:
        for result in message.tool_results:
            request.append(
                pai.ToolReturnPart(
                    tool_name=result.name or tool_names.get(result.call_id, ""),
                    content=result.content,
                    tool_call_id=result.call_id,
                    outcome="failed" if result.is_error else "success",
                )
            )
    return pai.ModelRequest(parts=request) if request else None


def to_model_messages(entries: Sequence[Entry]) -> list[pai.ModelMessage]:
    """pydantic-ai messages from active journal entries in order (what `Session.entries()` or
    `tether.store.active_entries` give). A message saved by `save_messages` comes back exactly, unless a
    revert hid some of its entries (the visible ones are then translated); entries tether wrote are
    translated, consecutive requests (or responses) merged into one; the latest compaction stands as its
    summary, a user prompt, followed by what it kept."""
    out: list[pai.ModelMessage] = []
    translated: list[bool] = []  # whether out[i] was translated (only those are merged)
    tool_names: dict[str, str] = {}

    def put(message: pai.ModelMessage, is_translated: bool) -> None:
        last = out[-1] if out and translated[-1] and is_translated else None
        if isinstance(last, pai.ModelRequest) and isinstance(message, pai.ModelRequest):
            out[-1] = pai.ModelRequest(parts=[*last.parts, *message.parts])
        elif isinstance(last, pai.ModelResponse) and isinstance(message, pai.ModelResponse):
            out[-1] = pai.ModelResponse(
                parts=[*last.parts, *message.parts],
                usage=last.usage + message.usage,
                model_name=last.model_name or message.model_name,
                provider_name=last.provider_name or message.provider_name,
            )
        else:
            out.append(message)
            translated.append(is_translated)

    window = list(entries)
    for entry in reversed(entries):
        if isinstance(entry.body, Compaction):
            put(pai.ModelRequest(parts=[pai.UserPromptPart(content=entry.body.summary)]), False)
            window = [e for e in entries if e.seq >= entry.body.first_kept_seq]
            break

    i = 0
    while i < len(window):
        entry, body = window[i], window[i].body
        i += 1
        if isinstance(body, Marker):
            kept = markers.read(body, markers.PydanticAiMessage)
            if kept is not None:
                out.extend(_adapter.validate_python([kept.message]))
                translated.append(False)
            continue
        if not isinstance(body, Message):
            continue
        kept = body.metadata.get(META_KEY)
        if isinstance(kept, dict) and isinstance(kept.get("message"), dict):
            n = kept.get("entries", 1)
            group = window[i - 1 : i - 1 + n] if isinstance(n, int) and n >= 1 else []
            if len(group) == n and all(e.seq == entry.seq + k for k, e in enumerate(group)):
                out.extend(_adapter.validate_python([kept["message"]]))
                translated.append(False)
                i += n - 1
                continue
        tool_names.update((call.id, call.name) for call in body.tool_calls)
        message = _translate(body, tool_names)
        if message is not None:
            put(message, True)
    return out


# --- the store -----------------------------------------------------------------------------------------


async def load_messages(store: Journal, session: str) -> list[pai.ModelMessage]:
    """The `message_history` for an agent from session `session` (a tether id or a key, see `session_id_for`):
    its active history from the latest compaction on; [] when the session does not exist yet."""
    sid = session_id_for(session)
    try:
        info = await store.get_session(sid)
    except SessionNotFound:
        return []

    def until(entry: Entry) -> int | None:
        return entry.body.first_kept_seq if isinstance(entry.body, Compaction) else None

    return to_model_messages(await active_until(store, sid, info.entry_count, until))


async def save_messages(
    store: Journal,
    session: str,
    messages: Sequence[pai.ModelMessage],
    *,
    directory: str | None = None,
    title: str | None = None,
) -> list[Entry]:
    """Append `messages` (an agent run's ``result.new_messages()``) to session `session` (a tether id or a
    key), in one transaction, creating the session (filed under `directory`, default the current one) when
    it does not exist. Entries keep their messages' times. Returns the entries written."""
    sid = session_id_for(session)
    pairs = to_entries(messages)
    if not pairs:
        return []
    try:
        await store.get_session(sid)
    except SessionNotFound:
        metadata = {} if sid == session else {META_KEY: {"session_key": session}}
        try:
            await store.create_session(
                id=sid, directory=canonical_directory(directory), title=title, agent=SOURCE, metadata=metadata
            )
        except InvalidInput:
            await store.get_session(sid)  # created meanwhile by another writer; else the error stands
    now = time.time()
    return await store.append(sid, [b for b, _ in pairs], created_at=[now if t is None else t for _, t in pairs])
