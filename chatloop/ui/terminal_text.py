"""Text as a terminal shows it: made safe (``visible``) and measured in cells.

Everything from a model, a tool, a file or a person passes ``visible`` before it
reaches a terminal, so none of it acts as a control sequence. ``cells`` and
``clip`` measure and cut such text as the terminal draws it, a grapheme at a
time, with rich's tables: a wide character takes two cells, a combining one
none, and an emoji sequence joined by ZWJ is one picture of two cells.
``rich.cells`` alone is loaded (about 1.5 ms, not rich's console), and only
when something is measured: a listing to a pipe never is, and loads no rich.
"""

from __future__ import annotations

import codecs
import re
from typing import BinaryIO

__all__ = ["VisibleBytes", "cells", "clip", "visible"]

# C0 controls (but tab and newline), DEL and C1 controls become visible pictures or
# escapes; bidirectional overrides too: none of them may reach a terminal as such.
_VISIBLE = {code: chr(0x2400 + code) for code in range(32) if chr(code) not in "\t\n"}
_VISIBLE[0x7F] = "\u2421"
_VISIBLE.update({code: f"\\x{code:02x}" for code in range(0x80, 0xA0)})
_VISIBLE.update(
    {code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}
)


_UNSAFE = re.compile("[" + "".join(re.escape(chr(code)) for code in _VISIBLE) + "]")
# The same table as a list indexed by code point (past its end, a character is kept):
# str.translate looks a list up faster than a dict.
_TABLE: list[int | str] = list(range(max(_VISIBLE) + 1))
for _code, _shown in _VISIBLE.items():
    _TABLE[_code] = _shown


def visible(text: str) -> str:
    """``text`` safe to print to a terminal: control characters (ESC, BEL, OSC, C1,
    bidirectional overrides) are shown as visible symbols, never acted on."""
    if text.isascii() or _UNSAFE.search(text) is not None:
        return text.translate(_TABLE)  # (translate has a fast path for ASCII text)
    return text  # other text is looked through once, in C, not char by char


class VisibleBytes:
    """A binary sink that passes what is written to ``sink`` made ``visible``: for a
    file's bytes copied to a terminal (``show --raw``, ``export``), a chunk at a time
    (memory does not grow with the file). UTF-8 split between two chunks is joined
    first; bytes that are not UTF-8 are written as ``\\xNN``, never as such (a lone
    C1 byte is a control to some terminals). ``close`` writes what a last chunk left
    pending (the start of a character never finished)."""

    def __init__(self, sink: BinaryIO) -> None:
        self._sink = sink
        self._decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")

    def write(self, data: bytes) -> int:
        text = self._decoder.decode(data)
        if text:
            self._sink.write(visible(text).encode("utf-8"))
        return len(data)

    def flush(self) -> None:
        self._sink.flush()

    def close(self) -> None:
        """Write what is pending and flush; the sink itself stays open."""
        text = self._decoder.decode(b"", final=True)
        if text:
            self._sink.write(visible(text).encode("utf-8"))
        self._sink.flush()


def cells(text: str) -> int:
    """How many terminal cells ``text`` (one line, made ``visible``) takes."""
    from rich.cells import cell_len

    return cell_len(text)


def clip(text: str, room: int, least: int = 8) -> str:
    """``text`` cut to ``room`` terminal cells (``least`` at least), "…" where it was
    cut, never inside a grapheme (a character and its combining marks, an emoji
    sequence)."""
    from rich.cells import cell_len, split_graphemes

    room = max(room, least)
    if (text.isascii() and len(text) <= room) or cell_len(text) <= room:
        return text
    spans, _ = split_graphemes(text)
    used = end = 0
    for _start, stop, width in spans:
        used += width
        if used > room - 1:
            break
        end = stop
    return text[:end] + "…"
