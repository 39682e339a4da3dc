"""Sessions, search hits and transcripts as JSON (``--json`` and ``export --format
json``), apart from the text forms in ``chatloop.ui.listing`` so that a listing
printed as text never loads ``json``."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from chatloop.store.rows import SearchHit, SessionRow

if TYPE_CHECKING:
    from chatloop.format import Facts, Message, Plain, SessionMeta, Usage

__all__ = [
    "hits_json", "message_dict", "message_json", "plain_json", "sessions_json",
    "write_sessions_json",
]  # fmt: skip


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
    """``json.dumps(message_dict(m), ensure_ascii=False)``, the same text: a message
    whose values have the types ``Message`` declares is written directly, any other
    through ``json``. Export writes one per message, and building the dict to encode
    it was half its cost."""
    usage, duration = m.usage, m.duration
    plain = (type(duration) is float and math.isfinite(duration)) or duration is None
    plain = plain and type(m.interrupted) is type(m.restore) is type(m.fallback) is bool
    if usage is not None:
        plain = plain and type(usage.input) is type(usage.output) is int
        plain = plain and type(usage.estimated) is bool
    try:
        parts = None
        if plain:
            parts = _parts(m) if m.thinking or m.tool_calls or m.tool_results else _NO_PARTS
        if parts is not None:
            model, stop = m.model, m.stop_reason
            return _written(_JSON_TEXT(m.role), m.at.isoformat(), _JSON_TEXT(m.key), m.text,
                            "null" if model is None else _JSON_TEXT(model),
                            "null" if stop is None else _JSON_TEXT(stop), usage, duration,
                            m.interrupted, m.restore, m.fallback, parts)  # fmt: skip
    except TypeError:  # not a string where one belongs
        pass
    return _ENCODE(message_dict(m))  # json writes any other message, or says why not


_NO_PARTS = '"thinking": [], "tool_calls": [], "tool_results": []'


def _parts(m: Message) -> str | None:
    """The message's thinking, tool calls and tool results as ``message_dict``'s JSON
    writes them; None for a flag that is not a bool, and TypeError for a string field
    that holds something else (json then writes the message, or says why not)."""
    text = _JSON_TEXT
    thinking = calls = results = ""  # (most messages have one kind of part, if any)
    if m.thinking:
        thinking = ", ".join(
            f'{{"text": {text(t.text)}, "signature": '
            f'{"null" if t.signature is None else text(t.signature)}}}'
            for t in m.thinking
        )  # fmt: skip
    if m.tool_calls:
        calls = ", ".join(
            f'{{"id": {text(c.id)}, "name": {text(c.name)}, "arguments": {text(c.arguments)}}}'
            for c in m.tool_calls
        )  # fmt: skip
    if m.tool_results:
        if not all(type(r.is_error) is bool for r in m.tool_results):
            return None
        results = ", ".join(
            f'{{"call_id": {text(r.call_id)}, "name": {text(r.name)}, '
            f'"content": {text(r.content)}, "is_error": {_JSON_FLAG[r.is_error]}}}'
            for r in m.tool_results
        )  # fmt: skip
    return f'"thinking": [{thinking}], "tool_calls": [{calls}], "tool_results": [{results}]'


def plain_json(p: Plain, meta: SessionMeta) -> str:
    """``message_json`` of the message of ``p``'s frame (``meta``: its session's), the
    same text, without building the message (see ``chatloop.format.plain_facts``)."""
    from chatloop.format import plain_facts

    return _plain_json(p, meta, plain_facts)


def _plain_json(
    p: Plain, meta: SessionMeta, plain_facts: Callable[[Plain, SessionMeta], Facts]
) -> str:
    """``plain_json``, given ``chatloop.format.plain_facts`` (export writes one per
    frame: importing it each time was a tenth of the cost)."""
    at, model, stop, usage, duration = plain_facts(p, meta)
    said = _MODELS.get(model)  # (the same one or two on every frame: encoded once)
    if said is None:
        if len(_MODELS) >= 64:
            _MODELS.clear()
        said = _MODELS[model] = "null" if model is None else _JSON_TEXT(model)
    return (  # ``_written``'s text with no parts and every flag false, spelt out
        f'{{"role": {_FIXED[p.role]}, "at": "{at}", "key": "{p.key}", '
        f'"text": {_JSON_TEXT(p.text)}, {_NO_PARTS}, "model": {said}, '
        f'"stop_reason": {_FIXED[stop]}, "usage": {_usage_json(usage)}, '
        f'"duration": {"null" if duration is None else repr(duration)}, '
        '"interrupted": false, "restore": false, "fallback": false}'
    )


_MODELS: dict[str | None, str] = {}
# What needs no escaping: a role, a stop of "stop", a frame key ([a-z2-7]{8}, as is).
_FIXED = {"user": '"user"', "assistant": '"assistant"', "stop": '"stop"', None: "null"}


def _written(
    role: str, at: str, key: str, text: str, model: str, stop_reason: str,
    usage: Usage | None, duration: float | None, interrupted: bool, restore: bool,
    fallback: bool, parts: str,
) -> str:  # fmt: skip
    """A message as JSON; ``role``, ``key``, ``model``, ``stop_reason`` and ``parts``
    (its thinking, tool calls and results) come as JSON already, ``text`` as it is."""
    return (
        f'{{"role": {role}, "at": "{at}", "key": {key}, "text": {_JSON_TEXT(text)}, '
        f'{parts}, "model": {model}, '
        f'"stop_reason": {stop_reason}, "usage": {_usage_json(usage)}, '
        f'"duration": {"null" if duration is None else repr(duration)}, '
        f'"interrupted": {_JSON_FLAG[interrupted]}, "restore": {_JSON_FLAG[restore]}, '
        f'"fallback": {_JSON_FLAG[fallback]}}}'
    )


def _usage_json(usage: Usage | None) -> str:
    return "null" if usage is None else (
        f'{{"input": {usage.input}, "output": {usage.output}, '
        f'"estimated": {_JSON_FLAG[usage.estimated]}}}'
    )  # fmt: skip


_ENCODE = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode


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
        write(piece)

    try:
        for i, (meta, messages) in enumerate(sessions):
            head = json.dumps(_plain(asdict(meta)), ensure_ascii=False)
            batch.append(f'{"," if i else ""}\n{{"meta": {head}, "messages": [')
            size += len(head)
            separator = "\n  "
            for m in messages:
                if size >= _BATCH_CHARS:
                    flush()
                text = (_plain_json(m, meta, plain_facts) if isinstance(m, Plain)
                        else message_json(m))  # fmt: skip
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
