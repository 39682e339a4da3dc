"""The session file format: frozen values, one renderer, one parser. No I/O.

A session file is YAML front matter, a ``# {Agent} Conversation`` heading, and
one *frame* per message (docs/format.md has the full grammar)::

    <!-- chatloop:KEY ROLE {json meta} -->
    ...readable markdown...
    <!-- /chatloop:KEY CRC32 -->

``KEY`` is eight random base32 characters chosen so that they occur nowhere in
the message's content, so no content can end a frame early or forge one: the
parser finds a frame's end by searching for ``/chatloop:KEY``. The CRC covers
the open line and the body, so damage (or a hand edit) is reported, never
silently accepted. Anything outside frames (the heading, a person's notes)
is decoration and is ignored by the parser; the store never rewrites it.

``parse_markdown(render_markdown(s)).session == s`` for every valid session.
"""

from __future__ import annotations

import base64
import json
import os
import re
import zlib
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from chatloop.session_meta import (
    SessionMeta,
    front_matter_end,
    parse_front_matter,
    render_front_matter,
)
from chatloop.transcript_parts import (
    SUMMARY_END,
    SUMMARY_START,
    Decor,
    build_message,
    compact_json,
    display_name,
    join_parts,
    message_meta,
)

Role = Literal["user", "assistant", "tool", "summary"]
ROLES: tuple[str, ...] = ("user", "assistant", "tool", "summary")
STATUSES: tuple[str, ...] = ("open", "closed", "interrupted")
KEY_RE = re.compile(r"^[a-z2-7]{8}$")

# fmt: off
__all__ = [
    "ROLES", "STATUSES", "SUMMARY_END", "SUMMARY_START", "Message", "ParseResult", "Problem",
    "Session", "SessionMeta", "Thinking", "ToolCall", "ToolResult", "Usage", "front_matter_end",
    "last_summary_frame", "new_key", "parse_markdown", "render_frame", "render_front_matter",
    "render_header", "render_markdown",
]
# fmt: on


# ----------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for. ``arguments`` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str = "{}"


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned for the call with ``call_id``."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass(frozen=True)
class Thinking:
    """Reasoning text the model streamed separately, with an optional signature."""

    text: str
    signature: str | None = None


@dataclass(frozen=True)
class Usage:
    """Token counts of one call; ``estimated`` when the server did not report them."""

    input: int = 0
    output: int = 0
    estimated: bool = False

    @property
    def total(self) -> int:
        return self.input + self.output


@dataclass(frozen=True)
class Message:
    """One framed record of a session.

    ``role`` is ``user``, ``assistant``, ``tool`` (results of tool calls) or
    ``summary`` (a progressive summary block). ``restore`` marks the
    restoration prompt (user) and its acknowledgment (assistant), which are
    overhead, not queries. ``key`` is the frame key: use ``Message.create`` or
    ``new_key`` so it does not occur in the content.
    """

    role: Role
    at: datetime
    key: str
    text: str = ""
    thinking: tuple[Thinking, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    model: str | None = None
    stop_reason: str | None = None
    usage: Usage | None = None
    duration: float | None = None
    interrupted: bool = False
    restore: bool = False
    fallback: bool = False

    @classmethod
    def create(cls, role: Role, at: datetime, **fields: Any) -> Message:
        """Build a message with a fresh key that its content cannot contain."""
        draft = cls(role=role, at=at, key="aaaaaaaa", **fields)
        return replace(draft, key=new_key(_content_of(draft)))

    @property
    def is_query(self) -> bool:
        """True for a message the person typed (not a restoration prompt)."""
        return self.role == "user" and not self.restore


@dataclass(frozen=True)
class Session:
    """A whole session: front matter plus its messages in file order."""

    meta: SessionMeta
    messages: tuple[Message, ...] = ()

    @property
    def summary(self) -> Message | None:
        """The last summary block, which is the one that counts."""
        for message in reversed(self.messages):
            if message.role == "summary":
                return message
        return None

    @property
    def query_count(self) -> int:
        return sum(1 for m in self.messages if m.is_query)


@dataclass(frozen=True)
class Problem:
    """Something the parser noticed. ``offset`` is a byte offset into the file."""

    kind: str
    offset: int
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} at byte {self.offset}: {self.detail}"


@dataclass(frozen=True)
class ParseResult:
    """The session read from a file, what was wrong, and where the valid part ends.

    ``end`` is ``len(data)``, or, when the last record is incomplete, the
    offset where that record's frame starts: everything before it is kept,
    everything from it on is the torn tail (see the ``torn_tail`` problem).
    """

    session: Session
    problems: tuple[Problem, ...]
    end: int
    legacy: bool = False

    @property
    def torn(self) -> bool:
        return any(p.kind == "torn_tail" for p in self.problems)


def new_key(avoid: str = "") -> str:
    """A random frame key (8 base32 characters) that does not occur in ``avoid``."""
    while True:
        key = base64.b32encode(os.urandom(5)).decode("ascii").lower()
        if key not in avoid:
            return key


# ----------------------------------------------------------------------------- render


def render_markdown(session: Session) -> bytes:
    """Render a whole session file. Equal to header + every frame, in order."""
    parts = [render_header(session.meta)]
    query = 0
    for message in session.messages:
        query += message.is_query
        parts.append(render_frame(message, agent=session.meta.agent, query=query))
    return b"".join(parts)


def render_header(meta: SessionMeta) -> bytes:
    """Front matter plus the heading: everything before the first frame."""
    heading = f"\n# {display_name(meta.agent) or 'Chat'} Conversation\n"
    return render_front_matter(meta) + heading.encode()


def render_frame(message: Message, *, agent: str, query: int) -> bytes:
    """One record as appended to the file: a blank line, then the frame.

    ``query`` is the number of queries up to and including this message; it
    only feeds the ``## Query N`` heading, which the parser does not trust.
    """
    if not KEY_RE.match(message.key):
        raise ValueError(f"invalid frame key {message.key!r}")
    if message.key in _content_of(message):
        raise ValueError("frame key occurs in the message content; use Message.create")
    decor = Decor(agent=agent, query=query)
    body = join_parts(message, decor)
    open_line = (
        f"<!-- chatloop:{message.key} {message.role} {compact_json(message_meta(message))} -->"
    )
    head = f"{open_line}\n{body}".encode()
    crc = zlib.crc32(head)
    return b"\n" + head + f"\n<!-- /chatloop:{message.key} {crc:08x} -->\n".encode()


def _content_of(message: Message) -> str:
    """Every string a frame carries, for choosing a key that avoids them."""
    bits: list[str] = [message.text, message.model or "", message.stop_reason or ""]
    for t in message.thinking:
        bits += [t.text, t.signature or ""]
    for c in message.tool_calls:
        bits += [c.id, c.name, c.arguments]
    for r in message.tool_results:
        bits += [r.call_id, r.name, r.content]
    return "\x00".join(bits)


# ----------------------------------------------------------------------------- parse

_OPEN_RE = re.compile(
    rb"<!-- chatloop:([a-z2-7]{8}) (user|assistant|tool|summary) (\{[^\n]*\}) -->\n"
)
_FRAME_END = b"<!-- /chatloop:"
_FRAME_START = b"<!-- chatloop:"  # found anywhere between frames, not only at line start


def parse_markdown(data: bytes) -> ParseResult:
    """Read a session file. Never raises for damage: it is listed in ``problems``.

    Files in the legacy bold-key format (no front matter) are read by
    ``chatloop.legacy`` into the same values, marked ``legacy=True``.
    """
    data_for_legacy = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    if not data.startswith(b"---") and _looks_legacy(data_for_legacy):
        from chatloop import legacy

        return legacy.parse_legacy(data_for_legacy)

    problems: list[Problem] = []
    meta_notes: list[tuple[str, str]] = []
    meta, body_start = parse_front_matter(data, meta_notes)
    problems.extend(Problem(kind, 0, detail) for kind, detail in meta_notes)
    messages: list[Message] = []
    pos = body_start
    while True:
        start = data.find(_FRAME_START, pos)
        if data.find(_FRAME_END, pos, len(data) if start < 0 else start) >= 0:
            detail = "a frame whose start marker is unreadable; skipped"
            problems.append(Problem("damaged", pos, detail))
        if start < 0:
            break
        outcome = _read_frame(data, start, meta.agent)
        if isinstance(outcome, _Torn):
            problems.append(Problem("torn_tail", start, "the last record is incomplete"))
            return _result(meta, messages, problems, start)
        if outcome.problem:
            problems.append(Problem(outcome.problem[0], start, outcome.problem[1]))
        if outcome.message is not None:
            messages.append(outcome.message)
        pos = outcome.next
    return _result(meta, messages, problems, len(data))


_SUMMARY_OPEN_RE = re.compile(rb"<!-- chatloop:[a-z2-7]{8} summary \{")


def last_summary_frame(tail: bytes, agent: str) -> tuple[Message | None, Problem | None, bool]:
    """The last summary frame in ``tail`` (any slice of a session file's body).

    Returns the message (None if there is none or it is unreadable), the
    problem found with it, and whether another frame follows it (then the
    summary does not cover the whole session). Used to resume from a large
    file without parsing all of it.
    """
    starts = [m.start() for m in _SUMMARY_OPEN_RE.finditer(tail)]
    if not starts:
        return None, None, False
    outcome = _read_frame(tail, starts[-1], agent)
    if isinstance(outcome, _Torn):
        return None, Problem("torn_tail", starts[-1], "the summary record is incomplete"), False
    found = outcome.problem
    problem = Problem(found[0], starts[-1], found[1]) if found else None
    later = tail.find(_FRAME_START, outcome.next) >= 0
    return outcome.message, problem, later


@dataclass(frozen=True)
class _Torn:
    """The frame at this offset is the incomplete last record."""


@dataclass(frozen=True)
class _Read:
    """One frame's outcome: a message (or None if skipped), at most one problem, and
    where to go on scanning."""

    message: Message | None
    problem: tuple[str, str] | None
    next: int


def _skip(data: bytes, pos: int) -> int:
    """Where to resume after a damaged frame: past its (orphaned) end marker if one
    comes before the next frame start, else ``pos``."""
    end = data.find(_FRAME_END, pos)
    following = data.find(_FRAME_START, pos)
    if end < 0 or 0 <= following < end:
        return pos
    line_end = data.find(b"\n", end)
    return len(data) if line_end < 0 else line_end + 1


def _read_frame(data: bytes, start: int, agent: str) -> _Read | _Torn:
    """Read the frame whose open marker is at ``start``; never raises for damage."""
    match = _OPEN_RE.match(data, start)
    if match is None:
        if data.find(b"\n", start) < 0:
            return _Torn()
        return _Read(None, ("damaged", "unreadable frame header; skipped"), _skip(data, start + 1))
    key = match.group(1)
    body_from = match.end()
    close_at = data.find(b"\n<!-- /chatloop:" + key + b" ", body_from)
    close_end = data.find(b"\n", close_at + 1) if close_at >= 0 else -1
    if close_end < 0:
        orphan_end = data.find(_FRAME_END, body_from)
        complete_orphan = orphan_end >= 0 and data.find(b"\n", orphan_end) >= 0
        if data.find(_FRAME_START, body_from) < 0 and not complete_orphan:
            return _Torn()
        return _Read(None, ("damaged", "frame has no end marker; skipped"), _skip(data, body_from))
    notes: list[str] = []
    body_bytes = data[body_from:close_at]
    try:
        body = body_bytes.decode("utf-8")
    except UnicodeDecodeError:
        body = body_bytes.decode("utf-8", errors="replace")
        notes.append("invalid UTF-8 replaced")
    try:
        info = json.loads(match.group(3))
        if not isinstance(info, dict):
            raise ValueError("frame metadata is not an object")
        message = build_message(match.group(2).decode(), key.decode(), info, body, agent, notes)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return _Read(None, ("damaged", f"unreadable frame ({exc}); skipped"), close_end + 1)
    crc = re.fullmatch(
        rb"<!-- /chatloop:[a-z2-7]{8} ([0-9a-f]{8}) -->", data[close_at + 1 : close_end]
    )
    if crc is None or int(crc.group(1), 16) != zlib.crc32(data[start:close_at]):
        detail = "; ".join(["checksum mismatch: edited by hand or damaged", *notes])
        return _Read(message, ("checksum", detail + "; content kept as found"), close_end + 1)
    return _Read(message, ("decoration", "; ".join(notes)) if notes else None, close_end + 1)


def _result(
    meta: SessionMeta, messages: list[Message], problems: list[Problem], end: int
) -> ParseResult:
    return ParseResult(Session(meta, tuple(messages)), tuple(problems), end)


def _looks_legacy(data: bytes) -> bool:
    head = data[:4096]
    return head.startswith(b"# ") and b"**Session ID:**" in head
