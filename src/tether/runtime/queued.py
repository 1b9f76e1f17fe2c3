"""The durable prompt queue, the runtime's side (the store's role is `PromptQueue`): what a queued prompt's
row holds, and how a run takes one exactly once.

A row's body is JSON: the prompt (text, or a message) and the run settings its request gave (the fields of
`launch.WIRE_OPTIONS`, what a wire carries; a request with anything else, a program's own tools or
permission callback, cannot outlive its process and is queued in memory only). Taking one: the run that
takes it holds the session's lease, and there, before it reads or journals anything, `admit` checks that
the row is still queued and that no earlier run journaled it already (its prompt message carries the
row's id in `metadata["queued_prompt"]`, and is journaled after the row's `after_seq`); the row is dropped
once its run ended. So a crash before the prompt is journaled leaves the row to run later; one after leaves
the prompt journaled, and the row is dropped unrun by whoever looks next; two processes that both try run
it once, whoever gets the lease first."""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from ..messages import Message
from ..store.protocols import Journal, PromptQueue
from ..store.records import QueuedPrompt
from .launch import WIRE_OPTIONS

QUEUED_KEY = "queued_prompt"
"""The metadata key of a journaled prompt that came from the durable queue: the row's id."""


class PromptTaken(Exception):
    """The queued prompt a run was to take is gone, or was journaled by an earlier run: nothing to do."""


class _Row(msgspec.Struct, kw_only=True):
    prompt: str | Message
    settings: dict[str, Any] = msgspec.field(default_factory=dict)


_decode = msgspec.json.Decoder(_Row)


def wire_settings(fields: dict[str, Any]) -> dict[str, Any] | None:
    """The run settings of a request's `fields` as a row keeps them; None when one cannot be kept (not a
    wire option): such a prompt is queued in memory only."""
    if any(name not in WIRE_OPTIONS for name in fields):
        return None
    return {name: list(value) if isinstance(value, tuple) else value for name, value in fields.items()}


def encode(prompt: str | Message, settings: dict[str, Any]) -> bytes:
    return msgspec.json.encode(_Row(prompt=prompt, settings=settings))


def decode(item: QueuedPrompt) -> tuple[Message, dict[str, Any]]:
    """The prompt of a row, as the message its run journals (tagged with the row's id), and its run's
    fields. Raises `msgspec.DecodeError`/`ValidationError` for a body this version cannot read."""
    row = _decode.decode(item.body)
    fields = {name: tuple(value) if isinstance(value, list) else value for name, value in row.settings.items()}
    unknown = [name for name in fields if name not in WIRE_OPTIONS]
    if unknown:
        raise msgspec.ValidationError(f"unknown run settings {unknown}")
    return tagged(row.prompt, item.id), fields


def tagged(prompt: str | Message, prompt_id: int) -> Message:
    """`prompt` as the user message its run journals, carrying the queued row's id."""
    message = prompt if isinstance(prompt, Message) else Message.user(prompt)
    return msgspec.structs.replace(message, metadata={**message.metadata, QUEUED_KEY: prompt_id})


class QueueStore(Journal, PromptQueue, Protocol):
    """What taking a queued prompt reads and writes."""


async def admit(store: QueueStore, session_id: str, prompt_id: int) -> None:
    """Under the session's lease, before its run journals anything: raise `PromptTaken` unless the row is
    still queued and not journaled yet (then drop it: an earlier run took it and died before dropping it)."""
    item = next((q for q in await store.queued_prompts(session_id) if q.id == prompt_id), None)
    if item is None:
        raise PromptTaken(prompt_id)
    for entry in await store.read(session_id, item.after_seq + 1):
        if isinstance(entry.body, Message) and entry.body.metadata.get(QUEUED_KEY) == prompt_id:
            await store.drop_prompt(session_id, prompt_id)
            raise PromptTaken(prompt_id)
