"""The trusted summary: the summary frame that resume may inject, found by structure.

Contract: a summary is trusted only where the file's structure puts it (the front
matter's pointer, else the last frame of an undamaged file); a summary typed in a
message or returned by a tool is inside another frame's body and is never found.
``find_summary`` never raises for damage: it says why there is none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

from chatloop.format.frames import Frame, iter_frames
from chatloop.format.read import UNREADABLE, Document, message_from, open_document
from chatloop.format.values import Message, Problem, SessionMeta

__all__ = ["SummaryLookup", "find_summary", "summary_offset"]


@dataclass(frozen=True)
class SummaryLookup:
    """What a reader found about a session's summary.

    ``message`` is the summary that may be trusted (None: none may); ``note``
    says, for the person, why there is none or how it was found; ``edited``
    is True when the trusted frame's checksum does not match (a hand edit:
    used as found); ``legacy`` when the file is of the legacy format (its summary
    was written by the seed tool, or by chatloop into an imported copy: its text
    cannot tell which)."""

    meta: SessionMeta
    message: Message | None
    note: str | None
    edited: bool = False
    legacy: bool = False


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
        return SummaryLookup(meta, summary, note, legacy=True)
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
        why = (
            "its last messages come after its summary"
            if seen_summary
            else "it has no summary (it was interrupted or is old)"
        )
        if damaged:
            why = "the file is damaged, so its summary cannot be trusted"
        return SummaryLookup(meta, None, note_prefix + why)
    if damaged:
        return SummaryLookup(
            meta,
            None,
            note_prefix + "the file is damaged before its summary, "
            "so the summary cannot be trusted",
        )
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
