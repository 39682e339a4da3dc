"""A look at the project folders taken by a child process, while this one goes on.

Knowing that the index is fresh costs one ``stat`` of every session file
(``Store.look``): 30-60 ms at 10,000 sessions, about a third of a listing.
Nothing in that look needs this process, so a forked child takes it on the
other core while this process imports SQLite and the index, opens it and loads
what the command will print with; the child sends back each folder's mark
(``FolderLook.mark``: its names, types, sizes and times), which is all a fresh
index is checked against. When the marks differ, or no child could be started,
the caller looks itself (the rows to re-read need every entry's stat, which
the mark does not carry).

Only a process with one thread forks (the child runs nothing but ``stat`` and
``marshal``, then ``os._exit``); elsewhere, or where there is no ``fork``, the
look is simply not taken ahead.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import signal
import sys

from chatloop.store.store import Store

__all__ = ["LookAhead", "Marks"]

Marks = list[tuple[str, bytes]]  # (project folder name, its mark), as Store.look makes them


class LookAhead:
    """Starts the child at once (``pid``; 0 when none could be); ``marks()`` waits for
    its answer and gives it once (a look is a moment: a second sync must look again);
    ``close()`` stops the child if it is still running (always call it: a child that
    was never read from would wait on its pipe)."""

    def __init__(self, store: Store, all_projects: bool) -> None:
        self.root = store.root
        self.all_projects = all_projects
        self.pid = 0
        self._running = False
        self._fd = -1
        self._done = True  # until a child is running
        threads = sys.modules.get("threading")
        if (not hasattr(os, "fork") or (threads is not None and threads.active_count() > 1)
                or signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN):  # fmt: skip
            return  # (children nobody may wait for: their ids could be reused)
        try:
            read_end, write_end = os.pipe()
        except OSError:
            return
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return
        if pid == 0:  # the child: look, answer, leave (no atexit, no buffered output)
            status = 1
            try:
                os.close(read_end)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                # Let go of the terminal and of whatever reads this process's output:
                # a parent that is killed must not leave them held open by its child.
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                data = marshal.dumps([(look.name, look.mark) for look in store.look(all_projects)])
                view = memoryview(data)
                while view:
                    view = view[os.write(write_end, view):]
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        self.pid, self._fd, self._running, self._done = pid, read_end, True, False

    @property
    def pending(self) -> bool:
        """Whether there is an answer still to take (a child was started, and ``marks``
        not yet asked)."""
        return not self._done

    def marks(self) -> Marks | None:
        """Each folder's (name, mark) as the child saw them, the first time it is asked;
        None if there is no answer, and on every later call."""
        if self._done:
            return None
        self._done = True
        chunks: list[bytes] = []
        marks: Marks | None = None
        try:
            while chunk := os.read(self._fd, 1 << 20):
                chunks.append(chunk)
            try:
                _, status = os.waitpid(self.pid, 0)
            finally:
                self._running = False  # reaped (or, ECHILD, reaped by someone else)
            if os.waitstatus_to_exitcode(status) == 0:
                value = marshal.loads(b"".join(chunks))
                if isinstance(value, list):
                    marks = value
        except (OSError, ValueError, EOFError, TypeError):
            marks = None
        finally:
            self.close()
        return marks

    def close(self) -> None:
        """Stop the child if it still runs, and let go of its pipe."""
        self._done = True
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._running:
            self._running = False
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)

    def __enter__(self) -> LookAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
