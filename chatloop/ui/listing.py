"""Plain-text views of sessions for the management commands (their JSON is
``chatloop.ui.as_json``; text made safe and measured, ``chatloop.ui.terminal_text``).

Plain text on purpose: ``chatloop sessions`` must start and finish fast, and
its output is meant for pipes and greps as much as for eyes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from chatloop.store.rows import SearchHit, SessionRow
from chatloop.ui.terminal_text import cells, clip, visible

if TYPE_CHECKING:  # a listing from a fresh index imports no parser
    from chatloop.format import Message, Plain, Session, SessionMeta


UNKNOWN = "?"  # a figure not yet known: the row was read from its file's head alone


def relative_time(when: str | None, now: datetime) -> str:
    """'just now', '5m ago', '3h ago', '2d ago', or the date for older moments;
    ``UNKNOWN`` for a moment not yet known (``SessionRow.updated``)."""
    if when is None:
        return UNKNOWN
    try:
        then = datetime.fromisoformat(when)
    except ValueError:
        return when
    seconds = (now - then).total_seconds()
    if seconds < 60:
        return "just now"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            if unit == "d" and seconds >= 30 * 86400:
                return then.strftime("%Y-%m-%d")
            return f"{int(seconds // size)}{unit} ago"
    return then.strftime("%Y-%m-%d")


def queries_of(row: SessionRow) -> str:
    """A row's query count as shown: ``UNKNOWN`` while not yet known (its words not
    yet read: ``SessionRow``), never a number the file may contradict."""
    return UNKNOWN if row.queries is None else str(row.queries)


def describe(row: SessionRow) -> str:
    """What a person recognises a session by: its title, else its last question; one
    line always (``one_line``), since every view prints it in a row of its own. (A
    row read from its front matter alone has no question yet: "untitled".)"""
    if row.title or row.preview:
        return one_line(row.title or row.preview)
    if row.parent_id:
        return f"(continues {row.parent_id})"
    return "(untitled)" if row.queries is None or row.queries else "(no messages)"


_BREAKS = re.compile(r"[\s\x85\u2028\u2029]+")


def one_line(text: str) -> str:
    """``text`` on one line: each run of line breaks, tabs and other white space
    (a title typed or made over several lines) shown as one space."""
    return _BREAKS.sub(" ", text).strip()


def fork_words(at: int) -> str:
    """Where a fork branches, as a person reads it: after query N, or, at 0, from the
    start (it carried none of its parent's exchanges)."""
    return "fork from the start" if at == 0 else f"fork after query {at}"


def handle_width(rows: Sequence[SessionRow]) -> int:
    """The handle column's width for ``rows``: 6, or the longest handle listed (8 when
    a handle is all digits, which ``ids.handles`` lengthens so it reads as no
    number), so that the columns after it line up."""
    return max([6, *(len(row.handle) for row in rows)])


def sessions_text(
    rows: list[SessionRow], now: datetime, show_project: bool = False, columns: int | None = None
) -> str:
    """One line per session: number, handle, age, queries, agent, status, title. With
    ``columns`` (a terminal's width), a title too long for the line is cut with "…",
    so that no line wraps (its status and project stay whole)."""
    if not rows:
        return "No sessions yet. Start one with `chatloop`."
    lines = []
    width = handle_width(rows)
    # a narrow terminal gives up the agent's column first (from 80 columns down), then
    # a row's marks, whole, from the last: a line never wraps, never cuts a mark
    agent_width = 16 if columns is None else max(0, min(16, columns - 64))
    for row in rows:
        number = f"{row.number:>3}" if row.number is not None else _unnumbered(row)
        marks = [] if row.status == "closed" else [f"[{row.status}]"]
        if row.forked_at is not None:
            marks.append(f"[{fork_words(row.forked_at)}]")
        if row.chain > 1:
            marks.append(f"[chain of {row.chain}]")
        where = f"  ({row.project})" if show_project else ""
        agent = f"{visible(row.agent[:agent_width]):<{agent_width}}  " if agent_width else ""
        head = (
            f"{number}  {row.handle or '-':<{width}}  {relative_time(row.updated, now):>9}  "
            f"{queries_of(row):>3}q  {agent}"
        )
        title = visible(describe(row)[:70])
        status = "".join(f" {mark}" for mark in marks)
        if columns is not None:  # the title gives way first, then whole marks: no wrap
            room = columns - cells(head) - cells(visible(where)) - 1
            while marks and cells(status) > room - 8:
                marks.pop()
                status = "".join(f" {mark}" for mark in marks) + " …"
            title = clip(title, room - cells(status), least=1)
        lines.append(f"{head}{title}{status}{where}")
    return visible("\n".join(lines))


def hits_text(hits: list[SearchHit]) -> str:
    if not hits:
        return "No matches."
    return "\n".join(hit_line(hit) for hit in hits)


def hit_line(hit: SearchHit, show_project: bool = False, columns: int | None = None) -> str:
    """One search hit as a line: number (``*`` when live), handle (else id), role, snippet
    (and the session's project, with ``show_project``: numbers count per project).
    Hits stream, so the handle column is as wide as a handle can be (8), whatever
    the handles that come. With ``columns`` (a terminal's width), a snippet too long
    for the line is cut with "…"."""
    number = hit.session.number if hit.session.number is not None else _unnumbered(hit.session)
    name = hit.session.handle or hit.session.id
    where = visible(f"  ({hit.session.project})") if show_project else ""
    head = visible(f"{number:>3}  {name:<8}  {hit.role:<9}  ")
    snippet = visible(hit.snippet)
    if columns is not None:
        snippet = clip(snippet, columns - cells(head) - cells(where) - 1)
    return f"{head}{snippet}{where}"


def transcript_lines(
    meta: SessionMeta,
    messages: Iterable[Message | Plain],
    heading: str = "",
    forked_at: int | None = None,
    after_damage: Callable[[], bool] | None = None,
) -> Iterator[str]:
    """A session as a person reads it in a terminal, one chunk per message as the
    messages stream in: who said what, tools, summary, and what was interrupted.
    ``heading``: what the session is known by (``describe`` of its row, as the
    listings name it), else its title, else its agent; ``forked_at``: the query of
    its parent it branches after, when it is a fork (its row's); ``after_damage``:
    whether the reading has met damage so far (a summary frame after damage may be
    text that a torn or damaged message held, so it is not shown as the session's
    summary). A ``Plain`` (from ``Document.views``) is shown exactly as its message
    would be.

    Every piece of text from the file goes through ``visible``, field by field (the
    frame around it is ours): a message's text on its own is often ASCII, which
    ``visible`` checks fastest, where the chunk with our rules and arrows is not."""
    from chatloop.format import Plain, empty_reply, no_text  # (here: `sessions` loads no parser)

    v = visible
    yield v(
        f"{heading or one_line(meta.title) or meta.agent or 'Session'}  ({meta.id}, {meta.status})"
    )
    if meta.parent_id and forked_at is not None:
        at = "at its start" if forked_at == 0 else f"after query {forked_at}"
        yield v(f"branches from {meta.parent_id} {at}")
    elif meta.parent_id:
        yield v(f"continues {meta.parent_id}")
    speaker = v(meta.agent or "Assistant")
    silent = f"{speaker}: {empty_reply(False, 'stop', False)}"
    # a fork's first messages are copies of its parent's (or a summary of them)
    fork = bool(meta.parent_id) and forked_at is not None
    restored = "Carried over" if fork else "Session restored"
    # a copy of an exchange said before (a retry's, a compaction's carried ones): where from
    carried = f"Carried over from {meta.parent_id}" if meta.parent_id else "Carried over"
    query = 0
    restorations = 0  # a later restoration prompt revises the first (chat.restoration)
    for m in messages:
        if isinstance(m, Plain):  # most messages: only text, nothing interrupted
            if m.role == "user":
                query += 1
                yield f"\n── Query {query} ({m.clock}) ──\nYou: {v(m.text)}"
            else:
                yield f"{speaker}: {v(m.text)}" if m.text and not m.text.isspace() else silent
            continue
        out: list[str] = []
        cut = "  (interrupted)" if m.interrupted else ""
        role = m.role
        if role == "user":
            query += m.is_query
            prompt = m.restore and not m.copy and not m.recalled
            restorations += prompt
            label = (
                "Recalled"
                if m.recalled
                else (carried if m.copy else "Summary revised" if restorations > 1 else restored)
                if m.restore
                else "Not sent"
                if m.unsent
                else f"Query {query}"
            )
            clock = m.at.isoformat()[11:19]  # HH:MM:SS (strftime costs three times this)
            said = v(m.text) if m.recalled else f"You: {v(m.text)}"  # (chatloop's, not yours)
            out += ["", f"── {label} ({clock}) ──{cut}", said]
        elif role == "assistant":
            out += [f"  [thinking] {v(t.text)}" for t in m.thinking]
            if m.text and not m.text.isspace():  # (blank text: as the chat, "empty")
                who = f"{speaker} (written by chatloop)" if m.restore and m.fallback else speaker
                out.append(f"{who}: {v(m.text)}{cut}")
            elif m.interrupted or not m.tool_calls:  # (a reply that only calls tools: its
                out.append(f"{speaker}: {no_text(m, fork or m.copy)}")  # arrows say it)
            out += [f"  → {v(c.name)}({v(c.arguments)})" for c in m.tool_calls]
        elif role == "tool":
            for r in m.tool_results:
                text = r.content.strip()
                first = text[:101].splitlines()[0][:100] if text else ""  # the first line
                out.append(f"  ← {v(r.name)}{' (error)' if r.is_error else ''}: {v(first)}")
        elif role == "summary":
            doubtful = after_damage is not None and after_damage()
            out += ["", SUMMARY_AFTER_DAMAGE if doubtful else "── Summary ──", v(m.text)]
        if out:
            yield "\n".join(out)


SUMMARY_AFTER_DAMAGE = "── Summary? (after damage: perhaps text a damaged message held) ──"


def transcript_text(session: Session) -> str:
    """``transcript_lines`` of a whole session, as one string."""
    return "\n".join(transcript_lines(session.meta, session.messages))


def tree_text(root: SessionRow, children: dict[str, list[SessionRow]], mark: str) -> str:
    """The lineage under ``root`` as an indented tree; ``mark`` (an id) is marked
    "← this one" (the root too, unless it has no descendants).

    Walked with a stack, each session once: a file whose parent link loops back
    (hand-edited, or hostile) or a chain thousands deep cannot make it recurse
    for ever."""
    lines: list[str] = []
    seen: set[str] = set()
    stack: list[tuple[SessionRow, str, bool, int]] = [(root, "", True, 0)]
    while stack:
        row, prefix, last, depth = stack.pop()
        if row.id in seen:
            continue
        seen.add(row.id)
        branch = "" if depth == 0 else ("└─ " if last else "├─ ")
        # the session asked about, unless it stands alone (then there is nothing to tell)
        star = "  ← this one" if row.id == mark and (depth or children.get(row.id)) else ""
        fork = f", {fork_words(row.forked_at)}" if row.forked_at is not None else ""
        lines.append(
            f"{prefix}{branch}{row.id}  {clip(visible(describe(row)), 50)}  "
            f"({queries_of(row)}q, {row.status}{fork}){star}"
        )
        kids = [kid for kid in children.get(row.id, []) if kid.id not in seen]
        inner = prefix + ("" if depth == 0 else ("   " if last else "│  "))
        for i, kid in reversed(list(enumerate(kids))):
            stack.append((kid, inner, i == len(kids) - 1, depth + 1))
    return visible("\n".join(lines))


def _unnumbered(row: SessionRow) -> str:
    """What stands for the number of a session that has none: ``*`` live (being
    written), ``-`` continued by a later session (its handle or id reaches it)."""
    return "  *" if row.live else "  -"
