"""Token counting: exact BPE counts for OpenAI's o200k_base and cl100k_base encodings, read offline from the
vocabularies that `bpe-openai` ships; a fast heuristic when they are missing; the per-message and per-tool
overheads of a chat request; a per-entry count cache; and estimates that say where their number came from."""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.machinery
import importlib.util
import logging
import math
import re
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from ..errors import InvalidInput, MissingExtra
from ..messages import (
    Entry,
    FilePart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from ..providers.base import TokenCounter as TokenCounter

log = logging.getLogger("tether.context")

ENCODINGS = ("o200k_base", "cl100k_base")
DEFAULT_ENCODING = "o200k_base"

# The chat format's framing, after OpenAI's published accounting (3 per message, 3 to prime the reply),
# rounded up a little: providers differ, and an estimate that is low is the one that overflows.
MESSAGE_OVERHEAD = 4
REQUEST_OVERHEAD = 3
TOOL_CALL_OVERHEAD = 8
TOOL_RESULT_OVERHEAD = 6
TOOL_SPEC_OVERHEAD = 10
TOOLS_OVERHEAD = 12
IMAGE_TOKENS = 1_600
"""An image of unknown size: Anthropic charges about (width * height) / 750, so 1,600 covers a 1,092-pixel
square; OpenAI's high-detail 512-pixel tiles cost less."""


# --- exact counts ------------------------------------------------------------------------------------

# The vocabularies are tiktoken's own files; these are the digests tiktoken checks its downloads against.
_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}

# Copied from tiktoken_ext.openai_public, which defines them inside functions that download the vocabulary;
# tests/context/test_tokens.py checks that they still agree.
_PATTERNS = {
    "cl100k_base": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}
_SPECIAL_TOKENS = {
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}

# Known answers that any engine must give before it is trusted.
_PROBES = {
    "cl100k_base": ("hello world", 2),
    "o200k_base": ("def main():\n    return 42  # héllo, wörld", 15),
}


def _check_encoding(encoding: str) -> str:
    if encoding not in ENCODINGS:
        raise InvalidInput(f"unknown encoding {encoding!r}; known: {', '.join(ENCODINGS)}")
    return encoding


def load_ranks(encoding: str) -> dict[bytes, int]:
    """The BPE merge ranks of `encoding`, read from the file that `bpe-openai` ships and checked against
    tiktoken's published digest. Raises `MissingExtra` when the package is not installed."""
    _check_encoding(encoding)
    directory = _package_dir()
    try:
        if directory is None:
            raise FileNotFoundError("bpe_openai")
        raw = (directory / "data" / f"{encoding}.tiktoken.gz").read_bytes()
    except OSError:
        raise MissingExtra("tokens", "bpe-openai") from None
    data = gzip.decompress(raw)
    if hashlib.sha256(data).hexdigest() != _SHA256[encoding]:
        raise MissingExtra("tokens", f"bpe-openai (its {encoding} vocabulary does not match tiktoken's)")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def tiktoken_encoding(encoding: str) -> Any:
    """A `tiktoken.Encoding` built from the bundled vocabulary, without tiktoken's network download."""
    try:
        import tiktoken
    except ImportError:
        raise MissingExtra("tokens", "tiktoken") from None
    return tiktoken.Encoding(
        encoding,
        pat_str=_PATTERNS[encoding],
        mergeable_ranks=load_ranks(encoding),
        special_tokens=_SPECIAL_TOKENS[encoding],
    )


def _clean(text: str) -> str:
    # Lone surrogates cannot be UTF-8 encoded; tiktoken replaces them the same way.
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class BpeCounter:
    """Exact token counts for one tiktoken encoding. `engine` says which implementation counts: the Rust
    counter of `bpe-openai` (about three times faster) or tiktoken; both give tiktoken's numbers."""

    def __init__(self, encoding: str, count: Callable[[str], int], engine: str) -> None:
        self.encoding = _check_encoding(encoding)
        self.engine = engine
        self.source = f"tiktoken:{encoding}"
        self._count = count

    def __repr__(self) -> str:
        return f"BpeCounter({self.encoding!r}, engine={self.engine!r})"

    def count(self, text: str) -> int:
        if not text:
            return 0
        try:
            return self._count(text)
        except UnicodeEncodeError:
            return self._count(_clean(text))


def _package_dir() -> Path | None:
    """Where `bpe_openai` is installed, found without importing it: its ``__init__`` loads every
    vocabulary it knows into Python dicts (1-2 s, ~60 MB), which counting does not need."""
    try:
        spec = importlib.util.find_spec("bpe_openai")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _bindings() -> ModuleType | None:
    """bpe-openai's Rust extension module, loaded from its file (see `_package_dir`)."""
    loaded = sys.modules.get("bpe_openai._bindings")
    if loaded is not None:
        return loaded
    directory = _package_dir()
    if directory is None:
        return None
    for path in sorted(directory.glob("_bindings.*")):
        if path.suffix not in (".so", ".pyd"):
            continue
        loader = importlib.machinery.ExtensionFileLoader("bpe_openai._bindings", str(path))
        spec = importlib.util.spec_from_file_location("bpe_openai._bindings", path, loader=loader)
        if spec is None:
            return None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module
    return None


def _rust_count(encoding: str) -> Callable[[str], int] | None:
    # A private module, so every step is guarded: any change there falls back to tiktoken.
    try:
        bindings = _bindings()
        if bindings is None:
            return None
        tokenizer = bindings.tokenizer_for_encoding(encoding)
        count: Callable[[str], int] = tokenizer.count
        probe, expected = _PROBES[encoding]
        if count(probe) != expected:
            log.warning("bpe-openai's %s counter disagrees with tiktoken; using tiktoken", encoding)
            return None
        return count
    except Exception as exc:  # an ABI or API change in a private module must not break counting
        log.warning("bpe-openai's counter is unusable (%s); using tiktoken", exc)
        return None


_load_lock = threading.Lock()


@cache
def _bpe_counter(encoding: str) -> BpeCounter:
    count = _rust_count(encoding)
    if count is not None:
        return BpeCounter(encoding, count, "bpe-openai")
    enc = tiktoken_encoding(encoding)

    def count_with_tiktoken(text: str) -> int:
        return len(enc.encode_ordinary(text))

    return BpeCounter(encoding, count_with_tiktoken, "tiktoken")


def bpe_counter(encoding: str = DEFAULT_ENCODING) -> BpeCounter:
    """The exact counter of `encoding`, loaded once per process. Raises `MissingExtra` without the
    `tokens` dependencies."""
    _check_encoding(encoding)
    with _load_lock:  # loading takes 0.1-0.3 s; two threads must not both pay it
        return _bpe_counter(encoding)


# --- the heuristic -----------------------------------------------------------------------------------

_PUNCT = re.compile(r"[^\w\s]", re.ASCII)


class HeuristicCounter:
    """Tokens from character classes, for when no vocabulary is installed: about 0.19 a letter, 0.55 a
    punctuation mark and 0.25 an extra UTF-8 byte. Fitted on o200k_base counts of Python source, chat prose
    and JSON tool output (mean error under 7% on each; chars/4 is 21% high on prose, 32% low on JSON)."""

    source = "heuristic"

    def count(self, text: str) -> int:
        if not text:
            return 0
        extra = len(text.encode("utf-8", "surrogatepass")) - len(text)
        punct = len(_PUNCT.findall(text))
        return max(1, math.ceil(0.19 * (len(text) - extra) + 0.55 * punct + 0.25 * extra))


HEURISTIC = HeuristicCounter()
_warned_missing = False


def encoding_for_model(model: str | None) -> str:
    """The encoding that counts best for `model` ("provider/model" or a bare id): cl100k_base for the GPT-4
    and GPT-3.5 generation, o200k_base for everything newer and for other vendors' models, whose own
    tokenizers are closer to it than to the older one."""
    name = (model or "").rsplit("/", 1)[-1].lower()
    if name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5")):
        return "o200k_base"
    if name.startswith(("gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")):
        return "cl100k_base"
    return "o200k_base"


def get_counter(encoding: str | None = None, *, model: str | None = None) -> TokenCounter:
    """The best counter available: exact for `encoding` (default: the one for `model`), else the
    heuristic (with one warning per process)."""
    global _warned_missing
    name = _check_encoding(encoding) if encoding is not None else encoding_for_model(model)
    try:
        return bpe_counter(name)
    except MissingExtra as exc:
        if not _warned_missing:
            log.warning("token counts are estimates: %s", exc)
            _warned_missing = True
        return HEURISTIC


MAX_CHARS_PER_TOKEN = 8
"""No vocabulary packs more characters than this into a token of real text (prose and code run at 3-5, JSON
and digits at 1-3): a text longer than this many characters a token is taken to be over a limit uncounted."""


def tokens_over(text: str, limit: int, counter: TokenCounter) -> bool:
    """Whether `text` holds more than `limit` tokens by `counter`, counted only where its size leaves it open:
    every token is at least one UTF-8 byte, so `limit` bytes (less one, for a tokenizer's leading-space
    token) are not over; more than `MAX_CHARS_PER_TOKEN` characters a token are. So the cost of deciding is
    bounded by the limit, not by the text, which may be a 100 MB paste."""
    if len(text) > MAX_CHARS_PER_TOKEN * limit:
        return True
    if len(text.encode("utf-8", "surrogatepass")) < limit:
        return False
    return counter.count(text) > limit


# --- messages, requests -----------------------------------------------------------------------------


def count_part(part: Part, counter: TokenCounter) -> int:
    """Tokens of one message part, with the framing its kind costs."""
    if isinstance(part, TextPart):
        return counter.count(part.text)
    if isinstance(part, ToolResultPart):
        return TOOL_RESULT_OVERHEAD + counter.count(part.content)
    if isinstance(part, ToolCallPart):
        return TOOL_CALL_OVERHEAD + counter.count(part.name) + counter.count(part.arguments_json())
    if isinstance(part, ThinkingPart):
        # Signed or redacted reasoning is replayed as it came; count what is sent, at 4 bytes a token.
        opaque = len(part.signature or "") + len(part.redacted or "")
        return counter.count(part.text) + math.ceil(opaque / 4)
    if isinstance(part, ImagePart):
        return IMAGE_TOKENS
    if isinstance(part, FilePart):
        if part.data is not None and part.media_type.startswith("text/"):
            return counter.count(part.data.decode("utf-8", "replace"))
        return IMAGE_TOKENS if part.data is None else max(IMAGE_TOKENS, math.ceil(len(part.data) / 4))
    raise TypeError(f"not a message part: {part!r}")  # pragma: no cover - the union is closed


def part_counts(message: Message, counter: TokenCounter) -> tuple[int, ...]:
    return tuple(count_part(p, counter) for p in message.parts)


def count_message(message: Message, counter: TokenCounter | None = None) -> int:
    """Tokens that `message` adds to a request: its parts and the per-message framing."""
    c = counter or get_counter()
    return MESSAGE_OVERHEAD + sum(count_part(p, c) for p in message.parts)


def count_tools(tools: Sequence[ToolSpec], counter: TokenCounter | None = None) -> int:
    """Tokens of the tool definitions sent with a request (name, description, JSON schema of each)."""
    if not tools:
        return 0
    c = counter or get_counter()
    total = TOOLS_OVERHEAD
    for tool in tools:
        total += TOOL_SPEC_OVERHEAD + _tool_tokens(c, tool)
    return total


_TOOL_TOKENS: dict[tuple[Any, str, str, bytes], int] = {}
"""Tokens of a tool's definition by counter: a run counts its tools at every step, the same ones."""
TOOL_TOKENS_KEPT = 4096


def _tool_tokens(c: TokenCounter, tool: ToolSpec) -> int:
    schema = msgspec.json.encode(tool.parameters)
    key = (c, tool.name, tool.description, schema)
    try:
        kept = _TOOL_TOKENS.get(key)
    except TypeError:  # a counter that cannot be a key (it compares by value but has no hash)
        return c.count(tool.name) + c.count(tool.description) + c.count(schema.decode())
    if kept is None:
        kept = c.count(tool.name) + c.count(tool.description) + c.count(schema.decode())
        if len(_TOOL_TOKENS) >= TOOL_TOKENS_KEPT:
            _TOOL_TOKENS.clear()
        _TOOL_TOKENS[key] = kept
    return kept


def count_fixed(system: str | None, tools: Sequence[ToolSpec], counter: TokenCounter | None = None) -> int:
    """Tokens of a request that do not depend on its messages: system prompt, tools, reply priming."""
    c = counter or get_counter()
    total = REQUEST_OVERHEAD + count_tools(tools, c)
    if system:
        total += MESSAGE_OVERHEAD + c.count(system)
    return total


def count_messages(
    messages: Iterable[Message],
    counter: TokenCounter | None = None,
    *,
    system: str | None = None,
    tools: Sequence[ToolSpec] = (),
) -> int:
    """Tokens of a whole request: messages, system prompt, tools and the framing around them."""
    c = counter or get_counter()
    return count_fixed(system, tools, c) + sum(count_message(m, c) for m in messages)


# --- estimates and the per-entry cache --------------------------------------------------------------


class TokenEstimate(msgspec.Struct, frozen=True, kw_only=True):
    """A token count and where it came from. `source` is ``"provider"`` when the number is anchored on the
    prompt size a provider reported for an earlier step (plus `counted` for what came after), else the
    counter's source. `counted` is this process's own count of the whole request, whatever the source."""

    tokens: int
    source: str
    counted: int
    counter: str
    provider_tokens: int | None = None
    anchor_seq: int | None = None
    """The seq of the assistant message whose usage anchored the estimate."""


class CountTable:
    """The part counts of one session's entries under one counter, by seq (see `TokenCache.table`)."""

    __slots__ = ("_cache", "_rows")

    def __init__(self, cache: TokenCache) -> None:
        self._cache = cache
        self._rows: dict[int, tuple[float, tuple[int, ...]]] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def counts(self, entry: Entry, message: Message, counter: TokenCounter) -> tuple[int, ...]:
        """The part counts of `message`, the body of `entry`: counted on first sight, then remembered.
        The commit time is checked too, so a session deleted and re-created under its id is recounted."""
        row = self._rows.get(entry.seq)
        if row is not None and row[0] == entry.created_at:
            self._cache.hits += 1
            return row[1]
        self._cache.misses += 1
        counts = part_counts(message, counter)
        if row is None:
            self._cache._grew(1)
        self._rows[entry.seq] = (entry.created_at, counts)
        return counts


class TokenCache:
    """Part counts of journal entries, by session, counter and seq. Entries never change once written, so
    a count never goes stale; the cache only bounds its size (`max_entries`), forgetting the sessions
    least recently looked up first."""

    def __init__(self, max_entries: int = 500_000) -> None:
        if max_entries < 1:
            raise InvalidInput("max_entries must be at least 1")
        self.max_entries = max_entries
        self._tables: dict[tuple[str, str], CountTable] = {}
        self._size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return self._size

    def clear(self) -> None:
        self._tables.clear()
        self._size = 0

    def table(self, session_id: str, counter: TokenCounter) -> CountTable:
        """The counts of one session's entries under `counter` (derivation looks it up once a step)."""
        key = (session_id, counter.source)
        table = self._tables.pop(key, None)  # re-inserted last: the most recently used
        if table is None:
            table = CountTable(self)
        self._tables[key] = table
        return table

    def parts(self, session_id: str | None, entry: Entry, message: Message, counter: TokenCounter) -> tuple[int, ...]:
        """The part counts of `message` (the body of `entry`); without a session, counted afresh."""
        if session_id is None:
            return part_counts(message, counter)
        return self.table(session_id, counter).counts(entry, message, counter)

    def _grew(self, n: int) -> None:
        self._size += n
        while self._size > self.max_entries and self._tables:
            _, oldest = next(iter(self._tables.items()))
            if len(self._tables) == 1:
                # one session bigger than the bound: forget its oldest tenth
                rows = oldest._rows
                for seq in list(rows)[: max(1, len(rows) // 10)]:
                    del rows[seq]
                    self._size -= 1
                return
            self._size -= len(oldest)
            del self._tables[next(iter(self._tables))]


_default_cache = TokenCache()


def default_cache() -> TokenCache:
    """The process-wide cache that derivation uses unless given another."""
    return _default_cache
