"""A session's summary written after its chat ended, by a detached worker process.

At the end of a chat (Ctrl-D, ``exit``, a signal, the end of a one-shot, and
``/new``, ``/resume``, a fork, ``/retry``, ``/edit`` or an agent switch, which
leave the session they were in), the person should not wait for the model.
``hand_off`` starts ``python -P -m chatloop.chat.background LOCK_FD`` (the job
on its stdin) and returns at once. The worker inherits the session's lock: the lock file's open
description is passed to it, so the session is never unlocked between the two
processes, and the lock file then names the worker (``fsio.mark_summary``), so
listings say ``summarizing`` and number it (``-c`` right after an exit
continues it: ``resumption.summarized`` waits for the worker,
``summary_wait`` seconds at most, then goes on from the summary built from the
transcript while the worker writes the file's own).

The worker summarizes and finalizes the session exactly as the chat would
have (``finish``: the summary the session began from, the model's summary
with its fallback, the title a session never named gets, the totals). It
shares the server by the rule of ``chat.sharing``: the person goes first. It
takes the server's turn among this home's workers, asks once the person has
been idle ``background_idle`` seconds, and when the person uses the server
again its request's connection is closed at once and the summary asked again,
whole, later (a yielded try is thrown away, never saved cut). A try has
``summary_worker_timeout`` seconds (``config``: 90) and the worker's whole
life ``summary_worker_patience`` (600); past either the worker writes the
fallback and ends, so a server that hangs, or a person who never leaves it
alone, keeps no worker (a process of some 30 MB) for long, one per chat that
ended. The job
is JSON on its stdin (never its command line, which other users can read: it
holds the API key): the session, the home and project folder, and the server
as the chat used it (its kind, URL and model, timeouts, window, the summary's
cap and timeout). It runs isolated as every child does (``chatloop.children``:
``-P``, in the home, absolute paths only): nothing is imported from the working
directory or the home.

Nothing is lost if the worker cannot start, is killed, or the machine stops:
the session stays ``open`` with nobody holding its lock, which every reader
takes as interrupted, and the next resume of it writes the missing summary
(the model's when the server answers, else the one built from the
transcript). A worker never starts for a backend it could not rebuild (the
tests' scripted ones), nor when the setting ``summaries`` is ``wait``.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from chatloop import children
from chatloop.backends.base import Backend
from chatloop.chat import sharing
from chatloop.chat.bounded import within
from chatloop.config import Settings
from chatloop.store.fsio import SUMMARY_HOLDER, lock_holder, mark_summary, wait_for_lock
from chatloop.store.store import Store
from chatloop.store.writer import SessionWriter

if TYPE_CHECKING:
    from chatloop.backends.base import Cancel

_T = TypeVar("_T")
KINDS = ("openai", "ollama", "embedded")  # the backends a worker can build again

__all__ = ["KINDS", "finish", "hand_off", "main"]


def hand_off(
    writer: SessionWriter,
    store: Store,
    backend: Backend,
    settings: Settings,
    changes: dict[str, Any],
    home: Path,
) -> int | None:
    """Start the worker that summarizes and finalizes ``writer``'s session (``changes``:
    front-matter values to write with it, a late title; ``home``: the person's, where
    the server's measurements and its sharing are kept), hand it the lock and close
    ``writer``. Returns the worker's pid; None, with ``writer`` untouched, when the
    backend is not one a worker can build or the process cannot start."""
    kind = getattr(backend, "kind", "")
    if kind not in KINDS:
        return None
    embedded = kind == "embedded"
    job = {
        "path": str(writer.path),
        "home": str(store.root),
        "person": str(home),
        "cwd": str(store.cwd),
        "changes": changes,
        "settings": settings._replace(
            backend=kind,
            base_url="" if embedded else backend.base_url,
            model=settings.model if embedded else backend.model,
        )._asdict(),
    }
    lock_fd = writer.lock_fd
    try:
        worker = subprocess.Popen(
            # isolated (chatloop.children): nothing imported from the working directory or
            # the home; the job comes on stdin, never on the command line, which every
            # local user can read (it holds the API key)
            children.python_command("chatloop.chat.background", str(lock_fd)),
            pass_fds=(lock_fd,),
            cwd=children.workdir(store.root),
            env=children.environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # no signal of the terminal's reaches it
        )
    except OSError:
        return None
    assert worker.stdin is not None
    try:
        worker.stdin.write(json.dumps(job).encode())  # (a few kB: the pipe takes it whole)
        worker.stdin.close()
    except OSError:  # it died at once: the lock goes with it, a resume finishes the session
        pass
    mark_summary(lock_fd, worker.pid)
    writer.close()  # our copy of the lock goes; the worker's holds it
    return worker.pid


def finish(
    writer: SessionWriter,
    store: Store,
    backend: Backend,
    settings: Settings,
    changes: dict[str, Any],
    home: Path,
) -> None:
    """Summarize ``writer``'s session and finalize it, as a chat closing it would (``home``:
    the person's, where the server's sharing is kept; ``changes["summary_leaves"]``:
    the last messages a compaction's child carries, which the summary leaves out): the
    summary it began from (``chain.began_from``), the model's summary of what was said
    (its fallback when the model fails), the totals, and ``changes`` (a late title).
    The model is asked by the rule of ``chat.sharing`` (``_when_free``): a try is given
    ``summary_worker_timeout`` seconds (the window asked of the server, the summary and
    its retry), the worker ``summary_worker_patience`` in all; past either the summary
    built from the transcript is written instead, so a server that hangs keeps no
    worker for long.
    Raises StoreError when the file cannot be finalized (it then stays open: a resume
    finishes it)."""
    from chatloop.backends.base import estimate_tokens
    from chatloop.chat import chain
    from chatloop.chat.context import summary_cap

    parent = chain.Parent(writer.path, writer.meta, None)
    above = store.parent_of(writer.path, writer.meta)
    if above is not None and lock_holder(above) == SUMMARY_HOLDER:
        # a compaction's parent whose model summary another worker is writing (it did
        # not wait for it): this summary continues from that one, so it waits for it
        wait_for_lock(above, settings.summary_worker_patience)
    previous = chain.began_from(store, parent)
    said = writer.messages  # (as marked: chain.summarize reads them, ledger_of too)
    # a compaction's parent: its last messages are carried by its child word for word
    leave = changes.get("summary_leaves", 0)
    said = said[: len(said) - leave] if isinstance(leave, int) and 0 < leave < len(said) else said

    def ask(cancel: Cancel) -> chain.SummaryOutcome:
        window = settings.context_window or backend.context_window() or None
        return chain.summarize(
            backend,
            said,
            previous=previous,
            window=window,
            max_tokens=summary_cap(window, settings.summary_max_tokens),
            timeout=settings.summary_timeout,
            # estimated, never counted by the server: a tokenizer call is a request the
            # person's can meet (llama.cpp's server cuts the running reply for any
            # request, a count included), and only the summary's own request yields
            count=estimate_tokens,
            cancel=cancel,
            # in pieces the person's request waits for at most one of (rule 4); an
            # in-process model reads no request but its own
            read_ahead=0 if backend.kind == "embedded" else sharing.READ_AHEAD_TOKENS,
        )

    shared = sharing.Shared(home, backend, settings.background_idle)
    outcome = _when_free(shared, settings, ask)
    if outcome is None:
        cap = summary_cap(settings.context_window or None, settings.summary_max_tokens)
        outcome = chain.fallback(said, previous, chain.summary_words(cap))
    writer.finalize(outcome.message(datetime.now().astimezone()), **changes)


def _when_free(
    shared: sharing.Shared, settings: Settings, ask: Callable[[Cancel], _T]
) -> _T | None:
    """What ``ask`` returns, asked by the rule of ``chat.sharing``: holding the
    server's turn among this home's workers, once the person has been idle
    ``background_idle`` seconds, and asked again, whole, each time the person's
    mark stops it (what a stopped try returned or raised is dropped: never a cut
    summary). None when ``summary_worker_patience`` runs out first (waiting for the
    turn, for idle, or in a try), or when a try that was not stopped took longer
    than ``summary_worker_timeout``."""
    from chatloop.backends.base import Cancel, Cancelled

    deadline = time.monotonic() + settings.summary_worker_patience
    with shared.turn(deadline) as ours:
        if not ours:
            return None
        while True:
            since = shared.wait_idle(deadline)
            left = deadline - time.monotonic()
            if since is None or left <= 0:
                return None
            cancel = Cancel(when=functools.partial(shared.marked_since, since))
            with shared.watch(since, cancel) as seen:
                try:
                    outcome = within(
                        min(settings.summary_worker_timeout, left),
                        functools.partial(ask, cancel),
                        cancel.set,
                    )
                except Cancelled:  # (the mark's, seen by the watch or by the Cancel itself)
                    if not (seen.yielded.is_set() or shared.marked_since(since)):
                        raise
                    outcome = None
            if not seen.yielded.is_set():
                return outcome


def main(argv: list[str]) -> int:
    """The worker: ``LOCK_FD`` on its command line, the job (JSON) on stdin (see the
    module doc). Exit 0 when the session was finalized, 1 when it was left for a resume
    to finish."""
    from chatloop.chat import server
    from chatloop.errors import ChatloopError

    lock_fd = int(argv[0])
    try:
        job = json.loads(sys.stdin.buffer.read())
    except ValueError:
        return 1
    settings = Settings(**job["settings"])
    store = Store(Path(job["home"]), cwd=Path(job["cwd"]))
    person = Path(job["person"])
    try:
        writer = store.adopt(Path(job["path"]), lock_fd)
    except ChatloopError:
        return 1
    try:
        # the person's home: their measurements of the server (probes), and its sharing
        backend = server.make(settings, home=person, keep_alive=False)  # (closable: sharing)
        try:
            finish(writer, store, backend, settings, job["changes"], person)
        finally:
            backend.close()
    except (ChatloopError, OSError):
        return 1
    finally:
        writer.close()
    return 0


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main(sys.argv[1:]))
