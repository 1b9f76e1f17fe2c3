"""Importers: how fast Claude Code transcripts, Codex rollouts and opencode's stores (its SQLite database and
its older JSON folder) come in, in how much memory, and what importing them again costs when nothing changed.

    python bench/importers.py                # 500 MB of each format (2 GB in all): many minutes
    python bench/importers.py --size 100     # 100 MB of each
    python bench/importers.py --quick        # 1 MB of each: checks that it runs
    python bench/importers.py --formats opencode-db,opencode-json

The corpus is generated in each format's schema (sessions of ~1 MB: user prompts, assistant text and
thinking with signatures, tool calls with outputs of a few KB, progress and snapshot lines; Codex: response
items, token counts, turn contexts; opencode: user and assistant messages with step, reasoning, text and
completed bash tool parts, in a database made with the schema of the one opencode 1.18.33 wrote
(tests/fixtures/opencode) or in the JSON folder's files) into a scratch folder, then each format is imported
by `tether import`'s own function, in a fresh process (so its peak RSS is the import's), into a new SQLite
store; then imported again. Figures per format: `import_mb_per_s_<format>` (source MB over wall seconds),
`import_rss_mb_<format>`, `reimport_s_<format>`, `reimport_ratio_<format>` (the second import over the
first); overall `import_rss_mb` (the largest peak), `reimport_s` (all formats) and `reimport_ratio` (the
largest). Readable rows, then one JSON object as the last line."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BenchError, Report, Target, filesystem_of, peak_rss_mb, run_json_child, scratch_dir

TARGETS = (Target("import_rss_mb", "<=", 200), Target("reimport_ratio", "<=", 0.05))
FORMATS = ("claude-code", "codex", "opencode-db", "opencode-json")
FILE_BYTES = 1 << 20
WORDS = [
    "the",
    "a",
    "function",
    "test",
    "file",
    "error",
    "value",
    "returns",
    "module",
    "import",
    "config",
    "port",
    "build",
    "fails",
    "fixed",
    "line",
]


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def claude_session(rng: random.Random, sid: str, target: int) -> bytes:
    out: list[bytes] = []
    size, parent, n = 0, None, 0
    cwd = f"/home/dev/project{rng.randrange(20)}"

    def put(obj: dict[str, Any]) -> None:
        nonlocal size, parent, n
        n += 1
        obj.update(
            parentUuid=parent, uuid=f"{sid}-{n}", isSidechain=False, userType="external", cwd=cwd,
            sessionId=sid, version="1.0.80", gitBranch="main", timestamp=f"2025-08-01T10:{n // 60 % 60:02d}:{n % 60:02d}Z",
        )  # fmt: skip
        parent = obj["uuid"]
        line = json.dumps(obj).encode() + b"\n"
        out.append(line)
        size += len(line)

    while size < target:
        put({"type": "user", "message": {"role": "user", "content": words(rng, 30)}})
        mid = f"msg_{sid}_{n}"
        usage = {
            "input_tokens": 12,
            "cache_read_input_tokens": 20000,
            "cache_creation_input_tokens": 500,
            "output_tokens": 300,
        }
        base = {"id": mid, "type": "message", "role": "assistant", "model": "claude-sonnet-4-20250514", "usage": usage}
        put(
            {
                "type": "assistant",
                "requestId": f"r{n}",
                "message": {
                    **base,
                    "content": [{"type": "thinking", "thinking": words(rng, 60), "signature": "Eq" + "x" * 300}],
                },
            }
        )
        put(
            {
                "type": "assistant",
                "requestId": f"r{n}",
                "message": {**base, "content": [{"type": "text", "text": words(rng, 80)}]},
            }
        )
        call = f"toolu_{sid}_{n}"
        put(
            {
                "type": "assistant",
                "requestId": f"r{n}",
                "message": {
                    **base,
                    "content": [
                        {
                            "type": "tool_use",
                            "id": call,
                            "name": "Bash",
                            "input": {"command": "pytest -q", "description": "run tests"},
                        }
                    ],
                },
            }
        )
        put({"type": "progress", "data": {"type": "bash_progress", "output": words(rng, 10)}, "toolUseID": call})
        output = words(rng, rng.randrange(300, 1200))
        put(
            {
                "type": "user",
                "toolUseResult": {"stdout": output, "stderr": "", "interrupted": False},
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call, "content": output}],
                },
            }
        )
        put({"type": "file-history-snapshot", "messageId": f"{sid}-{n}", "snapshot": {"trackedFileBackups": {}}})
    return b"".join(out)  # fmt: skip


def codex_session(rng: random.Random, sid: str, target: int) -> bytes:
    out: list[bytes] = []
    size, n = 0, 0

    def put(kind: str, payload: dict[str, Any]) -> None:
        nonlocal size, n
        n += 1
        line = (
            json.dumps(
                {"timestamp": f"2025-09-20T10:{n // 60 % 60:02d}:{n % 60:02d}.000Z", "type": kind, "payload": payload}
            ).encode()
            + b"\n"
        )
        out.append(line)
        size += len(line)

    put(
        "session_meta",
        {
            "id": sid,
            "timestamp": "2025-09-20T10:00:00Z",
            "cwd": f"/home/dev/p{rng.randrange(20)}",
            "originator": "codex_cli_rs",
            "cli_version": "0.39.0",
            "instructions": words(rng, 200),
        },
    )
    usage = {
        "input_tokens": 20000,
        "cached_input_tokens": 18000,
        "output_tokens": 300,
        "reasoning_output_tokens": 100,
        "total_tokens": 20300,
    }
    while size < target:
        put(
            "turn_context",
            {
                "cwd": "/home/dev/p",
                "approval_policy": "on-request",
                "sandbox_policy": {"mode": "workspace-write"},
                "model": "gpt-5",
                "summary": "auto",
            },
        )
        text = words(rng, 30)
        put("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        put("event_msg", {"type": "user_message", "message": text, "images": []})
        put(
            "response_item",
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": words(rng, 40)}],
                "content": None,
                "encrypted_content": "gAAA" + "y" * 400,
            },
        )
        call = f"call_{n}"
        put(
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "arguments": json.dumps({"command": ["bash", "-lc", "pytest -q"]}),
                "call_id": call,
            },
        )
        put("event_msg", {"type": "token_count", "info": {"total_token_usage": usage, "last_token_usage": usage}})
        put(
            "response_item",
            {
                "type": "function_call_output",
                "call_id": call,
                "output": json.dumps({"output": words(rng, rng.randrange(300, 1200)), "metadata": {"exit_code": 0}}),
            },
        )
        answer = words(rng, 80)
        put(
            "response_item",
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]},
        )
        put("event_msg", {"type": "agent_message", "message": answer})
        put("event_msg", {"type": "token_count", "info": {"total_token_usage": usage, "last_token_usage": usage}})
    return b"".join(out)  # fmt: skip


OPENCODE_SCHEMA = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "opencode" / "opencode-1.18.33.db"


def opencode_session(rng: random.Random, sid: str, target: int, t0: int) -> tuple[dict[str, Any], list[Any]]:
    """One opencode session of about `target` bytes: (its record, [(message record, [part records])])."""
    project = "p" * 40
    messages: list[Any] = []
    size, n, t = 0, 0, t0

    def ident(prefix: str) -> str:
        nonlocal n
        n += 1
        return f"{prefix}_{t0 // 1000:08x}{n:06x}{rng.getrandbits(40):010x}"

    tokens = {"total": 20300, "input": 2000, "output": 300, "reasoning": 0, "cache": {"read": 18000, "write": 0}}
    while size < target:
        user = ident("msg")
        text = words(rng, 30)
        messages.append(
            (
                {"id": user, "sessionID": sid, "role": "user", "time": {"created": t}, "agent": "build",
                 "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4"}, "summary": {"diffs": []}},
                [{"id": ident("prt"), "sessionID": sid, "messageID": user, "type": "text", "text": text}],
            )
        )  # fmt: skip
        call, output = ident("toolu"), words(rng, rng.randrange(300, 1200))
        for step in range(2):
            mid = ident("msg")
            info = {
                "id": mid, "sessionID": sid, "parentID": user, "role": "assistant", "mode": "build", "agent": "build",
                "path": {"cwd": "/home/dev/p", "root": "/home/dev/p"}, "cost": 0.0123, "tokens": tokens,
                "modelID": "claude-sonnet-4", "providerID": "anthropic", "time": {"created": t + 10, "completed": t + 900},
                "finish": "tool-calls" if step == 0 else "stop",
            }  # fmt: skip
            base = {"sessionID": sid, "messageID": mid}
            parts: list[dict[str, Any]] = [{"id": ident("prt"), **base, "type": "step-start", "snapshot": "a" * 40}]
            if step == 0:
                parts.append(
                    {"id": ident("prt"), **base, "type": "reasoning", "text": words(rng, 60),
                     "metadata": {"anthropic": {"signature": "Eq" + "x" * 300}}, "time": {"start": t + 20, "end": t + 30}}
                )  # fmt: skip
                parts.append(
                    {"id": ident("prt"), **base, "type": "tool", "callID": call, "tool": "bash",
                     "state": {"status": "completed", "input": {"command": "pytest -q", "description": "run tests"},
                               "output": output, "title": "pytest -q",
                               "metadata": {"output": output[:200], "exit": 0, "description": "run tests"},
                               "time": {"start": t + 40, "end": t + 400}}}
                )  # fmt: skip
            else:
                parts.append(
                    {"id": ident("prt"), **base, "type": "text", "text": words(rng, 80), "time": {"start": t + 500, "end": t + 600}}
                )  # fmt: skip
            parts.append(
                {"id": ident("prt"), **base, "type": "step-finish", "reason": info["finish"], "snapshot": "b" * 40,
                 "cost": 0.0123, "tokens": tokens}
            )  # fmt: skip
            messages.append((info, parts))
        t += 1000
        size += len(json.dumps(messages[-3:]))
    session = {
        "id": sid, "slug": "brave-otter", "version": "1.18.33", "projectID": project, "directory": "/home/dev/p",
        "title": words(rng, 5), "time": {"created": t0, "updated": t},
    }  # fmt: skip
    return session, messages


def write_opencode_json(root: Path, session: dict[str, Any], messages: list[Any]) -> int:
    """Into opencode's JSON folder, as opencode 1.1 writes it (indented, one file per record)."""
    written = 0

    def put(path: Path, value: Any) -> None:
        nonlocal written
        data = json.dumps(value, indent=2).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written += len(data)

    put(root / "session" / session["projectID"] / f"{session['id']}.json", session)
    for info, parts in messages:
        put(root / "message" / session["id"] / f"{info['id']}.json", info)
        for part in parts:
            put(root / "part" / info["id"] / f"{part['id']}.json", part)
    return written


def write_opencode_db(db: Any, session: dict[str, Any], messages: list[Any]) -> int:
    """Into opencode's database (rows as opencode 1.18 writes them: ids in columns, the rest JSON)."""
    written = 0
    db.execute(
        "INSERT INTO session (id, project_id, slug, directory, title, version, time_created, time_updated) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (session["id"], session["projectID"], session["slug"], session["directory"], session["title"],
         session["version"], session["time"]["created"], session["time"]["updated"]),
    )  # fmt: skip
    for info, parts in messages:
        data = json.dumps({k: v for k, v in info.items() if k not in ("id", "sessionID")})
        created = info["time"]["created"]
        db.execute("INSERT INTO message VALUES (?, ?, ?, ?, ?)", (info["id"], session["id"], created, created, data))
        written += len(data)
        for part in parts:
            pdata = json.dumps({k: v for k, v in part.items() if k not in ("id", "sessionID", "messageID")})
            db.execute(
                "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
                (part["id"], info["id"], session["id"], created, created, pdata),
            )
            written += len(pdata)
    return written


def generate_opencode(root: Path, fmt: str, total: int, seed: int) -> int:
    import sqlite3

    rng = random.Random(seed)
    written, i = 0, 0
    db = None
    if fmt == "opencode-db":
        root.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(root / "opencode.db")
        db.execute("PRAGMA journal_mode = WAL")
        with sqlite3.connect(f"file:{OPENCODE_SCHEMA}?mode=ro", uri=True) as schema:
            for (sql,) in schema.execute(
                "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
            ):
                db.execute(sql)
        db.execute(
            "INSERT INTO project (id, worktree, vcs, time_created, time_updated, sandboxes) VALUES (?, ?, ?, ?, ?, ?)",
            ("p" * 40, "/home/dev/p", "git", 1, 1, "[]"),
        )
    while written < total:
        sid = f"ses_{i:08x}{rng.getrandbits(64):016x}"
        session, messages = opencode_session(
            rng, sid, min(FILE_BYTES, max(total - written, 4096)), 1_760_000_000_000 + i * 10**7
        )
        if db is not None:
            written += write_opencode_db(db, session, messages)
            db.commit()
        else:
            written += write_opencode_json(root / "storage", session, messages)
        i += 1
    if db is not None:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
    return written


def generate(root: Path, fmt: str, total: int, seed: int) -> int:
    if fmt.startswith("opencode"):
        return generate_opencode(root, fmt, total, seed)
    rng = random.Random(seed)
    written, i = 0, 0
    while written < total:
        sid = f"{i:08x}-1111-4111-8111-{rng.getrandbits(48):012x}"
        size = min(FILE_BYTES, max(total - written, 4096))
        if fmt == "claude-code":
            path = root / "projects" / f"-home-dev-project{i % 20}" / f"{sid}.jsonl"
            data = claude_session(rng, sid, size)
        else:
            path = root / "sessions" / "2025" / "09" / f"{i % 28 + 1:02d}" / f"rollout-2025-09-20T10-00-00-{sid}.jsonl"
            data = codex_session(rng, sid, size)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written += len(data)
        i += 1
    return written


async def _child_import(fmt: str, root: str, db: str) -> dict[str, Any]:
    from tether.importers.sources import discover, import_path
    from tether.store import open_store

    if fmt.startswith("opencode"):
        files = [Path(root) / ("opencode.db" if fmt == "opencode-db" else "storage")]
        kind = "opencode"
    else:
        files = discover(fmt, Path(root) / ("projects" if fmt == "claude-code" else "sessions"))
        kind = fmt
    t0 = time.perf_counter()
    entries, outcomes = 0, {}
    async with open_store(f"sqlite:///{db}") as store:
        for path in files:
            for result in await import_path(store, str(path), kind):
                entries += result.entries
                outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
    return {"seconds": time.perf_counter() - t0, "rss_mb": peak_rss_mb(), "entries": entries, "outcomes": outcomes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=float, default=500, help="corpus size in MB of each format (500)")
    parser.add_argument("--quick", action="store_true", help="1 MB of each format: checks that the benchmark runs")
    parser.add_argument(
        "--formats", default=",".join(FORMATS), help=f"which formats, comma-separated (default: {','.join(FORMATS)})"
    )
    parser.add_argument("--dir", help="scratch folder (default: .bench-out/ in the repository)")
    parser.add_argument("--keep", action="store_true", help="keep the corpus and the stores")
    parser.add_argument("--child", nargs=3, metavar=("FORMAT", "ROOT", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_child_import(*args.child))))
        return
    total_mb = 1.0 if args.quick else args.size
    if total_mb <= 0:
        raise BenchError("--size must be a positive number of MB")
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise BenchError(f"unknown format {', '.join(unknown) or '(none)'}: choose from {', '.join(FORMATS)}")
    report = Report(TARGETS)
    report.set("corpus_mb", total_mb)
    with scratch_dir(args.dir, keep=args.keep) as scratch:
        report.section(f"corpus: {total_mb:g} MB of each format in {scratch} ({filesystem_of(scratch)})")
        rss, ratios, reimport = [], [], 0.0
        for fmt in formats:
            root = scratch / fmt
            size = generate(root, fmt, int(total_mb * (1 << 20)), FORMATS.index(fmt) + 1)
            mb = size / (1 << 20)
            db = scratch / f"{fmt}.db"
            script = str(Path(__file__).resolve())
            first = run_json_child([script, "--child", fmt, str(root), str(db)], timeout=7200)
            again = run_json_child([script, "--child", fmt, str(root), str(db)], timeout=7200)
            if again["outcomes"] != {"unchanged": sum(first["outcomes"].values())}:
                raise BenchError(f"{fmt}: the second import was not all unchanged: {again['outcomes']}")
            key = fmt.replace("-", "_")
            report.section(
                f"{fmt}: {mb:,.1f} MB, {sum(first['outcomes'].values())} {'sessions' if fmt.startswith('opencode') else 'files'}, {first['entries']:,} entries"
            )
            report.row("import speed", f"import_mb_per_s_{key}", mb / first["seconds"], "MB/s")
            report.row("import peak RSS", f"import_rss_mb_{key}", first["rss_mb"], "MB")
            report.row("import again, nothing new", f"reimport_s_{key}", again["seconds"], "s", digits=3)
            report.row(
                "  over the first import", f"reimport_ratio_{key}", again["seconds"] / first["seconds"], "", digits=4
            )
            rss.append(first["rss_mb"])
            ratios.append(again["seconds"] / first["seconds"])
            reimport += again["seconds"]
        report.section("overall")
        report.row("import peak RSS (the larger)", "import_rss_mb", max(rss), "MB")
        report.row("import again, nothing new (both)", "reimport_s", reimport, "s", digits=3)
        report.row("reimport ratio (the larger)", "reimport_ratio", max(ratios), "", digits=4)
    report.finish()


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
