"""Reseal: a file with a person's hand edits accepted.

Contract: every frame whose checksum or decoration no longer matches is written anew
around its content as found; every other byte stays as it was; what cannot be mended
without guessing (a damaged frame, a torn end, a front matter with something wrong)
is left as it is and returned for the caller to report. Bytes in, bytes out: the
store writes them.
"""

from __future__ import annotations

from dataclasses import replace

from chatloop.format.frames import Frame
from chatloop.format.front_matter import BOM, rewrite_front_matter
from chatloop.format.read import UNREADABLE, message_from, open_document
from chatloop.format.render import render_frame
from chatloop.format.values import Problem, SessionMeta, content_of, new_key

__all__ = ["HEAD_DAMAGE", "carried_copy", "reseal"]

OLD_COPY_HEADING = b"## Session restored\n"  # a copy's, before copies were headed so


def carried_copy(frame: Frame, meta: SessionMeta) -> bytes | None:
    """A carried copy's frame as chatloop writes one now (headed ``## Carried over``,
    its checksum computed again), from its open marker to its close line, when
    ``frame`` is a format-2 copy that a file written before copies were headed so
    still heads ``## Session restored``, and sound (its checksum good: a hand edit is
    never sealed here); None for every other frame (the caller keeps it as found).
    The message is the same; only its decoration changes."""
    if (
        meta.format < 2
        or frame.role != "user"
        or not frame.crc_ok
        or not frame.body.startswith(OLD_COPY_HEADING)
        or b'"copy":true' not in frame.info
    ):
        return None
    try:
        message = message_from(frame, meta, [])
    except UNREADABLE:
        return None
    if not message.copy:
        return None
    return render_frame(message, meta, 0)[1:]  # (the blank line before it is the file's)


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
                message = message._replace(key=new_key(content_of(message)))
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
