"""A separate process that writes a session, for crash and locking tests.

python -m tests.child_writer append PATH     open PATH, append messages forever,
                                             printing "wrote N" after each returns
python -m tests.child_writer rewrite PATH    rewrite the front matter forever, printing
                                             "rewriting" once the first rewrite is done
python -m tests.child_writer hold PATH       take the lock, print "locked", sleep
python -m tests.child_writer fsize PATH K    with RLIMIT_FSIZE = size + K, append a
                                             big message; print the outcome, then
                                             append a small one with no limit
python -m tests.child_writer draftuser PATH K
                                             draft a reply, then with RLIMIT_FSIZE =
                                             size + K append a message of the person's
                                             (the draft is written whole first)
python -m tests.child_writer draftfull PATH K
                                             draft a reply, then with RLIMIT_FSIZE =
                                             size + K draft it longer; print the
                                             outcome, then append the whole reply
                                             with no limit
python -m tests.child_writer halfclose PATH  finalize with a summary, and be killed
                                             (SIGKILL) as the closed front matter's
                                             temp file is about to be renamed over
                                             PATH: a summary worker killed in the
                                             middle of its close
"""

from __future__ import annotations

import resource
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

from chatloop.errors import StoreError
from chatloop.format import UNFINISHED, Message, Usage
from chatloop.store.store import Store


def _store(path: Path) -> Store:
    return Store(path.parent.parent.parent, cwd=path.parent)


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> None:
    mode, path = argv[0], Path(argv[1])
    if mode == "halfclose":
        _half_close(path)
        return
    writer = _store(path).open(path)
    now = datetime.now().astimezone()
    if mode == "append":
        n = writer.query_count
        while True:
            n += 1
            writer.append(Message.create("user", now, text=f"message {n} " + "x" * 400))
            _say(f"wrote user {n}")
            writer.append(Message.create("assistant", now, text=f"reply {n}", usage=Usage(5, 7)))
            _say(f"wrote assistant {n}")
    elif mode == "rewrite":
        i = 0
        while True:
            i += 1
            writer.update_meta(title=f"title {i} " + "y" * (i % 300))
            if i == 1:
                _say("rewriting")
    elif mode == "hold":
        _say("locked")
        time.sleep(60)
    elif mode == "fsize":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        size = path.stat().st_size
        limit = size + int(argv[2])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        before = path.read_bytes()
        try:
            writer.append(Message.create("user", now, text="big " + "z" * 5000))
            _say("appended")
        except StoreError as exc:
            _say(f"error: {exc.message} | {exc.hint} | unchanged={path.read_bytes() == before}")
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        writer.append(Message.create("user", now, text="after the disk was freed"))
        _say("recovered")
    elif mode in ("draftuser", "draftfull"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        part = dict(stop_reason=UNFINISHED, interrupted=True)
        writer.draft(Message.create("assistant", now, text="Basil wants sun.", **part))
        before = path.read_bytes()
        resource.setrlimit(
            resource.RLIMIT_FSIZE, (len(before) + int(argv[2]), resource.RLIM_INFINITY)
        )
        longer = Message.create("assistant", now, text="Basil wants sun. " * 40, **part)
        try:
            if mode == "draftuser":
                writer.append(Message.create("user", now, text="and mint?"))
            else:
                writer.draft(longer)
            _say("written")
        except StoreError as exc:
            _say(f"error: {exc.message} | unchanged={path.read_bytes() == before}")
        if mode == "draftfull":
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
            writer.append(Message.create("assistant", now, text="Basil wants sun. " * 40))
            _say("appended")


def _half_close(path: Path) -> None:
    """Finalize ``path`` as a summary worker does (its writer adopted: the session stays
    ``open``), and die by SIGKILL as the closed front matter's temp file is about to
    be renamed over it."""
    import os

    from chatloop.store.fsio import take_lock

    writer = _store(path).adopt(path, take_lock(path))

    def killed(*_: object) -> None:  # the rename that never happens
        os.kill(os.getpid(), signal.SIGKILL)

    os.replace = killed
    now = datetime.now().astimezone()
    writer.finalize(Message.create("summary", now, text="**Background Context:** basil"))


if __name__ == "__main__":
    main(sys.argv[1:])
