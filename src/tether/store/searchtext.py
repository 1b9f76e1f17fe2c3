"""What the search index sees of an entry, and how text becomes terms: the indexed text of a message (text,
tool calls, tool results; never thinking), a tokeniser and Porter stemmer that match SQLite FTS5's
``porter unicode61``, stop words, and the safe FTS5 query built from free user text."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ..messages import EntryBody, Message, TextPart, ToolCallPart, ToolResultPart

MAX_INDEXED_CHARS = 32_000
"""Text of one entry beyond this is not indexed (oversized tool output lives whole in an artifact anyway)."""

MAX_QUERY_TERMS = 48
"""Distinct terms a query keeps; the rest of an absurdly long query is ignored, not refused."""

INDEXED_ROLES = ("user", "assistant", "tool")
"""System prompts repeat in every session and say nothing a user would recall: they are not indexed."""

_json = msgspec.json.Encoder()


def indexed_text(body: EntryBody) -> str | None:
    """The text the search index holds for one entry, or None when it holds nothing for it.

    A message contributes its text parts, its tool calls (name and arguments) and its tool results, in
    order; an author's ``metadata["name"]`` (a speaker, a sub-agent) comes first, so that names find their
    turns. Thinking, images, files and every non-message entry are left out."""
    if type(body) is not Message or body.role not in INDEXED_ROLES:
        return None
    pieces: list[str] = []
    name = body.metadata.get("name") if body.metadata else None
    if isinstance(name, str) and name:
        pieces.append(name + ":")
    for part in body.parts:
        kind = type(part)
        if kind is TextPart:
            pieces.append(part.text)  # type: ignore[union-attr]
        elif kind is ToolResultPart:
            pieces.append(part.content)  # type: ignore[union-attr]
        elif kind is ToolCallPart:
            call: ToolCallPart = part  # type: ignore[assignment]
            args = call.raw_arguments if call.raw_arguments is not None else _json.encode(call.arguments).decode()
            pieces.append(f"{call.name} {args}")
    text = " ".join(p for p in pieces if p)
    if not text.strip():
        return None
    return text[:MAX_INDEXED_CHARS]


_HYPHENATED = re.compile(r"\b[^\W\d_]+(?:-[^\W\d_]+)+\b")
_HYPHENATED_ASCII = re.compile(r"\b[A-Za-z]+(?:-[A-Za-z]+)+\b", re.ASCII)
"""`_HYPHENATED` for ASCII text (the same matches there, found faster: an append indexes every message)."""


def document(text: str) -> str:
    """What the index tokenizes for `text`: the text, then each hyphenated word written as one ("de-stress"
    also as "destress", "e-mail" as "email"), so that a query finds it spelled either way (a query's
    "de-stress" is the phrase "de stress", which the text has)."""
    if "-" not in text:
        return text
    pattern = _HYPHENATED_ASCII if text.isascii() else _HYPHENATED
    joined = [word.replace("-", "") for word in pattern.findall(text)]
    return text + " " + " ".join(joined) if joined else text


# --- tokens -------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"[^\W_]+")
_TOKEN_ASCII = re.compile(r"[a-z0-9]+")
"""`_TOKEN` for lower-case ASCII text."""


def tokens(text: str) -> list[str]:
    """The terms of `text` before stemming, as FTS5's ``unicode61`` makes them: runs of letters and digits
    (anything else separates, ``_`` included), case-folded, diacritics removed. ASCII text (most of it) takes
    a shorter way to the same terms: NFKD leaves it as it is, and its letters and digits are ``[a-z0-9]``."""
    if text.isascii():
        return _TOKEN_ASCII.findall(text.lower())
    folded = unicodedata.normalize("NFKD", text.lower())
    if not folded.isascii():
        folded = "".join(c for c in folded if not unicodedata.combining(c))
    return _TOKEN.findall(folded)


def terms(text: str) -> list[str]:
    """`tokens`, stemmed: what the index matches on."""
    return [stem(t) for t in tokens(text)]


# --- the Porter stemmer, as FTS5's `porter` tokenizer applies it -------------------------------------------
# Porter (1980), with the refinements FTS5 ships (logi -> log, bli -> ble) and its limits: tokens shorter
# than 3 or longer than 64 bytes pass unchanged. tests/store/test_searchtext.py checks it against SQLite term by term.

_VOWELS = frozenset("aeiou")


def _consonant_mask(word: str) -> list[bool]:
    """For each letter, whether it is a consonant; ``y`` is a vowel after a consonant."""
    out: list[bool] = []
    prev_cons = False
    for c in word:
        cons = not (c in _VOWELS or (c == "y" and prev_cons))
        out.append(cons)
        prev_cons = cons
    return out


def _measure(stem: str) -> int:
    """m in [C](VC)^m[V]: how many vowel-consonant sequences the stem has."""
    m = 0
    prev_vowel = False
    for cons in _consonant_mask(stem):
        if cons and prev_vowel:
            m += 1
        prev_vowel = not cons
    return m


def _has_vowel(stem: str) -> bool:
    """*v*, as FTS5 tests it: a, e, i, o, u anywhere, or y anywhere but first."""
    return any(c in _VOWELS or (c == "y" and i > 0) for i, c in enumerate(stem))


def _ends_cvc(stem: str) -> bool:
    """*o: consonant-vowel-consonant at the end, the last not w, x or y."""
    if len(stem) < 3 or stem[-1] in "wxy":
        return False
    mask = _consonant_mask(stem)
    return mask[-3] and not mask[-2] and mask[-1]


_STEP2 = (
    ("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
    ("logi", "log"), ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"),
    ("ization", "ize"), ("ation", "ate"), ("ator", "ate"), ("alism", "al"), ("iveness", "ive"),
    ("fulness", "ful"), ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"),
)  # fmt: skip
_STEP3 = (
    ("ical", "ic"), ("ness", ""), ("icate", "ic"), ("iciti", "ic"), ("ful", ""), ("ative", ""), ("alize", "al"),
)  # fmt: skip
_STEP4 = (
    "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou", "ism",
    "ate", "iti", "ous", "ive", "ize",
)  # fmt: skip


def _first_suffix(word: str, suffixes: Iterable[str]) -> str | None:
    # Rules are tried in FTS5's order and the first suffix that matches decides, whether or not its
    # condition then holds (a word ending in -ational with m = 0 is not retried as -tional).
    for suffix in suffixes:
        if len(word) > len(suffix) and word.endswith(suffix):
            return suffix
    return None


def _replace(word: str, table: tuple[tuple[str, str], ...], min_m: int) -> str:
    suffix = _first_suffix(word, (s for s, _ in table))
    if suffix is None:
        return word
    stem_ = word[: -len(suffix)]
    return stem_ + dict(table)[suffix] if _measure(stem_) > min_m else word


def stem(token: str) -> str:
    """The Porter stem of one lower-case token, exactly as SQLite FTS5's ``porter`` tokenizer makes it."""
    n = len(token.encode())
    if n < 3 or n > 64:
        return token
    w = token
    # step 1a
    if w[-1] == "s":
        if w[-2] == "e" and ((len(w) > 4 and w[-4:-2] == "ss") or (len(w) > 3 and w[-3] == "i")):
            w = w[:-2]
        elif w[-2] != "s":
            w = w[:-1]
    # step 1b
    removed = False
    if len(w) > 3 and w.endswith("eed"):
        if _measure(w[:-3]) > 0:
            w = w[:-1]
    elif len(w) > 2 and w.endswith("ed"):
        if _has_vowel(w[:-2]):
            w, removed = w[:-2], True
    elif len(w) > 3 and w.endswith("ing") and _has_vowel(w[:-3]):
        w, removed = w[:-3], True
    if removed:
        if len(w) > 2 and w[-2:] in ("at", "bl", "iz"):
            w += "e"
        elif len(w) >= 2 and w[-1] == w[-2] and w[-1] not in "aeioulsz":
            w = w[:-1]
        elif _measure(w) == 1 and _ends_cvc(w):
            w += "e"
    # step 1c
    if w[-1] == "y" and _has_vowel(w[:-1]):
        w = w[:-1] + "i"
    w = _replace(w, _STEP2, 0)
    w = _replace(w, _STEP3, 0)
    suffix = _first_suffix(w, _STEP4)
    if suffix is not None:
        stem_ = w[: -len(suffix)]
        if _measure(stem_) > 1 and (suffix != "ion" or stem_[-1] in "st"):
            w = stem_
    # step 5
    if w[-1] == "e":
        m = _measure(w[:-1])
        if m > 1 or (m == 1 and not _ends_cvc(w[:-1])):
            w = w[:-1]
    if len(w) > 1 and w.endswith("ll") and _measure(w[:-1]) > 1:
        w = w[:-1]
    return w


# --- stop words and queries -----------------------------------------------------------------------------

STOP_WORDS: frozenset[str] = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "re",
        "ve",
        "don",
        "didn",
        "doesn",
        "isn",
        "wasn",
        "weren",
        "haven",
        "hasn",
        "hadn",
        "won",
        "wouldn",
        "couldn",
        "shouldn",
        "let",
        "lets",
        "also",
        "get",
        "got",
    ]
)
"""English function words and question words: they match nearly every message and carry nothing a
user is looking for. Dropped from queries (never from the index), unless a query has nothing else."""

_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b", re.IGNORECASE)


@dataclass(frozen=True)
class QueryTerm:
    """One alternative of a query: a single token, or the tokens of one compound word (a path, a
    snake_case or dotted name) that must appear in that order. `prefix`: the last token may be cut."""

    tokens: tuple[str, ...]
    prefix: bool = False

    def fts(self) -> str:
        quoted = '"' + " ".join(self.tokens) + '"'
        return quoted + "*" if self.prefix else quoted


def query_terms(query: str, *, max_terms: int = MAX_QUERY_TERMS) -> list[QueryTerm]:
    """The alternatives a free-text query searches for, most specific first within each word.

    Each whitespace-separated word becomes its tokens; a word of several tokens (``snake_case_name``,
    ``src/app.py``) is searched as that phrase and also as its separate tokens, so a partial path still
    finds something. Stop words are dropped unless nothing else is left. A word ending in ``*`` is a
    prefix. Nothing of the user's text reaches FTS5 unquoted, so its syntax characters mean nothing."""
    query = _POSSESSIVE.sub("", query)
    out: list[QueryTerm] = []
    seen: set[QueryTerm] = set()
    stop_only: list[QueryTerm] = []

    def add(term: QueryTerm, target: list[QueryTerm]) -> None:
        if term not in seen:
            seen.add(term)
            target.append(term)

    for word in query.split():
        prefix = word.endswith("*") and len(word.rstrip("*")) >= 2
        toks = tokens(word)
        if not toks:
            continue
        if len(toks) > 1:
            content = [t for t in toks if t not in STOP_WORDS]
            if content and len(content) < len(toks) and not any(c.isdigit() for c in word) and "_" not in word:
                # a contraction or hyphenated phrase of ordinary words ("don't", "well-known"): its words
                for t in content:
                    add(QueryTerm((t,)), out)
                continue
            if not content:
                for t in toks:
                    add(QueryTerm((t,)), stop_only)
                continue
            add(QueryTerm(tuple(toks), prefix), out)
            for t in content:
                add(QueryTerm((t,)), out)
        else:
            term = QueryTerm((toks[0],), prefix)
            add(term, stop_only if toks[0] in STOP_WORDS and not prefix else out)
        if len(out) >= max_terms:
            break
    return (out or stop_only)[:max_terms]


def match_expression(terms_: Iterable[QueryTerm]) -> str | None:
    """An FTS5 MATCH expression: the alternatives OR-ed (BM25 ranks documents that have more and rarer
    of them first). None when there is nothing to search for."""
    parts = [t.fts() for t in terms_]
    return " OR ".join(parts) if parts else None


EXCERPT_CHARS = 600


def excerpt_of(text: str, stems: Sequence[str], width: int = EXCERPT_CHARS) -> str:
    """At most `width` characters of `text` around the first place a query stem starts a word, with
    whitespace folded and ``…`` where it was cut."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    start = 0
    words = [s for s in stems if len(s) >= 2]
    if words:
        pattern = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in sorted(set(words), key=len)[::-1]) + ")", re.I)
        found = pattern.search(text)
        if found is not None:
            start = max(0, found.start() - width // 4)
    end = min(len(text), start + width)
    start = max(0, end - width)
    return ("…" if start > 0 else "") + text[start:end].strip() + ("…" if end < len(text) else "")


# --- BM25 over documents in memory (the MemoryStore's search; SQLite has FTS5's own) -----------------------

_K1 = 1.2
_B = 0.75


def _occurrences(doc: Sequence[str], term: tuple[str, ...], prefix: bool) -> int:
    first, n = term[0], len(term)
    count = 0
    for i in range(len(doc) - n + 1):
        if all(doc[i + j] == term[j] for j in range(n - 1)):
            last = doc[i + n - 1]
            if last == term[-1] or (prefix and last.startswith(term[-1])):
                count += 1
        elif n == 1 and prefix and doc[i].startswith(first):
            count += 1
    return count


def bm25_rank(
    docs: Sequence[tuple[Any, Sequence[str]]], query: Sequence[QueryTerm], keep: Container[Any]
) -> list[tuple[Any, float]]:
    """(key, score) of the documents in `keep` that match any query term, best first, scored as FTS5's
    ``bm25()`` scores (k1 = 1.2, b = 0.75, idf floored at 1e-6) with statistics over all of `docs`."""
    wanted = [(tuple(stem(t) for t in q.tokens), q.prefix) for q in query]
    total = len(docs)
    if not total:
        return []
    avg = sum(len(d) for _, d in docs) / total
    counts: list[dict[Any, int]] = []
    for term, prefix in wanted:
        found: dict[Any, int] = {}
        for key, doc in docs:
            n = _occurrences(doc, term, prefix)
            if n:
                found[key] = n
        counts.append(found)
    lengths = {key: len(doc) for key, doc in docs}
    scores: dict[Any, float] = {}
    for found in counts:
        idf = math.log((total - len(found) + 0.5) / (len(found) + 0.5))
        idf = idf if idf > 0 else 1e-6
        for key, tf in found.items():
            if key in keep:
                norm = _K1 * (1 - _B + _B * lengths[key] / avg)
                scores[key] = scores.get(key, 0.0) + idf * tf * (_K1 + 1) / (tf + norm)
    return sorted(scores.items(), key=lambda kv: -kv[1])
