"""Secrets kept out of commands and out of the journal: which environment variables are secrets
(`SECRET_NAME_PATTERNS`, `SecretPolicy`), the environment a command gets without them, and `Redactor`,
which replaces known secret values in text, bytes and journal entry bodies with ``[redacted:NAME]``.

Vocabulary rather than runtime, because both sides use it: the `bash` tool (an engine) scrubs its child's
environment, and the run's journal (the runtime) redacts what it appends; neither may import the other."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from .config import Config

SECRET_NAME_PATTERNS: tuple[str, ...] = (
    "*_API_KEY",
    "*_APIKEY",
    "*_TOKEN",
    "*_SECRET",
    "*_SECRET_*",
    "*PASSWORD*",
    "*PASSWD*",
    "*_PASS",
    "*_PWD",
    "*_PRIVATE_KEY",
    "*_SECRET_KEY",
    "*_ACCESS_KEY",
    "*_ACCESS_KEY_ID",
    "*_SIGNING_KEY",
    "*_ENCRYPTION_KEY",
    "*_MASTER_KEY",
    "*_AUTH_KEY",
    "*_SERVICE_KEY",
    "*_CLIENT_SECRET",
    "*_CREDENTIAL",
    "*_AUTH",
    "API_KEY",
    "APIKEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
)
"""Names (matched case-insensitively) that hold a credential. ``*_KEY`` alone is not among them: most such
names are ids or paths (``GPG_KEY``, ``SSH_KEY``); the kinds of key that are credentials are named. Covers
``OPENAI_API_KEY``, ``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``PGPASSWORD``,
``MYSQL_PWD``, ``NPM_CONFIG__AUTH``... A name that ends in `LOCATION_SUFFIXES` is not a secret by its name:
it says where one is (``DB_PASSWORD_FILE``), and commands need it to find it."""

LOCATION_SUFFIXES: tuple[str, ...] = ("_FILE", "_PATH", "_DIR", "_SOCK", "_SOCKET")

COMMAND_ENV: tuple[str, ...] = (
    # who and where: the shell, the user, the terminal, the language
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TZ", "TERM", "COLORTERM",
    "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "EDITOR", "VISUAL", "TMPDIR", "CI",
    "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
    # certificates and proxies (a proxy URL with a password in it is still kept out, by its value)
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    # toolchains: where they live and how they build
    "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYENV_ROOT", "PYENV_VERSION", "PYTHONPATH",
    "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
    "UV_INDEX_URL", "JAVA_HOME", "GOPATH", "GOROOT", "GOPROXY", "GOFLAGS", "CARGO_HOME", "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN", "NVM_DIR", "NODE_PATH", "NPM_CONFIG_REGISTRY", "PKG_CONFIG_PATH", "LD_LIBRARY_PATH",
    "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "MAKEFLAGS", "CMAKE_ARGS", "OPENBLAS_*", "OMP_NUM_THREADS",
)  # fmt: skip
"""The variables a command gets from tether's environment (``*`` patterns): what shells, compilers and
package managers need to work, and nothing an application of the user's may have put there (``SENTRY_DSN``,
``MYAPP_KEY``, ``GITHUB_PAT``: a secret under a name tether does not know never reaches a command). More with
``[tools.bash] allow_env``; a secret among these (by name or by value) is still left out unless named there."""
_COMMAND_ENV = frozenset(COMMAND_ENV)

MIN_SECRET_CHARS = 8
"""Values shorter than this are never redacted: they would mangle ordinary text (``true``, ``1234``)."""

_CREDENTIAL_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@")
"""A URL with a password in it (``postgres://user:pass@host/db``), whatever its variable is called."""

_AUTH_HEADER = re.compile(r"auth|key|token|secret|cookie", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (see `SECRET_NAME_PATTERNS`).
    Remembered by name: each run looks at every variable of the environment as it starts, and matching a
    name against every pattern was a millisecond of each run's start."""
    upper = name.upper()
    if upper.endswith(LOCATION_SUFFIXES):
        return False
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_NAME_PATTERNS)


def holds_credentials(value: str) -> bool:
    """Whether a value is a URL with a password in it."""
    return bool(_CREDENTIAL_URL.match(value))


@functools.lru_cache(maxsize=4096)
def _matches(name: str, patterns: frozenset[str]) -> bool:
    return name in patterns or any("*" in p and fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True)
class SecretPolicy:
    """Which environment variables are secrets: those in `names` (exact, or ``*`` patterns: the provider key
    variables, the ``api_key_env`` of configured providers, ``[tools.bash] deny_env``), those whose name
    `is_secret_name`, and those whose value `holds_credentials`. Commands get `COMMAND_ENV` without them,
    and the variables in `allow` (``[tools.bash] allow_env``); the journal never gets a secret's value,
    allowed or not."""

    names: frozenset[str] = frozenset()
    allow: frozenset[str] = frozenset()

    @classmethod
    def from_config(cls, config: Config, key_envs: Iterable[str] = ()) -> SecretPolicy:
        """The policy of a run: `key_envs` (the built-in providers' key variables), each configured
        provider's ``api_key_env``, and the ``[tools.bash]`` lists."""
        names = set(key_envs)
        names.update(p.api_key_env for p in config.providers.values() if p.api_key_env)
        names.update(config.tools.bash.deny_env)
        return cls(names=frozenset(names), allow=frozenset(config.tools.bash.allow_env))

    def is_secret(self, name: str, value: str = "") -> bool:
        return _matches(name, self.names) or is_secret_name(name) or holds_credentials(value)

    def child_environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """What a command gets of `env`: the variables of `COMMAND_ENV` that are not secrets, and those the
        policy allows (``[tools.bash] allow_env``) whatever they hold."""
        return {k: v for k, v in env.items() if self._passes(k, v)}

    def hidden(self, env: Mapping[str, str]) -> list[str]:
        """The names of `env` that `child_environment` leaves out."""
        return sorted(k for k, v in env.items() if not self._passes(k, v))

    def _passes(self, name: str, value: str) -> bool:
        if _matches(name, self.allow):
            return True
        return _matches(name, _COMMAND_ENV) and not self.is_secret(name, value)

    def redactor(self, env: Mapping[str, str], extra: Mapping[str, str] | None = None) -> Redactor:
        """A `Redactor` for the values of every secret in `env` (allowed ones too: a command may use a key,
        the journal still must not keep it), plus `extra` (label: value, such as `config_secrets`)."""
        if env is os.environ:  # every run's start: the same few dozen variables, mostly
            found = dict(_environment_secrets(self, frozenset(os.environ._data.items())))  # type: ignore[attr-defined]
        else:
            found = {name: value for name, value in env.items() if self.is_secret(name, value)}
        return Redactor({**found, **(extra or {})})


@functools.lru_cache(maxsize=8)
def _environment_secrets(policy: SecretPolicy, raw: frozenset[tuple[bytes, bytes]]) -> tuple[tuple[str, str], ...]:
    """The secrets of the process's environment (its raw bytes, which are what changes when it changes) under
    `policy`: read once per environment rather than at every run's start (a tenth of a millisecond or more)."""
    pairs = ((os.fsdecode(name), os.fsdecode(value)) for name, value in raw)  # as `os.environ` decodes them
    return tuple(sorted((name, value) for name, value in pairs if policy.is_secret(name, value)))


def config_secrets(config: Config) -> dict[str, str]:
    """The secret values a configuration holds itself, by label: providers' ``api_key``, and the values
    of their headers whose names speak of auth, keys, tokens, secrets or cookies (``Authorization =
    "Bearer sk-..."``: the token alone too); the same of MCP servers' headers, and their ``env`` values
    whose names are secret-like, when written in the file rather than read from a variable."""
    out: dict[str, str] = {}
    for name, provider in config.providers.items():
        if provider.api_key:
            out[f"providers.{name}.api_key"] = provider.api_key
        for header, value in provider.headers.items():
            if _AUTH_HEADER.search(header):
                label = f"providers.{name}.headers.{header}"
                out[label] = value
                scheme, _, token = value.strip().partition(" ")
                if token and scheme.isalpha():
                    out[f"{label}.token"] = token
    for name, server in config.mcp.items():  # an MCP server's token written in place of an {env:VAR}
        for header, value in server.headers.items():
            if _AUTH_HEADER.search(header) and "{env:" not in value and "${" not in value:
                out[f"mcp.{name}.headers.{header}"] = value
                scheme, _, token = value.strip().partition(" ")
                if token and scheme.isalpha():
                    out[f"mcp.{name}.headers.{header}.token"] = token
        for var, value in server.env.items():
            if is_secret_name(var) and "{env:" not in value and "${" not in value:
                out[f"mcp.{name}.env.{var}"] = value
    return out


class Redactor:
    """Replaces known secret values with ``[redacted:LABEL]`` in text, bytes, JSON-like data and journal
    entry bodies. Values shorter than `MIN_SECRET_CHARS` (after stripping whitespace) are ignored; longer
    values are replaced first, so a secret that contains another is replaced whole. An empty redactor
    (falsy) changes nothing and costs nothing."""

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        by_value: dict[str, str] = {}
        for label, raw in (secrets or {}).items():
            value = raw.strip()
            if len(value) >= MIN_SECRET_CHARS and value not in by_value:
                by_value[value] = label
        ordered = sorted(by_value.items(), key=lambda item: len(item[0]), reverse=True)
        self._text = [(value, f"[redacted:{label}]") for value, label in ordered]
        self._bytes = [(value.encode("utf-8"), tag.encode("utf-8")) for value, tag in self._text]
        self.labels = sorted(by_value.values())
        """What is redacted, by label (never the values)."""

    def __bool__(self) -> bool:
        return bool(self._text)

    def __repr__(self) -> str:
        return f"Redactor({len(self._text)} secrets: {', '.join(self.labels)})"

    def text(self, text: str) -> str:
        for value, tag in self._text:
            if value in text:
                text = text.replace(value, tag)
        return text

    def data(self, data: bytes) -> bytes:
        for value, tag in self._bytes:
            if value in data:
                data = data.replace(value, tag)
        return data

    def stream(self, blocks: Iterable[bytes]) -> Iterator[bytes]:
        """`blocks` redacted as one stream: a secret split between two blocks is found too. Holds back at
        most the longest secret's length from one block to the next."""
        if not self:
            yield from blocks
            return
        overlap = max(len(value) for value, _ in self._bytes) - 1
        carry = b""
        for block in blocks:
            if not block:
                continue
            buffer = self.data(carry + block)
            # whatever is still unmatched at the end may be the start of a secret: keep it for the next block
            cut = max(len(buffer) - overlap, 0)
            carry = buffer[cut:]
            if cut:
                yield buffer[:cut]
        if carry:
            yield self.data(carry)

    def value(self, value: Any) -> Any:
        """`value` with every string in it redacted (dict keys too), walking lists, dicts and msgspec
        structs (an entry body and its parts). Returns `value` itself when nothing in it changed."""
        if not self:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            items = [self.value(v) for v in value]
            return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
        if isinstance(value, dict):
            pairs = [(self.value(k), self.value(v)) for k, v in value.items()]
            changed = any(k2 is not k or v2 is not v for (k2, v2), (k, v) in zip(pairs, value.items(), strict=True))
            return dict(pairs) if changed else value
        if isinstance(value, msgspec.Struct):
            changes: dict[str, Any] = {}
            for name in value.__struct_fields__:
                old = getattr(value, name)
                new = self.value(old)
                if new is not old:
                    changes[name] = new
            return msgspec.structs.replace(value, **changes) if changes else value
        return value
