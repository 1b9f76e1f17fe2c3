"""The live view of a run, fed every event that carries text from a model, a tool or a provider: each field
comes out escaped (neither the terminal nor rich's markup obeys it), and nothing else is lost."""

from __future__ import annotations

import io
import re

from rich.console import Console

from tether.cli.render import TerminalRenderer
from tether.events import (
    CheckpointReached,
    CompactionCompleted,
    CompactionFailed,
    CompactionStarted,
    Error,
    Event,
    Progress,
    RlmFinished,
    RlmProgress,
    TextComplete,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallStart,
)

EVIL = "\x1b]0;T\x07[bold]b\x08\x9b"
SHOWN = "\\x1b]0;T\\x07[bold]b\\x08\\x9b"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def rendered(*events: Event) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    renderer = TerminalRenderer(Console(file=out, width=300), Console(file=err, width=300))
    for event in events:
        renderer.handle(event)
    renderer.close()
    return out.getvalue(), err.getvalue()


def test_every_event_with_text_is_escaped_for_the_terminal_and_for_markup() -> None:
    out, err = rendered(
        ThinkingDelta(text=f"thinking {EVIL}"),
        TextDelta(text=f"text {EVIL}"),
        TextComplete(text="", seq=2),
        ToolCallStart(call_id="c1", name=f"tool{EVIL}", arguments={f"key{EVIL}": "v"}),
        ToolCallComplete(call_id="c1", name="tool", success=False, duration_ms=1, preview=f"preview {EVIL}"),
        ToolCallComplete(call_id="c9", name=f"unstarted{EVIL}", success=True, duration_ms=1),
        CompactionStarted(reason=f"reason {EVIL}", tokens_before=10),
        CompactionCompleted(
            reason="r", strategy=f"strategy {EVIL}", tokens_before=10, tokens_after=5, seq=3, first_kept_seq=2
        ),
        CompactionFailed(reason="r", error=f"failure {EVIL}"),
        RlmProgress(stage="block", detail=f"block {EVIL}"),
        RlmFinished(
            iterations=1,
            sub_calls=0,
            input_tokens=1,
            output_tokens=1,
            duration_s=0.1,
            answer_chars=1,
            fallback=True,
            fallback_reason=f"fallback {EVIL}",
        ),
        Progress(what=f"what {EVIL}", detail=f"detail {EVIL}"),
        CheckpointReached(reason="step_limit", objective=EVIL, next_action=EVIL, steps=1, seq=4),
        Error(code=f"code{EVIL}", message=f"message {EVIL}"),
    )
    for stream in (out, err):
        found = RAW_CONTROL.search(stream)
        assert found is None, (found, stream)
    assert f"text {SHOWN}" in out
    for text in ("thinking", "tool", "key", "preview", "unstarted", "reason", "strategy", "failure", "block",
                 "fallback", "what", "detail", "code", "message"):  # fmt: skip
        assert f"{text}{SHOWN}" in err or f"{text} {SHOWN}" in err, (text, err)


def test_a_crlf_split_between_deltas_is_one_line_ending_and_a_lone_cr_is_shown() -> None:
    out, _ = rendered(TextDelta(text="one\r"), TextDelta(text="\ntwo\r"), TextComplete(text="", seq=2))
    assert out == "one\ntwo\\r\n"
    _, err = rendered(ThinkingDelta(text="a\r"), ThinkingDelta(text="\nb\r"), TextDelta(text="x"))
    assert "a\nb\\r" in err


def test_an_error_is_one_short_line_with_what_to_do_and_whole_with_debug() -> None:
    from tether.cli.render import short_error

    dump = "lab: 1 validation error for ChatCompletionRequest\n" + "\n".join(f"  messages.{i}: bad" for i in range(11))
    short = short_error("provider_error", dump)
    assert "\n" not in short and short.startswith("lab: 1 validation error for ChatCompletionRequest")
    assert "tether run --continue" in short and "--debug prints the whole error" in short
    assert short_error("auth_error", "openai: invalid key") == (
        "openai: invalid key. Next: check the provider's key (`tether doctor` says which is missing)"
    )
    long = short_error("busy", "x" * 500)
    assert len(long) < 260 and long.endswith("(--debug prints the whole error)")

    out, err = io.StringIO(), io.StringIO()
    for debug, whole in ((False, False), (True, True)):
        err = io.StringIO()
        renderer = TerminalRenderer(Console(file=out, width=200), Console(file=err, width=200), debug=debug)
        renderer.handle(Error(session_id="ses_x", n=1, code="provider_error", message=dump))
        assert ("messages.10: bad" in err.getvalue()) is whole
        assert err.getvalue().count("validation error") == 1


def test_a_spinner_with_the_seconds_so_far_while_the_model_works_on_a_terminal_only() -> None:
    import time

    from tether.cli.render import Waiting
    from tether.events import RunStarted

    started = RunStarted(session_id="ses_x", n=1, run_id="run_1", model="m", provider="p")
    err = io.StringIO()
    renderer = TerminalRenderer(Console(file=io.StringIO()), Console(file=err, force_terminal=True, width=80))
    renderer.handle(started)
    assert renderer.status is not None and renderer.waiting is not None  # the model works: the spinner turns
    assert Waiting(time.monotonic() - 82).__rich__() == "[dim]thinking… 82s[/dim]"
    renderer.handle(TextDelta(session_id="ses_x", n=2, text="Hi"))
    assert renderer.status is None and renderer.waiting is None  # the first token stops it
    renderer.handle(ToolCallStart(session_id="ses_x", n=3, call_id="c1", name="read", arguments={}))
    renderer.handle(ToolCallComplete(session_id="ses_x", n=4, call_id="c1", name="read", success=True, duration_ms=3.0))
    assert renderer.waiting is not None  # the results went back to the model: it works again
    renderer.close()
    assert renderer.status is None
    piped = TerminalRenderer(Console(file=io.StringIO()), Console(file=io.StringIO(), width=80))
    piped.handle(started)
    assert piped.status is None  # no spinner into a pipe
