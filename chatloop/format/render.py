"""Writing a session as text: the whole file, its header, and one frame as appended.

Contract: ``render_markdown(session)`` is what ``chatloop.format.read.parse_markdown``
reads back as the same session, in both formats, byte for byte again when re-rendered.
A frame's key must occur nowhere in its content (``Message.create`` and ``new_key``
see to it; ``render_frame`` refuses otherwise), so the frame ends only at its own close
marker. Decoration (headings, speaker labels, format 1's footer) is derived from the
metadata and is never trusted by a reader. No I/O: bytes are returned.
"""

from __future__ import annotations

import re
import zlib
from datetime import datetime

from chatloop.format.body import compact_json, display_name, render_body
from chatloop.format.frames import close_line, open_line
from chatloop.format.front_matter import render_front_matter
from chatloop.format.values import Message, Session, SessionMeta, content_of, is_key

__all__ = [
    "MESSAGE_FLAGS",
    "UNFINISHED",
    "close_unfinished",
    "frame_info",
    "render_frame",
    "render_header",
    "render_markdown",
    "render_unfinished",
]

# The flags an open line carries (``"flag":true``) when set; ``read`` reads them back.
MESSAGE_FLAGS = ("interrupted", "restore", "fallback", "copy", "unsent", "recalled")


def render_markdown(session: Session) -> bytes:
    """Render a whole session file: header + every frame, in order."""
    parts = [render_header(session.meta)]
    query = 0
    for message in session.messages:
        query += message.is_query
        parts.append(render_frame(message, session.meta, query))
    return b"".join(parts)


def render_header(meta: SessionMeta) -> bytes:
    """Everything before the first frame: the front matter, and in format 1 a
    ``# {Agent} Conversation`` heading (format 2 leaves it out: the front matter
    already names the agent, and each reply is headed by its name)."""
    if meta.format >= 2:
        return render_front_matter(meta)
    heading = f"\n# {display_name(meta.agent) or 'Chat'} Conversation\n"
    return render_front_matter(meta) + heading.encode()


def render_frame(message: Message, meta: SessionMeta, query: int) -> bytes:
    """One record as appended to the file: a blank line, then the frame, in the
    meta's format. ``query`` (queries so far, this one included) only feeds the
    ``## Query N`` heading, which no reader trusts."""
    if not is_key(message.key):
        raise ValueError(f"invalid frame key {message.key!r}")
    if message.key in content_of(message):
        raise ValueError("frame key occurs in the message content; use Message.create")
    version = meta.format
    body = render_body(message, meta.agent, query, version)
    head = f"{open_line(version, message.key, message.role, frame_info(message, meta))}\n{body}"
    data = head.encode()
    return b"\n" + data + b"\n" + close_line(version, message.key, zlib.crc32(data)) + b"\n"


# The stop reason of a reply that was still streaming when chatloop stopped (a crash,
# a kill, a power cut): its unfinished frame is on disk, and recovery closes it.
UNFINISHED = "unfinished"


def render_unfinished(message: Message, meta: SessionMeta, query: int) -> bytes:
    """``render_frame(message, ...)`` without its close marker: the record of a reply
    still streaming, as it stands on disk until the reply ends. The same message with
    more text renders to bytes that begin with these (text is written as is), so the
    writer appends only what is new. ``close_unfinished`` of what a crash left of them
    (any prefix past the open line and heading) is a complete frame again."""
    record = render_frame(message, meta, query)
    return record[: record.rindex(b"\n", 0, len(record) - 1)]


_UNFINISHED_HEAD = re.compile(rb"<!-- ([a-z2-7]{8}) assistant [^\n]*\n")


def close_unfinished(tail: bytes, version: int) -> bytes | None:
    """The complete frame for ``tail`` (what a crash left of a ``render_unfinished``
    record, from its open marker on: the blank line before it stays where it is), or
    None when ``tail`` is not one: not an assistant frame's open line, or not UTF-8
    once a character the crash cut in half is dropped. The caller still reads the
    result back before trusting it."""
    if version < 2 or _UNFINISHED_HEAD.match(tail) is None:
        return None
    for cut in range(4):  # a kill mid-write can split one character, never more
        head = tail[: len(tail) - cut]
        try:
            head.decode("utf-8")
        except UnicodeDecodeError:
            continue
        key = head[5:13].decode("ascii")
        return head + b"\n" + close_line(version, key, zlib.crc32(head)) + b"\n"
    return None


def frame_info(m: Message, meta: SessionMeta) -> str:
    """The open line's metadata.

    Format 1: one JSON object. Format 2: the time (``HH:MM:SS`` on the session's
    first day), the duration (``4.1s``) and the token usage (``58/121``,
    ``~58/121`` when estimated) when there are any, then a JSON object only for
    what is not the default: ``model`` when it differs from the front matter's,
    ``stop`` when not the normal ``stop`` (assistant), and the flags.
    """
    info: dict[str, object] = {}
    if meta.format == 1:
        info["at"] = m.at.isoformat()
        info.update(
            {
                k: v
                for k, v in (("model", m.model), ("stop", m.stop_reason), ("secs", m.duration))
                if v is not None
            }
        )
        if m.usage is not None:
            usage: dict[str, object] = {"in": m.usage.input, "out": m.usage.output}
            if m.usage.estimated:
                usage["est"] = True
            info["usage"] = usage
        for flag in MESSAGE_FLAGS:
            if getattr(m, flag):
                info[flag] = True
        return compact_json(info)
    words = [_short_time(m.at, meta.created)]
    if m.duration is not None:
        words.append(f"{m.duration!r}s")
    if m.usage is not None:
        u = m.usage
        words.append(f"{'~' if u.estimated else ''}{u.input}/{u.output}")
    if m.role == "assistant":
        if m.model != (meta.model or None):
            info["model"] = m.model
        if m.stop_reason != "stop":
            info["stop"] = m.stop_reason
    else:
        info.update(
            {k: v for k, v in (("model", m.model), ("stop", m.stop_reason)) if v is not None}
        )
    for flag in MESSAGE_FLAGS:
        if getattr(m, flag):
            info[flag] = True
    if info:
        words.append(compact_json(info))
    return " ".join(words)


def _short_time(at: datetime, created: datetime) -> str:
    """Format 2 writes a message's time as ``HH:MM:SS`` when it falls on the
    session's first day in the same UTC offset, to the second (the date and
    offset are in the front matter's ``created``); otherwise in full ISO 8601."""
    offset = at.utcoffset()
    same_day = at.date() == created.date() and at.microsecond == 0
    if offset is not None and offset == created.utcoffset() and same_day:
        return at.strftime("%H:%M:%S")
    return at.isoformat()
