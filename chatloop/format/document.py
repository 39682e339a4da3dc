"""A session file as a whole: render it, read it (in memory or streaming), skim it
for the index, and find the summary that resume may trust. No file is opened
here: readers take bytes or a binary file object the store opened.

Layout (docs/format.md has the full grammar)::

    ---            front matter (YAML, chatloop.format.front_matter)
    ...
    ---
    (# {Agent} Conversation)        format 1 only: decoration
    <frame>                         one per message (chatloop.format.frames)
    <frame>

``parse_markdown(render_markdown(s)).session == s`` for every valid session,
in both formats. Reading never raises for damage: problems are listed and
every readable message is kept.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, time
from typing import BinaryIO, NamedTuple, cast

from chatloop.config import DEFAULT_PREVIEW_CHARS
from chatloop.format import legacy
from chatloop.format.body import (
    compact_json,
    display_name,
    has_footer,
    plain_text,
    read_body,
    render_body,
)
from chatloop.format.body import searchable as _searchable_body
from chatloop.format.frames import Flaw, Frame, close_line, iter_frames, open_line, sniff_format
from chatloop.format.front_matter import (
    BOM,
    MAX_COUNT,
    Head,
    check_time,
    is_crlf,
    read_head,
    render_front_matter,
    rewrite_front_matter,
)
from chatloop.format.values import (
    FORMATS,
    Message,
    ParseResult,
    Problem,
    Session,
    SessionMeta,
    Usage,
    content_of,
    is_key,
    new_key,
)

HEAD_BYTES = 70 * 1024  # front matter is capped at 64 KiB; the heading follows
MAX_HEAD_BYTES = 1 << 20  # how far an oversized head is read to find its end

__all__ = [
    "HEAD_BYTES", "UNREADABLE", "Document", "Facts", "Plain", "Skim", "SummaryLookup",
    "find_summary", "frame_info", "message_from", "open_document", "parse_markdown", "plain_facts",
    "plain_of", "render_frame",
    "render_header", "render_markdown", "reseal", "skim", "summary_offset",
]  # fmt: skip


# ----------------------------------------------------------------------------- render


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
        info.update({k: v for k, v in (("model", m.model), ("stop", m.stop_reason),
                                       ("secs", m.duration)) if v is not None})  # fmt: skip
        if m.usage is not None:
            usage: dict[str, object] = {"in": m.usage.input, "out": m.usage.output}
            if m.usage.estimated:
                usage["est"] = True
            info["usage"] = usage
        for flag in ("interrupted", "restore", "fallback"):
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
        info.update({k: v for k, v in (("model", m.model), ("stop", m.stop_reason))
                     if v is not None})  # fmt: skip
    for flag in ("interrupted", "restore", "fallback"):
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


def _read_time(raw: str, created: datetime, notes: list[tuple[str, str]]) -> datetime | None:
    """A format 2 time: ``HH:MM:SS`` on the session's first day, else ISO 8601."""
    if len(raw) == 8 and raw[2] == raw[5] == ":" and raw.replace(":", "").isdigit():
        try:
            clock = time.fromisoformat(raw)
        except ValueError:  # "25:61:00": not a time of day; reported below
            return check_time(raw, "the message time", notes)
        return datetime.combine(created.date(), clock, created.tzinfo)
    return check_time(raw, "the message time", notes)


# ----------------------------------------------------------------------------- read


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
        restore = get("restore") is True
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
        else:
            interrupted = restore = fallback = False
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
        role, at, key, text, thinking, calls, results, model, stop,  # type: ignore[arg-type]
        usage, duration, interrupted, restore, fallback,
    )  # fmt: skip


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
            at = datetime.combine(created.date(), time.fromisoformat(clock.decode()),
                                  created.tzinfo)
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

    def __init__(self, head: Head, source: bytes | BinaryIO, start: int, *,
                 legacy_result: ParseResult | None = None, exact: bool = True) -> None:  # fmt: skip
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
        problems.append(Problem("crlf", 0, "CRLF line endings (converted by an editor or "
                                "git); read as LF"))  # fmt: skip
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


# ----------------------------------------------------------------------------- reseal


def reseal(data: bytes, name: str = "") -> tuple[bytes, int, tuple[Problem, ...]]:
    """A file with a person's hand edits accepted: every frame whose checksum or
    decoration no longer matches is written anew around its content as found
    (its key renewed if the person typed it into the content); every other byte,
    notes between frames included, stays as it was. A CRLF file becomes LF and a
    byte order mark is dropped. In format 2 the summary pointer is set again, its
    lines edited in place, unless something is wrong with the front matter: reseal
    never rewrites values a person may have meant (it would put what could be
    salvaged in their place), so then the front matter is left as it is, to be mended
    by hand and resealed again. Returns the new bytes, how many frames were
    rewritten, and the damage left as it is, for the caller to report: frames too
    damaged to read and a torn end (at their offsets in ``data``), then what is
    wrong with the front matter (kinds in ``HEAD_DAMAGE``, at offset 0).
    """
    doc = open_document(data, name)
    if doc.legacy:
        raise ValueError("a legacy file is read only; it has no checksums to reseal")
    head_damage = [p for p in doc.problems if p.kind in HEAD_DAMAGE]  # (no frame read yet)
    source = doc.source  # the normalised bytes
    assert isinstance(source, bytes)
    meta = doc.meta
    out: list[bytes] = []
    pos = doc.body_start
    changed = 0
    query = 0
    last: tuple[str, int, str] | None = None  # role, offset in the new body, key
    body_len = 0
    for frame in doc.frames():
        gap = source[pos : frame.offset]
        problems: list[Problem] = []
        try:
            message = message_from(frame, meta, problems)
        except UNREADABLE:
            out.append(source[pos : frame.end])
            body_len += frame.end - pos
            pos = frame.end
            last = None
            continue
        query += message.is_query
        record = source[frame.offset : frame.end]
        if problems or not frame.crc_ok:
            if message.key in content_of(message):
                message = replace(message, key=new_key(content_of(message)))
            record = render_frame(message, meta, query)[1:]
            changed += 1
        out.append(gap)
        body_len += len(gap)
        last = (message.role, body_len, message.key)
        out.append(record)
        body_len += len(record)
        pos = frame.end
    out.append(source[pos:])
    head = source[: doc.body_start]
    if head.startswith(BOM):
        head = head[len(BOM) :]
    if meta.format >= 2 and not head_damage and (meta.summary_key is not None or changed):
        key, at = (last[2], last[1]) if last is not None and last[0] == "summary" else (None, None)
        if (key, at) != (meta.summary_key, meta.summary_at):  # the two lines, edited in place
            head = rewrite_front_matter(head, replace(meta, summary_key=key, summary_at=at))
    left = [p for p in doc.problems if p.kind in ("damaged", "torn_tail")]
    return head + b"".join(out), changed, tuple(left + head_damage)


# What may be wrong with a front matter that ``reseal`` leaves for a person to mend.
HEAD_DAMAGE = ("front_matter", "naive_time", "range")


# ----------------------------------------------------------------------------- skim


@dataclass(frozen=True)
class Skim:
    """A file as the index stores it, read without building every message.
    ``updated`` is the later of the front matter's and the last record's time;
    ``problems`` counts what the scan saw (checksums are verified too); ``text``
    is the searchable words as valid UTF-8."""

    meta: SessionMeta
    queries: int
    updated: datetime
    preview: str
    has_summary: bool
    legacy: bool
    problems: int
    text: bytes


SEARCH_CHUNK_BYTES = 1 << 20


def skim(
    source: bytes | BinaryIO, name: str = "", words: Callable[[bytes], None] | None = None
) -> Skim:
    """What the index needs from a session file; never raises for damage.

    With ``words``, the searchable text goes to it in chunks of about
    ``SEARCH_CHUNK_BYTES`` (whole frames, valid UTF-8) as the file is read, and
    ``Skim.text`` is empty: memory stays flat for any size of file."""
    doc = open_document(source, name)
    if doc.legacy:
        messages = list(doc.messages())
        found = skim_of(ParseResult(Session(doc.meta, tuple(messages)), tuple(doc.problems),
                                    0, True))  # fmt: skip
        if words is not None and found.text:
            words(found.text)
            found = replace(found, text=b"")
        return found
    meta = doc.meta
    version = meta.format
    queries = 0
    has_summary = False
    last_query: Frame | None = None
    last: Frame | None = None
    bodies: list[bytes] = []
    held = 0
    bad_crc = 0
    footer_keys = (b'"secs"', b'"usage"', b'"interrupted"', b'"fallback"') if version == 1 else ()
    for frame in doc.frames():
        role = frame.role
        info = frame.info
        if role == "user" and b'"restore":true' not in info:
            queries += 1
            last_query = frame
        elif role == "summary":
            has_summary = True
        footer = any(k in info for k in footer_keys)
        piece = _searchable_body(role, frame.key.encode(), frame.body, footer, version)
        bodies.append(piece)
        held += len(piece) + 1
        if words is not None and held >= SEARCH_CHUNK_BYTES:
            words(_utf8(b"\n".join(bodies)))
            bodies, held = [], 0
        bad_crc += not frame.crc_ok
        last = frame
    problems: list[Problem] = []
    preview = ""
    if last_query is not None:
        try:
            preview = message_from(last_query, meta, problems).text
        except UNREADABLE:
            preview = ""
    updated = meta.updated
    if last is not None:
        try:
            updated = max(updated, message_from(last, meta, problems).at)
        except UNREADABLE:
            updated = meta.updated  # an unreadable last frame: the front matter's time
    text = _utf8(b"\n".join(bodies))
    if words is not None:
        if text:
            words(text)
        text = b""
    count = len([p for p in doc.problems if p.kind not in ("unknown_key",)]) + bad_crc
    return Skim(meta, queries, updated, _one_line(preview), has_summary, False, count, text)


def skim_of(result: ParseResult) -> Skim:
    """The same figures from a full parse (legacy files; tests compare the two)."""
    session = result.session
    messages = session.messages
    updated = max(session.meta.updated, messages[-1].at) if messages else session.meta.updated
    preview = next((m.text for m in reversed(messages) if m.is_query), "")
    text = "\n".join(words_of(m) for m in messages).encode()
    problems = len([p for p in result.problems if p.kind not in ("unknown_key",)])
    return Skim(session.meta, session.query_count, updated, _one_line(preview),
                session.summary is not None, result.legacy, problems, text)  # fmt: skip


def words_of(message: Message) -> str:
    """Everything a message says: text, thinking, tool calls and tool results."""
    bits = [message.text, *(t.text for t in message.thinking)]
    bits += [f"{c.name} {c.arguments}" for c in message.tool_calls]
    bits += [r.content for r in message.tool_results]
    return "\n".join(b for b in bits if b)


def _utf8(data: bytes) -> bytes:
    try:
        data.decode("utf-8")
        return data
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")


def _one_line(text: str) -> str:
    return " ".join(text.split())[:DEFAULT_PREVIEW_CHARS]


# ----------------------------------------------------------------------------- the summary


@dataclass(frozen=True)
class SummaryLookup:
    """What a reader found about a session's summary.

    ``message`` is the summary that may be trusted (None: none may); ``note``
    says, for the person, why there is none or how it was found; ``edited``
    is True when the trusted frame's checksum does not match (a hand edit:
    used as found)."""

    meta: SessionMeta
    message: Message | None
    note: str | None
    edited: bool = False


def summary_offset(meta: SessionMeta) -> int | None:
    """Where finalize said the summary frame starts, relative to the body."""
    return meta.summary_at if meta.summary_key is not None else None


def find_summary(source: BinaryIO, name: str = "") -> SummaryLookup:
    """The summary resume may trust, from a file object at offset 0.

    A summary is **structure, never content**. In order:

    1. Format 2 files that finalize closed carry ``summary_key``/``summary_at``
       in the front matter (which no message can reach): the frame at that
       offset must have that key, be a summary, and be the last frame. This
       reads the head and the summary frame only: O(1) in the file's size.
    2. Otherwise (format 1, or the pointer no longer matches because the file
       was edited) the frames are walked with the one scanner, which never
       looks inside a body: the last frame must be a summary, with no damage
       before it (a resynchronised scan could land inside a damaged body).

    A summary frame typed in a message or returned by a tool is inside that
    message's body, so neither rule ever sees it. Legacy files use the legacy
    reader's structural rule. Never raises for damage.
    """
    doc = open_document(source, name)
    meta = doc.meta
    if doc.legacy:
        summary = next((m for m in doc.messages() if m.role == "summary"), None)
        note = None if summary else "it has no summary (it was interrupted or is old)"
        return SummaryLookup(meta, summary, note)
    offset = summary_offset(meta)
    note_prefix = ""
    if offset is not None and doc.exact:
        start = doc.body_start + offset
        found = _pointed(doc, start, meta)
        if found is not None:
            return found
        note_prefix = "its summary moved (the file was edited), so the whole file was read; "
    last: Frame | None = None
    seen_summary = False
    for frame in doc.frames():
        last = frame
        seen_summary = seen_summary or frame.role == "summary"
    damaged = any(p.kind in ("damaged", "torn_tail") for p in doc.problems)
    if last is None or last.role != "summary":
        why = ("its last messages come after its summary" if seen_summary
               else "it has no summary (it was interrupted or is old)")  # fmt: skip
        if damaged:
            why = "the file is damaged, so its summary cannot be trusted"
        return SummaryLookup(meta, None, note_prefix + why)
    if damaged:
        return SummaryLookup(meta, None, note_prefix + "the file is damaged before its summary, "
                             "so the summary cannot be trusted")  # fmt: skip
    problems: list[Problem] = []
    try:
        message = message_from(last, meta, problems)
    except UNREADABLE:
        return SummaryLookup(meta, None, note_prefix + "its summary block cannot be read")
    return SummaryLookup(meta, message, note_prefix.rstrip("; ") or None, not last.crc_ok)


def _pointed(doc: Document, start: int, meta: SessionMeta) -> SummaryLookup | None:
    """The summary at the front matter's pointer, if it is there and last; None when
    the pointer does not match (the caller walks the file instead)."""
    source = doc.source
    if isinstance(source, bytes | bytearray):
        frames = iter_frames(source, start, meta.format)
    else:
        source.seek(start)
        frames = iter_frames(source, start, meta.format)
    first = next(frames, None)
    if not isinstance(first, Frame) or first.offset != start or first.key != meta.summary_key:
        return None
    if first.role != "summary":
        return None
    following = next(frames, None)
    if following is not None:
        return SummaryLookup(meta, None, "its last messages come after its summary")
    problems: list[Problem] = []
    try:
        message = message_from(first, meta, problems)
    except UNREADABLE:
        return None
    return SummaryLookup(meta, message, None, not first.crc_ok)
