"""The text side of the search index: what an entry contributes, the tokeniser and Porter stemmer checked
term by term against SQLite FTS5 itself, and queries built from hostile text."""

from __future__ import annotations

import itertools
import sqlite3

import pytest

from tether.messages import (
    ImagePart,
    Marker,
    Message,
    Revert,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from tether.store.searchtext import (
    MAX_INDEXED_CHARS,
    MAX_QUERY_TERMS,
    QueryTerm,
    document,
    excerpt_of,
    indexed_text,
    match_expression,
    query_terms,
    stem,
    tokens,
)

STEMS = [
    "caress", "ponies", "ties", "cats", "feed", "agreed", "plastered", "bled", "motoring", "sing", "conflated",
    "troubled", "sized", "hopping", "tanned", "falling", "hissing", "fizzed", "failing", "filing", "happy", "sky",
    "relational", "conditional", "rational", "valenci", "hesitanci", "digitizer", "conformabli", "radicalli",
    "differentli", "vileli", "analogousli", "vietnamization", "predication", "operator", "feudalism",
    "decisiveness", "hopefulness", "callousness", "formaliti", "sensitiviti", "sensibiliti", "triplicate",
    "formative", "formalize", "electriciti", "electrical", "hopeful", "goodness", "revival", "allowance",
    "inference", "airliner", "gyroscopic", "adjustable", "defensible", "irritant", "replacement", "adjustment",
    "dependent", "adoption", "homologou", "communism", "activate", "angulariti", "homologous", "effective",
    "bowdlerize", "probate", "rate", "cease", "controll", "roll", "generalizations", "oscillators", "yes", "eyes",
    "by", "running", "runner", "researching", "researched", "painting", "painted", "agreement", "skies", "dying",
    "lying", "crying", "studies", "studying", "argued", "abominable", "hoping", "hoped", "hopped", "classes",
]  # fmt: skip


def fts5_terms(texts: list[str]) -> list[list[str]]:
    """What SQLite's own `porter unicode61` makes of each text, read back through fts5vocab."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(t, tokenize = 'porter unicode61')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, instance)")
    conn.executemany("INSERT INTO f (rowid, t) VALUES (?, ?)", list(enumerate(texts, 1)))
    out: list[list[tuple[int, str]]] = [[] for _ in texts]
    for term, doc, offset in conn.execute("SELECT term, doc, offset FROM v"):
        out[doc - 1].append((offset, term))
    return [[term for _, term in sorted(terms)] for terms in out]


def test_the_stemmer_agrees_with_fts5_on_the_classic_porter_vocabulary() -> None:
    expected = fts5_terms(STEMS)
    assert [stem(w) for w in STEMS] == [e[0] for e in expected]


def test_the_stemmer_agrees_with_fts5_on_generated_words() -> None:
    # every stem x suffix pair: exercises each rule of each step, including the ones whose condition fails
    roots = ["relat", "condit", "hop", "run", "gener", "sens", "nat", "feud", "adopt", "electr", "formal", "cry",
             "agre", "troubl", "siz", "fil", "abl", "y", "ab", "oscill", "communic", "digit", "bowdler", "xyz"]  # fmt: skip
    suffixes = ["", "s", "es", "ies", "ed", "eed", "ing", "ational", "tional", "enci", "anci", "izer", "logi",
                "bli", "alli", "entli", "eli", "ousli", "ization", "ation", "ator", "alism", "iveness", "fulness",
                "ousness", "aliti", "iviti", "biliti", "icate", "ative", "alize", "iciti", "ical", "ful", "ness",
                "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "sion", "tion",
                "ou", "ism", "ate", "iti", "ous", "ive", "ize", "e", "ll", "y"]  # fmt: skip
    words = sorted({r + s for r, s in itertools.product(roots, suffixes)})
    expected = fts5_terms(words)
    mismatches = [(w, e, stem(w)) for w, e in zip(words, expected, strict=True) if [stem(w)] != e]
    assert mismatches == []


def test_tokens_fold_case_and_diacritics_and_split_like_unicode61() -> None:
    text = "Café NAÏVE snake_case_name src/app.py camelCase 3.14 Ångström 東京 don't"
    assert [[stem(t) for t in tokens(text)]] == fts5_terms([text])
    assert tokens("snake_case_name") == ["snake", "case", "name"]


def test_indexed_text_has_text_tool_calls_and_results_but_no_thinking() -> None:
    message = Message(
        role="assistant",
        parts=[
            ThinkingPart(text="secret reasoning"),
            TextPart(text="Let me read it."),
            ToolCallPart(id="c1", name="read", arguments={"path": "src/store/sqlite.py"}),
            ImagePart(media_type="image/png", uri="file:///x.png"),
        ],
        metadata={"name": "builder"},
    )
    text = indexed_text(message)
    assert text is not None
    assert "secret" not in text
    assert text.startswith("builder:")
    assert "Let me read it." in text and "read" in text and "src/store/sqlite.py" in text
    result = Message.tool(ToolResultPart(call_id="c1", content="def open_store(): ...", name="read"))
    assert indexed_text(result) == "def open_store(): ..."
    raw = Message(role="assistant", parts=[ToolCallPart(id="c", name="bash", raw_arguments="{not json")])
    assert indexed_text(raw) == "bash {not json"


def test_indexed_text_skips_system_prompts_markers_reverts_and_empty_messages() -> None:
    assert indexed_text(Message.system("You are a coding agent")) is None
    assert indexed_text(Marker(name="approval", data={"text": "yes"})) is None
    assert indexed_text(Revert(to_seq=1)) is None
    assert indexed_text(Message(role="assistant", parts=[ThinkingPart(text="only thinking")])) is None
    assert indexed_text(Message.user("   ")) is None


def test_indexed_text_is_capped() -> None:
    text = indexed_text(Message.tool(ToolResultPart(call_id="c", content="x" * (MAX_INDEXED_CHARS * 2))))
    assert text is not None and len(text) == MAX_INDEXED_CHARS


def test_queries_drop_stop_words_and_possessives_and_keep_compounds_as_phrases() -> None:
    terms = query_terms("What did Caroline's team decide about snake_case_name in src/app.py?")
    assert terms[:2] == [QueryTerm(("caroline",)), QueryTerm(("team",))]
    assert QueryTerm(("snake", "case", "name")) in terms and QueryTerm(("snake",)) in terms
    assert QueryTerm(("src", "app", "py")) in terms and QueryTerm(("app",)) in terms
    assert not any(t.tokens == ("what",) or t.tokens == ("did",) for t in terms)
    assert match_expression(terms) is not None


def test_a_query_of_stop_words_only_searches_them_rather_than_nothing() -> None:
    assert [t.tokens for t in query_terms("to be or not to be")] == [("to",), ("be",), ("or",), ("not",)]


@pytest.mark.parametrize(
    "query",
    ['"', '""', "*", "AND OR NOT", "NEAR(a b)", "col:value", "a^b", "(((", "'; DROP TABLE entries; --", "-x +y",
     "\x00\x01", "{x y}", "^", "a*", "**"],
)  # fmt: skip
def test_fts_syntax_in_a_query_is_quoted_and_fts5_accepts_the_result(query: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(t, tokenize = 'porter unicode61')")
    conn.execute("INSERT INTO f VALUES ('and or not near col value drop table entries x y a b')")
    expression = match_expression(query_terms(query))
    if expression is not None:
        conn.execute("SELECT rowid FROM f WHERE f MATCH ?", (expression,)).fetchall()  # must not raise


def test_a_huge_query_keeps_a_bounded_number_of_terms() -> None:
    query = " ".join(f"word{i}" for i in range(3000))  # ~25 KB
    assert len(query_terms(query)) == MAX_QUERY_TERMS


def test_prefix_words_become_prefix_queries() -> None:
    assert query_terms("migrat*") == [QueryTerm(("migrat",), prefix=True)]
    assert query_terms("migrat*")[0].fts() == '"migrat"*'


def test_excerpts_centre_on_the_first_match() -> None:
    text = "filler " * 200 + "the PostgreSQL migration failed on the users table " + "filler " * 200
    excerpt = excerpt_of(text, ["migration"], width=120)
    assert "migration" in excerpt and excerpt.startswith("…") and excerpt.endswith("…")
    assert len(excerpt) <= 122
    assert excerpt_of("short text", ["x"]) == "short text"


def test_a_document_adds_each_hyphenated_word_joined() -> None:
    assert document("helps me de-stress") == "helps me de-stress destress"
    assert document("a state-of-the-art e-mail client") == "a state-of-the-art e-mail client stateoftheart email"
    assert document("no hyphen here") == "no hyphen here"
    assert document("2023-10-13 and --help and a-1") == "2023-10-13 and --help and a-1"  # words of letters only


def test_ascii_text_takes_a_shorter_way_to_the_same_tokens_and_documents() -> None:
    """`tokens` and `document` have a fast path for ASCII text: it finds what the Unicode patterns find there."""
    import random
    import unicodedata

    from tether.store import searchtext

    rng = random.Random(27)
    alphabet = "aZk9-_ .,'/\\\t\n()Q0-x-y"  # ASCII only: letters, digits, hyphens, separators
    samples = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    samples += ["a-b", "-a-b-", "a--b", "a-b1", "1a-b", "A-B_c-d", "x-y-z w-", "e-mail's e-Mail", "_a-b_", "a-b-"]
    for text in samples:
        assert text.isascii()
        slow = searchtext._TOKEN.findall(unicodedata.normalize("NFKD", text.lower()))
        assert tokens(text) == slow, text
        joined = [w.replace("-", "") for w in searchtext._HYPHENATED.findall(text)]
        assert document(text) == (text + " " + " ".join(joined) if joined and "-" in text else text), text
