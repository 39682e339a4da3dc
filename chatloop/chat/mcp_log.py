"""The MCP SDK's log: a private file in the chatloop home, never the terminal.

The ``mcp`` SDK logs through the standard ``logging`` module (a line it cannot
parse on a server's stdout is a ``logger.exception``, traceback and all). With no
handler installed, Python's last-resort handler prints each record on stderr: a
server that writes garbage would fill the person's terminal. ``to_file`` sends
the ``mcp`` logger (and its children, such as ``mcp.client.stdio``) to
``HOME/logs/mcp.log`` instead, and stops it from reaching the root logger.

The file is 0600 whatever the umask, never followed through a symbolic link,
and bounded: past ``LOG_BYTES`` it is renamed ``mcp.log.1`` (the one before
is dropped), so it holds at most twice that. An exception is logged as one line
(its type and the first line of its message), and a record is cut at
``MAX_RECORD`` characters: a flood costs a bounded file and little time. When
the file cannot be written (a read-only home) the records are dropped, still
never printed.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
from io import TextIOWrapper
from pathlib import Path
from types import TracebackType

from chatloop.store.fsio import FILE_MODE, ensure_dir

__all__ = ["LOGGERS", "LOG_BYTES", "LOG_NAME", "MAX_RECORD", "to_file"]

LOGGERS = ("mcp", "mcp_types")  # the SDK's packages (children log under these)
LOG_NAME = "mcp.log"
LOG_BYTES = 2 << 20  # then rotated once: at most twice this on disk
MAX_RECORD = 2000

_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]


class _PrivateLog(logging.handlers.RotatingFileHandler):
    """A rotating log file opened 0600, never through a symbolic link, whose own
    failures (a full disk, a file made unwritable) are dropped, never printed."""

    def _open(self) -> TextIOWrapper:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.baseFilename, flags, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)  # (a file an older version made broader)
        except OSError:
            os.close(fd)
            raise
        return open(fd, "a", encoding="utf-8", errors="backslashreplace")

    def handleError(self, record: logging.LogRecord) -> None:
        # logging's default prints a traceback on stderr: the very terminal this
        # file keeps the SDK off. A record that cannot be written is lost, no more.
        return


class _OneLine(logging.Formatter):
    """A record in one line: an exception as its type and first line, never a
    traceback; cut at MAX_RECORD characters."""

    def formatException(self, ei: _ExcInfo) -> str:
        kind, exc = ei[0], ei[1]
        if kind is None or exc is None:
            return ""
        said = str(exc).strip().splitlines()
        return f"{kind.__name__}: {said[0]}" if said else kind.__name__

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record).replace("\n", " | ")
        return text if len(text) <= MAX_RECORD else text[:MAX_RECORD] + " …"


def to_file(home: Path) -> Path | None:
    """Send the SDK's loggers (``LOGGERS``) to ``home/logs/mcp.log`` and never to the
    terminal; the file's path, or None when it cannot be made (records are dropped
    then). Called at each start of servers: a later call with another home moves
    the log there (the tests give each chat its own home)."""
    path = home / "logs" / LOG_NAME
    handler: logging.Handler
    made: Path | None = path
    try:
        ensure_dir(path.parent)
        handler = _PrivateLog(path, maxBytes=LOG_BYTES, backupCount=1, encoding="utf-8")
    except OSError:
        handler, made = logging.NullHandler(), None
    handler.setFormatter(_OneLine("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.propagate = False  # the root's last-resort handler prints on stderr
        for old in [h for h in logger.handlers if isinstance(h, _PrivateLog | logging.NullHandler)]:
            logger.removeHandler(old)
            old.close()
        logger.addHandler(handler)
    return made
