"""The `question` tool: the model asks the human running the session and waits for the answer. Where
nobody can answer (a non-interactive run), it says so at once instead of waiting forever."""

from __future__ import annotations

from typing import Any, ClassVar

from ...errors import ToolError
from ..base import ToolContext, ToolOutput

NO_ONE_TO_ASK = (
    "no one can answer questions in this run (non-interactive); proceed with your best judgement "
    "or stop and say what you need"
)


class QuestionTool:
    name = "question"
    description = (
        "Ask the user a question and wait for the answer. Use it when a choice is theirs to make or you are "
        "missing information you cannot find; not for things you can check yourself. options, if given, are "
        "offered as choices."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The question, complete and self-contained"},
            "options": {"type": "array", "items": {"type": "string"}, "description": "Suggested answers"},
        },
        "required": ["question"],
        "additionalProperties": False,
    }
    # Changes nothing, but two questions at once would confuse the person answering: run them one by one.
    read_only = False
    bulk = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        question: str = args["question"].strip()
        if not question:
            raise ToolError("question is empty")
        if ctx.ask is None:
            raise ToolError(NO_ONE_TO_ASK)
        options: list[str] = args.get("options") or []
        prompt = question
        if options:
            prompt += "\n" + "\n".join(f"  {i}. {option}" for i, option in enumerate(options, 1))
        answer = (await ctx.ask(prompt)).strip()
        if not answer:
            return ToolOutput("(the user gave no answer)", metadata={"answered": False})
        return ToolOutput(answer, metadata={"answered": True})
