"""THE rule for sharing a model server between the person and this home's background work.

A local model server usually has one slot: while it answers one request, the next
waits (Ollama and LM Studio queue it; llama.cpp's server defers it) or cuts the
first (llama-cpp-python). The rule, stated once: **on a server the person is using
or about to use, the person goes first; background work of this home yields.**
Background work is, today, the summary worker of a chat that ended
(``chat.background``). How the rule is kept:

1. **The person marks.** As a chat, a one-shot or ``-c`` starts, before its server
   is chosen, the person's process marks the home (``arrive``: one ``utime`` of
   ``<home>/.sharing/person.use``), which every worker of the home counts as a
   mark of its server; at the start-up check (``server.connect``) it calls
   ``use``: one ``utime`` of ``<home>/.sharing/<key>.use`` (made the first time).
   A turn (its requests to the model and the tools between them) runs in
   ``using``: marked at its start and at its end, and held meanwhile (a shared
   ``flock`` on that file), so that a worker never starts in the middle of a
   reply, however long it streams (a mark alone is one moment: a reply longer
   than ``background_idle`` looked idle, and llama-cpp-python cuts a running
   stream for a new request). None of it waits or fails the person's request (a
   home it cannot write marks nothing).
2. **One worker at a time per server.** A worker takes the server's turn first
   (``Shared.turn``: an ``flock`` on ``<key>.turn``); the other workers of this
   home wait for it, so at most one of them asks the model at a time, and a
   worker killed lets go of it with its process.
3. **The worker waits for idle.** Holding the turn, it asks the model only once
   no turn of the person's is under way and they have left the server alone for
   ``background_idle`` seconds since their last mark (``Shared.wait_idle``).
4. **It yields at once.** While its request runs it watches the mark
   (``Shared.watch``: a thread that looks every ``POLL_SECONDS``). A newer mark
   sets the request's ``Cancel``, which closes the request's connection there and
   then (``backends.http.open_stream``: even a request still in prompt
   processing, which sends nothing to check between pieces), so the server drops
   it and takes the person's. What that request brought is thrown away, never
   saved (a cut summary is never the model's); the worker waits for idle again
   and asks again, whole. The request's ``Cancel`` also looks at the mark itself
   each time it is checked (``Cancel.when``), so nothing is sent after a mark the
   watch has not seen yet. And a server that reads a prompt without looking up
   (llama-cpp-python: a request that arrives, its model list included, waits until
   the whole prompt is read, however it was cancelled) is given the worker's
   prompt in pieces of ``READ_AHEAD_TOKENS`` first (one-token requests of longer
   and longer beginnings, each read on top of the last: ``chain.summarize``'s
   ``read_ahead``), the mark looked at before each: the person waits for one piece
   at most, not for the whole prompt.
5. **Nothing waits for ever.** A worker's whole life (its turn, its idle waits,
   every try) is bounded by ``summary_worker_patience``; each try that is not
   yielded by ``summary_worker_timeout``. Past either it writes the summary built
   from the transcript and ends.

A person who waits *for* background work steps back (``step_back``): ``-c`` right
after an exit waits for the summary the worker writes (``summary_wait``), and its
own start-up mark would otherwise hold that very worker back. The mark is set to
"long ago", which counts as idle but is never "newer" for a worker watching its
request. (Another chat of the person on the same server marks again with its
next request, and the worker yields again then.)

The key of a server is its origin (scheme, host and port, hashed): Ollama's own API
and its ``/v1`` are one server with one slot, whatever the backend kind. The
embedded model's key is ``embedded``: every chat and worker of this home that loads
it shares one key, so a worker does not load its copy (a second one in memory) while
a chat is using its own; once the person has been idle ``background_idle`` seconds it
does, and it stops between tokens when the person comes back (an in-process model
has no connection to close: a prompt it is reading is read to the end first).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:  # (the CLI marks the person's arrival before the backends load)
    from chatloop.backends.base import Backend, Cancel

FOLDER = ".sharing"
ARRIVAL = "person.use"  # the home's mark of a chat starting, its server not chosen yet
POLL_SECONDS = 0.1  # how often a worker's request looks at the person's mark
# a worker's prompt is read in pieces of this many tokens (about): what a person's request
# waits at most behind it on a server that reads a prompt without looking up (well under a
# second with a small model on two busy cores; a few seconds with a 7B one on a laptop).
# bench/read_ahead.py on an idle machine (llama_cpp.server, Gemma 3 270M): the person waited
# 0.87-0.94 s behind pieces of 64, 0.23-0.42 s behind 32, no less behind 8-24 (a request's
# own cost then rules); a smaller piece costs the worker a request each
READ_AHEAD_TOKENS = 32
EMBEDDED = "embedded"

HOLD_TRIES = 5  # a worker's look at the hold (an instant) can refuse the person's: again

__all__ = [
    "ARRIVAL",
    "POLL_SECONDS",
    "READ_AHEAD_TOKENS",
    "Shared",
    "Watch",
    "arrive",
    "key",
    "step_back",
    "use",
    "using",
]


def key(kind: str, base_url: str) -> str:
    """The name of a server's files: ``embedded`` for the in-process model, else a hash
    of the URL's origin (scheme, host, port): one server, one key, whatever path or
    backend kind reaches it."""
    if kind == EMBEDDED:
        return EMBEDDED
    parts = urlsplit(base_url.strip())
    port = parts.port or {"https": 443}.get(parts.scheme, 80)
    origin = f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"
    return hashlib.sha256(origin.encode()).hexdigest()[:16]


def _mark_path(home: Path, backend: Backend) -> Path:
    return home / FOLDER / f"{key(backend.kind, backend.base_url)}.use"


def _touch(path: Path, ns: int) -> None:
    """Set ``path``'s times to ``ns`` (made, 0600, in a 0700 folder, when missing);
    never through a symlink. OSError when the home cannot be written."""
    try:
        os.utime(path, ns=(ns, ns), follow_symlinks=False)
        return
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)
    os.utime(path, ns=(ns, ns), follow_symlinks=False)


def use(home: Path, backend: Backend) -> None:
    """The person's process is about to ask ``backend``'s server: mark it now (rule 1).
    One ``utime``; never waits, never raises (nothing is marked in a home that cannot
    be written: its workers then do not yield, as before this rule)."""
    with contextlib.suppress(OSError):
        _touch(_mark_path(home, backend), time.time_ns())


def arrive(home: Path) -> None:
    """A chat, one-shot or ``-c`` of the person is starting in ``home`` and will choose
    its server in a moment: mark the home now (rule 1, its first moment), so that
    every worker of this home yields while the person's process loads, before
    ``use`` marks the server chosen (a worker's piece being read then ends sooner,
    and its reading no longer takes the cores the start-up needs). Workers of another
    server yield too, for ``background_idle`` seconds at most. Never waits, never
    raises."""
    with contextlib.suppress(OSError):
        _touch(home / FOLDER / ARRIVAL, time.time_ns())


@contextlib.contextmanager
def using(home: Path, backend: Backend) -> Iterator[None]:
    """The block is the person's turn on ``backend``'s server (rule 1): marked as it
    begins (a worker's request under way yields) and as it ends (idle is counted from
    the end), and held while it runs (a shared ``flock`` on the mark), so no worker of
    this home begins in the middle of it. Never waits for a worker (a worker looks at
    the hold for an instant: a hold refused HOLD_TRIES times, a millisecond apart, is
    gone without, and the mark still tells) and never raises what the home does."""
    use(home, backend)
    fd = None
    with contextlib.suppress(OSError):
        fd = os.open(_mark_path(home, backend), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        for _ in range(HOLD_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:  # a worker looking, for an instant
                time.sleep(0.001)
    try:
        yield
    finally:
        use(home, backend)  # (before the hold goes: a worker then sees this mark)
        if fd is not None:
            os.close(fd)


def step_back(home: Path, backend: Backend) -> None:
    """The person now waits for this home's background work on ``backend``'s server (a
    summary being written): its mark counts as idle from now (see the module doc).
    Never raises."""
    for path in (_mark_path(home, backend), home / FOLDER / ARRIVAL):
        with contextlib.suppress(OSError):
            if path.exists():
                _touch(path, 0)


class Watch:
    """What ``Shared.watch`` saw: ``yielded`` is set when the person marked the server
    during the request (its ``Cancel`` was set then)."""

    def __init__(self) -> None:
        self.yielded = threading.Event()


class Shared:
    """A worker's view of one server of ``home`` under the rule of this module."""

    def __init__(self, home: Path, backend: Backend, idle: float) -> None:
        self.folder = home / FOLDER
        self.name = key(backend.kind, backend.base_url)
        self.idle = idle

    @property
    def _mark(self) -> Path:
        return self.folder / f"{self.name}.use"

    def marked_since(self, since: int) -> bool:
        """True when the person marked the server after ``since`` (``last_use``)."""
        return self.last_use() > since

    def last_use(self) -> int:
        """When the person last marked the server, or arrived in the home (``arrive``),
        whichever is later (ns since the epoch); 0 for never, and for marks stepped
        back."""
        times = [0]
        for path in (self._mark, self.folder / ARRIVAL):
            with contextlib.suppress(OSError):
                times.append(os.stat(path, follow_symlinks=False).st_mtime_ns)
        return max(times)

    @contextlib.contextmanager
    def turn(self, deadline: float) -> Iterator[bool]:
        """The server's turn among this home's workers (rule 2), waited for until
        ``deadline`` (``time.monotonic``): yields True while it is held, False when it
        could not be had in time (or the home cannot be written: then True, unshared,
        as before this rule)."""
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(
                self.folder / f"{self.name}.turn",
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
        except OSError:
            yield True
            return
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(POLL_SECONDS)
            yield True
        finally:
            os.close(fd)  # (the lock goes with it)

    def wait_idle(self, deadline: float) -> int | None:
        """Wait until the person has left the server alone ``idle`` seconds (rule 3):
        returns the mark the idle time was measured from (``last_use``), which the
        request's ``watch`` is given; None when ``deadline`` (``time.monotonic``) came
        first."""
        while True:
            mark = self.last_use()
            wait = mark / 1e9 + self.idle - time.time()
            if wait <= 0 and not self._held():
                return mark
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(left, POLL_SECONDS))  # (a step back counts at once)

    def _held(self) -> bool:
        """True while a turn of the person's holds the mark (``using``): looked at by
        taking it exclusively, for an instant, and letting it go."""
        try:
            fd = os.open(self._mark, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            os.close(fd)  # (and with it the lock, when it was taken)
        return False

    @contextlib.contextmanager
    def watch(self, since: int, cancel: Cancel) -> Iterator[Watch]:
        """While the block runs (the worker's request), a mark newer than ``since``
        sets ``cancel`` (which closes the request's connection) and the yielded
        ``Watch``'s ``yielded`` (rule 4)."""
        seen = Watch()
        done = threading.Event()

        def look() -> None:
            while not done.wait(POLL_SECONDS):
                if self.marked_since(since):
                    seen.yielded.set()
                    cancel.set()
                    return

        watcher = threading.Thread(target=look, name="chatloop-sharing", daemon=True)
        watcher.start()
        try:
            yield seen
        finally:
            done.set()
            watcher.join()
            # a server that cuts the running request for the person's (llama.cpp's) ends
            # it before the next look: a mark newer than ``since`` is a yield all the same
            if self.marked_since(since):
                seen.yielded.set()
