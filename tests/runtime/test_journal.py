"""The run's journal: one append path whose entries come out as numbered durable events, the same ones a
replay of the journal gives; live events numbered between them; and a steady step that costs the store one
append per entry and nothing else."""

from __future__ import annotations

import io
import itertools
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether import Message, Session, ToolCallPart
from tether.config import parse_config
from tether.events import DURABLE_TYPES, EVENT_SPAN, RESERVED_OFFSET, Done, Event, RunStarted, TextDelta
from tether.importers.tether_json import export_json
from tether.providers.base import ModelRequest
from tether.providers.scripted import ScriptedProvider
from tether.redaction import Redactor
from tether.runtime.handle import SessionHandle
from tether.runtime.journal import RunJournal, replay_events
from tether.store import SqliteStore, Store
from tether.tools.base import ToolRegistry, function_tool
from tether.tools.output import read_artifact_bytes


@function_tool(read_only=True)
async def look(what: str) -> str:
    """Look at something."""
    return f"{what} looks fine"


LEASE_TIMER_CALLS = ("get_lease", "renew_lease")
"""What a run's lease watcher asks the store on its timer (`runtime/lease.py`), whatever the steps do."""


class CountingStore:
    """A store that counts the calls made on it, by method name, and passes them on."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if not callable(value):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return counted


def stepper(steps: int) -> Callable[[ModelRequest], Message]:
    """A model that looks at something different `steps - 1` times, then answers."""

    def respond(request: ModelRequest) -> Message:
        since_prompt = [m for m in request.messages[-2 * steps :] if m.role == "tool"]
        n = len(request.messages)
        if len(since_prompt) >= steps - 1:
            return Message.assistant("All seen.")
        return Message.assistant(
            f"Step {n}.", tool_calls=[ToolCallPart(id=f"c{n}", name="look", arguments={"what": f"#{n}"})]
        )

    return respond


async def test_live_durable_events_are_exactly_what_a_replay_gives(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    provider = ScriptedProvider(stepper(3))
    live = [e async for e in session.stream("look around", provider=provider, model="m", tools=ToolRegistry([look]))]
    assert isinstance(live[0], RunStarted) and isinstance(live[-1], Done)
    numbers = [e.n for e in live]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)  # increasing in emission order
    assert all(e.session_id == session.id for e in live)
    durable = [e for e in live if isinstance(e, DURABLE_TYPES)]
    replayed = [e async for e in replay_events(store, session.id)]
    assert replayed == durable and len(durable) >= 3 * 2
    # a reconnect after any event gets the durable events after it, no gap and no repeat
    for cut in live:
        after = [e async for e in replay_events(store, session.id, after=cut.n)]
        assert after == [e for e in durable if e.n > cut.n]


async def test_a_second_run_continues_the_numbering(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    provider = ScriptedProvider(["one", "two"])
    first = [e async for e in session.stream("hi", provider=provider, model="m", tools=ToolRegistry())]
    second = [e async for e in session.stream("again", provider=provider, model="m", tools=ToolRegistry())]
    assert second[0].n > first[-1].n
    deltas = [e for e in second if isinstance(e, TextDelta)]
    assert deltas and all(e.n // 1_000_000 == session.info.entry_count - 1 for e in deltas)  # after the prompt


@pytest.mark.parametrize("history", [0, 600])
async def test_a_steady_step_costs_one_append_per_entry_and_no_reads(
    store: Store, tmp_path: Path, history: int
) -> None:
    counting = CountingStore(store)
    session = await Session.create(counting, directory=tmp_path)  # type: ignore[arg-type]
    for i in range(history // 2):
        await session.append(Message.user(f"question {i}"), Message.assistant(f"answer {i}"))
    marks: list[Counter[str]] = []
    respond = stepper(5)

    def model(request: ModelRequest) -> Message:
        marks.append(Counter(counting.calls))  # the store calls made before this step's model call
        return respond(request)

    events: list[Event] = [
        e async for e in session.stream("look", provider=ScriptedProvider(model), model="m", tools=ToolRegistry([look]))
    ]
    assert isinstance(events[-1], Done) and events[-1].steps == 5
    for before, after in itertools.pairwise(marks[1:]):
        # between two model calls: the answer with its call, then the call's result; nothing read back. The
        # lease's own looks (every 0.5 s, on a timer, not per step) fall between steps on a slow machine.
        # (The call's audit record goes in its result's append transaction.) The live numbers after an entry
        # this run appended (the next answer's deltas) are its own: no reservation, no write.
        steps = Counter({k: n for k, n in (after - before).items() if k not in LEASE_TIMER_CALLS})
        assert steps == Counter({"append": 2})


async def test_runs_on_new_handles_never_repeat_a_number(store: Store, tmp_path: Path) -> None:
    """The CLI and a server open a new handle per run; a run that appends nothing before its events (a
    continue with nothing to do) still numbers after the last run of this process."""
    first = await Session.create(store, directory=tmp_path)
    ran = [e async for e in first.stream("hi", provider=ScriptedProvider(["one"]), model="m", tools=ToolRegistry())]
    seen = [e.n for e in ran]
    for _ in range(2):
        again = await Session.open(store, first.id)
        events = [e async for e in again.stream(None, provider=ScriptedProvider([]), model="m", tools=ToolRegistry())]
        assert isinstance(events[-1], Done) and events[-1].reason == "nothing_to_do"
        assert min(e.n for e in events) > max(seen)
        seen += [e.n for e in events]


async def test_a_compaction_after_another_writer_is_a_conflict(store: Store, tmp_path: Path) -> None:
    from tether.errors import SeqConflict
    from tether.runtime.handle import SessionHandle
    from tether.runtime.journal import RunJournal

    handle = await SessionHandle.create(store, directory=tmp_path)
    journal = RunJournal(handle)
    await journal.append(Message.user("mine"))
    await store.append(handle.id, [Message.user("another writer's")])
    with pytest.raises(SeqConflict):  # the engine read the session after the intruder: it may not cut there
        await journal.append_for_engine([Message.assistant("summary")], expect_seq=3)
    assert (await store.get_session(handle.id)).entry_count == 2


# --- secrets: kept from commands, redacted from everything journaled -------------------------------------

OPENAI_KEY = "sk-proj-h12-4f9a8b7c6d5e4f3a2b1c0d"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYh12EXAMPLEKEY"
DB_PASSWORD = "correct-horse-battery-staple-h12"
DATABASE_URL = "postgres://app:Tr0ub4dor-h12-pw@db.internal:5432/app"
GITHUB_TOKEN = "ghp_h12AllowedTokenABCDEFGHIJKLMNOP0123"
LAB_KEY = "lab-gateway-key-h12-0123456789"
INLINE_KEY = "inline-config-key-h12-zyxwvut"

ENV_DUMP = "import os\nfor k, v in sorted(os.environ.items()):\n    print(f'{k}={v}')\n"


def store_bytes(db: Path) -> bytes:
    """Everything SQLite keeps of the store: the database, its WAL and shared memory."""
    return b"".join(p.read_bytes() for p in sorted(db.parent.glob(db.name + "*")))


async def export_bytes(db: Path, session_id: str) -> bytes:
    out = io.BytesIO()
    store = SqliteStore(db)
    try:
        await export_json(store, session_id, out)
    finally:
        await store.close()
    return out.getvalue()


def bash(id: str, command: str) -> ToolCallPart:
    return ToolCallPart(id=id, name="bash", arguments={"command": command})


async def run_bash_session(tmp_path: Path, script: list[Message | str], **options: Any) -> tuple[Path, str, list[Any]]:
    """A real run on a SQLite file with the real bash tool; returns the file, the session id and the
    tool results the journal holds."""
    db = tmp_path / "secrets.db"
    store = SqliteStore(db)
    try:
        session = await Session.create(store, directory=tmp_path)
        (tmp_path / "show_env.py").write_text(ENV_DUMP)
        provider = ScriptedProvider(script)
        events = [e async for e in session.stream("look around", provider=provider, model="m", **options)]
        assert isinstance(events[-1], Done), events[-1]
        results = [r for m in await session.messages() for r in m.tool_results]
    finally:
        await store.close()
    return db, session.id, results


async def test_a_run_s_commands_never_see_the_environment_s_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("MY_SERVICE_PASSWORD", DB_PASSWORD)
    monkeypatch.setenv("DATABASE_URL", DATABASE_URL)
    monkeypatch.setenv("H12_VISIBLE", "an-ordinary-setting")
    calls = [
        bash("c1", "env"),
        bash("c2", 'printenv OPENAI_API_KEY; echo "status=$?"'),
        bash("c3", f"{sys.executable} show_env.py"),
    ]
    db, sid, results = await run_bash_session(tmp_path, [Message.assistant("", tool_calls=calls), "done"])
    by_id = {r.call_id: r for r in results}
    # an allow-list: what shells and toolchains need is there, an application's own settings are not
    assert "PATH=" in by_id["c1"].content and "HOME=" in by_id["c1"].content
    assert "PATH=" in by_id["c3"].content
    assert "H12_VISIBLE" not in by_id["c1"].content and "H12_VISIBLE" not in by_id["c3"].content
    for name in ("OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "MY_SERVICE_PASSWORD", "DATABASE_URL"):
        assert f"{name}=" not in by_id["c1"].content and f"{name}=" not in by_id["c3"].content
    assert by_id["c2"].content == "status=1\n[exit code 0]"
    everything = store_bytes(db) + await export_bytes(db, sid)
    for secret in (OPENAI_KEY, AWS_SECRET, DB_PASSWORD, DATABASE_URL, "Tr0ub4dor-h12-pw"):
        assert secret.encode() not in everything


async def test_secrets_that_reach_the_journal_anyway_are_redacted_from_the_store_and_the_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command allowed a token prints it (in a short result, and in an output long enough to be saved as an
    artifact); the model puts a key from a config-named variable into a call's arguments and echoes the
    inline key of the configuration: none of it is stored."""
    monkeypatch.setenv("GITHUB_TOKEN", GITHUB_TOKEN)
    monkeypatch.setenv("LAB_KEY", LAB_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    config = parse_config(
        '[providers.lab]\nkind = "openai"\napi_key_env = "LAB_KEY"\n'
        f'[providers.other]\nkind = "openai"\napi_key = "{INLINE_KEY}"\n'
        '[tools.bash]\nallow_env = ["GITHUB_TOKEN"]\n'
    )
    calls = [
        bash("c1", "printenv GITHUB_TOKEN; printenv LAB_KEY; echo status=$?"),
        bash("c2", 'for i in $(seq 1 5000); do echo "line $i $GITHUB_TOKEN"; done'),
        bash("c3", f"echo {LAB_KEY} | wc -c"),
    ]
    script: list[Message | str] = [
        Message.assistant(f"Checking with {OPENAI_KEY}.", tool_calls=calls),
        f"Done. The inline key is {INLINE_KEY}.",
    ]
    db, sid, results = await run_bash_session(tmp_path, script, config=config)
    by_id = {r.call_id: r for r in results}
    assert by_id["c1"].content == "[redacted:GITHUB_TOKEN]\nstatus=1\n[exit code 0]"  # allowed, then redacted
    assert by_id["c2"].metadata["truncated"] is True and "[redacted:GITHUB_TOKEN]" in by_id["c2"].content
    store = SqliteStore(db)
    try:
        artifact = await read_artifact_bytes(store, by_id["c2"].metadata["artifact"])
        session = await Session.open(store, sid)
        messages = await session.messages()
    finally:
        await store.close()
    assert artifact.count(b"[redacted:GITHUB_TOKEN]") == 5000
    assert messages[1].tool_calls[2].arguments == {"command": "echo [redacted:LAB_KEY] | wc -c"}
    assert messages[1].text == "Checking with [redacted:OPENAI_API_KEY]."
    assert messages[-1].text == "Done. The inline key is [redacted:providers.other.api_key]."
    everything = store_bytes(db) + await export_bytes(db, sid)
    for secret in (GITHUB_TOKEN, LAB_KEY, OPENAI_KEY, INLINE_KEY):
        assert secret.encode() not in everything


async def test_the_journal_redacts_before_it_writes_and_costs_nothing_without_secrets(
    store: Store, tmp_path: Path
) -> None:
    handle = await SessionHandle.create(store, directory=str(tmp_path))
    journal = RunJournal(handle, redactor=Redactor({"OPENAI_API_KEY": OPENAI_KEY}))
    plain = Message.user("nothing secret")
    (first, second) = await journal.append(plain, Message.user(f"key {OPENAI_KEY}"))
    assert first.body == plain
    assert second.body == Message.user("key [redacted:OPENAI_API_KEY]")
    stored = [e.body async for e in store.iter_entries(handle.id, 1)]
    assert stored == [plain, Message.user("key [redacted:OPENAI_API_KEY]")]
    assert not RunJournal(handle).redactor  # none given: nothing to do


async def test_a_run_after_one_that_died_mid_stream_never_reuses_its_numbers(tmp_path: Path) -> None:
    """A process killed while its model streamed gave live numbers after the last entry; the next process
    (a fresh store object, no memory of them) numbers after every one of them: its `run_started` is not
    taken for a delta a follower already saw. (On main, it took the number of the dead run's first delta.)"""
    path = tmp_path / "t.db"
    dead = SqliteStore(path)  # the process that dies: left as it is, mid-stream
    session = await Session.create(dead, directory=tmp_path)
    seen: list[Event] = []
    stream = session.stream("hi", provider=ScriptedProvider(["a long answer " * 20]), model="m", tools=ToolRegistry())
    async for event in stream:
        seen.append(event)
        if sum(isinstance(e, TextDelta) for e in seen) == 3:
            break  # nothing after these events
    sid = session.id
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DELETE FROM leases")  # its lease is gone, as a dead holder's is taken over
    conn.close()
    try:
        async with SqliteStore(path) as store:  # a restart: a new process, same file
            again = await Session.open(store, sid)
            provider = ScriptedProvider(["done"])
            resumed = [e async for e in again.stream(None, provider=provider, model="m", tools=ToolRegistry())]
    finally:
        await stream.aclose()
        await dead.close()
    assert isinstance(resumed[0], RunStarted)
    assert min(e.n for e in resumed if e.session_id == sid) > max(e.n for e in seen)
    numbers = [e.n for e in seen + resumed]
    assert len(numbers) == len(set(numbers))


async def test_every_live_number_given_is_reserved_before_it_leaves_or_follows_the_runs_own_entry(
    store: Store, tmp_path: Path
) -> None:
    """A live number is the run's alone when it follows an entry the run appended (no other writer could
    append that seq); any other (the run's start, after the entry it found) is reserved in the store first."""
    counting = CountingStore(store)
    session = await Session.create(counting, directory=tmp_path)  # type: ignore[arg-type]
    reserved: list[tuple[int, int]] = []
    inner = counting.inner.reserve_numbers

    async def spy(session_id: str, floor: int, count: int) -> int:
        first = await inner(session_id, floor, count)
        reserved.append((first, first + count - 1))
        return first

    counting.inner.reserve_numbers = spy  # type: ignore[method-assign]
    events = [
        e async for e in session.stream("hi", provider=ScriptedProvider(["x y z"]), model="m", tools=ToolRegistry())
    ]
    live = [e.n for e in events if not isinstance(e, DURABLE_TYPES)]
    appended = {e.seq for e in await store.read(session.id)}  # every entry there is this run's

    def own(n: int) -> bool:
        return n // EVENT_SPAN in appended and n % EVENT_SPAN < RESERVED_OFFSET

    assert live and all(own(n) or any(lo <= n <= hi for lo, hi in reserved) for n in live)
    assert isinstance(events[0], RunStarted) and not own(events[0].n)  # its start follows no entry of its own
    assert any(own(n) for n in live)  # the answer's deltas follow its prompt, which it appended
