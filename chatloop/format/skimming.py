"""Skim: what the index needs from a session file, without building every message.

Contract: ``skim(source)`` gives the same figures as ``skim_of(parse_markdown(...))``
(tests compare the two): the front matter, the number of queries, the last update,
a one-line preview of the last question, whether there is a summary, how many
problems the scan saw, and the searchable words (valid UTF-8, chatloop's own markup
left out). It never raises for damage, and with ``words`` its memory stays flat for
any size of file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import BinaryIO

from chatloop.config import DEFAULT_PREVIEW_CHARS
from chatloop.format.body import searchable
from chatloop.format.frames import Frame
from chatloop.format.read import UNREADABLE, message_from, open_document
from chatloop.format.values import Message, ParseResult, Problem, Session, SessionMeta

__all__ = [
    "GLANCE_BYTES",
    "SEARCH_CHUNK_BYTES",
    "Skim",
    "glance",
    "glance_wants_tail",
    "skim",
    "skim_of",
    "words_of",
]


@dataclass(frozen=True)
class Skim:
    """A file as the index stores it, read without building every message.
    ``updated`` is the later of the front matter's and the last record's time;
    ``problems`` counts what the scan saw (checksums are verified too); ``text``
    is the searchable words as valid UTF-8. A ``glance`` (the head alone) leaves
    None where the head cannot say: ``queries``, ``updated`` (the last activity)
    and ``has_summary`` are then not yet known; ``skim`` always says them."""

    meta: SessionMeta
    queries: int | None
    updated: datetime | None
    preview: str
    has_summary: bool | None
    legacy: bool
    problems: int
    text: bytes
    tokens_known: bool = True  # False: the meta's token totals are not the file's yet


SEARCH_CHUNK_BYTES = 1 << 20
GLANCE_BYTES = 8192  # of a file's head, for ``glance``: a front matter is rarely 2 kB
# and of a legacy file's tail (its summary, which says whether it closed, ends it)


def glance_wants_tail(head: bytes) -> bool:
    """Whether ``glance`` needs the file's last bytes as well as ``head``: a legacy
    file (no front matter; a summary at its end is what closed it)."""
    from chatloop.format.legacy import looks_legacy

    return looks_legacy(head)


def glance(head: bytes, name: str = "", tail: bytes | None = None) -> Skim | None:
    """What a listing needs of a session from its front matter alone (``head``: the
    file's first bytes, ``GLANCE_BYTES`` of them), for a format 1 or format 2 file in
    any state: no preview, no words, no problems counted, the file not read past its
    head, so a listing of thousands answers at once and ``skim`` reads the rest later.

    What the front matter says is what a full read says (id, title, agent, model,
    dates created, status, tokens, chain links, fork point). The figures the frames
    decide are given only where finalize wrote them beside the summary's pointer (a
    format 2 session closed with its summary): the queries, the last activity and the
    summary. Elsewhere they may lag the frames (a session still open, interrupted, or
    closed by an older chatloop or another tool), so they are None, not yet known;
    a closed session's last activity is its front matter's ``updated``, written when
    it closed, after its last frame.

    A legacy file (``glance_wants_tail``) has no front matter: its keys and title
    come from its head and whether it closed from ``tail``, the file's last
    ``GLANCE_BYTES`` (empty when ``head`` is the whole file: then all is said); its
    queries, tokens and last activity are not yet known (``tokens_known`` False).

    None when the head cannot say even that: a front matter with problems or longer
    than ``head``, a byte order mark or CRLF line endings, a legacy file without its
    ``tail`` or too long a summary (``legacy.glance_legacy``): such a file is read
    in full."""
    from chatloop.format.front_matter import BOM, is_crlf, read_head

    if head.startswith(BOM) or is_crlf(head):
        return None
    if glance_wants_tail(head):
        return None if tail is None else _glance_legacy(head, name, tail)
    found = read_head(head, name)
    meta = found.meta
    if not found.has_front_matter or any(kind != "unknown_key" for kind, _ in found.problems):
        return None
    if meta.format >= 2 and meta.status == "closed" and meta.summary_at is not None:
        return Skim(meta, meta.queries, meta.updated, "", True, False, 0, b"")
    updated = meta.updated if meta.status == "closed" else None
    return Skim(meta, None, updated, "", None, False, 0, b"")


def _glance_legacy(head: bytes, name: str, tail: bytes) -> Skim | None:
    from chatloop.format.legacy import glance_legacy

    if not tail:  # (the whole file: all is said, the words left for later)
        return replace(skim(head, name), text=b"")
    found = glance_legacy(head, tail)
    if found is None:
        return None
    meta = found.session.meta
    closed = meta.status == "closed"
    return Skim(meta, None, None, "", closed, True, 0, b"", tokens_known=False)


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
        found = skim_of(
            ParseResult(Session(doc.meta, tuple(messages)), tuple(doc.problems), 0, True)
        )
        if words is not None and found.text:
            words(found.text)
            found = replace(found, text=b"")
        return found
    meta = doc.meta
    version = meta.format
    queries = 0
    has_summary = False
    last_query: Frame | None = None
    last_unsent: Frame | None = None  # (the preview of a session with no query)
    last: Frame | None = None
    bodies: list[bytes] = []
    held = 0
    bad_crc = 0
    footer_keys = (b'"secs"', b'"usage"', b'"interrupted"', b'"fallback"') if version == 1 else ()
    for frame in doc.frames():
        role = frame.role
        info = frame.info
        if role == "user" and b'"restore":true' not in info and b'"unsent":true' not in info:
            queries += 1
            last_query = frame
        elif role == "user" and b'"restore":true' not in info:  # (unsent, then)
            last_unsent = frame
        elif role == "summary":
            has_summary = True
        footer = any(k in info for k in footer_keys)
        if b'"recalled":true' not in info:  # (recalled words are indexed where first said)
            piece = searchable(role, frame.key.encode(), frame.body, footer, version)
            bodies.append(piece)
            held += len(piece) + 1
        if words is not None and held >= SEARCH_CHUNK_BYTES:
            words(_utf8(b"\n".join(bodies)))
            bodies, held = [], 0
        bad_crc += not frame.crc_ok
        last = frame
    problems: list[Problem] = []
    preview = ""
    shown = last_query or last_unsent
    if shown is not None:
        try:
            preview = _previewed(message_from(shown, meta, problems))
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
    kept = [m for m in messages if m.role == "user" and m.unsent and not m.restore]
    said = [m for m in messages if m.is_query] or kept
    preview = _previewed(said[-1]) if said else ""
    text = "\n".join(words_of(m) for m in messages if not m.recalled).encode()
    problems = len([p for p in result.problems if p.kind not in ("unknown_key",)])
    return Skim(
        session.meta,
        session.query_count,
        updated,
        _one_line(preview),
        session.summary is not None,
        result.legacy,
        problems,
        text,
    )


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


def _previewed(message: Message) -> str:
    """What a listing shows of a session by ``message``, its last question; a session
    that holds no query shows the last message it kept unsent, marked so."""
    return f"(not sent) {message.text}" if message.unsent else message.text
