"""`providers/clients.py`: the runs of one process share their SDK clients, and so their connections. Two
providers of the same settings reuse one connection to a real HTTP server on loopback (it records the client
address of each request); providers of other settings get clients of their own; a provider's `aclose` leaves
a shared client open, its owner closes them all; another event loop gets clients of its own."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tether.config import Config, ProviderConfig
from tether.messages import Message
from tether.providers import ModelRequest, complete
from tether.providers.anthropic import AnthropicProvider
from tether.providers.clients import SharedClients
from tether.providers.openai import OpenAIProvider
from tether.providers.registry import resolve_provider

pytest.importorskip("openai", reason="needs the `openai` extra: pip install 'tether[openai]'")


def answer(server: Any, text: str) -> None:
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [{"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}]
    body = "".join(f"data: {json.dumps({**head, **c})}\n\n" for c in chunks) + "data: [DONE]\n\n"
    server.answer_sse(body, keep_alive=True)


def request() -> ModelRequest:
    return ModelRequest(model="m", messages=[Message.user("hi")])


def openai_for(server: Any, clients: SharedClients | None, key: str = "sk-loopback") -> OpenAIProvider:
    return OpenAIProvider("openai", base_url=f"{server.url}/v1", api_key=key, clients=clients)


async def test_runs_of_the_same_settings_share_one_connection(server: Any) -> None:
    clients = SharedClients()
    for n in range(3):  # three runs, each its own provider, as `tether serve` makes one per prompt
        answer(server, f"answer {n}")
        provider = openai_for(server, clients)
        assert (await complete(provider, request())).message.text == f"answer {n}"
        await provider.aclose()  # the run's end: the shared client stays open
    assert len({r.peer for r in server.requests}) == 1 and len(server.requests) == 3
    assert clients.made == 1
    await clients.aclose()
    assert len(clients) == 0


async def test_without_shared_clients_each_run_connects_anew(server: Any) -> None:
    """What every prompt did before: a client, a connection (and against a hosted API a TLS handshake)."""
    for n in range(3):
        answer(server, f"answer {n}")
        provider = openai_for(server, None)
        assert (await complete(provider, request())).message.text == f"answer {n}"
        await provider.aclose()
    assert len({r.peer for r in server.requests}) == 3


async def test_other_settings_get_clients_of_their_own(server: Any) -> None:
    clients = SharedClients()
    first, same, other_key = openai_for(server, clients), openai_for(server, clients), openai_for(server, clients, "k2")
    other_headers = OpenAIProvider(
        "openai",
        base_url=f"{server.url}/v1",
        api_key="sk-loopback",
        headers={"x-api-key": "hdr-secret"},
        clients=clients,
    )
    other_url = OpenAIProvider("openai", base_url=f"{server.url}/v2", api_key="sk-loopback", clients=clients)
    anthropic = AnthropicProvider(base_url=server.url, api_key="sk-loopback", clients=clients)
    assert first._sdk() is same._sdk()
    distinct = [first._sdk(), other_key._sdk(), other_headers._sdk(), other_url._sdk(), anthropic._sdk()]
    assert len({id(c) for c in distinct}) == 5 and clients.made == 5
    keys = repr(list(clients._clients))
    assert "sk-loopback" not in keys and "hdr-secret" not in keys  # a digest of the key and the headers
    for provider in (first, same, other_key, other_headers, other_url, anthropic):
        await provider.aclose()
    assert all(not c.is_closed() for c in distinct)  # the providers leave them to their owner
    await clients.aclose()
    assert all(c.is_closed() for c in distinct)


async def test_a_provider_of_its_own_closes_its_client(server: Any) -> None:
    provider = openai_for(server, None)
    client = provider._sdk()
    await provider.aclose()
    assert client.is_closed()


def test_another_event_loop_gets_clients_of_its_own(server: Any) -> None:
    """A client's connections belong to the loop that made them: one loop's are never used on the next."""
    clients = SharedClients()

    async def one_run(text: str) -> object:
        answer(server, text)
        provider = openai_for(server, clients)
        assert (await complete(provider, request())).message.text == text
        return provider._sdk()

    first = asyncio.run(one_run("first"))
    second = asyncio.run(one_run("second"))
    assert first is not second and clients.made == 2 and len(clients) == 1
    assert len({r.peer for r in server.requests}) == 2
    asyncio.run(clients.aclose())  # the old loop's clients are dropped, not closed from a loop not theirs


async def test_resolve_provider_passes_the_clients_on(server: Any) -> None:
    clients = SharedClients()
    config = Config(providers={"team": ProviderConfig(kind="openai", base_url=f"{server.url}/v1", api_key="k")})
    one = resolve_provider("team/m", config=config, clients=clients).provider
    two = resolve_provider("team/m", config=config, clients=clients).provider
    assert isinstance(one, OpenAIProvider) and isinstance(two, OpenAIProvider)
    assert one._sdk() is two._sdk()
    alone = resolve_provider("team/m", config=config).provider
    assert isinstance(alone, OpenAIProvider) and alone._sdk() is not one._sdk()
    for provider in (one, two, alone):
        await provider.aclose()
    await clients.aclose()
