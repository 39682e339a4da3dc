"""The words of a glanced index, read in a process of its own.

A sync that finds many files to read writes their rows from their front matter
alone (``index_build``, "glances"), so the command that ran it answers at once.
``start`` then leaves the rest, reading every such file in full for the
full-text index, to a detached process (``python -P -m
chatloop.store.index_text HOME``, isolated as every child: ``chatloop.children``):
one at a time per home (the build lock), quiet, and gone when done. A search
before it is done waits for it, with progress, or does the work itself if it
died (``Index.complete_text``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from chatloop import children

__all__ = ["main", "start"]


def start(root: Path) -> bool:
    """Start the process that reads the words of ``root``'s glanced rows; False when
    it cannot be started (the first search then reads them)."""
    try:
        subprocess.Popen(
            # isolated (chatloop.children): a `sqlite3.py` where the person stands, or in
            # the home, is never imported
            children.python_command("chatloop.store.index_text", str(root.resolve())),
            cwd=children.workdir(root),
            env=children.environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C at the prompt is not its to receive
            close_fds=True,
        )
    except OSError:
        return False
    return True


def main(argv: list[str]) -> int:
    """Fill in the words of the glanced rows of the home ``argv[1]``."""
    import sqlite3

    from chatloop.errors import ChatloopError
    from chatloop.store.index_build import fill_text
    from chatloop.store.index_file import INDEX_FILE, IndexFile
    from chatloop.store.store import Store

    if len(argv) != 2:
        print("usage: python -m chatloop.store.index_text HOME", file=sys.stderr)
        return 2
    root = Path(argv[1])
    try:
        file = IndexFile(root / INDEX_FILE)
        try:
            fill_text(file, Store(root))
        finally:
            file.close()
    except (ChatloopError, OSError, sqlite3.Error):
        return 1  # (a home gone or unwritable: the next search reads what is left)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
