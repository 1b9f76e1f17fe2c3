"""Builds examples/sample-session.json: a short coding-agent session (a failing test found, read, fixed and
rerun, with one reverted detour) recorded through the public API and written by tether's own exporter.

    python examples/make_sample_session.py [OUTPUT]
"""

from __future__ import annotations

import asyncio
import sys
from decimal import Decimal
from pathlib import Path

from tether import (
    MemoryStore,
    Message,
    Session,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from tether.importers.tether_json import export_json


def assistant(*parts: TextPart | ThinkingPart | ToolCallPart, tokens: tuple[int, int], cost: str) -> Message:
    return Message(
        role="assistant",
        parts=list(parts),
        model="gpt-4o-mini",
        provider="openai",
        usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1], cost=Decimal(cost)),
        finish_reason="tool_calls" if any(isinstance(p, ToolCallPart) for p in parts) else "stop",
    )


def result(call_id: str, name: str, content: str, *, is_error: bool = False) -> Message:
    return Message.tool(ToolResultPart(call_id=call_id, name=name, content=content, is_error=is_error))


FAILING = """\
============================= test session starts ==============================
collected 3 items

tests/test_calc.py ..F                                                   [100%]

=================================== FAILURES ===================================
_______________________________ test_divide_by_zero ____________________________

    def test_divide_by_zero():
>       assert divide(1, 0) is None
E       ZeroDivisionError: division by zero

tests/test_calc.py:14: ZeroDivisionError
=========================== short test summary info ============================
FAILED tests/test_calc.py::test_divide_by_zero - ZeroDivisionError
========================= 1 failed, 2 passed in 0.02s ==========================
"""

CALC = '''\
"""Small arithmetic helpers."""


def add(a: float, b: float) -> float:
    return a + b


def divide(a: float, b: float) -> float:
    return a / b
'''


async def build(output: Path) -> None:
    async with MemoryStore() as store:
        session = await Session.create(
            store,
            directory="/home/dev/projects/calc",
            model="gpt-4o-mini",
            agent="build",
            system_prompt="You are a careful coding agent. Run the tests before and after every change.",
        )
        await session.append(Message.user("The test suite fails on test_divide_by_zero. Please fix it."))
        await session.append(
            assistant(
                ThinkingPart(text="Run the tests first to see the failure, then read the code under test."),
                ToolCallPart(id="call_1", name="bash", arguments={"command": "python -m pytest -q tests/test_calc.py"}),
                tokens=(412, 38),
                cost="0.0000846",
            ),
            result("call_1", "bash", FAILING, is_error=True),
            assistant(
                ToolCallPart(id="call_2", name="read", arguments={"path": "src/calc.py"}),
                tokens=(803, 21),
                cost="0.0001331",
            ),
            result("call_2", "read", CALC),
        )
        # A detour the user stopped: it is reverted, so it stays in the journal but leaves the active history.
        detour = await session.append(
            assistant(
                TextPart(text="I will make divide() catch every exception and return 0."),
                ToolCallPart(
                    id="call_3",
                    name="edit",
                    arguments={
                        "path": "src/calc.py",
                        "old": "    return a / b",
                        "new": "    try:\n        return a / b\n    except Exception:\n        return 0",
                    },
                ),
                tokens=(951, 64),
                cost="0.0001811",
            ),
        )
        await session.revert(detour[0].seq - 1, reason="the test expects None, and a bare except hides bugs")
        await session.append(
            Message.user("No: the test expects None for a zero divisor. Don't swallow other errors."),
            assistant(
                TextPart(text="Understood: only a zero divisor returns None."),
                ToolCallPart(
                    id="call_4",
                    name="edit",
                    arguments={
                        "path": "src/calc.py",
                        "old": "def divide(a: float, b: float) -> float:\n    return a / b",
                        "new": "def divide(a: float, b: float) -> float | None:\n    if b == 0:\n        return None\n    return a / b",
                    },
                ),
                tokens=(1032, 71),
                cost="0.0001974",
            ),
            result("call_4", "edit", "Edited src/calc.py: 1 replacement."),
            assistant(
                ToolCallPart(id="call_5", name="bash", arguments={"command": "python -m pytest -q tests/test_calc.py"}),
                tokens=(1120, 30),
                cost="0.0001860",
            ),
            result("call_5", "bash", "...\n3 passed in 0.01s\n"),
            assistant(
                TextPart(
                    text="Fixed: `divide()` now returns `None` when the divisor is zero, and other errors still "
                    "raise. All 3 tests pass."
                ),
                tokens=(1178, 33),
                cost="0.0001965",
            ),
        )
        await session.set_title("Fix divide() for a zero divisor")
        with output.open("wb") as out:
            await export_json(store, session.id, out)
    print(f"wrote {output} ({session.id})")


if __name__ == "__main__":
    asyncio.run(build(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("sample-session.json")))
