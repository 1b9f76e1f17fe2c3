"""A tether session as a Codex rollout (``RolloutLine``s of codex-rs/protocol, what `codex resume` reads and
`codex.py` imports back): ``session_meta`` first; each message as the response items Codex records (user and
assistant messages, reasoning, function calls and their outputs), with the event copies Codex's own UI shows
on resume (``user_message``, ``agent_message``); a ``turn_context`` wherever the model changes; usage as a
``token_count`` after its response; a compaction as a ``compacted`` item whose replacement history is its
summary; title changes as ``thread_name_updated``. tether's `bash` is Codex's ``shell_command``.

What the format cannot carry is counted in the `ExportReport`:

- left out: reverted entries, checkpoints and markers (tether's own), thinking that is not OpenAI's
  (its encrypted reasoning is what the Responses API takes back), file attachments, cache-write token
  counts and costs (an import prices the tokens anew), the system prompt of a session that did not come from Codex (Codex would use it in place of its
  own instructions), child sessions;
- flattened: a failed call's output is text (Codex keeps no error flag: it is kept under ``tether``, which
  the importer reads back); several results of one step become one output item each; an assistant message
  with no usage that another follows is one response with it.

A session that came from Codex gets back what tether kept of it: its session metadata, shell and custom
tool calls as they were written, output content items, a compaction's replacement history."""

from __future__ import annotations

import base64
import json
from typing import IO, Any

import msgspec

from .. import __version__
from ..messages import (
    Compaction,
    Entry,
    FilePart,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from ..store.protocols import Journal
from ..store.records import SessionInfo
from .foreign_export import (
    NO_RESULT,
    TETHER_KEY,
    ExportReport,
    attachments_after,
    child_count,
    continuation_order,
    export_mark,
    iso_time,
    last_title,
    note_unwritten,
    result_blocks,
    session_uuid,
    written_lines,
)

__all__ = ["SUMMARY_PREFIX", "export_codex"]

SUMMARY_PREFIX = "Summary of the conversation so far (written when its earlier part was compacted):\n\n"
"""What the model reads before a compaction's summary in the history Codex rebuilds from the rollout."""

_encoder = msgspec.json.Encoder()
_CONTEXT_TAGS = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions")


class _Writer:
    def __init__(self, out: IO[bytes], report: ExportReport, directory: str | None) -> None:
        self.out = out
        self.report = report
        self.directory = directory
        self.model: str | None = None
        self.open_response = False  # an assistant response was written and nothing has closed it yet
        self.custom: set[str] = set()
        self.totals = Usage()

    def line(self, at: float, kind: str, payload: dict[str, Any]) -> None:
        self.out.write(_encoder.encode({"timestamp": iso_time(at), "type": kind, "payload": payload}) + b"\n")
        self.report.lines += 1
        if kind != "event_msg" or payload.get("type") == "token_count":
            self.open_response = False

    def item(self, at: float, payload: dict[str, Any]) -> None:
        self.line(at, "response_item", payload)

    def event(self, at: float, payload: dict[str, Any]) -> None:
        self.line(at, "event_msg", payload)


def _session_meta(mark: dict[str, Any], report: ExportReport, created: float, directory: str | None,
                  kept: dict[str, Any], instructions: str | None) -> dict[str, Any]:  # fmt: skip
    meta = {k: v for k, v in kept.items() if k not in ("id", "timestamp", "cwd", "forked_from_id")}
    meta.update({"id": report.target_id, "timestamp": iso_time(created), "cwd": directory or ""})
    meta.setdefault("originator", "tether")
    meta.setdefault("cli_version", __version__)
    meta.setdefault("source", "cli")
    if instructions:
        meta["base_instructions"] = {"text": instructions}
    meta[TETHER_KEY] = dict(mark)  # where it came from, for an import to tell (`export_mark`; Codex ignores it)
    return meta


def _content(message: Message, w: _Writer, *, output: bool) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            items.append({"type": "output_text" if output else "input_text", "text": part.text})
        elif isinstance(part, ImagePart):
            url = _image_url(part)
            if url is None:
                w.report.leave_out("attachments without data or address")
                continue
            items.append({"type": "input_image", "image_url": url})
        elif isinstance(part, FilePart):
            w.report.leave_out("file attachments (Codex messages hold text and images)")
    return items


def _shell(call: ToolCallPart) -> dict[str, Any]:
    """tether's `bash` as Codex's ``shell_command``: the command line as one string, its timeout in ms."""
    args = dict(call.arguments) if isinstance(call.arguments, dict) else {}
    out: dict[str, Any] = {"command": args.pop("command", "")}
    timeout = args.pop("timeout", None)
    if isinstance(timeout, int | float) and not isinstance(timeout, bool):
        ms = timeout * 1000
        out["timeout_ms"] = int(ms) if float(ms).is_integer() else ms
    elif timeout is not None:
        out["timeout"] = timeout
    out.update(args)
    return {"type": "function_call", "name": "shell_command", "arguments": json.dumps(out, ensure_ascii=False),
            "call_id": call.id}  # fmt: skip


def _call_item(call: ToolCallPart, kept_calls: dict[str, Any], w: _Writer) -> dict[str, Any]:
    kept = kept_calls.get(call.id)
    if isinstance(kept, dict) and kept.get("custom") is True:
        w.custom.add(call.id)
        text = call.arguments.get("input", "") if isinstance(call.arguments, dict) else ""
        return {"type": "custom_tool_call", "status": "completed", "call_id": call.id, "name": call.name,
                "input": text if isinstance(text, str) else json.dumps(text)}  # fmt: skip
    if isinstance(kept, dict) and isinstance(kept.get("name"), str):
        if kept["name"] == "local_shell" and isinstance(kept.get("arguments"), dict):
            return {"type": "local_shell_call", "call_id": call.id, "status": "completed", "action": kept["arguments"]}
        if isinstance(kept.get("arguments"), str):
            return {"type": "function_call", "name": kept["name"], "arguments": kept["arguments"], "call_id": call.id}
    if call.name == "bash" and isinstance(call.arguments, dict) and isinstance(call.arguments.get("command"), str):
        return _shell(call)
    return {"type": "function_call", "name": call.name, "arguments": call.arguments_json(), "call_id": call.id}


def _token_usage(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "cached_input_tokens": usage.cache_read_tokens,
        "output_tokens": usage.output_tokens,
        "reasoning_output_tokens": usage.reasoning_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def _assistant(w: _Writer, entry: Entry, message: Message, cwd: str) -> None:
    at = entry.created_at
    codex = message.metadata.get("codex")
    kept_items = codex.get("items") if isinstance(codex, dict) else None
    carried = [
        p for p in message.parts
        if isinstance(p, TextPart | ToolCallPart | ToolResultPart) or (isinstance(p, ThinkingPart) and p.provider == "openai")
    ]  # fmt: skip
    if not carried and not kept_items:  # an empty response would take the usage of the next one
        w.report.leave_out("assistant messages with nothing Codex can carry")
        return
    if message.model is not None and message.model != w.model:
        w.model = message.model
        w.line(at, "turn_context", {"cwd": cwd, "approval_policy": "on-request",
                                    "sandbox_policy": {"type": "workspace-write"}, "model": message.model,
                                    "summary": "auto"})  # fmt: skip
    elif message.model is None and w.model is not None:
        w.report.flatten("assistant messages without a model (Codex gives them the one before)")
    if w.open_response:  # nothing closed the response before (a turn context would have)
        w.report.flatten("assistant messages without usage merged with the next (one Codex response)")
    calls = codex.get("calls") if isinstance(codex, dict) else None
    kept_calls: dict[str, Any] = calls if isinstance(calls, dict) else {}
    for part in message.parts:
        if isinstance(part, TextPart):
            w.item(
                at, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": part.text}]}
            )
            w.event(at, {"type": "agent_message", "message": part.text})
        elif isinstance(part, ThinkingPart):
            if part.provider != "openai":
                w.report.leave_out("thinking blocks of another provider than OpenAI")
                continue
            summary = [{"type": "summary_text", "text": part.text}] if part.text else []
            w.item(at, {"type": "reasoning", "summary": summary, "content": None, "encrypted_content": part.redacted})
            if part.text:
                w.event(at, {"type": "agent_reasoning", "text": part.text})
        elif isinstance(part, ToolCallPart):
            w.item(at, _call_item(part, kept_calls, w))
        elif isinstance(part, ToolResultPart):
            _output(w, at, part, [])
        else:
            w.report.leave_out("attachments of assistant messages")
    for kept in kept_items if isinstance(kept_items, list) else []:
        if isinstance(kept, dict) and isinstance(kept.get("item"), dict):
            w.item(at, kept["item"])  # web searches and the like, which tether has no part for
    w.open_response = True
    if message.usage is not None:
        usage = message.usage
        w.totals = w.totals + usage
        if usage.cache_write_tokens:
            w.report.leave_out("cache-write token counts")
        if usage.cost is not None:
            w.report.leave_out("costs (Codex keeps none: its import prices the tokens anew)")
        info = {"total_token_usage": _token_usage(w.totals), "last_token_usage": _token_usage(usage),
                "model_context_window": None}  # fmt: skip
        w.event(at, {"type": "token_count", "info": info, "rate_limits": None})


def _image_url(part: ImagePart) -> str | None:
    if part.data is not None:
        return f"data:{part.media_type};base64,{base64.b64encode(part.data).decode()}"
    return part.uri


def _output_items(result: ToolResultPart, images: list[Any], w: _Writer) -> Any:
    """A function call's output: its text, or the list of content items it came as, with its images (the
    image parts that follow it) back in their places."""

    def item_of(part: Any) -> dict[str, Any] | None:
        url = _image_url(part) if isinstance(part, ImagePart) else None
        if url is None:
            w.report.leave_out("attachments without data or address")
            return None
        return {"type": "input_image", "image_url": url}

    return result_blocks(result, images, "input_text", "input_image", item_of)


def _output(w: _Writer, at: float, result: ToolResultPart, images: list[Any]) -> None:
    if result.call_id in w.custom:
        payload: dict[str, Any] = {"type": "custom_tool_call_output", "call_id": result.call_id,
                                   "output": result.content}  # fmt: skip
    else:
        output = _output_items(result, images, w)
        payload = {"type": "function_call_output", "call_id": result.call_id, "output": output}
    if result.is_error:
        payload[TETHER_KEY] = {"is_error": True}
        w.report.flatten("failed calls' outputs (Codex keeps no error flag)")
    w.item(at, payload)


def _message(w: _Writer, entry: Entry, message: Message, cwd: str) -> None:
    if message.role == "assistant":
        _assistant(w, entry, message, cwd)
        return
    at = entry.created_at
    results = message.tool_results
    if len(results) > 1:
        w.report.flatten("tool messages with several results (one output item each)")
    if results:
        parts, beside = list(message.parts), False
        while parts:
            part = parts.pop(0)
            if isinstance(part, ToolResultPart):
                taken = attachments_after(part)
                _output(w, at, part, parts[:taken])
                parts = parts[taken:]
            elif isinstance(part, TextPart | ImagePart | FilePart):
                beside = True
        if beside:
            w.report.leave_out("text beside tool results")
        return
    content = _content(message, w, output=False)
    if message.role == "user":
        w.item(at, {"type": "message", "role": "user", "content": content})
        if message.text.lstrip().startswith(_CONTEXT_TAGS):
            return  # context Codex gives the model (the environment, AGENTS.md), not something a person typed
        event: dict[str, Any] = {"type": "user_message", "message": message.text}
        images = [c["image_url"] for c in content if c["type"] == "input_image"]
        if images:
            event["images"] = images
        w.event(at, event)
        return
    codex = message.metadata.get("codex")
    role = codex.get("role") if isinstance(codex, dict) and isinstance(codex.get("role"), str) else "developer"
    w.item(at, {"type": "message", "role": role, "content": content})


def _compaction(w: _Writer, entry: Entry, body: Compaction) -> None:
    codex = body.metadata.get("codex")
    history = codex.get("replacement_history") if isinstance(codex, dict) else None
    if not isinstance(history, list):
        text = SUMMARY_PREFIX + body.summary
        history = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]
    w.line(entry.created_at, "compacted", {"message": body.summary, "replacement_history": history})


async def export_codex(
    store: Journal, session_id: str, out: IO[bytes], *, target_id: str | None = None
) -> ExportReport:
    """Write session `session_id` to `out` as a Codex rollout and say what it left out. The rollout's
    session id is `target_id` (default: a UUID derived from the tether id). Its ``session_meta`` says
    where it came from (`export_mark`), so that importing it back adds only what Codex added."""
    info = await store.get_session(session_id)
    target = target_id or session_uuid(info.id)
    lines = await written_lines(lambda sink: _export(store, info, sink, target, export_mark(info, 0)))
    return await _export(store, info, out, target, export_mark(info, lines))


async def _export(store: Journal, info: SessionInfo, out: IO[bytes], target: str, mark: dict[str, Any]) -> ExportReport:
    report = ExportReport("codex", info.id, target)
    w = _Writer(out, report, info.directory)
    kept = info.metadata.get("codex")
    from_codex = isinstance(kept, dict)
    instructions = info.system_prompt if from_codex else None
    if info.system_prompt and not from_codex:
        report.leave_out("system prompt (Codex would put it in place of its own instructions)")
    meta = _session_meta(mark, report, info.created_at, info.directory, kept if isinstance(kept, dict) else {},
                         instructions)  # fmt: skip
    w.line(info.created_at, "session_meta", meta)
    cwd = info.directory or ""
    titles: list[str] = []
    last_at = info.created_at
    unanswered: set[str] = set()
    async for entry in continuation_order(store, info, report, unanswered):
        body = entry.body
        last_at = max(last_at, entry.created_at)
        report.entries += 1
        if isinstance(body, Message):
            _message(w, entry, body, cwd)
            for call in body.tool_calls:
                if call.id in unanswered:  # the Responses API refuses a call without its output
                    _output(w, entry.created_at, ToolResultPart(call_id=call.id, content=NO_RESULT, is_error=True), [])
                    report.flatten("calls that never got a result (given an error result)")
        elif isinstance(body, Compaction):
            _compaction(w, entry, body)
        elif isinstance(body, TitleChange):
            if body.title:
                titles.append(body.title)
                w.event(entry.created_at, {"type": "thread_name_updated", "thread_id": report.target_id,
                                           "thread_name": body.title})  # fmt: skip
            else:
                report.leave_out("title clearings")
        elif note_unwritten(body, report):
            report.entries -= 1
    final = last_title(info.title, titles)
    if final is not None:
        w.event(last_at, {"type": "thread_name_updated", "thread_id": report.target_id, "thread_name": final})
    children = await child_count(store, info.id)
    if children:
        report.leave_out("child sessions (export each by its id)", children)
    return report
