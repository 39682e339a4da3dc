"""Issue 49, item 3: a command that waits for the index says so on stderr with a count,
terminal or not (a log, a pipe, a cron job's mail), a line a second at most."""

from __future__ import annotations

from chatloop.format import Message
from chatloop.store.store import Store
from tests.conftest import T0, new_meta
from tests.pty_driver import run


def test_a_rebuild_says_its_count_on_a_stderr_that_is_no_terminal(store: Store) -> None:
    from chatloop.cli.wiring import QUIET_BELOW

    for n in range(QUIET_BELOW):
        with store.create(new_meta(title=f"session {n}")) as writer:
            writer.append(Message.create("user", T0, text=f"question {n}"))
            writer.finalize()
    done = run("reindex", home=store.root, cwd=store.cwd)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("indexing sessions")]
    assert lines and lines[-1] == f"indexing sessions: {QUIET_BELOW} of {QUIET_BELOW} files"
    assert len(lines) == len(set(lines))  # (each count once)
