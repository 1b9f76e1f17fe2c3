"""The wire types: one run request from every face (the server's body has exactly `RunRequest`'s wire fields,
and what a client sends for a `RunRequest` comes back as the same one), strict bodies (a boolean is no
integer, a string no number, a whole float an integer), and the spec's patterns say what the server holds."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from tether.runtime.launch import WIRE_OPTIONS, RunRequest
from tether.wire import (
    ABSOLUTE_PATH,
    RULE,
    SESSION_REF,
    AddNote,
    CreateShare,
    ForkRequest,
    PromptRequest,
    RevertRequest,
    RunSettings,
    run_body,
)


def test_the_run_settings_body_is_the_wire_fields_of_run_request() -> None:
    assert set(RunSettings.model_fields) == set(WIRE_OPTIONS)
    assert set(WIRE_OPTIONS) <= set(RunRequest.__dataclass_fields__)


def test_a_run_request_crosses_the_wire_and_comes_back_the_same() -> None:
    sent = RunRequest(
        "fix it",
        model="openai/gpt-5",
        agent="plan",
        tools="read,grep",
        max_steps=7,
        system_prompt="be brief",
        confirmed=True,
        permission_mode="never-ask",
        allow=("bash(git status*)",),
        deny=("edit",),
        directory="/somewhere",  # a local field: not sent
    )
    body = run_body(sent)
    assert set(body) == set(WIRE_OPTIONS)
    back = PromptRequest.model_validate({"prompt": "fix it", **body}).request("fix it")
    assert all(getattr(back, name) == getattr(sent, name) for name in WIRE_OPTIONS)
    assert run_body(RunRequest("x")) == {}  # the defaults are the server's to apply
    assert PromptRequest.model_validate({"prompt": "x"}).request("x") == RunRequest("x")


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (RevertRequest, {"to_seq": False}),
        (RevertRequest, {"to_seq": True}),
        (RevertRequest, {"to_seq": "5"}),
        (RevertRequest, {"to_seq": 2.5}),
        (ForkRequest, {"at": False}),
        (ForkRequest, {"at": "3"}),
        (CreateShare, {"expires_in": True}),
        (CreateShare, {"expires_in": "60"}),
        (PromptRequest, {"prompt": "x", "max_steps": True}),
        (PromptRequest, {"prompt": "x", "confirmed": 1}),
        (PromptRequest, {"prompt": "x", "queue": "false"}),
    ],
)
def test_booleans_are_not_numbers_nor_strings_numbers(model: Any, body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model.model_validate(body)


def test_a_whole_float_is_an_integer_as_json_schema_says() -> None:
    assert RevertRequest.model_validate({"to_seq": 3.0}).to_seq == 3
    assert CreateShare.model_validate({"expires_in": 60}).expires_in == 60.0


def test_a_project_note_names_its_project_in_the_schema() -> None:
    schema = AddNote.model_json_schema()
    assert {"required": ["scope"], "properties": {"scope": {"const": "user"}}} in schema["anyOf"]


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (
            SESSION_REF,
            ["ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", "M0R1YB"],
            ["..", "abc", "a/b/c/d/e", "x" * 36, "ses_01 JD8X"],
        ),
        (ABSOLUTE_PATH, ["/", "/home/x y"], ["", "relative", "~/x", "/a\x00b"]),
        (RULE, ["bash", "bash(git status*)", "mcp__*", "edit(src/**)"], ["bash(", "bash()", "bash( )", "", "a b"]),
    ],
)
def test_the_specs_patterns(pattern: str, good: list[str], bad: list[str]) -> None:
    assert all(re.fullmatch(pattern, value) for value in good)
    assert not any(re.fullmatch(pattern, value) for value in bad)
