"""Sessions, search hits and transcripts as JSON (``--json`` and ``export --format
json``), apart from the text forms in ``chatloop.ui.listing`` so that a listing
printed as text never loads ``json``."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from chatloop.store.index import SearchHit, SessionRow

if TYPE_CHECKING:
    from chatloop.format import Message, SessionMeta

__all__ = ["hits_json", "message_dict", "message_json", "sessions_json", "write_sessions_json"]


def sessions_json(rows: list[SessionRow]) -> str:
    return json.dumps([r._asdict() for r in rows], indent=2, ensure_ascii=False)


def hits_json(hits: list[SearchHit]) -> str:
    data = [
        {"number": h.session.number, "handle": h.session.handle, "id": h.session.id,
         "path": h.session.path,
         "role": h.role, "snippet": h.snippet}
        for h in hits
    ]  # fmt: skip
    return json.dumps(data, indent=2, ensure_ascii=False)


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
    from dataclasses import asdict  # (here: a listing as JSON never loads it)

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
