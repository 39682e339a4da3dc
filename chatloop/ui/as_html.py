"""Sessions as one self-contained HTML page (``export --format html``, ``/export``).

The page needs nothing but itself: its one stylesheet is inline and allowed by its
hash in a ``Content-Security-Policy`` meta that allows nothing else (no script,
no image, no font, no request of any kind), so text that got past the escaping
still could not run or fetch. It has no script: folding is ``<details>``; light
and dark follow the browser's ``prefers-color-scheme``; printed, every fold is open.

Every text from a file (a model's reply, a tool's result, what a person typed, a
title) is data: escaped for HTML, and made ``visible`` first by the terminal's
rule (``chatloop.ui.terminal_text``), so a control sequence or a bidirectional
override shows as a symbol. Replies and summaries are markdown, rendered by
``markdown-it-py`` with raw HTML off (CommonMark, with tables and strikethrough as
the terminal has them); a link survives only to ``http``, ``https``
or ``mailto`` and shows its target, an image is shown as a link to it (never
fetched), and code is highlighted by Pygments with classes (no style attribute:
the policy allows none).

Written as it is read: one card per message, ``write`` called with each, so a
200 MB session costs time, not memory (``bench/html_export.py`` measures it).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from chatloop.ui.terminal_text import visible

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

    from chatloop.format import Message, Plain, Problem, SessionMeta
    from chatloop.store.rows import SessionRow

__all__ = ["LINK_SCHEMES", "Lineage", "anchor", "page_policy", "write_html", "write_html_files"]

LINK_SCHEMES = ("http:", "https:", "mailto:")  # the only targets a link of the page has
FOLD_LINES = 12  # a tool's result or call longer than this is folded (closed)
FOLD_CHARS = 1200
MAX_LINEAGE_NODES = 500  # a lineage drawn larger says how many more it left out


@dataclass(frozen=True, slots=True)
class Lineage:
    """The lineage to draw above a chain: ``root`` and every session's ``children``
    (``Index.lineage``), ``mark`` the session exported; sessions in the page
    (their ids in ``shown``) link to their part, the others are drawn apart."""

    root: SessionRow
    children: Mapping[str, Sequence[SessionRow]]
    mark: str
    shown: frozenset[str]


def anchor(session_id: str) -> str:
    """The fragment id of a session's part of the page (``#s-ID``)."""
    return "s-" + "".join(c for c in session_id if c.isalnum() or c in "-_")


def page_policy(css: str) -> str:
    """The page's Content-Security-Policy: nothing at all but the stylesheet ``css``,
    by its hash (no inline style attribute, no script, no request)."""
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")
    return f"default-src 'none'; style-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"


def write_html(
    sessions: Iterable[tuple[SessionMeta, Iterable[Message | Plain]]],
    write: Callable[[str], object],
    lineage: Lineage | None = None,
    title: str = "",
) -> None:
    """The page of ``sessions`` (each its meta and its messages, in file order, as
    ``Document.views`` gives them), written through ``write`` a piece at a time:
    the head, the lineage's picture (``lineage``, for a chain), then each session as
    a header and one card per message. ``title``: the page's, else the first
    session's."""
    page = _Page(lineage.shown if lineage is not None else frozenset())
    head_written = False
    for meta, messages in sessions:
        if not head_written:
            write(page.head(title or meta.title or meta.id, lineage))
            head_written = True
        write(page.session_head(meta))
        for message in messages:
            card = page.card(meta, message)
            if card:
                write(card)
        write("</section>\n")
    if not head_written:
        write(page.head(title or "chatloop", lineage))
    write("</main>\n</body>\n</html>\n")


def write_html_files(
    paths: Sequence[Path], sink: BinaryIO, lineage: Lineage | None = None
) -> Iterator[tuple[str, Problem]]:
    """The session files at ``paths`` (in order) as one page on ``sink`` (bytes),
    each read as it is written; then, for each, the problems its reading met (its id
    and the problem), for the caller to choose what to note. (A generator: nothing is
    written until it is iterated.)"""
    from chatloop.store.export import Sessions, write_documents

    def page(sessions: Sessions, write: Callable[[str], object]) -> None:
        write_html(sessions, write, lineage)

    for doc in write_documents(paths, sink, page):
        for problem in doc.problems:
            yield doc.meta.id, problem


def _text(text: str) -> str:
    """Untrusted text as HTML text: made visible, then escaped (quotes too)."""
    return escape(visible(text), quote=True)


def _pre(text: str, kind: str = "text") -> str:
    return f'<pre class="{kind}">{_text(text)}</pre>'


def _fold(summary: str, body: str, kind: str, open_: bool = False) -> str:
    """``body`` under a ``<details>`` whose summary line is ``summary`` (HTML)."""
    opened = " open" if open_ else ""
    return f'<details class="{kind}"{opened}><summary>{summary}</summary>{body}</details>'


def _short(text: str) -> bool:
    return len(text) <= FOLD_CHARS and text.count("\n") < FOLD_LINES


def _when(at: datetime) -> str:
    return at.isoformat(sep=" ", timespec="seconds")


class _Page:
    """What the page's pieces share: the markdown renderer, the sessions in the page
    (``shown``: a parent among them is a link to its part), the query count of the
    session being written and whether it is a fork (for the labels)."""

    def __init__(self, shown: frozenset[str]) -> None:
        self._markdown = _markdown()
        self._shown = shown
        self._query = 0
        self._restorations = 0  # restoration prompts of the session being written
        self._fork = False
        self._where = ""  # the anchor of the session being written

    def head(self, title: str, lineage: Lineage | None) -> str:
        css = _stylesheet()
        picture = "" if lineage is None else _lineage_svg(lineage)
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{page_policy(css)}">\n'
            '<meta name="referrer" content="no-referrer">\n'
            '<meta name="color-scheme" content="light dark">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_text(title)}</title>\n<style>{css}</style>\n</head>\n<body>\n"
            f'<header class="page"><h1>{_text(title)}</h1>'
            '<p class="made">Exported by chatloop</p></header>\n'
            f"{picture}<main>\n"
        )

    def session_head(self, meta: SessionMeta) -> str:
        self._query = self._restorations = 0
        self._where = anchor(meta.id)
        forked_at = meta.extra.get("forked_at")
        self._fork = bool(meta.parent_id) and isinstance(forked_at, int)
        facts: list[tuple[str, str]] = [
            ("id", meta.id),
            ("agent", meta.agent or meta.agent_name),
            ("model", meta.model),
            ("created", _when(meta.created)),
            ("updated", _when(meta.updated)),
            ("status", meta.status),
            ("queries", str(meta.queries)),
            ("tokens", f"{meta.tokens_in} in / {meta.tokens_out} out"),
        ]
        if meta.restoration_tokens:
            facts.append(("restoration", f"{meta.restoration_tokens} tokens"))
        if meta.cwd:
            facts.append(("folder", meta.cwd))
        if meta.git_branch:
            facts.append(("branch", meta.git_branch))
        rows = "".join(f"<dt>{name}</dt><dd>{_text(value)}</dd>" for name, value in facts if value)
        parent = ""
        if meta.parent_id:
            how = (
                f"branches from {self._parent(meta.parent_id)} after query {forked_at}"
                if self._fork
                else f"continues {self._parent(meta.parent_id)}"
            )
            parent = f'<p class="parent">{how}</p>'
        return (
            f'<section class="session" id="{anchor(meta.id)}">\n'
            f'<header class="session"><h2>{_text(meta.title or meta.id)}</h2>{parent}'
            f"<dl>{rows}</dl></header>\n"
        )

    def _card(self, kind: str, label: str, m: Message, body: str, model: str = "") -> str:
        """A message's card: its label (HTML made here), its facts, ``body`` (HTML);
        ``model``: the session's (a reply's model is shown when it is another). Its id is
        the session's anchor and the frame's key (a copy in a fork keeps its key)."""
        facts = [f'<time datetime="{escape(m.at.isoformat())}">{escape(_when(m.at))}</time>']
        if m.usage is not None:
            tilde = "~" if m.usage.estimated else ""
            facts.append(f"{tilde}{m.usage.input} in / {tilde}{m.usage.output} out tokens")
        if m.duration is not None:
            facts.append(f"{m.duration:.1f} s")
        if m.role == "assistant" and m.model and m.model != model:
            facts.append(_text(m.model))
        if m.stop_reason and m.stop_reason != "stop" and m.role == "assistant":
            facts.append(f"stop: {_text(m.stop_reason)}")
        badges = ""
        if m.interrupted:
            badges += '<span class="badge cut">interrupted</span>'
        if m.unsent:
            badges += '<span class="badge unsent">not sent</span>'
        if m.copy:
            badges += '<span class="badge copy">copy</span>'
        return (
            f'<article class="card {kind}" id="{self._where}-{escape(m.key)}">'
            f'<div class="who"><span class="role">{label}</span>{badges}'
            f'<span class="facts">{" · ".join(facts)}</span></div>{body}</article>\n'
        )

    def _parent(self, parent_id: str) -> str:
        """A parent's id: a link to its part when it is in the page, else text."""
        if parent_id in self._shown:
            return f'<a href="#{anchor(parent_id)}">{_text(parent_id)}</a>'
        return _text(parent_id)

    def card(self, meta: SessionMeta, item: Message | Plain) -> str:
        """One message as a card (HTML); "" for one with nothing to show."""
        message = _message(item, meta)
        role = message.role
        if role == "user":
            return self._user(meta, message)
        if role == "assistant":
            return self._assistant(meta, message)
        if role == "tool":
            return self._tool(message)
        return self._summary(message)

    def _user(self, meta: SessionMeta, m: Message) -> str:
        if m.recalled:  # (chatloop's lookup in the chain's earlier files, for the next query)
            body = _fold("Recalled (sent in front of the query above)", _pre(m.text), "restore")
            return self._card("restore", "Recalled from earlier sessions", m, body)
        if m.restore and not m.copy:  # (a restoration prompt, also where a fork carries one)
            body = _fold("Restoration prompt (what the model was given)", _pre(m.text), "restore")
            self._restorations += 1  # a later one revises the first (chat.restoration)
            title = "Summary revised" if self._restorations > 1 else "Session restored"
            return self._card("restore", title, m, body)
        if m.restore:
            origin = f" from {self._parent(meta.parent_id)}" if meta.parent_id else ""
            return self._card("user carried", f"You · carried over{origin}", m, _pre(m.text))
        if m.unsent:
            return self._card("user unsent", "You · not sent", m, _pre(m.text))
        self._query += 1
        return self._card("user", f"You · query {self._query}", m, _pre(m.text))

    def _assistant(self, meta: SessionMeta, m: Message) -> str:
        from chatloop.format import no_text

        speaker = _text(meta.agent or "Assistant")
        parts = [_fold("Thinking", _pre(t.text, "thinking"), "thinking", False) for t in m.thinking]
        if m.text and not m.text.isspace():
            parts.append(f'<div class="reply">{self._markdown.render(visible(m.text))}</div>')
        elif m.interrupted or not m.tool_calls:
            parts.append(f'<p class="none">{_text(no_text(m, self._fork or m.copy))}</p>')
        for call in m.tool_calls:
            arguments = _arguments(call.arguments)
            parts.append(
                _fold(
                    f"→ call <code>{_text(call.name)}</code>",
                    _pre(arguments, "arguments"),
                    "call",
                    _short(arguments),
                )
            )
        if m.restore and m.copy:
            kind, label = "assistant carried", f"{speaker} · carried over"
        elif m.restore and m.fallback:  # (chatloop's own, not the model's: acknowledgment)
            kind, label = "assistant restore", f"{speaker} · acknowledgment written by chatloop"
        elif m.restore:
            kind, label = "assistant restore", f"{speaker} · acknowledgment"
        else:
            kind, label = "assistant", speaker
        return self._card(kind, label, m, "".join(parts), meta.model)

    def _tool(self, m: Message) -> str:
        parts = []
        for r in m.tool_results:
            marks = " · error" if r.is_error else ""
            if r.approved:
                marks += f" · approval: {_text(r.approved)}"
            parts.append(
                _fold(
                    f"← result of <code>{_text(r.name)}</code>{marks}",
                    _pre(r.content, "result"),
                    "result error" if r.is_error else "result",
                    _short(r.content),
                )
            )
        return self._card("tool", "Tool", m, "".join(parts))

    def _summary(self, m: Message) -> str:
        label = "Summary (built without the model)" if m.fallback else "Summary"
        body = _fold(
            "What this session was about (its summary)",
            f'<div class="reply">{self._markdown.render(visible(m.text))}</div>',
            "summary",
        )
        return self._card("summary", label, m, body)


def _arguments(raw: str) -> str:
    """A tool call's arguments, indented when they are JSON (else as they came)."""
    try:
        return json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    except ValueError:
        return raw


def _message(item: Message | Plain, meta: SessionMeta) -> Message:
    """The message of ``item``: a ``Plain`` (a frame of text only) built from its facts."""
    from chatloop.format import Message, Plain, plain_facts

    if not isinstance(item, Plain):
        return item
    at, model, stop, usage, duration = plain_facts(item, meta)
    return Message(
        "user" if item.role == "user" else "assistant",
        datetime.fromisoformat(at),
        item.key,
        item.text,
        model=model,
        stop_reason=stop,
        usage=usage,
        duration=duration,
    )


# -- markdown --------------------------------------------------------------------------


def _allowed(url: str) -> bool:
    """A link target the page may have: http, https or mailto (case and surrounding
    space ignored, as browsers do); anything else stays text."""
    scheme = url.strip().lower()
    return scheme.startswith(LINK_SCHEMES) and not any(c in url for c in "\x00\n\r\t")


def _markdown() -> MarkdownIt:
    """CommonMark with raw HTML off, links only to ``LINK_SCHEMES`` (showing their
    target), images drawn as links (never fetched), code highlighted by Pygments."""
    from markdown_it import MarkdownIt

    # tables and strikethrough as the terminal's rich renders them too
    md = MarkdownIt("commonmark", {"html": False, "highlight": _highlight})
    md.enable(["table", "strikethrough"])
    # a refused link is rendered as its text (markdown-it's hook, meant to be replaced)
    md.validateLink = _allowed  # type: ignore[method-assign]
    rules: Any = md.renderer.rules  # type: ignore[attr-defined]  # (untyped callables)

    def link_open(tokens: Any, idx: int, options: Any, env: Any) -> str:
        href = tokens[idx].attrGet("href") or ""
        return f'<a href="{escape(href)}" rel="noopener noreferrer nofollow">'

    def link_close(tokens: Any, idx: int, options: Any, env: Any) -> str:
        # the link's text, back to its opening (links do not nest): an autolink, whose
        # text is its target, does not show it twice
        shown: list[str] = []
        start = idx - 1
        while start >= 0 and tokens[start].type != "link_open":
            shown.append(tokens[start].content)
            start -= 1
        href = str(tokens[start].attrGet("href") or "") if start >= 0 else ""
        if "".join(reversed(shown)) == href:
            return "</a>"
        return f'</a> <span class="href">({escape(href)})</span>'

    def image(tokens: Any, idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        src = str(token.attrGet("src") or "")
        alt = escape(token.content or "image")
        return (
            f'<a class="image" href="{escape(src)}" rel="noopener noreferrer nofollow">'
            f'[image: {alt}]</a> <span class="href">({escape(src)})</span>'
        )

    def cell_open(tokens: Any, idx: int, options: Any, env: Any) -> str:
        # a column's alignment as a class: the policy allows no style attribute
        token = tokens[idx]
        align = str(token.attrGet("style") or "").partition(":")[2]
        kind = f' class="align-{align}"' if align in ("left", "right", "center") else ""
        return f"<{token.tag}{kind}>"

    rules["th_open"] = cell_open
    rules["td_open"] = cell_open
    rules["link_open"] = link_open
    rules["link_close"] = link_close
    rules["image"] = image
    return md


def _highlight(code: str, lang: str, attrs: str) -> str:
    """A fenced block highlighted by Pygments (classes; the stylesheet colours them),
    or "" (markdown-it escapes it as it is) for a language Pygments does not know."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    name = lang.strip().split()[0] if lang.strip() else ""
    if not name:
        return ""
    try:
        lexer = get_lexer_by_name(name)
    except ClassNotFound:
        return ""
    inner = highlight(code, lexer, HtmlFormatter(nowrap=True))
    return f'<pre class="code hl"><code>{inner}</code></pre>\n'


# -- the lineage -----------------------------------------------------------------------

_NODE_W, _NODE_H, _STEP_X, _STEP_Y = 340, 44, 36, 58


def _lineage_svg(lineage: Lineage) -> str:
    """The lineage as an inline SVG: one box per session, indented under its parent
    (walked with a stack, each once: a link that loops cannot recurse), an edge
    labelled compaction/resume or fork; a box in the page links to its part."""
    from chatloop.ui.listing import describe, fork_words

    placed: list[tuple[SessionRow, int, int | None]] = []  # row, depth, parent's index
    seen: set[str] = set()
    stack: list[tuple[SessionRow, int, int | None]] = [(lineage.root, 0, None)]
    left_out = 0
    while stack:
        row, depth, parent = stack.pop()
        if row.id in seen:
            continue
        if len(placed) >= MAX_LINEAGE_NODES:
            left_out += 1
            continue
        seen.add(row.id)
        placed.append((row, depth, parent))
        here = len(placed) - 1
        kids = [kid for kid in lineage.children.get(row.id, []) if kid.id not in seen]
        for kid in reversed(kids):
            stack.append((kid, depth + 1, here))
    depth_max = max(d for _, d, _ in placed)
    width = 20 + depth_max * _STEP_X + _NODE_W + 200
    height = 20 + len(placed) * _STEP_Y
    out = [
        f'<nav class="lineage" aria-label="lineage"><h2>Lineage</h2>'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img"><title>The sessions of this chain</title>'
    ]
    for i, (row, depth, parent) in enumerate(placed):
        x, y = 10 + depth * _STEP_X, 10 + i * _STEP_Y
        if parent is not None:
            px = 10 + placed[parent][1] * _STEP_X + 14
            py = 10 + parent * _STEP_Y + _NODE_H
            how = fork_words(row.forked_at) if row.forked_at is not None else "continued"
            kind = "fork" if row.forked_at is not None else "continue"
            out.append(
                f'<path class="edge {kind}" d="M{px},{py} V{y + _NODE_H // 2} H{x}"/>'
                f'<text class="edge-label" x="{x + _NODE_W + 8}" y="{y + 28}">{escape(how)}</text>'
            )
        name = visible(describe(row))
        name = name if len(name) <= 38 else name[:37] + "…"
        status = f"{row.id} · {row.queries}q · {row.status}"
        this = " this" if row.id == lineage.mark else ""
        box = (
            f'<rect class="node{this}" x="{x}" y="{y}" width="{_NODE_W}" height="{_NODE_H}" '
            f'rx="6"/><text class="node-title" x="{x + 10}" y="{y + 18}">{_text(name)}</text>'
            f'<text class="node-facts" x="{x + 10}" y="{y + 35}">{_text(status)}</text>'
        )
        if row.id in lineage.shown:
            out.append(
                f'<a class="node-link" href="#{anchor(row.id)}" id="lineage-{anchor(row.id)}">'
                f"<title>{_text(row.id)}: go to this session</title>{box}</a>"
            )
        else:
            out.append(
                f'<g class="elsewhere"><title>{_text(row.id)}: not in this page</title>{box}</g>'
            )
    out.append("</svg>")
    if left_out:
        out.append(f"<p>{left_out} more sessions not drawn.</p>")
    out.append("</nav>\n")
    return "".join(out)


# -- the stylesheet --------------------------------------------------------------------

_CSS = """
:root { color-scheme: light dark; --bg: #fbfbf8; --fg: #1d1d1f; --muted: #6b6b70;
  --card: #ffffff; --line: #d9d9de; --user: #eef4ff; --tool: #f6f3ea; --think: #f3eefa;
  --summary: #eef8f0; --restore: #fff7e6; --cut: #b3261e; --link: #0b57d0; --code: #f4f4f6; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #16171a; --fg: #e6e6e9; --muted: #9a9aa2; --card: #1f2024; --line: #34353b;
    --user: #1b2740; --tool: #2a2719; --think: #271f33; --summary: #1b2d21;
    --restore: #33290f; --cut: #ff8a80; --link: #8ab4f8; --code: #26272c; }
}
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 60rem; padding: 1rem 1.25rem 4rem; background: var(--bg);
  color: var(--fg); font: 16px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; }
a { color: var(--link); }
h1 { font-size: 1.5rem; margin: .5rem 0 0; }
h2 { font-size: 1.2rem; margin: 0; }
.made, .parent, .facts, .href, .none { color: var(--muted); }
.made { margin: 0 0 1rem; font-size: .85rem; }
.href { font-size: .85em; word-break: break-all; }
section.session { margin: 2rem 0; padding-top: .5rem; border-top: 3px solid var(--line); }
header.session dl { display: grid; grid-template-columns: max-content 1fr; gap: 0 1rem;
  margin: .5rem 0 1rem; font-size: .9rem; }
header.session dt { color: var(--muted); }
header.session dd { margin: 0; overflow-wrap: anywhere; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
  padding: .6rem .9rem; margin: .7rem 0; break-inside: avoid; }
.card.user { background: var(--user); }
.card.tool { background: var(--tool); }
.card.summary { background: var(--summary); }
.card.restore { background: var(--restore); }
.card.carried { opacity: .8; border-style: dashed; }
.card.unsent { border-style: dotted; }
.who { display: flex; flex-wrap: wrap; gap: .25rem .75rem; align-items: baseline;
  font-size: .85rem; margin-bottom: .3rem; }
.role { font-weight: 600; }
.badge { border: 1px solid currentColor; border-radius: 4px; padding: 0 .3rem;
  font-size: .75rem; }
.badge.cut { color: var(--cut); }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: .3rem 0;
  font: .9rem/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
pre.text { font: inherit; }
pre.code, .reply code { background: var(--code); border-radius: 4px; }
pre.code { padding: .5rem .7rem; white-space: pre; overflow-x: auto; }
.reply code { padding: 0 .2rem; }
.reply pre code { padding: 0; }
.reply > :first-child { margin-top: 0; }
.reply > :last-child { margin-bottom: 0; }
.reply table { border-collapse: collapse; margin: .5rem 0; display: block; overflow-x: auto; }
.reply th, .reply td { border: 1px solid var(--line); padding: .2rem .5rem; }
.align-left { text-align: left; }
.align-right { text-align: right; }
.align-center { text-align: center; }
details { margin: .3rem 0; }
details > summary { cursor: pointer; color: var(--muted); font-size: .9rem; }
details.thinking { background: var(--think); border-radius: 6px; padding: .2rem .6rem; }
details.result.error > summary { color: var(--cut); }
nav.lineage { overflow-x: auto; margin: 1rem 0; }
nav.lineage svg { display: block; font: 13px system-ui, sans-serif; }
.node { fill: var(--card); stroke: var(--line); stroke-width: 1.5; }
.node.this { stroke: var(--link); stroke-width: 2.5; }
.node-link:hover .node, .node-link:focus .node { stroke: var(--link); }
.node-title { fill: var(--fg); font-weight: 600; }
.node-facts, .edge-label { fill: var(--muted); font-size: 11px; }
.elsewhere .node { stroke-dasharray: 4 3; }
.edge { fill: none; stroke: var(--muted); stroke-width: 1.5; }
.edge.fork { stroke-dasharray: 6 4; }
@media print {
  body { max-width: none; background: #fff; color: #000; }
  details::details-content { content-visibility: visible; display: contents; }
  .card { border-color: #999; }
}
"""


def _stylesheet() -> str:
    """The page's stylesheet: its own rules and Pygments' (a light style, and a dark
    one inside ``prefers-color-scheme: dark``)."""
    from pygments.formatters import HtmlFormatter

    light = HtmlFormatter(style="friendly").get_style_defs(".hl")
    dark = HtmlFormatter(style="monokai").get_style_defs(".hl")
    return (
        f"{_CSS}{light}\n@media (prefers-color-scheme: dark) {{\n{dark}\n}}\n"
        ".hl, .hl pre, .hl span { background: transparent; }\n"
    )
