"""Files attached to a message (``chatloop -f FILE "…"``, ``/file PATH …``).

An attachment is carried in the message itself, as the model receives it and as
the transcript keeps it: a line naming the file as the person gave it and its
size, then its text in a code fence longer than any run of backticks in it (no
line of the file can close it). The file is read once, when attached; only text
is attached (a file with NUL bytes is refused), up to ``MAX_BYTES``; bytes that
are not UTF-8 are kept as ``\\xNN`` escapes, never lost and never guessed.
"""

from __future__ import annotations

import re
from pathlib import Path

from chatloop.errors import ChatloopError

__all__ = ["MAX_BYTES", "attachment", "with_attachments"]

MAX_BYTES = 256 * 1024  # about 64,000 tokens: more than a local model's window holds
_TICKS = re.compile(r"`+")


def attachment(given: str) -> str:
    """The attachment block of the file at ``given`` (a path as the person typed it);
    raises ChatloopError, with what to do, for a file that is missing, not a regular
    file, unreadable, binary or larger than ``MAX_BYTES``."""
    path = Path(given).expanduser()
    try:
        if not path.is_file():
            what = "a folder" if path.is_dir() else "no file"
            raise ChatloopError(f"{given} is {what}: only a file can be attached", "")
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ChatloopError(
                f"{given} is {size:,} bytes; an attachment is at most {MAX_BYTES:,}",
                f'Attach a part of it, e.g. `head -c 100000 {given} | chatloop "…"`.',
            )
        data = path.read_bytes()[:MAX_BYTES]
    except OSError as exc:
        raise ChatloopError(f"Cannot read {given}: {exc.strerror or exc}", "") from exc
    if b"\0" in data:
        raise ChatloopError(f"{given} is not text (it holds NUL bytes)", "Attach a text file.")
    text = data.decode("utf-8", "backslashreplace").rstrip("\n")
    fence = "`" * max(3, 1 + max((len(run) for run in _TICKS.findall(text)), default=0))
    return f"Attached file {given} ({len(data):,} bytes):\n{fence}\n{text}\n{fence}"


def with_attachments(text: str, blocks: list[str]) -> str:
    """``text`` (a question, maybe empty) followed by the attachment ``blocks``."""
    return "\n\n".join(part for part in (text, *blocks) if part)
