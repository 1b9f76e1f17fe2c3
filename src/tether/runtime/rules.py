"""Approval rules: `allow`, `ask` or `deny` for a tool, optionally narrowed by a pattern (``bash(git
status*)``, ``edit(src/**)``, ``read(**/.env)``, ``task(*)``, ``mcp__server__tool``), and the permission
modes. `Rules.decide` is pure: one call, one `Permission`. The order is written once, in `Rules.decide`."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal, get_args

from ..errors import InvalidInput
from ..paths import config_path, tether_home
from ..tools.sandbox import PROTECTED
from .commands import SimpleCommand, Unparseable, split_command
from .permission import Permission, strictest

Action = Literal["allow", "ask", "deny"]
Mode = Literal["default", "accept-edits", "plan", "never-ask", "bypass"]
MODES: tuple[str, ...] = get_args(Mode)
STRICTNESS: dict[Action, int] = {"allow": 0, "ask": 1, "deny": 2}

PATH_TOOLS = frozenset({"read", "write", "edit", "list", "glob", "grep"})
"""Tools whose pattern is a path glob matched against their ``path`` argument (default: the workspace)."""
EDIT_TOOLS = frozenset({"write", "edit"})
HARMLESS_TOOLS = frozenset({"question", "task"})
"""Tools allowed by default though not marked read-only: `question` changes nothing (it is marked so that two
questions never run at once), and a `task`'s sub-agent has its every call decided by these same rules."""
BUILTIN_ASKS = ("read(**/.env)", "read(**/.env.*)", "grep(**/.env)", "grep(**/.env.*)")
"""Asked about by default though their tools are read-only: secrets live there."""

_RULE = re.compile(r"^\s*([A-Za-z0-9_.*-]+)\s*(?:\((.*)\))?\s*$", re.DOTALL)


@dataclass(frozen=True)
class Rule:
    """One rule: what it does, to which tool (a name, or a glob of names: ``mcp__github__*``), narrowed by
    `pattern` (None: every call of the tool), and where it was written (shown when it decides)."""

    action: Action
    tool: str
    pattern: str | None = None
    source: str = ""

    @property
    def text(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool}({self.pattern})"

    def names(self, tool: str) -> bool:
        return self.tool == tool or ("*" in self.tool and _glob(self.tool, "name").fullmatch(tool) is not None)


def parse_rule(text: str, action: Action, source: str = "") -> Rule:
    """``tool`` or ``tool(pattern)``; `InvalidInput` naming what is wrong."""
    match = _RULE.match(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidInput(f"{text!r} is not a rule: write TOOL or TOOL(PATTERN), such as bash(git status*)")
    tool, pattern = match.group(1), match.group(2)
    if pattern is not None:
        pattern = pattern.strip()
        if not pattern:
            raise InvalidInput(f"{text!r}: the pattern in the parentheses is empty (leave them out for every call)")
        if pattern in ("*", "**"):
            pattern = None
    return Rule(action=action, tool=tool, pattern=pattern, source=source)


def parse_rules(texts: Iterable[str], action: Action, source: str) -> list[Rule]:
    texts = tuple(texts)
    if all(type(text) is str for text in texts):
        return list(_parsed(texts, action, source))
    return [parse_rule(text, action, source) for text in texts]  # what is not a string fails there


@lru_cache(maxsize=1024)
def _parsed(texts: tuple[str, ...], action: Action, source: str) -> tuple[Rule, ...]:
    """The rules of `texts`, parsed once: every run's start parses the same few layers again (a rule is
    frozen, so the same ones serve every run)."""
    return tuple(parse_rule(text, action, source) for text in texts)


def check_mode(mode: str, source: str = "") -> Mode:
    if mode not in MODES:
        where = f" ({source})" if source else ""
        raise InvalidInput(f"unknown permission mode {mode!r}{where}; the modes are: {', '.join(MODES)}")
    return mode  # type: ignore[return-value]


@cache
def _glob(pattern: str, kind: Literal["name", "command", "path"]) -> re.Pattern[str]:
    """A pattern as a regex. Names and commands: ``*`` is any text (``\\*`` a star), and ``cmd *`` also
    matches ``cmd`` alone. Paths: ``**`` crosses directories, ``*`` and ``?`` stay within one."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if kind != "path":
            if ch == "\\" and pattern[i + 1 : i + 2] == "*":
                out.append(re.escape("*"))
                i += 2
                continue
            if ch == "*":
                # "git status *" matches "git status" too: the arguments may be none
                if out and out[-1] == re.escape(" ") and i == len(pattern) - 1:
                    out[-1] = "(?: .*)?"
                else:
                    out.append(".*")
            else:
                out.append(re.escape(ch))
            i += 1
            continue
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif ch == "*":
            out.append("[^/]*")
            i += 1
        elif ch == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(ch))
            i += 1
    text = "".join(out)
    if kind == "path" and text.endswith("/.*"):  # src/** is src itself too
        text = text[:-3] + "(?:/.*)?"
    return re.compile(text, re.DOTALL)


def _absolute(value: str, workspace: Path) -> str:
    path = Path(os.path.expanduser(value))
    return os.path.normpath(path if path.is_absolute() else workspace / path)


def path_matches(pattern: str, path: str, workspace: Path) -> bool:
    """Whether `path` (absolute) falls under `pattern`: absolute (``/etc/**``, ``~/.ssh/**``), anywhere
    (``**/.env``), or relative to the workspace (``src/**``)."""
    if pattern.startswith("**"):
        return _glob(pattern, "path").fullmatch(path.lstrip("/")) is not None
    return _glob(_absolute(pattern, workspace), "path").fullmatch(path) is not None


@dataclass
class _Check:
    """One thing a call would do, decided on its own: a tool on a subject (a command, a path, the call's
    arguments). `allow_subjects` are the readings an allow rule may match (a command seen through `sudo`
    may be denied as what it runs, but allowed only as written)."""

    tool: str
    subjects: list[str]
    allow_subjects: list[str]
    label: str
    read_only: bool = False
    unreadable: bool = False
    redirection: bool = False
    """A command's redirection into a file: part of the command, unless it leaves the workspace."""


@dataclass(frozen=True)
class _Decided:
    """The decision on one check. A `firm` ask stays an ask in ``bypass`` mode: a person must see it."""

    action: Action
    why: str
    rule: Rule | None
    firm: bool = False


@dataclass(frozen=True)
class Rules:
    """The rules a run decides by: the explicit ones of every layer (user config, project config, the
    session's own, the run's flags) and the mode. Built-in defaults are not in `rules`: they decide only
    what no explicit rule speaks to."""

    rules: tuple[Rule, ...] = ()
    mode: Mode = "default"
    defaults: tuple[Rule, ...] = field(default_factory=lambda: tuple(parse_rules(BUILTIN_ASKS, "ask", "built-in")))
    ceiling: Rules | None = None
    """A parent run's rules, for a sub-agent's: a call gets the stricter of the two decisions, so that no
    rule of the child's own (its agent profile's) lets it do what its parent may not."""
    unconfined: str | None = None
    """Why no sandbox can confine commands here, when one was asked for: every ``bash`` call then asks a
    person, in every mode (rather than run with the user's full reach unseen)."""
    _workspaces: dict[Path, Path] = field(default_factory=dict, init=False, repr=False, compare=False)
    """The workspaces decided in, made canonical once for these rules (a run's: each of its tool calls
    is decided in the same one)."""

    def adding(self, rules: Iterable[Rule]) -> Rules:
        return replace(self, rules=(*self.rules, *rules))

    def for_child(self, rules: Iterable[Rule]) -> Rules:
        """The rules of a sub-agent of a run that has these: these, in their mode, with `rules` (its agent
        profile's) added, and never more than these."""
        return replace(self, rules=(*self.rules, *rules), ceiling=self)

    def decide(self, tool: str, arguments: Any, *, read_only: bool, workspace: Path) -> Permission:
        """The decision on one call, in one order:

        1. ``bypass`` allows, ``plan`` denies every tool that is not read-only;
        2. the call is split into checks (a command into the simple commands it runs and the files it
           redirects into, as ``write(path)`` and ``read(path)``);
        3. for each check, the explicit rules that match it, strictest first: deny, then ask, then allow;
           ``accept-edits`` adds ``edit`` and ``write`` in the workspace as allowed; with none matching, the
           built-in defaults (read-only tools allowed, ``.env`` files asked about, a command's redirection
           into the workspace left to the command, the rest asked about: writing outside the workspace too);
           a command that cannot be read is asked about whatever allows it;
        4. the call gets the strictest of its checks: ``safe && unsafe`` is never ``safe``;
        5. ``never-ask`` turns an ask into a deny.

        Explicit deny rules hold in every mode, ``bypass`` included. A sub-agent's rules get the stricter of
        their decision and their parent's (`ceiling`)."""
        own = self._decide(tool, arguments, read_only=read_only, workspace=workspace)
        if self.ceiling is None:
            return own
        return strictest(own, self.ceiling.decide(tool, arguments, read_only=read_only, workspace=workspace))

    def _canonical(self, workspace: Path) -> Path:
        canonical = self._workspaces.get(workspace)
        if canonical is None:
            if len(self._workspaces) >= 16:
                self._workspaces.clear()
            canonical = self._workspaces[workspace] = workspace.expanduser().resolve()
        return canonical

    def _decide(self, tool: str, arguments: Any, *, read_only: bool, workspace: Path) -> Permission:
        if self.mode == "plan" and not (read_only or tool in HARMLESS_TOOLS):
            return Permission(False, f"plan mode runs read-only tools only, and {tool} is not one")
        workspace = self._canonical(workspace)
        decided = [
            self._decide_check(check, workspace) for check in self._checks(tool, arguments, read_only, workspace)
        ]
        if tool == "bash" and self.unconfined is not None:
            why = f"no sandbox can confine commands here ({self.unconfined}), so every command is asked about"
            decided.append(_Decided("ask", why, None, firm=True))
        worst = max(decided, key=lambda d: (STRICTNESS[d.action], d.firm))  # every call is at least one check
        action, why, rule = worst.action, worst.why, worst.rule
        text = rule.text if rule is not None else ""
        if action == "deny":
            return Permission(False, why, rule=text)
        if action == "ask" and self.mode == "bypass" and not worst.firm:
            return Permission(True, "bypass mode", rule=text)
        if action == "ask" and self.mode == "never-ask":
            hint = allow_hint(self.suggestion(tool, arguments, read_only=read_only, workspace=workspace))
            return Permission(False, f"{why}, and the permission mode never-ask denies what would ask{hint}", rule=text)
        if action == "ask":
            return Permission(False, why, ask=True, rule=text)
        return Permission(True, why, rule=text)

    def _mode_rules(self, workspace: Path) -> list[Rule]:
        if self.mode != "accept-edits":
            return []
        return [Rule("allow", name, f"{workspace}/**", "accept-edits mode") for name in sorted(EDIT_TOOLS)]

    def _decide_check(self, check: _Check, workspace: Path) -> _Decided:
        decided = self._decide_rules(check, workspace)
        guarded = _guarded(check, workspace)
        if guarded is None or decided.action == "deny":
            return decided
        explicit = [
            r
            for r in self.rules
            if r.action == "allow"
            and r.names(check.tool)
            and _names_path(r, guarded, workspace)
            and any(_matches(r, check.tool, s, workspace) for s in check.allow_subjects)
        ]
        if decided.action == "allow" and explicit:
            return _Decided(
                "allow", f"{check.label}: allowed by the rule {explicit[0].text}{_from(explicit[0])}", explicit[0]
            )
        why = (
            f"{check.label} changes {guarded}, which holds tether's or the agent's own configuration or "
            f"instructions: asked about in every mode (a rule that names it, such as {check.tool}"
            f"({_shown_path(guarded, workspace)}), allows it)"
        )
        return _Decided("ask", why, None, firm=True)

    def _decide_rules(self, check: _Check, workspace: Path) -> _Decided:
        matched: list[Rule] = []
        for rule in (*self.rules, *self._mode_rules(workspace)):
            if not rule.names(check.tool):
                continue
            if rule.pattern is None:
                matched.append(rule)
            elif check.unreadable:
                continue  # a pattern cannot see into a command that was not read
            else:
                subjects = check.allow_subjects if rule.action == "allow" else check.subjects
                if any(_matches(rule, check.tool, s, workspace) for s in subjects):
                    matched.append(rule)
        if check.unreadable:
            # only a rule for every command of the tool speaks to it, and an allow does not make it safe
            strictest = max(matched, key=lambda r: STRICTNESS[r.action], default=None)
            if strictest is not None and strictest.action == "deny":
                return _Decided("deny", f"denied by the rule {strictest.text}{_from(strictest)}", strictest)
            # what it runs may be what a deny rule forbids: even bypass asks then, rather than run it
            denied = next((r for r in self.rules if r.action == "deny" and r.names(check.tool)), None)
            if denied is not None:
                why = f"{check.label} could not be read with certainty, and the rule {denied.text} may forbid it"
                return _Decided("ask", why, None, firm=True)
            return _Decided("ask", f"{check.label} could not be read with certainty", None)
        if matched:
            rule = max(matched, key=lambda r: STRICTNESS[r.action])
            verb = {"deny": "denied", "ask": "asked about", "allow": "allowed"}[rule.action]
            return _Decided(rule.action, f"{check.label}: {verb} by the rule {rule.text}{_from(rule)}", rule)
        for rule in self.defaults:
            if rule.names(check.tool) and (
                rule.pattern is None or any(_matches(rule, check.tool, s, workspace) for s in check.subjects)
            ):
                verb = {"deny": "denied", "ask": "asked about", "allow": "allowed"}[rule.action]
                return _Decided(rule.action, f"{check.label}: {verb} by default ({rule.text})", rule)
        if check.redirection and all(_inside(s, workspace) for s in check.subjects):
            return _Decided("allow", f"{check.label} stays in the workspace", None)
        if check.read_only or check.tool in HARMLESS_TOOLS:
            return _Decided("allow", f"{check.tool} is read-only", None)
        return _Decided("ask", f"{check.label} asks by default", None)

    def _checks(self, tool: str, arguments: Any, read_only: bool, workspace: Path) -> list[_Check]:
        args = arguments if isinstance(arguments, Mapping) else {}
        if tool == "bash":
            command = args.get("command")
            if not isinstance(command, str):
                return [_Check(tool, [], [], "a command that is not text", unreadable=True)]
            try:
                parts = split_command(command)
            except Unparseable as exc:
                return [_Check(tool, [], [], f"the command ({exc})", unreadable=True)]
            return [c for part in parts for c in _command_checks(part, workspace)] or [
                _Check(tool, [""], [""], "an empty command")
            ]
        if tool in PATH_TOOLS:
            value = args.get("path")
            path = value if isinstance(value, str) and value else "."
            subjects = _path_subjects(path, workspace)
            return [_Check(tool, subjects, subjects[-1:], f"{tool} {path}", read_only)]
        if tool == "task":  # a sub-agent is named by its agent: task(review), task(*)
            agent = args.get("agent")
            name = agent if isinstance(agent, str) and agent else "build"
            return [_Check(tool, [name], [name], f"a sub-agent ({name})", read_only)]
        strings = [v for v in args.values() if isinstance(v, str)]
        return [_Check(tool, strings, strings, tool, read_only)]

    def suggestion(self, tool: str, arguments: Any, *, read_only: bool, workspace: Path) -> list[str]:
        """The rules that would allow this call from now on (what "always" saves): for a command, one per
        part that is not allowed already, as narrow as a command and its subcommand (``bash(git push*)``);
        for a file, its path; for another tool, the tool."""
        workspace = self._canonical(workspace)
        out: list[str] = []
        for check in self._checks(tool, arguments, read_only, workspace):
            if self._decide_check(check, workspace).action == "allow":
                continue
            rule = _suggest(check, workspace)
            if rule is not None and rule not in out:
                out.append(rule)
        return out


def allow_hint(suggestion: Sequence[str]) -> str:
    """How a person allows what was asked about, for a denial's reason ('' when no rule can)."""
    if not suggestion:
        return ""
    flags = " ".join(f"--allow '{rule}'" for rule in suggestion)
    return f"; to allow it: {flags}, or [permissions] allow in config.toml"


def _from(rule: Rule) -> str:
    return f" (from {rule.source})" if rule.source else ""


def _matches(rule: Rule, tool: str, subject: str, workspace: Path) -> bool:
    assert rule.pattern is not None
    if tool in PATH_TOOLS:
        return path_matches(rule.pattern, subject, workspace)
    return _glob(rule.pattern, "command").fullmatch(subject) is not None


def _guarded(check: _Check, workspace: Path) -> Path | None:
    """The protected place a writing check changes (see `protected_place`), or None."""
    if check.tool not in EDIT_TOOLS:
        return None
    for subject in check.subjects:
        place = protected_place(subject, workspace)
        if place is not None:
            return place
    return None


def protected_place(path: str, workspace: Path) -> Path | None:
    """Where `path` (absolute) falls among the places a model must not change unseen: tether's home and
    configuration, and in the workspace (at any depth) `sandbox.PROTECTED` (``.git``, ``.tether``,
    ``.mcp.json``, skills folders, instruction files). Returns that place (``/ws/.tether``), or None."""
    target = Path(path)
    for root in (config_path().parent, tether_home()):
        root = Path(os.path.realpath(root))
        if target.is_relative_to(root):
            return root
    if target.is_relative_to(workspace):
        parts = target.relative_to(workspace).parts
        for i, part in enumerate(parts):
            if part in PROTECTED:
                return workspace.joinpath(*parts[: i + 1])
    return None


def _names_path(rule: Rule, place: Path, workspace: Path) -> bool:
    """Whether `rule`'s pattern names `place` itself: its part before any wildcard reaches into it
    (``write(.tether/config.toml)``, ``edit(.git/**)``; not ``write(**)`` nor accept-edits' workspace)."""
    if rule.pattern is None:
        return False
    literal = re.split(r"[*?\[]", rule.pattern, maxsplit=1)[0]
    if not literal:
        return False
    return Path(_absolute(literal, workspace)).is_relative_to(place)


def _shown_path(place: Path, workspace: Path) -> str:
    return place.relative_to(workspace).as_posix() if place.is_relative_to(workspace) else str(place)


def _inside(path: str, workspace: Path) -> bool:
    return Path(path).is_relative_to(workspace)


def _path_subjects(path: str, workspace: Path) -> list[str]:
    """The path as written (made absolute) and as it resolves (symlinks followed): deny and ask rules see
    both, an allow rule only where it really leads."""
    if "\0" in path:  # names no file (the tool refuses it): judged as written, nothing expanded or followed
        return [os.path.normpath(workspace / path)]
    written = _absolute(path, workspace)
    real = os.path.realpath(written)
    return [written] if real == written else [written, real]


def _command_checks(part: SimpleCommand, workspace: Path) -> list[_Check]:
    checks: list[_Check] = []
    if part.words:
        subjects = [f.text for f in part.forms]
        label = f"`{part.forms[0].text}`"
        if part.dynamic:
            # no pattern can tell what it runs: like a command that was not read, only a deny of every
            # command speaks to it
            checks.append(
                _Check("bash", subjects, [], f"{label} (its command is known only when it runs)", unreadable=True)
            )
        else:
            checks.append(_Check("bash", subjects, [f.text for f in part.forms if f.allow_ok], label))
    for target in part.writes:
        subjects = _path_subjects(target, workspace)
        checks.append(_Check("write", subjects, subjects[-1:], f"a redirection into {target}", redirection=True))
    for source in part.reads:
        subjects = _path_subjects(source, workspace)
        checks.append(_Check("read", subjects, subjects[-1:], f"a redirection from {source}", read_only=True))
    return checks


_SUBCOMMAND = re.compile(r"^[a-z][a-z0-9_:-]*$")
SUBCOMMAND_TOOLS = frozenset(
    [
        "git",
        "npm",
        "pnpm",
        "yarn",
        "bun",
        "npx",
        "cargo",
        "go",
        "make",
        "just",
        "uv",
        "pip",
        "pip3",
        "poetry",
        "docker",
        "podman",
        "kubectl",
        "gh",
        "dotnet",
        "mvn",
        "gradle",
        "tox",
        "nox",
        "hatch",
        "pdm",
        "rustup",
        "brew",
        "apt",
    ]
)
"""Commands whose second word is a subcommand: "always" allows the subcommand (``bash(git push*)``); any
other command is allowed only exactly as it was asked (``bash(rm -rf build)``)."""


def _suggest(check: _Check, workspace: Path) -> str | None:
    if check.unreadable:
        return None
    if check.tool == "bash":
        if not check.allow_subjects:
            return None  # its command is only known at run time: no rule can allow it safely
        words = check.allow_subjects[-1].split(" ")
        if len(words) >= 2 and words[0] in SUBCOMMAND_TOOLS and _SUBCOMMAND.match(words[1]):
            return f"bash({words[0]} {words[1]}*)"
        return "bash(" + check.allow_subjects[-1].replace("*", "\\*") + ")"
    if check.tool in PATH_TOOLS:
        path = Path(check.allow_subjects[-1])
        shown = path.relative_to(workspace).as_posix() if path.is_relative_to(workspace) else str(path)
        return f"{check.tool}({shown})"
    return check.tool


def layered(
    layers: Sequence[tuple[str, Mapping[str, Sequence[str]]]], mode: str | None = None, mode_source: str = ""
) -> Rules:
    """`Rules` from layers of ``{"allow": [...], "ask": [...], "deny": [...]}``, each named by where it was
    written. Every rule counts whatever its layer (the strictest wins); `mode` is the last one set."""
    rules: list[Rule] = []
    for source, lists in layers:
        for action in ("deny", "ask", "allow"):
            rules.extend(parse_rules(lists.get(action, ()), action, source))
    return Rules(tuple(rules), check_mode(mode or "default", mode_source))


SESSION_RULES_KEY = "permissions"
"""Where a session keeps its own rules: ``metadata["permissions"] = {"allow": [...]}`` (written by an
"always, in this session")."""


def with_session_rules(metadata: Mapping[str, Any], lists: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """`metadata` with the session's own rules replaced by `lists` (``{"allow": [...], ...}``), each rule
    checked first (`InvalidInput` names the one that does not parse); empty lists remove the layer."""
    actions: tuple[Action, ...] = ("deny", "ask", "allow")
    kept = {action: list(lists.get(action, ())) for action in actions}
    for action in actions:
        parse_rules(kept[action], action, "this session")
    out = {k: v for k, v in metadata.items() if k != SESSION_RULES_KEY}
    if any(kept.values()):
        out[SESSION_RULES_KEY] = {action: texts for action, texts in kept.items() if texts}
    return out


def session_rules(metadata: Mapping[str, Any]) -> list[Rule]:
    """The rules a session keeps in its metadata; one that does not parse (an edited import) is left out."""
    lists = metadata.get(SESSION_RULES_KEY)
    out: list[Rule] = []
    if not isinstance(lists, Mapping):
        return out
    for action in ("deny", "ask", "allow"):
        texts = lists.get(action)
        for text in texts if isinstance(texts, list) else []:
            try:
                out.append(parse_rule(text, action, "this session"))
            except InvalidInput:
                continue
    return out
