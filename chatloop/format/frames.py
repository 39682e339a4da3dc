"""THE frame scanner: the one piece of code that finds records in a session body.

Every reader is built on ``iter_frames``: the full parse, the index's skim,
the summary lookup that resume trusts, search snippets, ``show`` and
``export``. A frame is::

    format 1:  <!-- chatloop:KEY ROLE {json} -->\\n BODY \\n<!-- /chatloop:KEY CRC32 -->\\n
    format 2:  <!-- KEY ROLE AT[ 4.1s][ IN/OUT][ {json}] -->\\n BODY \\n<!-- /KEY CRC32 -->\\n

``KEY`` is chosen so that it occurs nowhere in the frame's content, so a
frame ends only at its own close marker: the scanner jumps from an open
marker straight to ``/KEY`` and never looks inside a body for other frames.
That is why a frame typed in a message, or returned by a tool, stays content:
it is inside another frame's body, where no reader looks for structure.
The CRC covers the open line and the body; a mismatch is reported on the
frame (``crc_ok``), never silently accepted.

Between frames the scanner only looks for the next open marker (a person's
notes there are decoration). Damage is reported as a ``Flaw`` and scanning
resynchronises: a frame whose open line is unreadable is skipped up to its
orphaned close marker; an incomplete last frame is the ``torn_tail``.

``iter_frames`` takes bytes, or a binary file object that it reads in chunks:
memory is bounded by the largest frame (capped at ``MAX_FRAME_BYTES``), not by
the file, so a 200 MB transcript is read in constant memory.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple

_OPEN_1 = b"<!-- chatloop:"
# Read 256 KiB at a time. Reading by the MiB, malloc kept handing back fresh pages from
# the system: exporting a 200 MB file faulted in 49,633 pages against 6,453, and took
# 5% longer.
CHUNK_BYTES = 1 << 18
MAX_FRAME_BYTES = 32 << 20  # a longer frame (or one with no end) is damage, read no further

__all__ = [
    "CHUNK_BYTES",
    "MAX_FRAME_BYTES",
    "Flaw",
    "Frame",
    "close_line",
    "iter_frames",
    "open_line",
    "sniff_format",
]


class Frame(NamedTuple):
    """One complete record. ``offset``/``end`` are byte offsets of its open marker
    and just past its close line; ``info`` is the open line after the role
    (format 1: JSON; format 2: the time, then JSON if any). A named tuple, not a
    dataclass: one is built per record read, and a tuple is built fastest."""

    offset: int
    end: int
    key: str
    role: str
    info: bytes
    body: bytes
    crc_ok: bool


@dataclass(frozen=True, slots=True)
class Flaw:
    """Damage the scanner stepped over: ``damaged`` (skipped) or ``torn_tail``
    (an incomplete last record starting at ``offset``)."""

    kind: str
    offset: int
    detail: str


_OPEN_RE = {
    1: re.compile(rb"<!-- chatloop:([a-z2-7]{8}) (user|assistant|tool|summary) (\{[^\n]*\}) -->\n"),
    2: re.compile(rb"<!-- ([a-z2-7]{8}) (user|assistant|tool|summary) ([^ \n][^\n]*) -->\n"),
}
_CLOSE_PREFIX = {1: b"\n<!-- /chatloop:", 2: b"\n<!-- /"}
_ORPHAN_RE = {
    1: re.compile(rb"<!-- /chatloop:"),
    2: re.compile(rb"<!-- /[a-z2-7]{8} [0-9a-f]{8} -->"),
}


def open_line(version: int, key: str, role: str, info: str) -> str:
    """The open marker line (without its newline)."""
    if version == 1:
        return f"<!-- chatloop:{key} {role} {info} -->"
    return f"<!-- {key} {role} {info} -->"


_START_2 = re.compile(rb"<!-- [a-z2-7]{8} (?:user|assistant|tool|summary) ")


def close_line(version: int, key: str, crc: int) -> bytes:
    """The close marker line (without its newline) for a frame whose open line and
    body have CRC32 ``crc``."""
    if version == 1:
        return b"<!-- /chatloop:%s %08x -->" % (key.encode(), crc)
    return b"<!-- /%s %08x -->" % (key.encode(), crc)


def sniff_format(data: bytes, start: int) -> int:
    """The format whose open marker comes first in ``data`` from ``start`` (2 when
    there is none): how a file whose front matter names no known format is read."""
    one = _Scanner(1).find_open(data, start)
    two = _Scanner(2).find_open(data, start)
    return 1 if one >= 0 and (two < 0 or one < two) else 2


class _Scanner:
    """One step at a time over a buffer; ``None`` from ``step`` means "read more"."""

    def __init__(self, version: int) -> None:
        self.version = 2 if version >= 2 else 1
        self.open_re = _OPEN_RE[self.version]
        self.close_prefix = _CLOSE_PREFIX[self.version]
        self.orphan_re = _ORPHAN_RE[self.version]
        self.close_format = _CLOSE_FORMAT[self.version]

    def find_open(self, buf: bytes, pos: int) -> int:
        """Where the next open marker starts at or after ``pos``, or -1."""
        if self.version == 1:
            return buf.find(_OPEN_1, pos)
        found = _START_2.search(buf, pos)
        return -1 if found is None else found.start()

    def orphan(self, buf: bytes, lo: int, hi: int) -> int:
        found = self.orphan_re.search(buf, lo, hi)
        return -1 if found is None else found.start()

    def skip(self, buf: bytes, pos: int, final: bool) -> int | None:
        """Where to resume after a damaged frame: past its orphaned close line if
        that comes before the next open marker, else ``pos``."""
        following = self.find_open(buf, pos)
        end = self.orphan(buf, pos, len(buf) if following < 0 else following)
        if end < 0:
            return pos if following >= 0 or final else None
        line_end = buf.find(b"\n", end)
        if line_end < 0:
            return len(buf) if final else None
        return line_end + 1

    def step(
        self, buf: bytes, pos: int, final: bool, base: int
    ) -> tuple[Frame | Flaw | None, int] | None:
        """One frame, flaw or gap from ``pos`` (``iter_frames`` reads well-formed frames
        itself, inline, and comes here for everything else); None: read more."""
        start = self.find_open(buf, pos)
        if start < 0:
            if not final:
                return None
            if self.orphan(buf, pos, len(buf)) >= 0:
                return Flaw("damaged", base + pos, _NO_START), len(buf)
            return None, len(buf)
        if start > pos + 1 and self.orphan(buf, pos, start) >= 0:
            return Flaw("damaged", base + pos, _NO_START), start
        match = self.open_re.match(buf, start)
        if match is None:
            if buf.find(b"\n", start) < 0:
                if not final:
                    return None
                return Flaw("torn_tail", base + start, _TORN), len(buf)
            resume = self.skip(buf, start + 1, final)
            if resume is None:
                return None
            return Flaw("damaged", base + start, "unreadable frame header; skipped"), resume
        key = match.group(1)
        body_from = match.end()
        close_at = buf.find(self.close_prefix + key + b" ", body_from)
        close_end = buf.find(b"\n", close_at + 1) if close_at >= 0 else -1
        if close_end < 0:
            if not final:
                return None
            orphan_end = self.orphan(buf, body_from, len(buf))
            complete_orphan = orphan_end >= 0 and buf.find(b"\n", orphan_end) >= 0
            if self.find_open(buf, body_from) < 0 and not complete_orphan:
                return Flaw("torn_tail", base + start, _TORN), len(buf)
            resume = self.skip(buf, body_from, True)
            assert resume is not None
            return Flaw("damaged", base + start, "frame has no end marker; skipped"), resume
        crc = zlib.crc32(memoryview(buf)[start:close_at])
        expected = self.close_format % (key, crc)
        crc_ok = close_end - close_at - 1 == len(expected) and buf.startswith(
            expected, close_at + 1
        )
        frame = Frame(
            base + start,
            base + close_end + 1,
            key.decode(),
            _ROLES[match.group(2)],
            match.group(3),
            buf[body_from:close_at],
            crc_ok,
        )
        return frame, close_end + 1


_CLOSE_FORMAT = {1: b"<!-- /chatloop:%s %08x -->", 2: b"<!-- /%s %08x -->"}
_SEALED = {version: close + b"\n" for version, close in _CLOSE_FORMAT.items()}
_ROLES = {role.encode(): role for role in ("user", "assistant", "tool", "summary")}
_GROW_MAX = MAX_FRAME_BYTES // 4
_NO_START = "a frame whose start marker is unreadable; skipped"
_TORN = "the last record is incomplete"


def iter_frames(
    source: bytes | BinaryIO, start: int, version: int, chunk: int = CHUNK_BYTES
) -> Iterator[Frame | Flaw]:
    """The frames (and flaws) of a session body, in file order, from ``start``.

    ``source`` is the whole file as bytes (``start`` is where its body begins),
    or a binary file object positioned at the body (``start`` is that position,
    so offsets are the file's). Never raises for damage.
    """
    scanner = _Scanner(version)
    if isinstance(source, bytes | bytearray):
        buf, base, pos, final = bytes(source), 0, start, True
        reader = None
    else:
        buf, base, pos, final = b"", start, 0, False
        reader = source
    open_match, close_prefix = scanner.open_re.match, scanner.close_prefix
    sealed, crc32 = _SEALED[scanner.version], zlib.crc32
    # A gap read in pieces (no open marker in what is held): where it began, whether its
    # damage was told, and where the last piece of it was let go (a frame read since
    # then, the gap is over).
    gap_from, gap_told, gap_to = -1, False, -1
    while True:
        # The common case, inline: a whole frame with its good checksum after one blank
        # line. ``KEY`` occurs nowhere in the content, so the first ``/KEY`` after the
        # open line is the close marker's (found first as the body's first "<", when
        # it is); any other case (a checksum that does not match, a close line edited
        # by hand) is read by ``step``, the general path.
        here = pos + 1 if buf.startswith(b"\n<!-- ", pos) else pos
        match = open_match(buf, here)
        if match is not None:
            key, role, info = match.groups()
            body_from = match.end()
            close_at = buf.find(b"<", body_from) - 1  # (memchr: most bodies hold no "<")
            if close_at < body_from or not buf.startswith(close_prefix + key, close_at):
                close_at = buf.find(close_prefix + key, body_from)
            if close_at >= 0:
                close = sealed % (key, crc32(buf[here:close_at]))
                if buf.startswith(close, close_at + 1):
                    yield Frame(
                        base + here,
                        base + close_at + 1 + len(close),
                        key.decode(),
                        _ROLES[role],
                        info,
                        buf[body_from:close_at],
                        True,
                    )
                    pos = close_at + 1 + len(close)
                    if final and pos >= len(buf):
                        return
                    continue
        out = scanner.step(buf, pos, final, base)  # everything else: gaps, damage, more data
        if out is None:
            assert reader is not None
            if scanner.find_open(buf, pos) < 0:  # a gap: keep only what may be a split marker
                if base + pos != gap_to:
                    gap_from, gap_told = base + pos, False
                if not gap_told and scanner.orphan(buf, pos, len(buf)) >= 0:
                    gap_told = True  # (told once, from where the gap began: as if read whole)
                    yield Flaw("damaged", gap_from, _NO_START)
                pos = max(pos, len(buf) - 64)
                gap_to = base + pos
            elif len(buf) - pos > MAX_FRAME_BYTES:
                opened = scanner.find_open(buf, pos)  # (where it opens: its offset)
                yield Flaw("damaged", base + opened, "a frame longer than 32 MiB; skipped")
                nxt = scanner.find_open(buf, opened + 1)
                pos = nxt if nxt >= 0 else len(buf)
                if nxt < 0:  # the rest of it, up to its close line, is a gap already told
                    gap_from, gap_told, gap_to = base + opened, True, base + pos
                continue
            # a frame longer than what is held is read in ever larger pieces, so that a
            # long one is searched and copied a few times, not once per chunk; never past
            # the limit, so that a frame over it is skipped whatever the chunk
            held = len(buf) - pos
            more = reader.read(min(max(chunk, min(held, _GROW_MAX)), MAX_FRAME_BYTES + 1 - held))
            if not more:
                final = True
            buf, base, pos = buf[pos:] + more, base + pos, 0
            continue
        item, pos = out
        if isinstance(item, Flaw) and item.detail is _NO_START and item.offset == gap_to:
            item = None if gap_told else Flaw("damaged", gap_from, _NO_START)
        if item is not None:
            yield item
        if final and pos >= len(buf):
            return
