"""Plain-text and JSON views of sessions for the management commands.

Plain text on purpose: ``chatloop sessions`` must start and finish fast, and
its output is meant for pipes and greps as much as for eyes.
"""

from __future__ import annotations

import json
import math
import re
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


_UNSAFE = re.compile("[" + "".join(re.escape(chr(code)) for code in _VISIBLE) + "]")
# The same table as a list indexed by code point (past its end, a character is kept):
# str.translate looks a list up faster than a dict.
_TABLE: list[int | str] = list(range(max(_VISIBLE) + 1))
for _code, _shown in _VISIBLE.items():
    _TABLE[_code] = _shown


def visible(text: str) -> str:
    """``text`` safe to print to a terminal: control characters (ESC, BEL, OSC, C1,
    bidirectional overrides) are shown as visible symbols, never acted on."""
    if text.isascii() or _UNSAFE.search(text) is not None:
        return text.translate(_TABLE)  # (translate has a fast path for ASCII text)
    return text  # other text is looked through once, in C, not char by char


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
    messages stream in: who said what, tools, summary, and what was interrupted.

    Every piece of text from the file goes through ``visible``, field by field (the
    frame around it is ours): a message's text on its own is often ASCII, which
    ``visible`` checks fastest, where the chunk with our rules and arrows is not."""
    v = visible
    yield v(f"{meta.title or meta.agent or 'Session'}  ({meta.id}, {meta.status})")
    if meta.parent_id:
        yield v(f"continues {meta.parent_id}")
    speaker = v(meta.agent or "Assistant")
    query = 0
    for m in messages:
        out: list[str] = []
        cut = "  (interrupted)" if m.interrupted else ""
        role = m.role
        if role == "user":
            query += not m.restore
            label = "Session restored" if m.restore else f"Query {query}"
            clock = m.at.isoformat()[11:19]  # HH:MM:SS (strftime costs three times this)
            out += ["", f"── {label} ({clock}) ──{cut}", f"You: {v(m.text)}"]
        elif role == "assistant":
            out += [f"  [thinking] {v(t.text)}" for t in m.thinking]
            if m.text or m.thinking or not m.interrupted:
                out.append(f"{speaker}: {v(m.text)}{cut}")
            else:  # nothing arrived: say why the exchange has no reply
                why = NO_REPLY.get(m.stop_reason or "", "(no reply: interrupted)")
                out.append(f"{speaker}: {why}")
            out += [f"  → {v(c.name)}({v(c.arguments)})" for c in m.tool_calls]
        elif role == "tool":
            for r in m.tool_results:
                text = r.content.strip()
                first = text[:101].splitlines()[0][:100] if text else ""  # the first line
                out.append(f"  ← {v(r.name)}{' (error)' if r.is_error else ''}: {v(first)}")
        elif role == "summary":
            out += ["", "── Summary ──", v(m.text)]
        if out:
            yield "\n".join(out)


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


_JSON_TEXT = json.encoder.encode_basestring  # json.dumps's own string escaper (non-ASCII kept)
_JSON_FLAG = {False: "false", True: "true"}


def message_json(m: Message) -> str:
    """``json.dumps(message_dict(m), ensure_ascii=False)``, the same text: a message with
    text only (most of them) is written directly, the rest through ``json``. Export
    writes one per message, and building the dict to encode it was half its cost."""
    usage, duration = m.usage, m.duration
    plain = (type(duration) is float and math.isfinite(duration)) or duration is None
    plain = plain and type(m.interrupted) is type(m.restore) is type(m.fallback) is bool
    if usage is not None:
        plain = plain and type(usage.input) is type(usage.output) is int
        plain = plain and type(usage.estimated) is bool
    if m.thinking or m.tool_calls or m.tool_results or not plain:
        return _ENCODE(message_dict(m))
    used = "null" if usage is None else (
        f'{{"input": {usage.input}, "output": {usage.output}, '
        f'"estimated": {_JSON_FLAG[usage.estimated]}}}'
    )  # fmt: skip
    return (
        f'{{"role": {_JSON_TEXT(m.role)}, "at": "{m.at.isoformat()}", "key": {_JSON_TEXT(m.key)}, '
        f'"text": {_JSON_TEXT(m.text)}, "thinking": [], "tool_calls": [], "tool_results": [], '
        f'"model": {"null" if m.model is None else _JSON_TEXT(m.model)}, '
        f'"stop_reason": {"null" if m.stop_reason is None else _JSON_TEXT(m.stop_reason)}, '
        f'"usage": {used}, "duration": {"null" if duration is None else repr(duration)}, '
        f'"interrupted": {_JSON_FLAG[m.interrupted]}, "restore": {_JSON_FLAG[m.restore]}, '
        f'"fallback": {_JSON_FLAG[m.fallback]}}}'
    )


_ENCODE = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode


def write_sessions_json(
    sessions: Iterable[tuple[SessionMeta, Iterable[Message]]], write: Callable[[str], object]
) -> None:
    """Sessions as one JSON array, ``[{"meta": {...}, "messages": [...]}, ...]``, written
    a message at a time (a 200 MB transcript never sits in memory as one string)."""
    write("[")
    for i, (meta, messages) in enumerate(sessions):
        head = json.dumps(_plain(asdict(meta)), ensure_ascii=False)
        write(f'{"," if i else ""}\n{{"meta": {head}, "messages": [')
        separator = "\n  "
        for message in messages:
            write(separator + message_json(message))
            separator = ",\n  "
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
