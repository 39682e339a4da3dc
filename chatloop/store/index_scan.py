"""Reading session files for the index: skims, many at a time, and search snippets.

What is read out of a file is the format's business (``chatloop.format.skim``,
built on the one frame scanner); this module opens the files (through
``chatloop.store.fsio``) and finds where a search word occurs, frame by frame,
in constant memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from chatloop.errors import ChatloopError
from chatloop.format import UNREADABLE, Skim, message_from, open_document, skim, words_of
from chatloop.store.fsio import open_read

_SNIPPET_CHARS = 60  # of context each side of a search hit

__all__ = ["hit_in", "is_copy_label", "scan_file"]


def scan_file(path: str, words: Callable[[bytes], None] | None = None) -> tuple[str, Skim | None]:
    """Skim one file; None if it vanished or cannot be read (the next sync retries).
    With ``words``, the searchable text is handed to it in chunks as it is read
    (the skim's own ``text`` is then empty)."""
    try:
        with open_read(Path(path)) as handle:
            return path, skim(handle, Path(path).stem, words)
    except (OSError, ChatloopError):
        return path, None


COPY_LABELS = {"restore": "restored", "summary": "summary"}  # hits in a copy, so labelled


def hit_in(path: Path, word: str) -> tuple[str, str]:
    """The role of the message where ``word`` first occurs as a whole word, and a
    one-line snippet of that message around it, the word in [brackets]; ("", "") if
    the file no longer holds it. A message the person or the model wrote wins over a
    copy of one (a summary, a restoration prompt, its acknowledgment): a hit only in
    copies is labelled "summary" or "restored". Reads frame by frame: only a frame
    that holds the word becomes a message, and reading stops at the first original."""
    pattern = re.compile(r"(?<![^\W_])" + re.escape(word) + r"(?![^\W_])", re.IGNORECASE)
    copy: tuple[str, str] = ("", "")
    try:
        with open_read(path) as handle:
            doc = open_document(handle, path.stem)
            if doc.legacy:
                return _best_hit(doc.messages(), pattern)
            quick = re.compile(re.escape(word.encode()), re.IGNORECASE) if word.isascii() else None
            for frame in doc.frames():
                if quick is not None and quick.search(frame.body) is None:
                    continue  # a cheap first look at the bytes, for ASCII words
                if pattern.search(frame.body.decode("utf-8", "replace")) is None:
                    continue
                try:
                    message = message_from(frame, doc.meta, [])
                except UNREADABLE:
                    continue
                found = _first_hit(iter([message]), pattern)
                if not found[0]:
                    continue
                if not _is_copy(message):
                    return found
                copy = copy if copy[0] else found
    except (OSError, ChatloopError):
        return copy
    return copy


def is_copy_label(role: str) -> bool:
    """True for the label of a hit found only in copies (summaries, restorations)."""
    return role in COPY_LABELS.values()


def _is_copy(message: object) -> bool:
    from chatloop.format import Message

    assert isinstance(message, Message)
    return message.role == "summary" or message.restore


def _best_hit(messages: Iterator[object], pattern: re.Pattern[str]) -> tuple[str, str]:
    """The first hit in an original message, else the first in a copy."""
    copy: tuple[str, str] = ("", "")
    for message in messages:
        found = _first_hit(iter([message]), pattern)
        if found[0] and not _is_copy(message):
            return found
        copy = copy if copy[0] else found
    return copy


def _first_hit(messages: Iterator[object], pattern: re.Pattern[str]) -> tuple[str, str]:
    from chatloop.format import Message

    for message in messages:
        assert isinstance(message, Message)
        said = " ".join(words_of(message).split())
        inside = pattern.search(said)
        if inside is None:
            continue  # the word was in the frame's markup, not its content
        before = said[max(0, inside.start() - _SNIPPET_CHARS) : inside.start()]
        after = said[inside.end() : inside.end() + _SNIPPET_CHARS]
        lead = tail = ""
        if inside.start() > _SNIPPET_CHARS:  # cut: start and end on whole words
            lead, before = "…", before.partition(" ")[2]
        if inside.end() + _SNIPPET_CHARS < len(said):
            tail, after = "…", after.rpartition(" ")[0]
        role = (
            COPY_LABELS["summary" if message.role == "summary" else "restore"]
            if _is_copy(message)
            else message.role
        )
        return role, f"{lead}{before}[{inside.group()}]{after}{tail}"
    return "", ""
