"""Retries and error classification shared by the adapters: HTTP failures become the typed errors of
`tether.errors`, and `retrying()` re-opens a stream after a retryable failure, with exponential backoff and
jitter, honouring the provider's ``retry-after``.

A stream is retried only while nothing has been forwarded to the consumer: once the first event (a token, a
usage report) has been yielded, a failure propagates, because the caller may already have shown or acted on
the partial answer and a second answer would not continue the first.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

from ..errors import (
    AuthError,
    BadRequest,
    ContextOverflow,
    ProviderError,
    RateLimited,
    TransientError,
)
from .base import EventStream, ModelRequest, Provider, StreamEvent, aclose_quietly

log = logging.getLogger("tether.providers")

# What providers say when a prompt does not fit: OpenAI and most compatible servers, Anthropic, Gemini,
# llama.cpp, vLLM, Groq, Mistral.
_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|context length|context window|prompt is too long"
    r"|too many tokens|exceeds? the (?:model'?s? )?(?:maximum|context|max)|input is too long"
    r"|reduce the length of the messages|requested \d+ tokens|string_above_max_length|request too large for model",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry. `max_attempts` counts the first try; a ``retry-after`` longer
    than `max_retry_after` is cut down to it so that one answer from a server cannot stall a run."""

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if min(self.base_delay, self.max_delay, self.max_retry_after) < 0:
            raise ValueError("delays must not be negative")

    def delay(self, retry: int, error: ProviderError) -> float:
        """Seconds to wait before retry number `retry` (1 for the first retry) after `error`."""
        retry_after = error.retry_after if isinstance(error, RateLimited | TransientError) else None
        if retry_after is not None:
            return min(max(0.0, float(retry_after)), self.max_retry_after)
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** (retry - 1))
        # "Equal jitter": at least half the backoff, so retries never collapse to zero, and spread over the
        # other half, so that many clients failing together do not retry together.
        return ceiling / 2 + random.uniform(0, ceiling / 2)


NO_RETRY = RetryPolicy(max_attempts=1)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``retry-after`` header: a number of seconds, or an HTTP date. None when absent or
    unreadable; never negative."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_from_headers(headers: Mapping[str, str] | None) -> float | None:
    """``retry-after-ms`` (OpenAI) when present, else ``retry-after``."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    return parse_retry_after(headers.get("retry-after"))


def is_context_overflow(*texts: str | None) -> bool:
    return any(t and _OVERFLOW.search(t) for t in texts)


def classify_http_error(
    status: int | None,
    message: str,
    *,
    code: str | None = None,
    type: str | None = None,
    headers: Mapping[str, str] | None = None,
    provider: str | None = None,
) -> ProviderError:
    """The typed error for an HTTP failure of a model API, from its status, message and error code/type."""
    text = f"{provider or 'provider'}: {message}" if message else f"{provider or 'provider'}: HTTP {status}"
    if is_context_overflow(code, type, message) or status == 413:
        return ContextOverflow(text, status=status, provider=provider)
    if status in (401, 403) or type in ("authentication_error", "permission_error"):
        return AuthError(text, status=status, provider=provider)
    if status == 429 or type == "rate_limit_error":
        error = RateLimited(text, retry_after=retry_after_from_headers(headers), status=status, provider=provider)
        if code == "insufficient_quota" or type == "insufficient_quota":
            # Out of credit: waiting will not help, and retrying only burns the run's time.
            error.retryable = False
        return error
    if (status is not None and (status in (408, 409) or status >= 500)) or type in ("overloaded_error", "api_error"):
        transient = TransientError(text, status=status, provider=provider)
        transient.retry_after = retry_after_from_headers(headers)  # an overloaded server may say when
        return transient
    if status is not None and 400 <= status < 500:
        return BadRequest(text, status=status, provider=provider)
    return ProviderError(text, status=status, provider=provider)


Sleep = Callable[[float], Awaitable[None]]


async def retrying(
    open_stream: Callable[[], AsyncIterator[StreamEvent]],
    policy: RetryPolicy,
    *,
    sleep: Sleep = asyncio.sleep,
) -> EventStream:
    """Events of `open_stream()`, re-opened after a retryable `ProviderError` raised before the first event.

    Closing this generator closes the stream it is reading (and so the HTTP response under it).
    """
    attempt = 1
    while True:
        stream = open_stream()
        forwarded = False
        try:
            async for event in stream:
                forwarded = True
                yield event
            return
        except ProviderError as exc:
            if forwarded or not exc.retryable or attempt >= policy.max_attempts:
                raise
            wait = policy.delay(attempt, exc)
            # one short line a retry (a server's error can be a page long); the whole of it at debug level
            first = next((line for line in str(exc).splitlines() if line.strip()), "").strip()[:160]
            log.warning("%s (attempt %d of %d); retrying in %.1fs", first, attempt, policy.max_attempts, wait)
            log.debug("the whole error: %s", exc)
        finally:
            await aclose_quietly(stream)
        await sleep(wait)
        attempt += 1


class RetryingProvider:
    """Any provider, with `retrying()` around its streams (the HTTP adapters retry by themselves)."""

    def __init__(self, provider: Provider, policy: RetryPolicy = RetryPolicy(), *, sleep: Sleep = asyncio.sleep):
        self.provider = provider
        self.policy = policy
        self.name = provider.name
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"RetryingProvider({self.provider!r}, {self.policy!r})"

    def stream(self, request: ModelRequest) -> EventStream:
        return retrying(lambda: self.provider.stream(request), self.policy, sleep=self._sleep)
