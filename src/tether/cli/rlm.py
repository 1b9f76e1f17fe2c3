"""`tether rlm FILE QUESTION`: answer a question about a file too large for the model's window, with RLM (a
sandboxed REPL that the model drives with code and sub-model calls) or its map-reduce fallback. The answer
goes to stdout (or the whole result with `--json`); progress and a cost summary go to stderr."""

from __future__ import annotations

import asyncio
import sys
from typing import IO

import click

from ..rlm import RlmEvent, RlmLimits, RlmProgress, RlmResult, rlm_answer
from .common import echo_json, wants_json
from .render import format_cost, rlm_progress_line
from .sanitize import escape_controls

LOCAL_NO_CODE = (
    "The embedded local model is too small to write REPL code: answering with map-reduce over the file's "
    "chunks (--mode repl tries the REPL anyway)."
)


def _summary(result: RlmResult) -> str:
    how = f"map-reduce ({result.fallback_reason})" if result.fallback else "RLM"
    return (
        f"{how} · {result.iterations} steps · {result.sub_calls} sub-calls · "
        f"{result.input_tokens:,} tokens in / {result.output_tokens:,} out · "
        f"{format_cost(result.usage.cost)} · {result.duration_s:.1f} s"
    )


@click.command("rlm")
@click.argument("file", type=click.File("r", encoding="utf-8", errors="replace"))
@click.argument("question")
@click.option("--model", "-m", "model_spec", metavar="PROVIDER/MODEL", help="e.g. openai/gpt-5.5, local/smollm2-135m.")
@click.option(
    "--sub-model", metavar="MODEL", help="Model id (same provider) that answers llm_query. [default: --model]"
)
@click.option(
    "--mode",
    type=click.Choice(["auto", "repl", "map-reduce"]),
    default="auto",
    show_default=True,
    help="auto: the REPL, unless the model is the embedded local one, which cannot write code.",
)
@click.option(
    "--max-iterations", default=15, show_default=True, type=click.IntRange(1, 1_000), help="Root model steps."
)
@click.option(
    "--max-sub-calls", default=50, show_default=True, type=click.IntRange(0, 100_000), help="llm_query calls."
)
@click.option("--max-tokens", default=1_000_000, show_default=True, type=click.IntRange(1), help="Token budget.")
@click.option(
    "--timeout", default=600.0, show_default=True, type=click.FloatRange(min=1), help="Seconds for the REPL loop."
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
def rlm(
    file: IO[str],
    question: str,
    model_spec: str | None,
    sub_model: str | None,
    mode: str,
    max_iterations: int,
    max_sub_calls: int,
    max_tokens: int,
    timeout: float,
    as_json: bool,
    quiet: bool,
) -> None:
    """Answer QUESTION about FILE (or - for stdin), however large it is."""
    from ..providers.base import aclose_quietly
    from ..providers.registry import resolve_provider
    from ..runtime.configuration import load_config

    text = file.read()
    resolved = resolve_provider(model_spec, config=load_config())
    use_repl = mode == "repl" or (mode == "auto" and resolved.provider.name != "local")
    if mode == "auto" and not use_repl and not quiet:
        click.echo(LOCAL_NO_CODE, err=True)
    limits = RlmLimits(
        max_iterations=max_iterations,
        max_sub_calls=max_sub_calls,
        max_tokens=max_tokens,
        wall_seconds=timeout,
        context_window=resolved.info.context_window,
        max_output_tokens=min(RlmLimits().max_output_tokens, resolved.info.max_output_tokens),
    )

    def show(event: RlmEvent) -> None:
        if not quiet and isinstance(event, RlmProgress) and (line := rlm_progress_line(event)) is not None:
            click.echo(escape_controls(line), err=True)

    async def answer() -> RlmResult:
        try:
            return await rlm_answer(
                text,
                question,
                resolved.provider,
                model=resolved.model,
                sub_model=sub_model,
                limits=limits,
                on_event=show,
                use_repl=use_repl,
            )
        finally:  # its HTTP client, on this loop (left to the collector, it is closed on whichever loop runs then)
            await aclose_quietly(resolved.provider)

    result = asyncio.run(answer())
    if wants_json(as_json):
        echo_json(result)
    else:
        # the answer is the document this command makes: exact into a file or a pipe, escaped on a terminal
        click.echo(escape_controls(result.answer) if sys.stdout.isatty() else result.answer)
        if not quiet:
            click.echo(escape_controls(_summary(result)), err=True)
