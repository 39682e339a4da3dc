"""Reading a session file: its head at once, then its frames as messages, streaming.

Layout (docs/format.md has the full grammar)::

    ---            front matter (YAML, chatloop.format.front_matter)
    ...
    ---
    (# {Agent} Conversation)        format 1 only: decoration
    <frame>                         one per message (chatloop.format.frames)
    <frame>

Contracts: ``parse_markdown(render_markdown(s)).session == s`` for every valid
session, in both formats. Reading never raises for damage: problems are listed and
every readable message is kept; a frame whose content cannot be read at all is
reported as ``damaged`` and skipped. JSON in open lines and part markers is read by
``json``: a line a person edited reads as json reads it. ``Document.views()`` gives a
``Plain`` for a frame that holds only text as chatloop writes it (``show`` and
``export`` read many), the same facts its message would hold. No file is opened
here: readers take bytes or a binary file object the store opened.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, time
from typing import BinaryIO, NamedTuple, cast

from chatloop.format import legacy
from chatloop.format.body import has_footer, plain_text, read_body
from chatloop.format.frames import Flaw, Frame, iter_frames, sniff_format
from chatloop.format.front_matter import BOM, MAX_COUNT, Head, check_time, is_crlf, read_head
from chatloop.format.values import (
    FORMATS,
    Message,
    ParseResult,
    Problem,
    Session,
    SessionMeta,
    Usage,
)

HEAD_BYTES = 70 * 1024  # front matter is capped at 64 KiB; the heading follows
MAX_HEAD_BYTES = 1 << 20  # how far an oversized head is read to find its end

__all__ = [
    "HEAD_BYTES",
    "UNREADABLE",
    "Document",
    "Facts",
    "Plain",
    "message_from",
    "open_document",
    "parse_markdown",
    "plain_facts",
    "plain_of",
]


def message_from(frame: Frame, meta: SessionMeta, problems: list[Problem]) -> Message:
    """The message a frame holds. Values out of range become problems (the value is
    dropped, the message kept); raises ValueError for metadata or parts that cannot
    be read at all (the caller reports the frame as damaged)."""
    offset, _, key, role, raw_info, raw_body, crc_ok = frame
    version = meta.format
    notes: list[tuple[str, str]] = []
    if version == 1:
        info = json.loads(raw_info)
        if not isinstance(info, dict):
            raise ValueError("frame metadata is not an object")
        get = info.get
        at = check_time(get("at"), "the message time", notes) or meta.created
        secs, usage_raw = get("secs"), get("usage")
        usage = _usage(usage_raw, notes)
        duration = _duration(secs, notes)
        interrupted, fallback = get("interrupted") is True, get("fallback") is True
        restore, copy = get("restore") is True, get("copy") is True
        unsent, recalled = get("unsent") is True, get("recalled") is True
        footer = has_footer(1, secs is not None, usage_raw is not None, interrupted, fallback)
        model, stop = _opt_str(get("model")), _opt_str(get("stop"))
    else:
        at, duration, usage, info = _head_v2(raw_info, meta.created, notes)
        footer = False
        if role == "assistant":  # format 2 leaves out the front matter's model, "stop"
            model = _opt_str(info["model"]) if "model" in info else (meta.model or None)
            stop = _opt_str(info["stop"]) if "stop" in info else "stop"
        elif info:
            model, stop = _opt_str(info.get("model")), _opt_str(info.get("stop"))
        else:
            model = stop = None
        if info:
            interrupted = info.get("interrupted") is True
            restore = info.get("restore") is True
            fallback = info.get("fallback") is True
            copy = info.get("copy") is True
            unsent = info.get("unsent") is True
            recalled = info.get("recalled") is True
        else:
            interrupted = restore = fallback = copy = unsent = recalled = False
    body_notes: list[str] = []
    try:
        body = raw_body.decode("utf-8")
    except UnicodeDecodeError:
        body = raw_body.decode("utf-8", errors="replace")
        body_notes.append("invalid UTF-8 replaced")
    plain = None
    if version >= 2 and (role == "user" or role == "assistant"):
        plain = plain_text(role, key, body)  # most frames: text only, as written
    if plain is None:
        text, thinking, calls, results = read_body(
            role, key, restore, footer, body, version, body_notes
        )
    else:
        text, thinking, calls, results = plain, (), (), ()
    if not crc_ok:  # one problem per damaged frame, saying all that was seen
        said = [detail for _, detail in notes] + body_notes
        detail = "; ".join(["checksum mismatch: edited by hand or damaged", *said])
        problems.append(Problem("checksum", offset, detail + "; content kept as found"))
    elif notes or body_notes:
        problems.extend(Problem(kind, offset, detail) for kind, detail in notes)
        if body_notes:
            problems.append(Problem("decoration", offset, "; ".join(body_notes)))
    return Message(
        role,  # type: ignore[arg-type]  # (the scanner reads only the four roles)
        at,
        key,
        text,
        thinking,
        calls,
        results,
        model,
        stop,
        usage,
        duration,
        interrupted,
        restore,
        fallback,
        copy,
        unsent,
        recalled,
    )


class Plain(NamedTuple):
    """A frame that holds only text as chatloop writes it, read without building its
    message: a question (``user``), or a reply (``assistant``) that ended normally
    with no thinking or tool call. No flag, no problem: its checksum is good.
    ``clock`` is its time as written (``HH:MM:SS``, on the session's first day) and
    ``text`` is its message's text: ``message_from`` of the same frame gives a
    Message with that role, text and time of day, a stop reason of ``stop`` for a
    reply and none for a question, and every flag false. ``key`` is the frame's key;
    ``secs``, ``tilde``, ``tokens_in`` and ``tokens_out`` are the rest of its open
    line as written (``b"4.1"``, then ``b"~"`` or ``b""``, ``b"1200"``, ``b"30"``),
    or None where it has no duration or usage: ``plain_facts`` reads the rest of
    the message from them."""

    role: str
    clock: str
    text: str
    key: str = ""
    secs: bytes | None = None
    tilde: bytes | None = None
    tokens_in: bytes | None = None
    tokens_out: bytes | None = None


class Facts(NamedTuple):
    """What ``message_from`` gives of a plain frame beside its role and text:
    ``at`` as ISO text (``Message.at.isoformat()``), model, stop reason, usage and
    duration."""

    at: str
    model: str | None
    stop_reason: str | None
    usage: Usage | None
    duration: float | None


# The open lines of a plain frame: the time of day, then the duration and usage if any
# (a subset of what _HEAD_V2 reads on its fast path, with no JSON).
_PLAIN_HEAD = re.compile(
    rb"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d)"
    rb"(?: (\d{1,15}\.\d{1,17})s)?(?: (~?)(\d{1,15})/(\d{1,15}))?\Z"
)


def plain_facts(plain: Plain, meta: SessionMeta) -> Facts:
    """What the message of ``plain``'s frame holds beside its role and text (the
    session's ``meta``), for readers that need every field, such as ``export``,
    without building the message."""
    created = meta.created
    at = datetime.combine(created.date(), time.fromisoformat(plain.clock), created.tzinfo)
    _, _, _, _, secs, tilde, got_in, got_out = plain
    duration = None if secs is None else float(secs)
    usage = None
    if got_in is not None and got_out is not None:  # (both or neither: one group)
        usage = Usage(int(got_in), int(got_out), tilde == b"~")
    if plain.role == "assistant":  # format 2 leaves out the front matter's model, "stop"
        return Facts(at.isoformat(), meta.model or None, "stop", usage, duration)
    return Facts(at.isoformat(), None, None, usage, duration)


def plain_of(frame: Frame, version: int) -> Plain | None:
    """``frame`` as a ``Plain`` if it is one (format 2), else None (read it with
    ``message_from``). Cheap: no time, usage or message is built."""
    _, _, key, role, info, raw_body, crc_ok = frame  # (once: a field read is a call)
    if version < 2 or not crc_ok or (role != "user" and role != "assistant"):
        return None
    head = _PLAIN_HEAD.match(info)
    if head is None:
        return None
    try:
        body = raw_body.decode()
    except UnicodeDecodeError:
        return None
    text = plain_text(role, key, body)
    if text is None:
        return None
    clock, secs, tilde, got_in, got_out = head.groups()
    return Plain(role, clock.decode(), text, key, secs, tilde, got_in, got_out)


def _read_time(raw: str, created: datetime, notes: list[tuple[str, str]]) -> datetime | None:
    """A format 2 time: ``HH:MM:SS`` on the session's first day, else ISO 8601."""
    if len(raw) == 8 and raw[2] == raw[5] == ":" and raw.replace(":", "").isdigit():
        try:
            clock = time.fromisoformat(raw)
        except ValueError:  # "25:61:00": not a time of day; reported below
            return check_time(raw, "the message time", notes)
        return datetime.combine(created.date(), clock, created.tzinfo)
    return check_time(raw, "the message time", notes)


# The open line as chatloop writes it: the time (HH:MM:SS on the session's first day,
# else ISO 8601 with an offset), then the duration and the usage if any (each in the
# range it is written in), then JSON if any. Anything else (an exponent, a naive or
# unreadable time, words out of order, damage) takes the general path.
_HEAD_V2 = re.compile(
    rb"(?:((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d)|(\d{4}-\d\d-\d\dT[\d:.]+[+-]\d\d:\d\d))"
    rb"(?: (\d{1,15}\.\d{1,17})s)?(?: (~?)(\d{1,15})/(\d{1,15}))?(?: (\{.*))?\Z"
)


def _head_v2(
    raw: bytes, created: datetime, notes: list[tuple[str, str]]
) -> tuple[datetime, float | None, Usage | None, dict[str, object]]:
    """A format 2 open line after the role: time, ``4.1s``, ``IN/OUT``, then JSON."""
    common = _HEAD_V2.match(raw)
    if common is not None:
        clock, full, secs, tilde, got_in, got_out, rest = common.groups()
        at: datetime | None
        if full is None:
            at = datetime.combine(
                created.date(), time.fromisoformat(clock.decode()), created.tzinfo
            )
        else:
            try:
                at = datetime.fromisoformat(full.decode())  # with an offset: aware
            except ValueError:
                at = None  # the general path says why
        if at is not None:
            duration = None if secs is None else float(secs)  # finite, within MAX_COUNT
            usage = None if got_in is None else Usage(int(got_in), int(got_out), tilde == b"~")
            if rest is None:
                return at, duration, usage, {}
            return at, duration, usage, _info_v2(rest)
    at_bytes, _, rest = raw.partition(b" ")
    at = _read_time(at_bytes.decode("ascii", "replace"), created, notes) or created
    duration = usage = None
    while rest and rest[0] != 123:  # "{"
        word, _, rest = rest.partition(b" ")
        if word[-1:] == b"s":
            duration = _duration(float(word[:-1]), notes)
        elif b"/" in word:
            estimated = word[:1] == b"~"
            got_in, _, got_out = (word[1:] if estimated else word).partition(b"/")
            tokens_in, tokens_out = int(got_in), int(got_out)
            if 0 <= tokens_in <= MAX_COUNT and 0 <= tokens_out <= MAX_COUNT:
                usage = Usage(tokens_in, tokens_out, estimated)
            else:
                notes.append(("range", "token usage is out of range; dropped"))
        else:
            raise ValueError(f"unknown word {word[:20]!r} in the open line")
    if not rest:
        return at, duration, usage, {}
    return at, duration, usage, _info_v2(rest)


def _info_v2(raw: bytes) -> dict[str, object]:
    """A format 2 open line's JSON object: only what is not the default (a model
    other than the front matter's, a stop other than "stop", flags)."""
    info = json.loads(raw)
    if not isinstance(info, dict):
        raise ValueError("frame metadata is not an object")
    return info


def _duration(secs: object, notes: list[tuple[str, str]]) -> float | None:
    if secs is None:
        return None
    number = isinstance(secs, int | float) and not isinstance(secs, bool)
    if number and math.isfinite(secs) and 0 <= secs <= MAX_COUNT:  # type: ignore[arg-type, operator]
        return float(secs)  # type: ignore[arg-type]
    notes.append(("range", "secs is out of range; dropped"))
    return None


def _usage(raw: object, notes: list[tuple[str, str]]) -> Usage | None:
    if raw is None:
        return None
    if isinstance(raw, dict):
        values = [raw.get("in"), raw.get("out")]
        estimated = bool(raw.get("est"))
    elif isinstance(raw, list) and len(raw) in (2, 3):
        values, estimated = list(raw[:2]), len(raw) == 3 and bool(raw[2])
    else:
        notes.append(("range", "usage cannot be read; dropped"))
        return None
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            notes.append(("range", "token usage is out of range; dropped"))
            return None
    return Usage(int(values[0]), int(values[1]), estimated)  # type: ignore[arg-type]


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


class Document:
    """A session being read: its meta at once, its frames and messages as they
    stream. ``problems`` grows while iterating; ``end`` is the valid end (see
    ``ParseResult``) once iteration has finished. Iterate once."""

    def __init__(
        self,
        head: Head,
        source: bytes | BinaryIO,
        start: int,
        *,
        legacy_result: ParseResult | None = None,
        exact: bool = True,
    ) -> None:
        self.meta = head.meta if legacy_result is None else legacy_result.session.meta
        self.problems: list[Problem] = [Problem(k, 0, d) for k, d in head.problems]
        self.legacy = legacy_result is not None
        self.exact = exact
        self.end = -1
        self._legacy = legacy_result
        self.source = source
        self.body_start = start
        self._has_front_matter = head.has_front_matter

    def frames(self) -> Iterator[Frame]:
        """Every complete frame; flaws become problems (a torn tail sets ``end``)."""
        last: Frame | None = None
        for item in self._walk():
            if isinstance(item, Flaw):
                self._flaw(item)
                continue
            last = item
            yield item
        self._ended(last)

    def _walk(self) -> Iterator[Frame | Flaw]:
        """The scanner over the body, from its start (empty for a legacy file or one
        without front matter); ``frames()`` and ``_read()`` go through here, then
        ``_flaw`` for each flaw and ``_ended`` at the end."""
        self.end = -1
        if self._legacy is not None or not self._has_front_matter:
            return iter(())
        if not isinstance(self.source, bytes | bytearray):
            self.source.seek(self.body_start)  # a second walk starts from the top too
        return iter_frames(self.source, self.body_start, self.meta.format)

    def _flaw(self, flaw: Flaw) -> None:
        self.problems.append(Problem(flaw.kind, flaw.offset, flaw.detail))
        if flaw.kind == "torn_tail":
            self.end = flaw.offset

    def _ended(self, last: Frame | None) -> None:
        if self._legacy is not None or not self._has_front_matter:
            self.end = self.body_start
        elif self.end < 0:
            self.end = max(self.body_start if last is None else last.end, self._size_hint())

    def _size_hint(self) -> int:
        if isinstance(self.source, bytes | bytearray):
            return len(self.source)
        try:
            return int(self.source.tell())
        except (OSError, AttributeError):
            return -1

    def messages(self) -> Iterator[Message]:
        """Every readable message in file order (legacy files included)."""
        if self._legacy is not None:
            return self._legacy_messages()
        return cast("Iterator[Message]", self._read(plain=False))  # (no Plain without plain)

    def views(self) -> Iterator[Message | Plain]:
        """``messages()``, except that a frame holding only text comes as a ``Plain``
        (no message built for it): for readers of many frames, such as ``show`` and
        ``export`` (``plain_facts`` gives the rest of what its message holds).
        Problems and ``end`` are the same as ``messages()``'s."""
        if self._legacy is not None or self.meta.format < 2:
            return self.messages()
        return self._read(plain=True)

    def _legacy_messages(self) -> Iterator[Message]:
        assert self._legacy is not None
        self.end = self._legacy.end
        yield from self._legacy.session.messages

    def _read(self, plain: bool) -> Iterator[Message | Plain]:
        """The message of every frame, or with ``plain`` its ``Plain`` when it is one:
        one loop over the scanner (``frames()``'s, inlined: a generator fewer per
        frame, for readers of many)."""
        meta, problems, version = self.meta, self.problems, self.meta.format
        last: Frame | None = None
        for frame in self._walk():
            if isinstance(frame, Flaw):
                self._flaw(frame)
                continue
            last = frame
            if plain:
                view = plain_of(frame, version)
                if view is not None:
                    yield view
                    continue
            try:
                yield message_from(frame, meta, problems)
            except UNREADABLE as exc:
                self._unreadable(frame, exc)
        self._ended(last)

    def _unreadable(self, frame: Frame, exc: Exception) -> None:
        detail = f"unreadable frame ({exc}); skipped"
        self.problems.append(Problem("damaged", frame.offset, detail))


# What reading a frame's content can raise for damage (RecursionError: JSON nested
# deeper than the interpreter's stack, in an open line or a part marker).
UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError)


def open_document(source: bytes | BinaryIO, name: str = "") -> Document:
    """Start reading a session from bytes or from a binary file object at offset 0.

    ``name`` is the file's stem (the id when the front matter has none). A
    CRLF-converted file is read as LF (a ``crlf`` problem; its offsets are then
    not the file's, so ``exact`` is False); CRLF and legacy files are read
    whole, the legacy ones by ``chatloop.format.legacy``. Everything else
    streams: only the head is read here.
    """
    data: bytes | None = None
    stream: BinaryIO | None = None
    if isinstance(source, bytes | bytearray):
        data = bytes(source)
        head_bytes = data[:HEAD_BYTES]
    else:
        stream = source
        head_bytes = stream.read(HEAD_BYTES)
    crlf = is_crlf(head_bytes)
    unbommed = head_bytes[len(BOM) :] if head_bytes.startswith(BOM) else head_bytes
    is_legacy = not unbommed.startswith(b"---") and legacy.looks_legacy(unbommed)
    if stream is not None and (crlf or is_legacy):
        data, stream = head_bytes + stream.read(), None
    problems: list[Problem] = []
    if crlf and data is not None:
        data = data.replace(b"\r\n", b"\n")
        head_bytes = data[:HEAD_BYTES]
        problems.append(
            Problem("crlf", 0, "CRLF line endings (converted by an editor or git); read as LF")
        )
    if is_legacy and data is not None:
        result = legacy.parse_legacy(data[len(BOM) :] if data.startswith(BOM) else data)
        doc = Document(read_head(b"", name), b"", 0, legacy_result=result, exact=not crlf)
        doc.problems = problems + list(result.problems)
        return doc
    if unbommed.startswith(b"---\n") and b"\n---\n" not in head_bytes:  # an oversized head
        if stream is not None:
            head_bytes += _read_until_close(stream)
        elif data is not None:
            head_bytes = data[:MAX_HEAD_BYTES]
    head = read_head(head_bytes, name)
    if head.meta.format not in FORMATS:  # no (known) format key: tell it from the frames
        head.meta = replace(head.meta, format=sniff_format(head_bytes, head.body_start))
    if stream is None:
        assert data is not None
        doc = Document(head, data, head.body_start, exact=not crlf)
    else:
        stream.seek(head.body_start)
        doc = Document(head, stream, head.body_start)
    doc.problems[:0] = problems
    return doc


def _read_until_close(source: BinaryIO) -> bytes:
    """More of an oversized head, up to ``MAX_HEAD_BYTES``, until its ``---`` closes."""
    more = b""
    while len(more) < MAX_HEAD_BYTES:
        chunk = source.read(HEAD_BYTES)
        more += chunk
        if not chunk or b"\n---\n" in more:
            break
    return more


def parse_markdown(data: bytes, name: str = "") -> ParseResult:
    """Read a whole session file in memory. Never raises for damage: it is listed in
    ``problems``. Files in the legacy bold-key format are read by
    ``chatloop.format.legacy`` into the same values, marked ``legacy=True``."""
    doc = open_document(data, name)
    messages = tuple(doc.messages())
    end = doc.end if doc.end >= 0 else len(data)
    session = Session(doc.meta, messages)
    return ParseResult(session, tuple(doc.problems), end, doc.legacy, doc.exact)
