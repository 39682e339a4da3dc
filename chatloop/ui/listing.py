"""Plain-text and JSON views of sessions for the management commands.

Plain text on purpose: ``chatloop sessions`` must start and finish fast, and
its output is meant for pipes and greps as much as for eyes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING

from chatloop.store.index import SearchHit, SessionRow

if TYPE_CHECKING:  # a listing from a fresh index imports no parser
    from chatloop.format import Message, Session, SessionMeta

# C0 controls (but tab and newline), DEL and C1 controls become visible pictures or
# escapes; bidirectional overrides too: none of them may reach a terminal as such.
_VISIBLE = {code: chr(0x2400 + code) for code in range(32) if chr(code) not in "\t\n"}
_VISIBLE[0x7F] = "\u2421"
_VISIBLE.update({code: f"\\x{code:02x}" for code in range(0x80, 0xA0)})
_VISIBLE.update({code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F),
                                                     *range(0x2066, 0x206A))})  # fmt: skip


def visible(text: str) -> str:
    """``text`` safe to print to a terminal: control characters (ESC, BEL, OSC, C1,
    bidirectional overrides) are shown as visible symbols, never acted on."""
    return text.translate(_VISIBLE)


def relative_time(when: str, now: datetime) -> str:
    """'just now', '5m ago', '3h ago', '2d ago', or the date for older moments."""
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


def describe(row: SessionRow) -> str:
    """What a person recognises a session by: its title, else its last question."""
    if row.title or row.preview:
        return row.title or row.preview
    return f"(continues {row.parent_id})" if row.parent_id else "(no messages)"


def sessions_text(rows: list[SessionRow], now: datetime, show_project: bool = False) -> str:
    """One line per session: number, handle, age, queries, agent, status, title."""
    if not rows:
        return "No sessions yet. Start one with `chatloop`."
    lines = []
    width = max([6, *(len(row.handle) for row in rows)])  # a long handle keeps the columns
    for row in rows:
        number = f"{row.number:>3}" if row.number is not None else "  *"
        status = "" if row.status == "closed" else f" [{row.status}]"
        if row.forked_at is not None:
            status += f" [fork after query {row.forked_at}]"
        if row.chain > 1:
            status += f" [chain of {row.chain}]"
        where = f"  ({row.project})" if show_project else ""
        lines.append(
            f"{number}  {row.handle or '-':<{width}}  {relative_time(row.updated, now):>9}  "
            f"{row.queries:>3}q  {row.agent[:16]:<16}  {describe(row)[:70]}{status}{where}"
        )
    return visible("\n".join(lines))


def sessions_json(rows: list[SessionRow]) -> str:
    return json.dumps([asdict(r) for r in rows], indent=2, ensure_ascii=False)


def hits_text(hits: list[SearchHit]) -> str:
    if not hits:
        return "No matches."
    return "\n".join(hit_line(hit) for hit in hits)


def hit_line(hit: SearchHit) -> str:
    """One search hit as a line: number (``*`` when live), handle (else id), role, snippet."""
    number = hit.session.number if hit.session.number is not None else "*"
    name = hit.session.handle or hit.session.id
    return visible(f"{number:>3}  {name:<6}  {hit.role:<9}  {hit.snippet}")


def hits_json(hits: list[SearchHit]) -> str:
    data = [
        {"number": h.session.number, "handle": h.session.handle, "id": h.session.id,
         "path": h.session.path,
         "role": h.role, "snippet": h.snippet}
        for h in hits
    ]  # fmt: skip
    return json.dumps(data, indent=2, ensure_ascii=False)


NO_REPLY = {
    "error": "(no reply: the request failed)",
    "cancelled": "(no reply: interrupted before any text arrived)",
}


def transcript_lines(meta: SessionMeta, messages: Iterable[Message]) -> Iterator[str]:
    """A session as a person reads it in a terminal, one chunk per message as the
    messages stream in: who said what, tools, summary, and what was interrupted."""
    yield visible(f"{meta.title or meta.agent or 'Session'}  ({meta.id}, {meta.status})")
    if meta.parent_id:
        yield visible(f"continues {meta.parent_id}")
    query = 0
    for m in messages:
        out: list[str] = []
        cut = "  (interrupted)" if m.interrupted else ""
        if m.role == "user":
            query += m.is_query
            label = "Session restored" if m.restore else f"Query {query}"
            out += ["", f"── {label} ({m.at:%H:%M:%S}) ──{cut}", f"You: {m.text}"]
        elif m.role == "assistant":
            out += [f"  [thinking] {t.text}" for t in m.thinking]
            if m.text or m.thinking or not m.interrupted:
                out.append(f"{meta.agent or 'Assistant'}: {m.text}{cut}")
            else:  # nothing arrived: say why the exchange has no reply
                why = NO_REPLY.get(m.stop_reason or "", "(no reply: interrupted)")
                out.append(f"{meta.agent or 'Assistant'}: {why}")
            out += [f"  → {c.name}({c.arguments})" for c in m.tool_calls]
        elif m.role == "tool":
            for r in m.tool_results:
                first = r.content.strip().splitlines()[0] if r.content.strip() else ""
                out.append(f"  ← {r.name}{' (error)' if r.is_error else ''}: {first[:100]}")
        elif m.role == "summary":
            out += ["", "── Summary ──", m.text]
        if out:
            yield visible("\n".join(out))


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
        fork = f", fork after query {row.forked_at}" if row.forked_at is not None else ""
        lines.append(f"{prefix}{branch}{row.id}  {describe(row)[:50]}  "
                     f"({row.queries}q, {row.status}{fork}){star}")  # fmt: skip
        kids = [kid for kid in children.get(row.id, []) if kid.id not in seen]
        inner = prefix + ("" if depth == 0 else ("   " if last else "│  "))
        for i, kid in reversed(list(enumerate(kids))):
            stack.append((kid, inner, i == len(kids) - 1, depth + 1))
    return visible("\n".join(lines))


def message_dict(m: Message) -> dict[str, object]:
    """A message as plain JSON values (the shape ``export --format json`` writes)."""
    return {
        "role": m.role, "at": m.at.isoformat(), "key": m.key, "text": m.text,
        "thinking": [{"text": t.text, "signature": t.signature} for t in m.thinking],
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                       for c in m.tool_calls],
        "tool_results": [{"call_id": r.call_id, "name": r.name, "content": r.content,
                          "is_error": r.is_error} for r in m.tool_results],
        "model": m.model, "stop_reason": m.stop_reason,
        "usage": None if m.usage is None else {"input": m.usage.input,
                                               "output": m.usage.output,
                                               "estimated": m.usage.estimated},
        "duration": m.duration, "interrupted": m.interrupted, "restore": m.restore,
        "fallback": m.fallback,
    }  # fmt: skip


def write_sessions_json(
    sessions: Iterable[tuple[SessionMeta, Iterable[Message]]], write: Callable[[str], object]
) -> None:
    """Sessions as one JSON array, ``[{"meta": {...}, "messages": [...]}, ...]``, written
    a message at a time (a 200 MB transcript never sits in memory as one string)."""
    write("[")
    for i, (meta, messages) in enumerate(sessions):
        head = json.dumps(_plain(asdict(meta)), ensure_ascii=False)
        write(f'{"," if i else ""}\n{{"meta": {head}, "messages": [')
        for j, message in enumerate(messages):
            text = json.dumps(message_dict(message), ensure_ascii=False)
            write(f"{',' if j else ''}\n  {text}")
        write("\n]}")
    write("\n]\n")


def _plain(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
