"""Sessions, search hits and transcripts as JSON (``--json`` and ``export --format
json``), apart from the text forms in ``chatloop.ui.listing`` so that a listing
printed as text never loads ``json``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from chatloop.store.rows import SearchHit, SessionRow

if TYPE_CHECKING:  # (imported where used: a listing as JSON never loads the format)
    from chatloop.format import Facts, Message, Plain, SessionMeta, Usage

__all__ = [
    "escaped",
    "hits_json",
    "message_dict",
    "message_json",
    "plain_json",
    "sessions_json",
    "write_sessions_json",
]


# json escapes C0 controls; with non-ASCII kept (ensure_ascii=False) it leaves DEL, the
# C1 controls (CSI is one) and the bidirectional overrides raw, which a terminal that
# shows the JSON would act on. Each becomes its \uXXXX escape: they occur only inside
# strings (JSON's own syntax is ASCII), so the text is the same JSON, read back the same.
_CONTROLS = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escaped(text: str) -> str:
    """JSON ``text`` with every control character json leaves raw as ``\\uXXXX``."""
    if text.isascii():
        return text.replace("\x7f", "\\u007f")
    return _CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def sessions_json(rows: list[SessionRow]) -> str:
    return escaped(json.dumps([r._asdict() for r in rows], indent=2, ensure_ascii=False))


def hits_json(hits: list[SearchHit]) -> str:
    data = [
        {
            "number": h.session.number,
            "handle": h.session.handle,
            "id": h.session.id,
            "path": h.session.path,
            "role": h.role,
            "snippet": h.snippet,
        }
        for h in hits
    ]
    return escaped(json.dumps(data, indent=2, ensure_ascii=False))


def message_dict(m: Message) -> dict[str, object]:
    """A message as plain JSON values (the shape ``export --format json`` writes)."""
    return {
        "role": m.role,
        "at": m.at.isoformat(),
        "key": m.key,
        "text": m.text,
        "thinking": [{"text": t.text, "signature": t.signature} for t in m.thinking],
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls
        ],
        "tool_results": [
            {
                "call_id": r.call_id,
                "name": r.name,
                "content": r.content,
                "is_error": r.is_error,
                "approved": r.approved,
            }
            for r in m.tool_results
        ],
        "model": m.model,
        "stop_reason": m.stop_reason,
        "usage": _usage_dict(m.usage),
        "duration": m.duration,
        "interrupted": m.interrupted,
        "restore": m.restore,
        "fallback": m.fallback,
        "copy": m.copy,
        "unsent": m.unsent,
        "recalled": m.recalled,
    }


# One encoder for every message (``json.dumps`` with an option builds one per call: a
# fifth of the time export spends writing JSON); it holds no state between calls.
_ENCODE = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode


def message_json(m: Message) -> str:
    """``message_dict(m)`` as JSON on one line, non-ASCII kept (control characters
    escaped: ``escaped``)."""
    return escaped(_ENCODE(message_dict(m)))


def plain_json(p: Plain, meta: SessionMeta) -> str:
    """``message_json`` of the message of ``p``'s frame (``meta``: its session's), the
    same text, without building the message (see ``chatloop.format.plain_facts``)."""
    from chatloop.format import plain_facts

    return escaped(_ENCODE(_plain_dict(p, plain_facts(p, meta))))


def _plain_dict(p: Plain, facts: Facts) -> dict[str, object]:
    """``message_dict`` of the message of ``p``'s frame, whose ``facts`` are given."""
    at, model, stop, usage, duration = facts
    return {
        "role": p.role,
        "at": at,
        "key": p.key,
        "text": p.text,
        "thinking": [],
        "tool_calls": [],
        "tool_results": [],
        "model": model,
        "stop_reason": stop,
        "usage": _usage_dict(usage),
        "duration": duration,
        "interrupted": False,
        "restore": False,
        "fallback": False,
        "copy": False,
        "unsent": False,
        "recalled": False,
    }


def _usage_dict(usage: Usage | None) -> dict[str, object] | None:
    if usage is None:
        return None
    return {"input": usage.input, "output": usage.output, "estimated": usage.estimated}


def write_sessions_json(
    sessions: Iterable[tuple[SessionMeta, Iterable[Message | Plain]]],
    write: Callable[[str], object],
) -> None:
    """Sessions as one JSON array, ``[{"meta": {...}, "messages": [...]}, ...]``, written
    in pieces of about 64 kB (a 200 MB transcript never sits in memory as one string).
    What was built is written when reading stops with an error; a piece whose writing
    failed is not written again. A ``Plain`` is written as its message would be
    (``Document.views()`` gives them)."""
    from dataclasses import asdict  # (here: a listing as JSON never loads it)

    from chatloop.format import Plain, plain_facts

    batch: list[str] = ["["]
    size = 0

    def flush() -> None:
        nonlocal size
        piece = "".join(batch)
        batch.clear()  # (first: a write that fails is not tried again)
        size = 0
        write(escaped(piece))

    try:
        for i, (meta, messages) in enumerate(sessions):
            head = json.dumps(_plain(asdict(meta)), ensure_ascii=False)
            batch.append(f'{"," if i else ""}\n{{"meta": {head}, "messages": [')
            size += len(head)
            separator = "\n  "
            for m in messages:
                if size >= _BATCH_CHARS:
                    flush()
                data = (
                    _plain_dict(m, plain_facts(m, meta))
                    if isinstance(m, Plain)
                    else message_dict(m)
                )
                text = _ENCODE(data)
                batch.append(separator)
                batch.append(text)
                separator = ",\n  "
                size += len(text)
            batch.append("\n]}")
            if size >= _BATCH_CHARS:
                flush()
        batch.append("\n]\n")
    finally:
        if batch:
            flush()


_BATCH_CHARS = 1 << 16


def _plain(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
