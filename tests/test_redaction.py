"""Which environment variables are secrets, the environment a command gets without them, and the redactor
that takes known secret values out of text, bytes and journal entry bodies."""

from __future__ import annotations

import os

import pytest

from tether.config import parse_config
from tether.messages import Marker, Message, ToolCallPart, ToolResultPart
from tether.redaction import MIN_SECRET_CHARS, Redactor, SecretPolicy, config_secrets, is_secret_name

KEY = "sk-proj-4f9a8b7c6d5e4f3a2b1c"
TOKEN = "ghp_0123456789abcdefABCDEF"


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "anthropic_api_key",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "STRIPE_SECRET_KEY",
        "JWT_SECRET",
        "CLIENT_SECRET",
        "PGPASSWORD",
        "MYSQL_PWD",
        "DB_PASSWORD",
        "SMTP_PASS",
        "NPM_CONFIG__AUTH",
        "SSH_PRIVATE_KEY",
        "TOKEN",
    ],
)
def test_names_that_hold_credentials(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "HOME",
        "PWD",
        "OLDPWD",
        "SSH_AUTH_SOCK",  # where the agent is, which git over ssh needs
        "GIT_ASKPASS",
        "GPG_KEY",
        "KEYMAP",
        "DB_PASSWORD_FILE",  # where a secret is, not the secret
        "GOOGLE_APPLICATION_CREDENTIALS",
        "TOKENIZERS_PARALLELISM",
    ],
)
def test_names_that_do_not(name: str) -> None:
    assert not is_secret_name(name)


def test_a_command_s_environment_loses_secrets_by_name_by_policy_and_by_value() -> None:
    env = {
        "PATH": "/usr/bin",
        "OPENAI_API_KEY": KEY,
        "GITHUB_TOKEN": TOKEN,
        "LAB_KEY": "lab-key-0123456789",
        "CORP_VAULT_ADDR": "https://vault.corp.example",
        "DATABASE_URL": "postgres://app:hunter2hunter2@db.internal/app",
        "HOMEPAGE_URL": "https://example.com/docs",
    }
    policy = SecretPolicy(names=frozenset({"LAB_KEY", "CORP_*"}), allow=frozenset({"GITHUB_TOKEN"}))
    assert policy.child_environment(env) == {
        "PATH": "/usr/bin",
        "GITHUB_TOKEN": TOKEN,  # allowed
    }
    # HOMEPAGE_URL is no secret, but no command needs it either: only the allow-list passes
    assert policy.hidden(env) == ["CORP_VAULT_ADDR", "DATABASE_URL", "HOMEPAGE_URL", "LAB_KEY", "OPENAI_API_KEY"]
    # the default policy still knows secrets by their names
    assert "OPENAI_API_KEY" not in SecretPolicy().child_environment(env)


def test_the_policy_of_a_configuration() -> None:
    config = parse_config(
        '[providers.lab]\nkind = "openai"\napi_key_env = "LAB_KEY"\n'
        '[tools.bash]\nallow_env = ["GITHUB_TOKEN"]\ndeny_env = ["DATABASE_URL", "CORP_*"]\n'
    )
    policy = SecretPolicy.from_config(config, ["OPENAI_API_KEY"])
    assert policy.names == {"OPENAI_API_KEY", "LAB_KEY", "DATABASE_URL", "CORP_*"}
    assert policy.allow == {"GITHUB_TOKEN"}


def test_secrets_a_configuration_holds_itself() -> None:
    config = parse_config(
        '[providers.lab]\nkind = "openai"\napi_key = "lab-inline-key-123"\n'
        '[providers.lab.headers]\nAuthorization = "Bearer tok-0123456789"\nX-Trace = "visible-value-1"\n'
    )
    assert config_secrets(config) == {
        "providers.lab.api_key": "lab-inline-key-123",
        "providers.lab.headers.Authorization": "Bearer tok-0123456789",
        "providers.lab.headers.Authorization.token": "tok-0123456789",
    }


def test_the_redactor_of_a_policy_covers_allowed_secrets_too() -> None:
    env = {"OPENAI_API_KEY": KEY, "GITHUB_TOKEN": TOKEN, "EDITOR": "vim-with-a-long-name"}
    redactor = SecretPolicy(allow=frozenset({"GITHUB_TOKEN"})).redactor(env, {"providers.lab.api_key": "x" * 12})
    assert redactor.labels == ["GITHUB_TOKEN", "OPENAI_API_KEY", "providers.lab.api_key"]
    assert redactor.text(f"{KEY} {TOKEN} vim-with-a-long-name") == (
        "[redacted:OPENAI_API_KEY] [redacted:GITHUB_TOKEN] vim-with-a-long-name"
    )
    assert KEY not in repr(redactor)


def test_short_values_are_never_redacted() -> None:
    redactor = Redactor({"SHORT_TOKEN": "a" * (MIN_SECRET_CHARS - 1), "PADDED_TOKEN": "  true\n"})
    assert not redactor
    assert redactor.text("aaaaaaa true") == "aaaaaaa true"


def test_a_secret_that_contains_another_is_replaced_whole() -> None:
    redactor = Redactor({"INNER_TOKEN": "abcdefgh", "OUTER_TOKEN": "xx-abcdefgh-yy"})
    assert redactor.text("xx-abcdefgh-yy abcdefgh") == "[redacted:OUTER_TOKEN] [redacted:INNER_TOKEN]"
    assert redactor.data(b"abcdefgh!") == b"[redacted:INNER_TOKEN]!"


def test_a_stream_is_redacted_whatever_its_blocks() -> None:
    redactor = Redactor({"GITHUB_TOKEN": TOKEN, "OPENAI_API_KEY": KEY})
    data = f"a{TOKEN}b\n{KEY}{KEY}\n{TOKEN}".encode()
    want = redactor.data(data)
    assert TOKEN.encode() not in want and KEY.encode() not in want
    for size in range(1, len(data) + 1):
        blocks = [data[i : i + size] for i in range(0, len(data), size)]
        assert b"".join(redactor.stream(blocks)) == want, size


def test_entry_bodies_are_redacted_everywhere_a_string_can_be() -> None:
    redactor = Redactor({"OPENAI_API_KEY": KEY})
    tag = "[redacted:OPENAI_API_KEY]"
    assistant = Message.assistant(
        f"your key is {KEY}",
        tool_calls=[ToolCallPart(id="c1", name="bash", arguments={"command": f"echo {KEY}", "n": 3})],
    )
    result = Message.tool(
        ToolResultPart(call_id="c1", name="bash", content=f"{KEY}\n", metadata={"exit_code": 0, KEY: [KEY]})
    )
    marker = Marker(name="note", data={"seen": {"deep": [f"k={KEY}"]}})
    red = [redactor.value(b) for b in (assistant, result, marker)]
    assert KEY not in repr(red)
    assert red[0].text == f"your key is {tag}"
    assert red[0].tool_calls[0].arguments == {"command": f"echo {tag}", "n": 3}
    assert red[1].tool_results[0].content == f"{tag}\n"
    assert red[1].tool_results[0].metadata == {"exit_code": 0, tag: [tag]}
    assert red[2].data == {"seen": {"deep": [f"k={tag}"]}}


def test_what_holds_no_secret_is_returned_as_it_is() -> None:
    redactor = Redactor({"OPENAI_API_KEY": KEY})
    body = Message.assistant("nothing here", tool_calls=[ToolCallPart(id="c", name="x", arguments={"a": [1]})])
    assert redactor.value(body) is body
    assert Redactor().value(Message.user(KEY)).text == KEY


def test_a_command_gets_an_allow_list_so_secrets_under_unknown_names_stay_out() -> None:
    env = {
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "GITHUB_PAT": "ghp_0123456789abcdefghijklmnopqrstuvwxyz",
        "SENTRY_DSN": "https://0123456789abcdef@o1.ingest.sentry.io/42",
        "MYAPP_KEY": "myapp-secret-0123456789",
        "HTTPS_PROXY": "http://user:hunter2hunter2@proxy.corp:3128",  # allow-listed name, credentials in it
        "MY_TOOL_HOME": "/opt/tool",
    }
    policy = SecretPolicy()
    assert policy.child_environment(env) == {
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }
    # what a project needs, the user names: allow_env passes it whatever it holds
    more = SecretPolicy(allow=frozenset({"MY_TOOL_*", "SENTRY_DSN"}))
    assert more.child_environment(env)["MY_TOOL_HOME"] == "/opt/tool"
    assert more.child_environment(env)["SENTRY_DSN"] == env["SENTRY_DSN"]
    assert "GITHUB_PAT" not in more.child_environment(env)


def test_the_environment_s_secrets_follow_a_change_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's own environment is looked at once per version of it: a variable set or changed since
    the last run's start is seen by the next."""
    policy = SecretPolicy(names=frozenset({"MY_SERVICE_KEY"}))
    monkeypatch.delenv("MY_SERVICE_KEY", raising=False)
    assert "sk-first-value-123456" not in policy.redactor(os.environ).labels
    monkeypatch.setenv("MY_SERVICE_KEY", "sk-first-value-123456")
    first = policy.redactor(os.environ)
    assert "MY_SERVICE_KEY" in first.labels
    assert first.text("key sk-first-value-123456") == "key [redacted:MY_SERVICE_KEY]"
    monkeypatch.setenv("MY_SERVICE_KEY", "sk-second-value-654321")
    second = policy.redactor(os.environ)
    assert second.text("sk-second-value-654321 sk-first-value-123456") == (
        "[redacted:MY_SERVICE_KEY] sk-first-value-123456"
    )
    # a mapping other than the process's environment is read as given
    assert policy.redactor({"MY_SERVICE_KEY": "sk-third-value-000000"}).labels == ["MY_SERVICE_KEY"]
