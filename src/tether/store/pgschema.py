"""The schema of a `PostgresStore`, as numbered migrations applied when a store opens (`migrate`).

`tether_schema` holds the version. A store that opens reads it first and, when it is current, takes no
lock at all; otherwise it takes an advisory lock (`LOCK_KEY`), reads the version again and applies what is
missing in one transaction: two processes (or nodes) that open a fresh database at
once apply each migration exactly once, the second waiting for the first and then finding nothing to do.
A database written by a newer tether is refused, never touched.

A migration is only ever appended to `MIGRATIONS`: a released one never changes (a store that applied it
will not apply it again). The full-text search configuration (`tether_search`) stems English words with
Snowball and keeps stop words in the index, as FTS5's ``porter`` does (queries drop them, `searchtext`);
its input is the text `searchtext.tokens` already split, so that both backends see the same words."""

from __future__ import annotations

from typing import Any

LOCK_KEY = 0x7465746865720001
"""The advisory lock that serializes migrations (a bigint: "tether" and 1)."""
AUDIT_LOCK_KEY = 0x7465746865720002
"""The advisory lock of the audit trail's head: writers append one record at a time, keeping one chain."""
CHANGES_LOCK_KEY = 0x7465746865720003
"""The advisory lock of the change feed: a change's id is taken and committed under it, so ids commit in
order (a follower that read id N never later finds a smaller one appear), and `last_change_id` reads the
sequence under it shared (no id taken but not yet committed)."""
LEASE_LOCK_SPACE = 0x7465
"""The first key of the advisory locks of leases (the second is a hash of the session id)."""

_V1 = """
CREATE TEXT SEARCH DICTIONARY tether_stem (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH CONFIGURATION tether_search (COPY = english);
ALTER TEXT SEARCH CONFIGURATION tether_search
    ALTER MAPPING FOR asciiword, word, hword, hword_part, hword_asciipart, asciihword WITH tether_stem;
CREATE TABLE sessions (
    id text COLLATE "C" PRIMARY KEY,
    parent_id text COLLATE "C",
    forked_from text COLLATE "C",
    forked_at bigint,
    title text,
    directory text,
    agent text,
    model text,
    state text NOT NULL DEFAULT 'active',
    system_prompt text,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    entry_count bigint NOT NULL DEFAULT 0,
    message_count bigint NOT NULL DEFAULT 0,
    input_tokens bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    cost_pico bigint NOT NULL DEFAULT 0,
    metadata text NOT NULL DEFAULT '{}'
);
CREATE INDEX sessions_recent ON sessions (updated_at DESC, id DESC);
CREATE INDEX sessions_directory ON sessions (directory, updated_at DESC, id DESC);
CREATE INDEX sessions_parent ON sessions (parent_id, updated_at DESC, id DESC) WHERE parent_id IS NOT NULL;
CREATE TABLE entries (
    session_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    kind text NOT NULL,
    created_at double precision NOT NULL,
    payload text NOT NULL,
    role smallint,
    terms tsvector,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX entries_terms ON entries USING gin (terms) WHERE terms IS NOT NULL;
CREATE INDEX entries_reverts ON entries (session_id, seq) WHERE kind = 'revert';
CREATE TABLE artifacts (
    id text COLLATE "C" PRIMARY KEY,
    media_type text NOT NULL,
    size bigint NOT NULL,
    created_at double precision NOT NULL,
    data bytea NOT NULL
);
CREATE TABLE leases (
    session_id text COLLATE "C" PRIMARY KEY,
    holder text NOT NULL,
    pid integer,
    host text,
    since double precision NOT NULL,
    expires_at double precision NOT NULL,
    request text
);
CREATE TABLE shares (
    id text COLLATE "C" PRIMARY KEY,
    session_id text COLLATE "C" NOT NULL,
    token_hash bytea NOT NULL UNIQUE,
    created_at double precision NOT NULL,
    expires_at double precision,
    revoked_at double precision
);
CREATE INDEX shares_session ON shares (session_id, created_at);
CREATE TABLE streams (
    session_id text COLLATE "C" PRIMARY KEY,
    after_seq bigint NOT NULL,
    updated_at double precision NOT NULL,
    payload text NOT NULL
);
CREATE TABLE audit (
    seq bigint PRIMARY KEY,
    at double precision NOT NULL,
    kind text NOT NULL,
    session_id text COLLATE "C",
    actor text,
    outcome text,
    detail text NOT NULL,
    prev text NOT NULL,
    hash text NOT NULL
);
CREATE INDEX audit_session ON audit (session_id, seq) WHERE session_id IS NOT NULL;
CREATE TABLE audit_head (
    id integer PRIMARY KEY CHECK (id = 1),
    seq bigint NOT NULL,
    hash text NOT NULL
);
CREATE TABLE sink_positions (
    sink text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    PRIMARY KEY (sink, session_id)
);
"""

_V2 = """
CREATE TABLE event_numbers (
    session_id text COLLATE "C" PRIMARY KEY,
    hi bigint NOT NULL
);
CREATE TABLE changes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at double precision NOT NULL,
    kind text NOT NULL,
    session_id text COLLATE "C",
    data text NOT NULL
);
"""

_V3 = """
CREATE TABLE session_changes (
    session_id text COLLATE "C" PRIMARY KEY,
    xid xid8 NOT NULL
);
CREATE INDEX session_changes_xid ON session_changes (xid);
CREATE FUNCTION tether_session_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sid text;
BEGIN
    IF TG_OP = 'DELETE' THEN sid := OLD.id; ELSE sid := NEW.id; END IF;
    INSERT INTO session_changes (session_id, xid) VALUES (sid, pg_current_xact_id())
    ON CONFLICT (session_id) DO UPDATE SET xid = EXCLUDED.xid WHERE session_changes.xid <> EXCLUDED.xid;
    RETURN NULL;
END
$$;
CREATE TRIGGER sessions_changed AFTER INSERT OR UPDATE OR DELETE ON sessions
    FOR EACH ROW EXECUTE FUNCTION tether_session_changed();
INSERT INTO session_changes (session_id, xid) SELECT id, pg_current_xact_id() FROM sessions;
"""
"""The sessions' change cursor (`SessionChanges`): each session's row (a deleted one's too: a tombstone) holds
the id of the last transaction that wrote it. A reader asks for the rows of every transaction at or after the
oldest one that was still running when it last asked (`pg_snapshot_xmin`): every commit it could not see
then, whatever order the transactions committed in, and nothing older."""

_V4 = """
CREATE TABLE recall_meta (
    key text COLLATE "C" PRIMARY KEY,
    value bigint NOT NULL
);
CREATE TABLE recall_sessions (
    num bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id text COLLATE "C" NOT NULL UNIQUE,
    directory text,
    created_at double precision NOT NULL,
    upto bigint NOT NULL DEFAULT 0
);
CREATE INDEX recall_sessions_directory ON recall_sessions (directory);
CREATE TABLE recall_turns (
    num bigint NOT NULL,
    seq bigint NOT NULL,
    role smallint NOT NULL,
    created_at double precision NOT NULL,
    own_len integer NOT NULL,
    previous_len integer NOT NULL,
    PRIMARY KEY (num, seq)
);
CREATE TABLE recall_postings (
    term text COLLATE "C" NOT NULL,
    num bigint NOT NULL,
    seq bigint NOT NULL,
    own integer[] NOT NULL,
    previous integer[] NOT NULL,
    PRIMARY KEY (term, num, seq)
);
CREATE INDEX recall_postings_turn ON recall_postings (num, seq);
CREATE TABLE recall_reverts (
    num bigint NOT NULL,
    seq bigint NOT NULL,
    to_seq bigint NOT NULL,
    PRIMARY KEY (num, seq)
);
CREATE TABLE recall_facts (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    directory text,
    line text NOT NULL,
    terms tsvector NOT NULL
);
CREATE INDEX recall_facts_turn ON recall_facts (session_id, seq);
CREATE INDEX recall_facts_terms ON recall_facts USING gin (terms);
CREATE TABLE recall_fact_progress (
    session_id text COLLATE "C" PRIMARY KEY,
    upto bigint NOT NULL
);
CREATE TABLE recall_vectors (
    session_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    vec bytea NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE recall_vector_progress (
    session_id text COLLATE "C" NOT NULL,
    model text NOT NULL,
    upto bigint NOT NULL,
    PRIMARY KEY (session_id, model)
);
CREATE TABLE recall_vector_words (
    word text COLLATE "C" PRIMARY KEY,
    vec bytea NOT NULL
);
"""
"""Recall's turn keys (`recall/pgkeys.py`), one inverted index shared by every node: a session's number and
how far its entries are keyed (`upto`), each turn's token count per column (its own words, the previous
turn's tail), each term's postings with its positions per column (phrases; the count is the term
frequency), the reverts, and in `recall_meta` the change cursor's position and the totals BM25 needs. The
fact lines (`recall/pgfacts.py`) and the turn vectors with the words that expand queries (`recall/pgvectors.py`:
float32 and float16 bytes, as the SQLite side file keeps them) with their progress, beside them."""

_V5 = f"""
CREATE FUNCTION tether_audit_seal(
    p_at float8[], p_kind text[], p_sid text[], p_actor text[], p_outcome text[], p_detail text[], p_middle bytea[],
    p_genesis text
) RETURNS TABLE (sealed_seq bigint, sealed_prev text, sealed_hash text) LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(array_length(p_at, 1), 0);
    s bigint;
    p text;
    h text;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock({AUDIT_LOCK_KEY});
    SELECT a.seq, a.hash INTO s, p FROM audit_head a WHERE a.id = 1;
    IF NOT FOUND THEN
        s := 0;
        p := p_genesis;
    END IF;
    FOR i IN 1 .. n LOOP
        s := s + 1;
        h := encode(sha256(convert_to('[' || s || ',', 'UTF8') || p_middle[i] || convert_to(',"' || p || '"]', 'UTF8')), 'hex');
        INSERT INTO audit (seq, at, kind, session_id, actor, outcome, detail, prev, hash)
            VALUES (s, p_at[i], p_kind[i], p_sid[i], p_actor[i], p_outcome[i], p_detail[i], p, h);
        sealed_seq := s;
        sealed_prev := p;
        sealed_hash := h;
        RETURN NEXT;
        p := h;
    END LOOP;
    INSERT INTO audit_head (id, seq, hash) VALUES (1, s, p)
        ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash;
END
$$;
"""
"""Audit records sealed by the server, after the head, in the caller's transaction under the trail's lock
(held to the commit): each one's hash is `audit.seal`'s, SHA-256 of ``canonical_json([seq, at, kind,
session_id, actor, outcome, detail, prev])``, whose middle (all but seq and prev) the client encodes. A
function, so that it runs inside one statement (an audited append is one round trip, and the lock is never
held for a round trip to a client); its queries take their snapshots after the lock, so each reads the head
that the lock's last holder committed."""

_V6 = """
CREATE TABLE prompt_queue (
    id BIGSERIAL PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    after_seq BIGINT NOT NULL,
    queued_at DOUBLE PRECISION NOT NULL,
    body BYTEA NOT NULL
);
CREATE INDEX prompt_queue_session ON prompt_queue (session_id, id);
"""
"""Migration 6, the durable prompt queue (`PromptQueue`; SqliteStore's schema 11): a row per queued prompt, gone with its
session."""


_V7 = """
DROP TRIGGER sessions_changed ON sessions;
CREATE TRIGGER sessions_changed AFTER INSERT OR DELETE ON sessions
    FOR EACH ROW EXECUTE FUNCTION tether_session_changed();
CREATE TRIGGER sessions_changed_update AFTER UPDATE ON sessions
    FOR EACH ROW WHEN (OLD.entry_count = NEW.entry_count) EXECUTE FUNCTION tether_session_changed();
"""
"""Migration 7: an append marks its session in `session_changes` itself, in its own statement
(`postgres._APPEND_MARK`), and the trigger of `_V3` is left to the other writes of a session's row (its
creation, deletion, and updates that do not move `entry_count`, which only an append moves): a plpgsql call
less on the append path. A node of an older tether that is still running when a newer one migrates (a rolling
upgrade) appends without marking; its sessions are marked again by their next write from a newer node."""

_V8 = """
LOCK TABLE entries IN SHARE MODE;
CREATE TABLE entry_terms (
    session_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    role smallint NOT NULL,
    created_at double precision NOT NULL,
    terms tsvector NOT NULL,
    PRIMARY KEY (session_id, seq)
);
INSERT INTO entry_terms (session_id, seq, role, created_at, terms)
    SELECT session_id, seq, role, created_at, terms FROM entries WHERE terms IS NOT NULL AND role IS NOT NULL;
CREATE INDEX entry_terms_terms ON entry_terms USING gin (terms);
DROP INDEX entries_terms;
ALTER TABLE entries DROP COLUMN terms;
CREATE TABLE search_queue (
    session_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""
"""Migration 8: search terms move out of `entries` into `entry_terms` (with the role and time that searches
filter on), and an append no longer makes them (`to_tsvector` and the GIN insert were a third of its time on
the server): it queues its messages in `search_queue`, and a flush (`postgres._index_pending`), which every
search makes first, takes them off the queue and inserts their terms. Every entry's terms made before are
copied over first, under a lock that lets reads go on and holds writers back until the migration commits (an
append of an older node between the copy and the drop would otherwise lose its terms), so nothing waits after
it. The copy and the GIN index take time on a large database, in the one transaction that other nodes opening
the store wait for; the dropped column's space comes back only when the table is rewritten (`VACUUM FULL
entries`). Stop older tether nodes first: their appends, searches, forks and imports name the column that is
gone (what an older node's delete leaves behind in the new tables is overwritten or dropped by the new code)."""

_V9 = """
ALTER TABLE search_queue ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
"""
"""Migration 9: an append's mark in the sessions' change cursor is the queue row it writes anyway (for every
entry now, not only for messages with words: the flush drops the others), stamped with the writing
transaction's id by the column's default; `session_changes` is no longer upserted by the append (an update
that could not stay HOT, its `xid` being indexed: an eighth of the append's time on the server). The flush that
takes rows off the queue carries their marks into `session_changes` in the same statement, and the cursor's
reader reads both tables (`PostgresStore.changed_sessions`; the queue is small, a flush every `INDEX_EVERY`
appends). Rows already queued take the migration's own id: their sessions are reported once more. Stop older
tether nodes first, as for migration 8: an older node's flush takes rows off the queue without carrying their
marks over (a newer node's append would go unreported to the cursor's readers), and its reader does not read
the queue."""

MIGRATIONS: list[tuple[int, str]] = [
    (1, _V1),  # sessions, entries (with their search terms), artifacts, leases, shares, streams, audit, sinks
    (2, _V2),  # live event numbers reserved per session, the global change feed (SqliteStore's schema 9)
    (3, _V3),  # the sessions' change cursor for what is derived from the journal (SqliteStore's schema 10)
    (4, _V4),  # recall's turn keys, vectors and facts as tables
    (5, _V5),  # the audit trail sealed on the server
    (6, _V6),  # the durable prompt queue (SqliteStore's schema 11)
    (7, _V7),  # an append marks the change cursor in its own statement, the trigger the other writes
    (8, _V8),  # search terms in a table of their own, made by a flush after the append from its queue
    (9, _V9),  # the append's change mark is its queue row, carried into session_changes by the flush
]
"""(version, SQL) in order; the schema of a store is the last version."""

SCHEMA_VERSION = MIGRATIONS[-1][0]


def _version(conn: Any) -> int | None:
    """The schema version, or None when the database has no tether schema yet."""
    if conn.execute("SELECT to_regclass('tether_schema')").fetchone()[0] is None:
        return None
    row = conn.execute("SELECT version FROM tether_schema").fetchone()
    return int(row[0]) if row is not None else 0


def migrate(conn: Any, *, known: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Bring the database of `conn` (a psycopg connection, not in a transaction) to `known`; returns the
    version before and after. Raises `NewerSchema` for a database of a newer tether."""
    version = _version(conn)
    if version is not None and version >= known:
        if version > known:
            raise NewerSchema(version, known)
        return version, version
    # A session-level lock taken before the transaction begins: the transaction's first statement then
    # reads the catalog as it is after whoever held the lock committed (inside a transaction that took the
    # lock itself, a catalog lookup may still see the tables as they were before).
    conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
    try:
        with conn.transaction():
            version = _version(conn)  # again, under the lock: another process may have done it meanwhile
            if version is None:
                conn.execute("CREATE TABLE tether_schema (version integer NOT NULL)")
                conn.execute("INSERT INTO tether_schema (version) VALUES (0)")
                version = 0
            if version > known:
                raise NewerSchema(version, known)
            before = version
            for number, sql in MIGRATIONS:
                if version < number <= known:
                    conn.execute(sql)
                    version = number
            conn.execute("UPDATE tether_schema SET version = %s", (version,))
    finally:
        if not conn.closed:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    return before, version


class NewerSchema(Exception):
    """The database's schema is newer than this tether knows."""

    def __init__(self, version: int, known: int) -> None:
        super().__init__(f"schema {version}, this tether knows {known}")
        self.version = version
        self.known = known
