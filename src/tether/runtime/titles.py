"""Titles written by a model. After a session's first exchange (its first prompt and the first answer with
text), a small model (``[runtime] title_model``; unset: the session's own, but not the embedded local one)
writes a short title. The run starts it as the answer is journaled and goes on without waiting: the title is
journaled (a `TitleChange`) at the run's next step, or once the run has said it is done, still under its
lease (`AgentRun` waits for it at most `TITLE_WAIT` seconds then). A title a person set is never replaced;
`retitle` (``tether sessions retitle ID``, the server's ``POST /sessions/{id}/retitle``) writes one again
on demand."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence

from ..config import Config
from ..errors import ConfigError, NotYet, ProviderError
from ..messages import Entry, Message, TitleChange
from ..providers.anthropic import AnthropicProvider
from ..providers.base import ModelRequest, Provider, complete
from ..providers.openai import OpenAIProvider
from ..providers.registry import ResolvedModel, resolve_provider
from ..store.protocols import Store
from .handle import SessionHandle
from .lease import held_for_edit

log = logging.getLogger("tether.runtime")

TITLE_SYSTEM = (
    "You name conversations. Reply with a title of at most eight words that says what the conversation "
    "below is about: no quotes, no final full stop, nothing else."
)
TITLE_WAIT = 20.0
"""Seconds a run waits for its title once it has said it is done (the title is dropped after that)."""
TITLE_TIMEOUT = 60.0
"""Seconds `retitle` waits for the model."""
MAX_TITLE = 80
EXCERPT = 2000
"""Characters of the prompt and of the answer the title model reads."""

OFF = ("", "off", "none", "false")


def title_model(
    config: Config, provider: Provider, model: str, resolve: Callable[[str], ResolvedModel] | None = None
) -> tuple[Provider, str] | None:
    """Who titles the sessions of a run on `provider`/`model`: the configured ``title_model``, else the run's
    own model when a server serves it (not the embedded local one, nor a program's own provider); None:
    nobody. A title model that cannot be used is logged
    and titles nothing (a run never fails for its title). `resolve` makes the configured one (the run's
    `resolve_model`: a manager's, with its shared clients); None: the registry's, with `config`."""
    spec = config.runtime.title_model
    if spec is not None and spec.strip().lower() in OFF:
        return None
    if spec is None:  # the run's own model when a server serves it: not the embedded one, nor a test double
        return (provider, model) if isinstance(provider, OpenAIProvider | AnthropicProvider) else None
    try:
        resolved = resolve(spec) if resolve is not None else resolve_provider(spec, config=config)
    except ConfigError as exc:
        log.warning("title_model = %r cannot be used: %s", spec, exc)
        return None
    return resolved.provider, resolved.model


def clean_title(text: str) -> str | None:
    """The title in a model's reply: its first line, without quotes, a ``Title:`` label or a final stop,
    spaces collapsed, at most `MAX_TITLE` characters; None when nothing is left."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    line = re.sub(r"^(title|session title)\s*:\s*", "", line, flags=re.IGNORECASE)
    line = line.strip().strip("\"'`*#").strip().rstrip(".").strip()
    line = " ".join(line.split())
    if not line:
        return None
    return line if len(line) <= MAX_TITLE else line[: MAX_TITLE - 1].rstrip() + "…"


def first_exchange(entries: Sequence[Entry]) -> tuple[str, str] | None:
    """The session's first prompt and the first answer with text, when `entries` (from the first) hold both."""
    prompt = next((e.body.text for e in entries if isinstance(e.body, Message) and e.body.role == "user"), None)
    answer = next(
        (e.body.text for e in entries if isinstance(e.body, Message) and e.body.role == "assistant" and e.body.text),
        None,
    )
    return (prompt, answer) if prompt and answer else None


def titled_by_a_person(entries: Sequence[Entry]) -> bool:
    return any(isinstance(e.body, TitleChange) for e in entries)


async def write_title(provider: Provider, model: str, prompt: str, answer: str) -> str | None:
    """One short call: the title of an exchange, or None when the model gave nothing usable."""
    text = f"User: {prompt[:EXCERPT]}\n\nAssistant: {answer[:EXCERPT]}"
    request = ModelRequest(
        model=model, system=TITLE_SYSTEM, messages=[Message.user(text)], max_output_tokens=32, temperature=0
    )
    return clean_title((await complete(provider, request)).message.text)


async def retitle(
    store: Store,
    session_id: str,
    *,
    config: Config,
    model: str | None = None,
    resolve: Callable[..., ResolvedModel] = resolve_provider,
    lease: bool = True,
) -> str:
    """Title session `session_id` again from its first exchange, with `model`, else ``title_model``, else
    the session's own model (the embedded one too: a person asked); journaled under the session's lease
    (`lease=False`: the caller holds the session, as the server's `exclusive` does).
    Raises `NotYet` when there is no exchange yet, `ProviderError` when the model gave no title,
    `SessionBusy` while a run holds the session, `ConfigError` for a model that cannot be used."""
    info = await store.get_session(session_id)
    exchange = first_exchange(await store.read(session_id, 1, 200))
    if exchange is None:
        raise NotYet(f"session {session_id} has no exchange to title yet (a prompt and an answer)")
    spec = model or (config.runtime.title_model if (config.runtime.title_model or "").lower() not in OFF else None)
    resolved = resolve(spec or info.model, config=config)
    title = await asyncio.wait_for(write_title(resolved.provider, resolved.model, *exchange), TITLE_TIMEOUT)
    if title is None:
        raise ProviderError(f"{resolved.id} gave no title")
    if not lease:
        await SessionHandle(store, await store.get_session(session_id)).set_title(title)
        return title
    async with held_for_edit(store, session_id, what="title"):  # a run holds the session: SessionBusy
        await SessionHandle(store, await store.get_session(session_id)).set_title(title)
    return title


__all__ = [
    "TITLE_WAIT",
    "clean_title",
    "first_exchange",
    "retitle",
    "title_model",
    "titled_by_a_person",
    "write_title",
]
