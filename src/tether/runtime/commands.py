"""A shell command as the simple commands it would run, for the approval rules: `split_command` parses the
part of the shell language that agents write (quotes, `&&` `||` `;` `|` `&`, subshells, `$(...)` and
backticks, redirections, `sh -c`, `find -exec`), sees through wrappers (`sudo`, `env`, `timeout`, ...), and
gives up (None) on anything it cannot read with certainty: the caller then asks a person."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
RESERVED_PREFIXES = frozenset({"!", "then", "do", "else", "elif", "if", "while", "until", "time"})
"""Words that stand before a command without changing what it runs (`if x; then rm y; fi`)."""
CLOSERS = frozenset({"fi", "done", "esac", "{", "}"})
"""Words that end a compound command and run nothing themselves."""
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash"})
_PLAIN_PARAMETER = re.compile(r"\$\{#?(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])\}")
"""``${NAME}`` and ``${#NAME}``: the value or its length, evaluating nothing."""


class Unparseable(ValueError):
    """The command uses shell syntax this parser does not read with certainty."""


@dataclass
class Form:
    """One way of reading a simple command for matching: its words joined by single spaces. `allow_ok` is
    False once a wrapper that changes what the command may do (`sudo`, an environment assignment) was
    stripped: such a form can be denied or asked about, but an allow rule must name the wrapper itself."""

    text: str
    allow_ok: bool = True


@dataclass
class SimpleCommand:
    """A command that runs, with the files it redirects into (`writes`) and from (`reads`). `forms` are the
    readings rules match, outermost first; `dynamic` means its command word is only known when it runs
    (``$CMD args``)."""

    words: list[str]
    forms: list[Form] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    dynamic: bool = False

    @property
    def text(self) -> str:
        return self.forms[-1].text if self.forms else " ".join(self.words)


@dataclass
class _Word:
    text: str = ""
    started: bool = False
    dynamic: bool = False  # holds an expansion whose value is only known at run time


@dataclass
class _Raw:
    """A simple command as parsed: its words, which of them are dynamic, and its redirections."""

    words: list[str] = field(default_factory=list)
    dynamic: list[bool] = field(default_factory=list)
    writes: list[tuple[str, bool]] = field(default_factory=list)
    reads: list[tuple[str, bool]] = field(default_factory=list)


class _Parser:
    """A recursive reader of a command list; nested lists (`$(...)`, backticks, subshells) add their simple
    commands to the same flat list, since each of them runs."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.commands: list[_Raw] = []

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def parse_list(self, closer: str | None) -> None:
        """Read commands until `closer` (``)``, a backtick) or the end; the closer is consumed."""
        raw = _Raw()
        word = _Word()

        def end_word() -> None:
            nonlocal word
            if word.started:
                raw.words.append(word.text)
                raw.dynamic.append(word.dynamic)
            word = _Word()

        def end_command() -> None:
            nonlocal raw
            end_word()
            if raw.words or raw.writes or raw.reads:
                self.commands.append(raw)
            raw = _Raw()

        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if closer is not None and ch == closer:
                self.pos += 1
                end_command()
                return
            if ch in " \t":
                self.pos += 1
                end_word()
            elif ch == "\n" or ch == ";":
                self.pos += 1
                end_command()
            elif ch == "#" and not word.started:
                while self.pos < len(self.text) and self.text[self.pos] != "\n":
                    self.pos += 1
            elif ch in "&|":
                two = self.peek(2)
                if two in ("&>",):  # &> and &>> redirect both streams into a file
                    end_word()
                    self.pos += 3 if self.peek(3) == "&>>" else 2
                    raw.writes.append(self._target())
                    continue
                self.pos += 2 if two in ("&&", "||", "|&") else 1
                end_command()
            elif ch == "(":
                if word.started:
                    raise Unparseable("a parenthesis inside a word")
                if raw.words:
                    raise Unparseable("a parenthesis after a command word (a function definition?)")
                self.pos += 1
                self.parse_list(")")
            elif ch == ")":
                raise Unparseable("an unmatched closing parenthesis")
            elif ch in "<>":
                fd = word.text if word.started and word.text.isdigit() and not word.dynamic else None
                if word.started and fd is None:
                    end_word()
                word = _Word()
                self._redirect(raw)
            elif ch == "'":
                end = self.text.find("'", self.pos + 1)
                if end < 0:
                    raise Unparseable("an unterminated single quote")
                word.text += self.text[self.pos + 1 : end]
                word.started = True
                self.pos = end + 1
            elif ch == '"':
                self.pos += 1
                self._double_quoted(word)
            elif ch == "\\":
                nxt = self.text[self.pos + 1 : self.pos + 2]
                self.pos += 2
                if nxt == "\n" or not nxt:
                    continue  # a line continuation
                word.text += nxt
                word.started = True
            elif ch == "$":
                self._dollar(word)
            elif ch == "`":
                self.pos += 1
                self.parse_list("`")
                word.dynamic = word.started = True
                word.text += "`...`"
            else:
                word.text += ch
                word.started = True
                self.pos += 1
        if closer is not None:
            raise Unparseable(f"an unterminated {closer!r}")
        end_command()

    def _double_quoted(self, word: _Word) -> None:
        word.started = True
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == '"':
                self.pos += 1
                return
            if ch == "\\" and self.text[self.pos + 1 : self.pos + 2] in ('"', "\\", "$", "`", "\n"):
                if self.text[self.pos + 1] != "\n":
                    word.text += self.text[self.pos + 1]
                self.pos += 2
            elif ch == "$":
                self._dollar(word)
            elif ch == "`":
                self.pos += 1
                self.parse_list("`")
                word.dynamic = True
                word.text += "`...`"
            else:
                word.text += ch
                self.pos += 1
        raise Unparseable("an unterminated double quote")

    def _dollar(self, word: _Word) -> None:
        """`$(...)` runs a command list; `$VAR`, `${...}` are values known only at run time."""
        word.started = True
        two = self.peek(2)
        if self.peek(3) == "$((" or two == "$[":
            # an arithmetic expression evaluates the subscripts of the variables it names, and a subscript
            # may hold a command: `x='a[$(touch p)]'; echo $[x]` runs touch
            raise Unparseable("arithmetic expansion (its value, and what it runs, are known only at run time)")
        if two == "$(":
            self.pos += 2
            self.parse_list(")")
            word.dynamic = True
            word.text += "$(...)"
        elif two == "${":
            end = self.text.find("}", self.pos)
            if end < 0 or "$(" in self.text[self.pos : end] or "`" in self.text[self.pos : end]:
                raise Unparseable("a parameter expansion with commands inside")
            if not _PLAIN_PARAMETER.fullmatch(self.text[self.pos : end + 1]):
                # operators, subscripts, indirection and transformations evaluate what a variable holds
                # (`${x:x}` and `${a[x]}` as arithmetic, `${x@P}` as a prompt, `${!x}` as another name)
                raise Unparseable("a parameter expansion with an operator, a subscript or indirection")
            word.text += self.text[self.pos : end + 1]
            word.dynamic = True
            self.pos = end + 1
        elif two == "$'":
            raise Unparseable("an ANSI-C quoted string")
        elif len(two) == 2 and (two[1].isalnum() or two[1] in "_@*#?$!-"):
            match = re.match(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])", self.text[self.pos :])
            assert match is not None
            word.text += match.group()
            word.dynamic = True
            self.pos += match.end()
        else:  # a lone $ is itself
            word.text += "$"
            self.pos += 1

    def _redirect(self, raw: _Raw) -> None:
        """A redirection and its target: ``>``, ``>>``, ``>|``, ``<``, ``<>``, ``<<<``, ``>&2``, ``2>&1``,
        ``<(...)`` and ``>(...)`` (commands that run). Here-documents are not read."""
        op = self.text[self.pos]
        nxt = self.peek(2)[1:]
        if nxt == "(":  # process substitution
            self.pos += 2
            self.parse_list(")")
            return
        if op == "<" and self.peek(3) == "<<<":
            self.pos += 3
            self._target()  # a here-string is input text, not a file
            return
        if op == "<" and nxt == "<":
            raise Unparseable("a here-document")
        self.pos += 1
        if nxt in (">", "|") or (op == "<" and nxt == ">"):
            self.pos += 1
        duplicate = self.peek() == "&"
        if duplicate:
            self.pos += 1
        target = self._target()
        if duplicate and (target[0].isdigit() or target[0] == "-"):
            return  # >&2, <&0, >&-: another descriptor, no file
        (raw.writes if op == ">" or nxt == ">" else raw.reads).append(target)

    def _target(self) -> tuple[str, bool]:
        """The word a redirection names, and whether it is dynamic."""
        while self.peek() in (" ", "\t"):
            self.pos += 1
        word = _Word()
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in " \t\n;&|()<>":
                break
            if ch == "'":
                end = self.text.find("'", self.pos + 1)
                if end < 0:
                    raise Unparseable("an unterminated single quote")
                word.text += self.text[self.pos + 1 : end]
                self.pos = end + 1
            elif ch == '"':
                self.pos += 1
                self._double_quoted(word)
            elif ch == "$":
                self._dollar(word)
            elif ch == "`":
                raise Unparseable("a command in a redirection target")
            elif ch == "\\":
                word.text += self.text[self.pos + 1 : self.pos + 2]
                self.pos += 2
            else:
                word.text += ch
                self.pos += 1
            word.started = True
        if not word.started:
            raise Unparseable("a redirection without a target")
        return word.text, word.dynamic


def _skip_options(words: list[str], i: int, with_value: frozenset[str], *, attached: bool = True) -> int:
    """The index of the first word after the options at `i` (``--`` ends them). Options in `with_value`
    take the next word unless their value is attached (``-uroot``, ``--user=root``)."""
    while i < len(words):
        w = words[i]
        if w == "--":
            return i + 1
        if not w.startswith("-") or w == "-":
            return i
        if w in with_value:
            i += 2
            continue
        if attached and len(w) > 2 and not w.startswith("--") and w[:2] in with_value:
            i += 1
            continue
        i += 1
    return i


_WRAPPERS: dict[str, tuple[frozenset[str], bool]] = {
    # name: (options that take a value, transparent: the command inside can do no more than alone)
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), True),
    "nice": (frozenset({"-n", "--adjustment"}), True),
    "nohup": (frozenset(), True),
    "command": (frozenset(), True),
    "builtin": (frozenset(), True),
    "exec": (frozenset({"-a"}), True),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), True),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), True),
    "ionice": (frozenset({"-c", "--class", "-n", "--classdata", "-p", "-P", "-u"}), True),
    "xargs": (
        frozenset({"-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a", "--arg-file", "--delimiter", "--max-args"}),
        True,
    ),
    "sudo": (frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group"}), False),
    "doas": (frozenset({"-u", "-C"}), False),
    "env": (frozenset({"-u", "--unset", "-C", "--chdir"}), True),
}


def _unwrap(words: list[str]) -> tuple[list[Form], list[str]]:
    """The forms of a simple command from the outside in, and the innermost command's words."""
    forms = [Form(" ".join(words))]
    allow_ok = True
    i = 0
    while True:
        start = i
        while i < len(words) and ASSIGNMENT.match(words[i]):  # FOO=1 cmd: the environment changes
            i += 1
        if i >= len(words):
            break
        if i > start:
            allow_ok = False
            forms.append(Form(" ".join(words[i:]), allow_ok))
        name = words[i]
        if name in RESERVED_PREFIXES:
            i += 1
        elif name == "command" and i + 1 < len(words) and words[i + 1] in ("-v", "-V"):
            break  # `command -v x` looks x up, it does not run it
        elif name in _WRAPPERS:
            with_value, transparent = _WRAPPERS[name]
            if name == "env" and any(w in ("-S", "--split-string") or w.startswith("-S") for w in words[i + 1 :]):
                raise Unparseable("env -S splits a string into a command")
            i = _skip_options(words, i + 1, with_value)
            if name == "timeout" and i < len(words):
                i += 1  # the duration
            if name in ("sudo", "doas") and i >= len(words):
                raise Unparseable(f"{name} without a command starts a shell")
            if name == "env":
                while i < len(words) and ASSIGNMENT.match(words[i]):
                    i += 1
                    transparent = False
            allow_ok = allow_ok and transparent
        else:
            break
        if i >= len(words):
            break
        forms.append(Form(" ".join(words[i:]), allow_ok))
    inner = words[i:] if i < len(words) else []
    if inner and "/" in inner[0]:  # /bin/rm is rm: denied and asked about as rm, allowed only as written
        forms.append(Form(" ".join([inner[0].rsplit("/", 1)[1], *inner[1:]]), False))
    # the same text twice (an empty assignment list) adds nothing
    seen: dict[str, Form] = {}
    for form in forms:
        if form.text not in seen or (form.allow_ok and not seen[form.text].allow_ok):
            seen[form.text] = form
    return list(seen.values()), inner


def _nested(inner: list[str], dynamic: list[bool]) -> list[str] | None:
    """The command texts a simple command (`inner`, which of its words are `dynamic`) runs inside itself
    (`sh -c TEXT`, `eval TEXT`, `find -exec`), or None."""
    if not inner:
        return None
    name = inner[0].rsplit("/", 1)[-1]
    if name == "eval":
        if any(dynamic[1:]):
            raise Unparseable("eval of a value known only at run time")
        return [" ".join(inner[1:])]
    if name in SHELLS:
        for k, w in enumerate(inner[1:], start=1):
            if w == "-c" or (w.startswith("-") and not w.startswith("--") and "c" in w[1:]):
                if k + 1 >= len(inner):
                    raise Unparseable(f"{name} -c without a command")
                if dynamic[k + 1]:
                    raise Unparseable(f"{name} -c with a command known only at run time")
                return [inner[k + 1]]
            if not w.startswith("-"):
                break
    if name == "find":
        found: list[str] = []
        k = 1
        while k < len(inner):
            if inner[k] in ("-exec", "-execdir", "-ok", "-okdir"):
                end = k + 1
                while end < len(inner) and inner[end] not in (";", "+"):
                    end += 1
                found.append(" ".join(inner[k + 1 : end]))
                k = end
            k += 1
        return found or None
    return None


def split_command(text: str, *, depth: int = 0) -> list[SimpleCommand]:
    """The simple commands `text` runs, each with its readings for the rules. Raises `Unparseable` on what
    it cannot read with certainty (here-documents, arithmetic, `env -S`, unbalanced quotes or parentheses,
    a command nested too deep)."""
    if depth > 4:
        raise Unparseable("commands nested too deep")
    parser = _Parser(text)
    parser.parse_list(None)
    out: list[SimpleCommand] = []
    for raw in parser.commands:
        words, dynamic = raw.words, raw.dynamic
        while words and words[0] in CLOSERS:  # `}`, `fi`, `done` run nothing
            words, dynamic = words[1:], dynamic[1:]
        writes = [t for t, _ in raw.writes]
        reads = [t for t, _ in raw.reads]
        if any(d for _, d in raw.writes + raw.reads):
            raise Unparseable("a redirection into a file named only at run time")
        writes = [w for w in writes if w not in HARMLESS_TARGETS]
        if words and all(ASSIGNMENT.match(w) for w in words):
            # `X=1` alone runs nothing, but it changes what every later command of the line does
            # (`PATH=./evil:$PATH; git status`, `HOME=.; git status`, a variable an expansion evaluates)
            raise Unparseable("an assignment that stands as a command of its own (it changes what later commands do)")
        if not words:
            if writes or reads:  # `> file` alone truncates it
                out.append(SimpleCommand(words=[], forms=[Form(":")], writes=writes, reads=reads))
            continue
        forms, inner = _unwrap(words)
        offset = len(words) - len(inner)
        command = SimpleCommand(
            words=words, forms=forms, writes=writes, reads=reads, dynamic=bool(inner) and dynamic[offset]
        )
        out.append(command)
        nested = _nested(inner, dynamic[offset:])
        for inner_text in nested or []:
            out.extend(split_command(inner_text, depth=depth + 1))
    return out
