"""A session as one self-contained HTML page: what `tether sessions export --format html` writes, the server's
export answers and a share link shows. Inline CSS, no script, nothing fetched; the page's own
Content-Security-Policy forbids anything else. Transcripts are untrusted, so every text is escaped and
Markdown is rendered by markdown-it with raw HTML off and images left as links. Written as it is read: memory
is bounded by one turn, not by the session."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from functools import lru_cache
from typing import IO, Any, NamedTuple

from . import __version__, markers
from .messages import (
    Checkpoint,
    Compaction,
    Entry,
    FilePart,
    ImagePart,
    Marker,
    Message,
    Revert,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    cut_reason,
)
from .store.protocols import Journal, JournalSearchIndex
from .store.records import RevertSpan, SessionInfo
from .store.reverts import effective_reverts
from .transcript import attachment_label, call_signature, cut_calls, error_text, revert_note, shown_as_hidden

OUTPUT_CHARS = 50_000
"""The most characters of one tool output or argument list shown; the rest is counted in a note (the JSON
export keeps all of it)."""
HOLD_ENTRIES = 256
"""The most entries held back while a turn's tool results are paired with their calls; past it the turn is
written as it stands (its later results then show on their own)."""

CSS = """
:root{color-scheme:light dark;--bg:#fff;--fg:#1d2026;--dim:#646b76;--line:#dde1e6;--card:#f6f8fa;
--user:#2f7d32;--assistant:#2459b3;--tool:#9a6700;--err:#c62828;--mark:#7b3fa0;--code:#eef1f4}
@media (prefers-color-scheme:dark){:root{--bg:#111418;--fg:#e3e6ea;--dim:#98a0ab;--line:#2c323a;
--card:#181c21;--user:#6fcf73;--assistant:#7aa7ff;--tool:#e0b44c;--err:#ff7b72;--mark:#c99cf0;--code:#1f252c}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:960px;margin:0 auto;padding:24px 16px 64px}
header.session{border-bottom:1px solid var(--line);margin-bottom:20px;padding-bottom:12px}
header.session h1{font-size:1.5em;margin:0 0 8px;overflow-wrap:anywhere}
dl.facts{display:flex;flex-wrap:wrap;gap:4px 18px;margin:0;color:var(--dim);font-size:.9em}
dl.facts div{display:flex;gap:6px}dl.facts dt{font-weight:600}dl.facts dd{margin:0;overflow-wrap:anywhere}
article.entry{border-left:3px solid var(--line);padding:2px 0 2px 14px;margin:14px 0}
article.user{border-color:var(--user)}article.assistant{border-color:var(--assistant)}
article.tool,article.system{border-color:var(--tool)}
.head{display:flex;flex-wrap:wrap;gap:4px 10px;align-items:baseline;font-size:.85em;color:var(--dim)}
.role{font-weight:700;text-transform:capitalize}.user .role{color:var(--user)}
.assistant .role{color:var(--assistant)}.tool .role,.system .role{color:var(--tool)}
a.seq{color:var(--dim);text-decoration:none}a.seq:hover{text-decoration:underline}
.text{overflow-wrap:anywhere}.text>:first-child{margin-top:4px}.text>:last-child{margin-bottom:4px}
.text table{border-collapse:collapse}.text td,.text th{border:1px solid var(--line);padding:2px 8px}
.align-left{text-align:left}.align-center{text-align:center}.align-right{text-align:right}
code{font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:var(--code);
border-radius:4px;padding:1px 4px}
pre{background:var(--code);border-radius:6px;padding:10px 12px;overflow:auto;max-height:36em;
white-space:pre-wrap;overflow-wrap:anywhere}pre code{background:none;padding:0}
details{background:var(--card);border:1px solid var(--line);border-radius:6px;margin:6px 0;padding:0 10px}
details>summary{cursor:pointer;padding:6px 0;overflow-wrap:anywhere}
details[open]>summary{border-bottom:1px solid var(--line);margin-bottom:6px}
details.call>summary code{background:none;padding:0}
.ok{color:var(--user)}.error,.err{color:var(--err)}details.call.failed{border-color:var(--err)}
.label{font-size:.8em;font-weight:600;color:var(--dim);text-transform:uppercase;letter-spacing:.04em}
.note{color:var(--dim);font-size:.9em;margin:4px 0}
.marker{color:var(--mark);font-size:.9em;margin:12px 0;padding-left:17px}.marker .text{color:var(--fg)}
.reverted{opacity:.55}.reverted .head::after{content:"reverted";color:var(--err);font-weight:600}
.thinking{font-style:italic}details.child{background:var(--bg);margin:8px 0 4px}
details.child>summary{color:var(--dim);font-size:.9em}
nav.pages{margin:18px 0;font-size:.95em;color:var(--dim)}
footer{margin-top:32px;border-top:1px solid var(--line);padding-top:8px;color:var(--dim);font-size:.85em}
"""
CSS_SOURCE = "sha256-" + base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode()
CSP = (
    f"default-src 'none'; style-src '{CSS_SOURCE}'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
"""The page's Content-Security-Policy: its own style sheet (by hash) and nothing else, no script, no frame."""
_META_CSP = CSP.replace("; frame-ancestors 'none'", "")  # a <meta> policy may not set frame-ancestors


SAFE_SCHEMES = ("http://", "https://", "mailto:")
"""The links a transcript may hold; any other stays text."""


@lru_cache(maxsize=1)
def _markdown() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.disable("image")  # a picture would be fetched from elsewhere: it stays a link

    def validate_link(url: str) -> bool:
        # only links that leave the page for the web: no javascript:, data:, custom schemes (an installed
        # program's), and no relative link that would lead a reader of a share into the server's API
        return url.strip().lower().startswith(SAFE_SCHEMES)

    md.validateLink = validate_link  # type: ignore[method-assign]  # markdown-it documents this override

    def link_open(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        href = tokens[idx].attrGet("href")
        if not (isinstance(href, str) and validate_link(href)):
            del tokens[idx].attrs["href"]  # an empty destination, `[x]()`, is never given to validateLink
        tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
        return str(renderer.renderToken(tokens, idx, options, env))

    md.add_render_rule("link_open", link_open)

    def aligned_by_class(state: Any) -> None:
        # a table column's alignment comes as style="text-align:..."; the page's policy allows no inline style
        for token in state.tokens:
            style = token.attrGet("style") if token.type in ("th_open", "td_open") else None
            if isinstance(style, str) and style.startswith("text-align:"):
                del token.attrs["style"]
                token.attrSet("class", "align-" + style.removeprefix("text-align:"))

    md.core.ruler.push("aligned_by_class", aligned_by_class)
    return md


def markdown_html(text: str) -> str:
    """Markdown as HTML: raw HTML in it escaped (markdown-it's `html` off), links only to the web
    (`SAFE_SCHEMES`), pictures left as links, table alignment as classes (the page allows no inline style)."""
    return str(_markdown().render(text))


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _time(ts: float) -> str:
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
    return f'<time datetime="{iso}">{_utc(ts)}</time>'


def _clipped(text: str) -> str:
    if len(text) <= OUTPUT_CHARS:
        return f"<pre>{_e(text)}</pre>"
    rest = len(text) - OUTPUT_CHARS
    note = f"… {rest:,} more characters (the JSON export holds all of it)"
    return f'<pre>{_e(text[:OUTPUT_CHARS])}</pre><p class="note">{_e(note)}</p>'


def _header(info: SessionInfo, *, shared: bool) -> str:
    facts: list[tuple[str, str]] = [("Session", info.id)]
    if info.directory and not shared:
        facts.append(("Directory", info.directory))
    if info.model:
        facts.append(("Model", info.model))
    if info.agent:
        facts.append(("Agent", info.agent))
    facts.append(("Created", _utc(info.created_at)))
    facts.append(("Updated", _utc(info.updated_at)))
    facts.append(("Messages", f"{info.message_count:,}"))
    if info.input_tokens or info.output_tokens:
        facts.append(("Tokens", f"{info.input_tokens:,} in / {info.output_tokens:,} out"))
    if info.cost:
        facts.append(("Cost", f"${info.cost.normalize():f}"))
    if info.forked_from:
        facts.append(("Forked from", f"{info.forked_from} at entry {info.forked_at}"))
    if info.parent_id:
        facts.append(("Sub-agent of", info.parent_id))
    items = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in facts)
    title = _e(info.title or "Untitled session")
    return f'<header class="session"><h1>{title}</h1><dl class="facts">{items}</dl></header>\n'


def page_start(info: SessionInfo, *, shared: bool = False) -> str:
    """The page up to its first entry."""
    title = _e((info.title or "Untitled session") + " · tether")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_META_CSP)}">\n'
        '<meta name="referrer" content="no-referrer">\n<meta name="robots" content="noindex, nofollow">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="tether {_e(__version__)}">\n'
        f"<title>{title}</title>\n<style>{CSS}</style></head>\n<body><main>\n" + _header(info, shared=shared)
    )


def page_end(*, shared: bool = False) -> str:
    said = "Shared read-only" if shared else "Exported"
    return f"<footer>{said} by tether {_e(__version__)} on {_e(_utc(time.time()))}.</footer>\n</main></body></html>\n"


class _Turn:
    """An assistant message held until the results of its tool calls arrive, with what came between (the
    tool messages and the approval markers), so that each call shows with its arguments and its output."""

    def __init__(self, entry: Entry, hidden: bool) -> None:
        self.entry = entry
        self.hidden = hidden
        message = entry.body
        assert isinstance(message, Message)
        self.calls = {c.id for c in message.tool_calls}
        self.results: dict[str, ToolResultPart] = {}
        self.approvals: dict[str, list[str]] = {}
        self.after: list[tuple[Entry, bool]] = []  # what is written after the message, in order

    def take(self, entry: Entry, hidden: bool) -> bool:
        """Keep `entry` in this turn; False when it ends the turn (the caller writes the turn, then it)."""
        body = entry.body
        if len(self.after) >= HOLD_ENTRIES:
            return False
        if isinstance(body, Message) and body.role == "tool":
            for result in body.tool_results:
                if result.call_id in self.calls and result.call_id not in self.results:
                    self.results[result.call_id] = result
            self.after.append((entry, hidden))
            return True
        approval = markers.parse(body)
        if isinstance(approval, markers.ApprovalRequest | markers.ApprovalDecision):
            if approval.call_id in self.calls:
                self.approvals.setdefault(approval.call_id, []).append(_approval_text(approval))
                return True
            self.after.append((entry, hidden))
            return True
        return False


def _approval_text(approval: markers.ApprovalRequest | markers.ApprovalDecision) -> str:
    if isinstance(approval, markers.ApprovalRequest):
        return "approval asked" + (f": {approval.reason}" if approval.reason else "")
    by = approval.by or "someone"
    if not approval.approved:
        said = f": {approval.message}" if approval.message else ""
        return f"✗ denied by {by}{said}"
    reach = {"session": " for this session", "project": " for the project"}.get(approval.scope, "")
    return f"✓ approved by {by}{reach}"


Piece = str | SessionInfo
"""What the writer gives: HTML, or a sub-agent's session whose transcript goes there (nested)."""


class _Writer:
    def __init__(
        self, spans: Sequence[RevertSpan], prefix: str = "", children: dict[str, SessionInfo] | None = None
    ) -> None:
        self.spans = spans
        self.prefix = prefix  # of the ids of this session's entries (a nested session's are apart)
        self.children = children or {}  # sub-agent sessions to nest, by the call that ran them

    def anchor(self, seq: int) -> tuple[str, str]:
        """The id of an entry's element, and a link to it."""
        name = f"{self.prefix}e{seq}"
        return name, f'<a class="seq" href="#{name}">#{seq}</a>'

    def entry_open(self, entry: Entry, role: str, hidden: bool, extra: str = "") -> str:
        classes = f"entry {role}" + (" reverted" if hidden else "")
        name, link = self.anchor(entry.seq)
        head = f'{link}<span class="role">{_e(role)}</span>'
        return f'<article class="{classes}" id="{name}"><div class="head">{head}{extra}{_time(entry.created_at)}</div>'

    def message(
        self, entry: Entry, hidden: bool, turn: _Turn | None = None, paired: set[str] | None = None
    ) -> list[Piece]:
        message = entry.body
        assert isinstance(message, Message)
        extra = f'<span class="model">{_e(message.model)}</span>' if message.model else ""
        out: list[Piece] = [self.entry_open(entry, message.role, hidden, extra)]
        for part in message.parts:
            if isinstance(part, TextPart):
                if part.text.strip():
                    out.append(f'<div class="text">{markdown_html(part.text)}</div>')
            elif isinstance(part, ThinkingPart):
                label = f"Thinking · {len(part.text):,} characters" if part.text else "Thinking (redacted)"
                body = f'<div class="text thinking">{markdown_html(part.text)}</div>' if part.text else ""
                out.append(f'<details class="thinking"><summary>{_e(label)}</summary>{body}</details>')
            elif isinstance(part, ToolCallPart):
                out += self.call(part, turn)
            elif isinstance(part, ToolResultPart):
                if paired is None or part.call_id not in paired:
                    out.append(self.result(part))
            elif isinstance(part, ImagePart | FilePart):
                out.append(f'<p class="note">{_e(attachment_label(part))}</p>')
        cut = cut_reason(message)
        if cut is not None:
            calls = "".join(f"; a call to {name} was cut mid-arguments" for name in cut_calls(message))
            out.append(f'<p class="note err cut">[{_e(cut + calls)}]</p>')
        if message.usage is not None and message.usage.total_tokens:
            usage = f"{message.usage.input_tokens:,} in / {message.usage.output_tokens:,} out tokens"
            out.append(f'<p class="note">{_e(usage)}</p>')
        out.append("</article>\n")
        return out

    def call(self, call: ToolCallPart, turn: _Turn | None) -> list[Piece]:
        result = turn.results.get(call.id) if turn is not None else None
        approvals = turn.approvals.get(call.id, []) if turn is not None else []
        if result is None:
            outcome, cls = ("waiting for approval", "") if approvals else ("… no result", "")
        elif result.is_error:
            outcome, cls = "✗ error", " failed"
        else:
            lines = len(result.content.splitlines())
            outcome, cls = f"✓ {lines:,} line{'s' * (lines != 1)}", ""
        mark = "err" if cls else "ok" if result is not None else ""
        summary = f'<code>{_e(call_signature(call))}</code> <span class="{mark}">{_e(outcome)}</span>'
        if call.arguments_ok:
            arguments = json.dumps(call.arguments, ensure_ascii=False, indent=2, default=str)
        else:
            arguments = call.raw_arguments or ""
        body = ['<div class="label">Arguments</div>', _clipped(arguments)]
        if not call.arguments_ok:
            body.insert(0, '<p class="note err">the model sent arguments that are not valid JSON</p>')
        for text in approvals:
            body.append(f'<p class="note">{_e(text)}</p>')
        if result is not None:
            label = "Error" if result.is_error else "Output"
            body += [f'<div class="label">{label}</div>', _clipped(result.content)]
            body.append(self.child_note(result))
        opening = f'<details class="call{cls}"><summary>{summary}</summary>{"".join(body)}'
        child = self.children.get(call.id)
        if child is not None:
            return [opening, child, "</details>"]
        return [opening + "</details>"]

    def result(self, result: ToolResultPart) -> str:
        """A result whose call is not beside it (before a compaction, in a hidden span)."""
        state = '<span class="err">✗ error</span>' if result.is_error else '<span class="ok">✓</span>'
        name = _e(result.name or "tool")
        body = _clipped(result.content) + self.child_note(result)
        return f'<details class="call{" failed" if result.is_error else ""}"><summary>{name} result {state}</summary>{body}</details>'

    @staticmethod
    def child_note(result: ToolResultPart) -> str:
        child = result.metadata.get("child_id")
        if not isinstance(child, str):
            return ""
        agent = result.metadata.get("agent")
        outcome = result.metadata.get("outcome")
        text = f"↳ sub-agent session {child}" + (f" ({agent})" if isinstance(agent, str) else "")
        if isinstance(outcome, str):
            text += f" · {outcome}"
        return f'<p class="note">{_e(text)}</p>'

    def marker(self, entry: Entry, hidden: bool) -> str:
        body = entry.body
        cls = "marker" + (" reverted" if hidden else "")
        name, anchor = self.anchor(entry.seq)
        anchor += " "
        when = f" · {_time(entry.created_at)}"
        if isinstance(body, Compaction):
            summary = f"Compaction: entries before #{body.first_kept_seq} summarized"
            if body.tokens_before and body.tokens_after:
                summary += f" ({body.tokens_before:,} → {body.tokens_after:,} tokens)"
            return (
                f'<div class="{cls}" id="{name}"><details><summary>{anchor}{_e(summary)}{when}</summary>'
                f'<div class="text">{markdown_html(body.summary)}</div></details></div>\n'
            )
        if isinstance(body, Revert):
            text = f"↶ Reverted to entry {body.to_seq}{revert_note(entry.seq, self.spans)}"
            text += f": {body.reason}" if body.reason else ""
        elif isinstance(body, TitleChange):
            text = f"Title changed to “{body.title}”"
        elif isinstance(body, Checkpoint):
            text = f"Checkpoint ({body.reason}, {body.steps} steps): {body.objective}"
            text += f" — next: {body.next_action}" if body.next_action else ""
        elif isinstance(known := markers.parse(body), markers.Interrupted):
            text = f"Turn interrupted: entry {known.seq} got no answer"
        elif isinstance(known, markers.ErrorRecord) and isinstance(body, Marker):
            text = f"✗ Error: {error_text(body)}"
        elif isinstance(known, markers.ApprovalRequest):
            text = f"{known.tool or 'a call'}: {_approval_text(known)}"
        elif isinstance(known, markers.ApprovalDecision):
            text = f"a call: {_approval_text(known)}"
        elif isinstance(body, Marker):
            text = f"• {body.name}"
        else:
            return ""
        return f'<div class="{cls}" id="{name}">{anchor}{_e(text)}{when}</div>\n'

    def turn(self, turn: _Turn) -> list[Piece]:
        out = self.message(turn.entry, turn.hidden, turn)
        paired = set(turn.results)
        for entry, hidden in turn.after:
            body = entry.body
            if isinstance(body, Message):
                rest = [p for p in body.parts if not (isinstance(p, ToolResultPart) and p.call_id in paired)]
                if rest:
                    out += self.message(entry, hidden, None, paired)
            else:
                out.append(self.marker(entry, hidden))
        return out


class Page(NamedTuple):
    """A part of a long transcript: from entry `start`, about `size` entries (a turn whose tool results lie
    past the end is finished first). `link(seq)` is the address of the page that starts at `seq`."""

    start: int
    size: int
    link: Callable[[int], str]


async def html_chunks(
    store: JournalSearchIndex,
    session_id: str,
    *,
    raw: bool = False,
    shared: bool = False,
    children: bool = False,
    info: SessionInfo | None = None,
    page: Page | None = None,
) -> AsyncIterator[str]:
    """The page in pieces, as the journal is read (one piece per entry or turn). Reverted entries are left
    out (a note marks each revert) unless `raw`; `children`: each sub-agent's transcript is nested, folded,
    under the call that ran it (else a note names its session); `shared`: the page a share link shows (no
    directory, and never another session's transcript); `page`: only that part of the transcript, with links
    to the first part and the next."""
    info = info or await store.get_session(session_id)
    yield page_start(info, shared=shared)
    bounds = None if page is None else (page.start, page.start + page.size - 1)
    if page is not None and page.start > 1:
        yield f'<nav class="pages"><a href="{_e(page.link(1))}">From the first message</a></nav>\n'
    next_start: list[int] = []
    async for piece in _transcript(
        store, info, raw=raw, children=children and not shared, prefix="", bounds=bounds, rest=next_start
    ):
        yield piece
    if not info.entry_count:
        yield '<p class="note">This session has no messages yet.</p>\n'
    if page is not None and next_start:
        more = info.entry_count - next_start[0] + 1
        label = f"Next: entries {next_start[0]:,} to {min(info.entry_count, next_start[0] + page.size - 1):,} of {info.entry_count:,}"
        yield f'<nav class="pages"><a href="{_e(page.link(next_start[0]))}">{_e(label)}</a> ({more:,} more)</nav>\n'
    yield page_end(shared=shared)


async def _transcript(
    store: JournalSearchIndex,
    info: SessionInfo,
    *,
    raw: bool,
    children: bool,
    prefix: str,
    bounds: tuple[int, int] | None = None,
    rest: list[int] | None = None,
) -> AsyncIterator[str]:
    """`bounds`: only the entries from the first to the second (and the rest of a turn open there); the seq
    where the next part starts is put in `rest`."""
    last = info.entry_count
    # the reverts come from the store's index (no read of the history); ones appended after `info` are not ours
    spans = [s for s in await store.reverted_spans(info.id) if s.revert <= last]
    effective = effective_reverts(spans)
    writer = _Writer(spans, prefix, await _children(store, info.id) if children else None)
    nested = 0
    turn: _Turn | None = None

    async def pieces(out: list[Piece] | str) -> AsyncIterator[str]:
        nonlocal nested
        for piece in [out] if isinstance(out, str) else out:
            if isinstance(piece, str):
                yield piece
                continue
            nested += 1
            label = f"Sub-agent session {piece.id}" + (f" ({piece.agent})" if piece.agent else "")
            yield f'<details class="child"><summary>{_e(label)}</summary>'
            async for inner in _transcript(store, piece, raw=raw, children=True, prefix=f"{prefix}s{nested}-"):
                yield inner
            yield "</details>"

    async for entry in store.iter_entries(info.id, bounds[0] if bounds is not None else 1):
        if entry.seq > last:
            break
        past_end = bounds is not None and entry.seq > bounds[1]
        if past_end and turn is None:
            if rest is not None:
                rest.append(entry.seq)
            break
        hidden = shown_as_hidden(entry.seq, spans, effective)
        if hidden and not raw:
            continue
        if turn is not None:
            if turn.take(entry, hidden):
                continue
            async for piece in pieces(writer.turn(turn)):
                yield piece
            turn = None
            if past_end:  # the turn open at the end is written whole; the next part starts here
                if rest is not None:
                    rest.append(entry.seq)
                break
        body = entry.body
        if isinstance(body, Message) and body.tool_calls:
            turn = _Turn(entry, hidden)
        elif isinstance(body, Message):
            async for piece in pieces(writer.message(entry, hidden)):
                yield piece
        else:
            marker = writer.marker(entry, hidden)
            if marker:
                yield marker
    if turn is not None:
        async for piece in pieces(writer.turn(turn)):
            yield piece


async def _children(store: Journal, session_id: str) -> dict[str, SessionInfo]:
    """The session's sub-agent sessions by the call that ran each (`metadata.task.call_id`)."""
    found: dict[str, SessionInfo] = {}
    cursor: str | None = None
    while True:
        page = await store.list_sessions(parent_id=session_id, limit=1000, cursor=cursor)
        for child in page.items:
            task = child.metadata.get("task")
            call_id = task.get("call_id") if isinstance(task, dict) else None
            if isinstance(call_id, str) and call_id:
                found[call_id] = child
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


async def export_html(
    store: JournalSearchIndex, session_id: str, out: IO[str], *, raw: bool = False, children: bool = False
) -> SessionInfo:
    """Write the session as one self-contained HTML file (see `html_chunks`)."""
    info = await store.get_session(session_id)
    async for piece in html_chunks(store, session_id, raw=raw, children=children, info=info):
        out.write(piece)
    return info
