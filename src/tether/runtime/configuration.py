"""Reading the user's configuration: the one place that opens `config.toml` (see `tether.config` for its
shape), a workspace's own `.tether/config.toml` (its ``[permissions]`` only), and the one place that writes
a rule into it. Whoever starts work (the CLI, a server, `Session.stream` without a provider) reads it here
and passes what it found down; nothing below the runtime reads configuration."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from ..config import Config, PermissionsConfig, RulesConfig, parse_config
from ..context.budget import ContextSettings
from ..errors import ConfigError, InvalidInput
from ..paths import config_path
from ..tools.sandbox import Sandbox, SandboxPolicy
from . import audit, filecache
from .rules import Rules, layered
from .trust import ConfirmProject, accept, accept_rules, pending_change, withheld

log = logging.getLogger("tether.runtime")

PROJECT_CONFIG = Path(".tether") / "config.toml"
"""A workspace's own configuration, relative to the workspace: its approval rules, shared with whoever works
there (and checked in, if the project wants)."""


def load_config(path: Path | None = None) -> Config:
    """The user's config (`config_path()` by default), or an empty one when the file does not exist."""
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from exc
    return parse_config(text, source=str(path))


def context_settings(config: Config, *, source: str | None = None) -> ContextSettings:
    """The ``[context]`` section as the context engine's settings; a bad value is a `ConfigError` naming
    where it came from."""
    try:
        return msgspec.convert(config.context, ContextSettings).validate()
    except (msgspec.ValidationError, InvalidInput) as exc:
        raise ConfigError(f"[context] in {source or config_path()}: {exc}") from None


def project_config_path(workspace: str | os.PathLike[str]) -> Path:
    return _project_config_path(os.fspath(workspace))


@functools.lru_cache(maxsize=256)
def _project_config_path(workspace: str) -> Path:
    return Path(workspace) / PROJECT_CONFIG


def load_project_permissions(workspace: str | os.PathLike[str]) -> PermissionsConfig | None:
    """The ``[permissions]`` of the workspace's ``.tether/config.toml``, or None without one. A project file
    holds nothing else (providers, models and keys are the user's), and cannot turn approvals off
    (``mode = "bypass"`` is the user's to choose): either is a `ConfigError` naming the file. Read again only
    when the file changed (`filecache`): every run's start asks."""
    path = project_config_path(workspace)
    try:
        return filecache.parsed(path, _project_permissions)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from exc


def _project_permissions(path: Path, raw: bytes) -> PermissionsConfig:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from exc
    config = parse_config(text, source=str(path))
    empty = Config()
    others = [
        n
        for n in config.__struct_fields__
        if n not in ("permissions", "mcp") and getattr(config, n) != getattr(empty, n)
    ]  # [mcp.NAME]: the workspace's MCP servers, read by `runtime.mcp` (they start once the user enables them)
    if others:
        raise ConfigError(
            f"{path}: a workspace's config holds [permissions] only, not {', '.join(others)} "
            f"(those belong in {config_path()})"
        )
    if config.permissions.mode == "bypass":
        raise ConfigError(f'{path}: mode = "bypass" turns approvals off; only your own config or --permission-mode can')
    return config.permissions


def permission_rules(
    config: Config,
    workspace: str | os.PathLike[str],
    *,
    mode: str | None = None,
    allow: Sequence[str] = (),
    ask: Sequence[str] = (),
    deny: Sequence[str] = (),
    agent: tuple[str, RulesConfig | None] | None = None,
    confirm: ConfirmProject | None = None,
) -> Rules:
    """The rules of a run in `workspace`: the user's ``[permissions]``, the workspace's, the agent profile's
    (`agent`: its name and ``[agents.NAME.permissions]``), then the run's own (``--allow``, ``--deny``,
    ``--permission-mode``). Every rule of every layer counts (the strictest wins); the mode is the last one
    set. A bad rule is a `ConfigError` naming its file, or an `InvalidInput` for a flag.

    What the workspace's file grants (allow rules, ``accept-edits``) counts only once this user accepted it
    (`trust`): a change since then is put to `confirm`, and left out unless it says yes."""
    user = config.permissions
    project = load_project_permissions(workspace)
    if project is not None:
        change = pending_change(os.fspath(workspace), project_config_path(workspace), project)
        if change is not None:
            if confirm is not None and confirm(change):
                accept(os.fspath(workspace), project)
            else:
                if confirm is None:
                    log.warning("%s; not applied until accepted (tether trust %s)", change.describe(), workspace)
                project = withheld(change, project)
    # (where a rule was written, as a rule's source; as an error names it; the rules; the error's type)
    layers: list[tuple[str, str, RulesConfig | dict[str, Sequence[str]], type[Exception]]] = [
        (str(config_path()), f"[permissions] in {config_path()}", user, ConfigError)
    ]
    if project is not None:
        path = project_config_path(workspace)
        layers.append((str(path), f"[permissions] in {path}", project, ConfigError))
    if agent is not None and agent[1] is not None:
        table = f"[agents.{agent[0]}.permissions]"
        layers.append((f"{table} in {config_path()}", f"{table} in {config_path()}", agent[1], ConfigError))
    for action, given in (("allow", allow), ("ask", ask), ("deny", deny)):
        layers.append(("the run's flags", f"--{action}", {action: given}, InvalidInput))
    chosen = mode or (project.mode if project is not None else None) or user.mode or "default"
    key = tuple(
        (source, where, tuple((action, tuple(texts)) for action, texts in rule_lists(lists).items()), error)
        for source, where, lists, error in layers
    )
    try:
        hash(key)
    except TypeError:  # a rule that is not a string (a program's flags): it fails in the build, uncached
        return _layered_rules.__wrapped__(key, chosen)
    return _layered_rules(key, chosen)


_Layers = tuple[tuple[str, str, tuple[tuple[str, tuple[str, ...]], ...], type[Exception]], ...]


@functools.lru_cache(maxsize=64)
def _layered_rules(layers: _Layers, chosen: str) -> Rules:
    """The rules of `layers` (each: where its rules were written, as a rule's source; as an error names it;
    its rules by action; the error's type) in the mode `chosen`; built once for the same layers (every run's
    start asks, with the same few). What raises is not kept."""
    rules = Rules(mode="default")
    for source, where, lists, error in layers:
        try:
            rules = rules.adding(layered([(source, dict(lists))]).rules)
        except InvalidInput as exc:
            raise error(f"{where}: {exc}") from None
    try:
        return layered([], chosen).adding(rules.rules)
    except InvalidInput as exc:
        raise InvalidInput(f"--permission-mode: {exc}") from None


def rule_lists(lists: RulesConfig | Mapping[str, Sequence[str]]) -> dict[str, Sequence[str]]:
    """``{"allow": [...], "ask": [...], "deny": [...]}`` of a config table or of such a mapping."""
    if isinstance(lists, RulesConfig):
        return {"allow": lists.allow, "ask": lists.ask, "deny": lists.deny}
    return dict(lists)


def run_sandbox(config: Config, mode: str | None = None) -> Sandbox:
    """The sandbox of a run: ``[sandbox]`` of the user's config, its mode replaced by `mode` (``--sandbox``)
    when given. A bad value is an `InvalidInput` naming the flag, or a `ConfigError` naming the file."""
    table = config.sandbox
    network = table.network if table.network is not None else "off"
    try:
        policy = SandboxPolicy(
            mode=(table.mode or "workspace-write") if mode is None else mode,  # type: ignore[arg-type]
            network=network if isinstance(network, str) else tuple(network),
            writable=tuple(table.writable),
            mechanism=table.mechanism or "auto",
        )
    except InvalidInput as exc:
        if mode is not None:
            raise InvalidInput(f"--sandbox: {exc}") from None
        raise ConfigError(f"[sandbox] in {config_path()}: {exc}") from None
    return Sandbox(policy)


def approval_timeout(config: Config) -> float | None:
    return config.permissions.timeout


_HEADER = re.compile(r"^\s*\[\s*permissions\s*\]\s*(#.*)?$", re.MULTILINE)
_NEXT_TABLE = re.compile(r"^\s*\[", re.MULTILINE)
_ALLOW = re.compile(r"^\s*allow\s*=\s*\[", re.MULTILINE)


def save_project_rules(workspace: str | os.PathLike[str], rules: Sequence[str]) -> Path:
    """Add `rules` to ``allow`` under ``[permissions]`` in the workspace's ``.tether/config.toml`` (made if
    missing), keeping everything else in the file as written. The result is parsed before it replaces the
    file; a file laid out in a way this cannot edit safely is a `ConfigError` (edit it by hand)."""
    path = project_config_path(workspace)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    table = data.get("permissions", {})
    current = table.get("allow", []) if isinstance(table, dict) else []
    new = [r for r in rules if r not in current]
    if not new:
        return path
    items = ", ".join(json.dumps(r, ensure_ascii=False) for r in new)  # a JSON string is a TOML basic string
    header = _HEADER.search(text)
    if "permissions" not in data:
        text = text + ("\n" if text and not text.endswith("\n") else "") + f"\n[permissions]\nallow = [{items}]\n"
    elif header is None:
        raise ConfigError(f"{path}: cannot add {items} to [permissions] allow here; add it by hand")
    else:
        end = _NEXT_TABLE.search(text, header.end())
        section_end = end.start() if end else len(text)
        allow = _ALLOW.search(text, header.end(), section_end)
        if allow is None:
            text = text[: header.end()] + f"\nallow = [{items}]" + text[header.end() :]
        else:
            close = _closing_bracket(text, allow.end())
            if close is None:
                raise ConfigError(f"{path}: cannot add {items} to [permissions] allow here; add it by hand")
            before = text[allow.end() : close].rstrip()
            joiner = "" if not before.strip() or before.endswith(",") else ", "
            text = text[: allow.end()] + before + joiner + items + text[close:]
    try:
        written = tomllib.loads(text)["permissions"]["allow"]
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        written = None
    if written != [*current, *new]:
        raise ConfigError(f"{path}: cannot add {items} to [permissions] allow safely; add it by hand")
    write_config(path, text)
    audit.note("config.changed", detail={"path": str(path), "workspace": os.fspath(workspace), "allow": new})
    accept_rules(os.fspath(workspace), new)  # a person's answer wrote them: they need no second yes
    return path


def write_config(path: Path, text: str) -> None:
    """Replace a config file with `text` all at once (its directory made if missing): a crash leaves the old
    file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config.", suffix=".toml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _closing_bracket(text: str, start: int) -> int | None:
    """Where the array opened just before `start` closes (strings and comments skipped), or None."""
    depth, i = 1, start
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            triple = text[i : i + 3] == ch * 3
            quote = ch * 3 if triple else ch
            i += len(quote)
            while i < len(text) and not text.startswith(quote, i):
                i += 2 if ch == '"' and text[i] == "\\" else 1
            i += len(quote)
            continue
        if ch == "#":
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None
