"""Issue 32, item 1: the summary of a chat that ended is written by a detached worker;
the person is back at the shell at once, and nothing is lost if the worker dies.

The scripted server holds every summary request until the test lets it go (an event,
never a sleep), so "the program ended while its summary was still being written" is
seen, not timed."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pexpect
import pytest

from chatloop.format import Session, parse_markdown
from chatloop.store.fsio import SUMMARY_HOLDER, lock_holder, lock_path, wait_for_lock
from tests.fakes import STRUCTURED
from tests.pty_driver import chatloop_bin, environment
from tests.scripted_server import scripted_server

pytestmark = pytest.mark.e2e


class HeldSummaries:
    """A scripted server whose summary requests wait for ``release``."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked = threading.Event()  # a summary request came
        self.summaries = 0
        self.pieces = 0  # one-token reads of a summary prompt's beginnings (read ahead)

    def reply(self, request: dict[str, Any]) -> str:
        last = str(request["messages"][-1]["content"])
        if "progressive summary" in last and request.get("max_tokens") == 1:
            self.pieces += 1  # (the worker's prompt read in pieces: answered at once)
            return "The"
        if "progressive summary" in last:
            self.summaries += 1
            self.asked.set()
            self.release.wait(120)
            return STRUCTURED
        return "Water it when the top of the soil is dry."


@contextmanager
def held_server() -> Iterator[tuple[str, HeldSummaries]]:
    held = HeldSummaries()
    with scripted_server(held.reply) as url:
        try:
            yield url, held
        finally:
            held.release.set()  # (before the server stops: no request is left waiting)


def _env(home: Path) -> dict[str, str]:
    return {**environment(home, 16), "CHATLOOP_SUMMARIES": "background"}


def _chatloop(url: str, home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chatloop_bin(), "--base-url", url, *args],
        cwd=cwd,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _only_session(home: Path) -> Path:
    (path,) = [p for p in home.rglob("*.md")]
    return path


def _read(path: Path) -> Session:
    return parse_markdown(path.read_bytes()).session


def test_a_one_shot_ends_before_its_summary_and_the_worker_closes_the_session(
    chatloop_home: Path, project: Path
) -> None:
    with held_server() as (url, held):
        done = _chatloop(url, chatloop_home, project, "How often should I water basil?")
        # the program has ended; its summary request is still held by the server
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "Water it when the top of the soil is dry."
        assert "summary is being written in the background" in done.stderr
        assert held.asked.wait(60)
        path = _only_session(chatloop_home)
        assert lock_holder(path) == SUMMARY_HOLDER
        listing = _chatloop(url, chatloop_home, project, "sessions")
        assert "[summarizing]" in listing.stdout and listing.stdout.lstrip().startswith("1 ")
        held.release.set()
        wait_for_lock(path)
    session = _read(path)
    assert session.meta.status == "closed" and session.meta.summary == "model"
    assert session.summary is not None and "Background Context" in session.summary.text
    assert [m.text for m in session.messages if m.is_query] == ["How often should I water basil?"]
    assert session.meta.queries == 1 and session.meta.title  # totals and a title, as ever
    assert held.summaries == 1
    assert not lock_holder(path)


def test_continue_right_after_an_exit_waits_for_the_summary_being_written(
    chatloop_home: Path, project: Path
) -> None:
    """An exit, then `-c` at once: the second chatloop waits for the worker (it writes
    the very summary wanted) and continues from it; the model summarizes once."""
    with held_server() as (url, held):
        first = _chatloop(url, chatloop_home, project, "How often should I water basil?")
        assert first.returncode == 0, first.stderr
        assert held.asked.wait(60)
        parent = _only_session(chatloop_home)
        again = subprocess.Popen(
            [chatloop_bin(), "--base-url", url, "-c", "And in winter?"],
            cwd=project,
            env={**_env(chatloop_home), "CHATLOOP_SUMMARY_WAIT": "600"},  # (the test lets go)
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert again.stderr is not None
        before = [again.stderr.readline()]
        while "Waiting for the summary" not in before[-1]:
            assert before[-1], "the second chatloop did not wait"
            before.append(again.stderr.readline())
        held.release.set()
        _out, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        said = "".join(before) + err  # a summary being written is said so, once
        assert "no summary" not in said and "interrupted" not in said, said
        wait_for_lock(parent)
        for path in chatloop_home.rglob("*.md"):
            wait_for_lock(path)
    sessions = sorted(
        (_read(p) for p in chatloop_home.rglob("*.md")),
        key=lambda s: (s.meta.created, s.meta.parent_id is not None),  # (the same second)
    )
    first_file, child = sessions
    assert first_file.meta.status == "closed" and first_file.meta.summary == "model"
    assert child.meta.parent_id == first_file.meta.id
    restoration = child.messages[0]
    assert restoration.restore and "Background Context" in restoration.text
    assert [m.text for m in child.messages if m.is_query] == ["And in winter?"]


def test_a_worker_killed_leaves_the_session_for_the_next_resume_to_finish(
    chatloop_home: Path, project: Path
) -> None:
    with held_server() as (url, held):
        done = _chatloop(url, chatloop_home, project, "How often should I water basil?")
        assert done.returncode == 0, done.stderr
        assert held.asked.wait(60)
        path = _only_session(chatloop_home)
        pid = int(lock_path(path).read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        wait_for_lock(path)
        assert _read(path).meta.status == "open"  # nothing written, nothing lost
        listing = _chatloop(url, chatloop_home, project, "sessions")
        assert "[interrupted]" in listing.stdout and listing.stdout.lstrip().startswith("1 ")
        doctor = _chatloop(url, chatloop_home, project, "doctor")
        assert "1 session(s) ended without a summary" in doctor.stdout + doctor.stderr
        held.release.set()
        resumed = _chatloop(url, chatloop_home, project, "-c", "And in winter?")
        assert resumed.returncode == 0, resumed.stderr
        assert "Wrote the missing summary" in resumed.stderr
        for made in chatloop_home.rglob("*.md"):
            wait_for_lock(made)
    parent = _read(path)
    assert parent.meta.status == "closed" and parent.summary is not None
    assert [m.text for m in parent.messages if m.is_query] == ["How often should I water basil?"]


def test_two_exits_in_a_row_each_hand_their_own_session_to_a_worker(
    chatloop_home: Path, project: Path
) -> None:
    with held_server() as (url, held):
        for question in ("First question?", "Second question?"):
            done = _chatloop(url, chatloop_home, project, question)
            assert done.returncode == 0, done.stderr
        paths = list(chatloop_home.rglob("*.md"))
        assert len(paths) == 2 and all(lock_holder(p) == SUMMARY_HOLDER for p in paths)
        held.release.set()
        for path in paths:
            wait_for_lock(path)
    assert all(_read(p).meta.status == "closed" for p in paths)
    assert all(_read(p).meta.summary == "model" for p in paths)
    # (the first worker's request yields to the second one-shot and is asked again:
    # chat.sharing, tests/test_sharing.py; each session's summary is the model's)
    assert held.summaries >= 2


def test_ctrl_d_in_the_chat_is_back_at_the_shell_before_the_summary(
    chatloop_home: Path, project: Path
) -> None:
    """The REPL: a message, then Ctrl-D; the program ends while the summary request is
    still held, and the worker finishes the file."""
    from tests.pty_driver import ready, spawn, wait

    with held_server() as (url, held):
        child = spawn(url, chatloop_home, project, 16, summaries="background")
        child.sendline("How often should I water basil?")
        wait(child, ready(1))
        child.sendeof()
        child.expect("summary is being written in the background")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
        assert held.asked.wait(60)  # the program has ended; its summary is still held
        path = _only_session(chatloop_home)
        assert lock_holder(path) == SUMMARY_HOLDER and _read(path).meta.status == "open"
        held.release.set()
        wait_for_lock(path)
    assert _read(path).meta.status == "closed" and _read(path).meta.summary == "model"


def test_retry_answers_before_the_summary_of_what_it_leaves(
    chatloop_home: Path, project: Path
) -> None:
    """/retry branches at once: the new answer comes while the summary of the session
    it leaves is still held by the server."""
    from tests.pty_driver import ready, spawn, wait

    with held_server() as (url, held):
        child = spawn(url, chatloop_home, project, 16, summaries="background")
        child.sendline("How often should I water basil?")
        wait(child, ready(1))
        child.sendline("/retry")
        wait(child, "Forked:")
        wait(child, ready(1))  # the branch's answer is in
        assert held.asked.wait(60)  # while the summary of the session it left is held:
        held_ones = [p for p in chatloop_home.rglob("*.md") if lock_holder(p) == SUMMARY_HOLDER]
        assert len(held_ones) == 1 and _read(held_ones[0]).meta.status == "open"
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
        held.release.set()
        paths = list(chatloop_home.rglob("*.md"))
        for path in paths:
            wait_for_lock(path)
    sessions = [_read(p) for p in paths]
    assert len(sessions) == 2 and all(s.meta.status == "closed" for s in sessions)
    fork = next(s for s in sessions if s.meta.parent_id)
    parent = next(s for s in sessions if not s.meta.parent_id)
    assert fork.meta.parent_id == parent.meta.id and parent.summary is not None
    assert all(s.meta.summary == "model" for s in sessions)
    assert held.summaries >= 2  # (more when a request yielded to the branch's turn)


def test_the_worker_runs_no_code_of_the_project_and_shows_no_key(
    chatloop_home: Path, project: Path, tmp_path: Path
) -> None:
    """A project folder holding a `chatloop/` package of its own, and an API key in the
    settings: the worker imports nothing from the working directory, and its command
    line (which every local user can read) does not carry the key."""
    marker = tmp_path / "ran"
    (project / "chatloop").mkdir()
    (project / "chatloop" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    with held_server() as (url, held):
        done = subprocess.run(
            [chatloop_bin(), "--base-url", url, "How often should I water basil?"],
            cwd=project,
            env={**_env(chatloop_home), "CHATLOOP_API_KEY": "sk-secret-4242"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert held.asked.wait(60)  # the worker is in its summary request now
        path = _only_session(chatloop_home)
        pid = int(lock_path(path).read_text().split()[0])
        shown = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert b"sk-secret-4242" not in shown and b"chatloop.chat.background" in shown
        held.release.set()
        wait_for_lock(path)
    assert not marker.exists()
    assert _read(path).meta.status == "closed"


def test_a_retry_of_a_session_never_named_takes_the_title_it_gets_at_close(
    chatloop_home: Path, project: Path
) -> None:
    """The first exchange fails (the server drops it), so the session is not named
    then; `/retry` branches from it: the session is named at close by its first
    request's line (written by the worker), and the branch takes that title too."""
    from tests.pty_driver import ready, spawn, wait

    failing = threading.Event()
    failing.set()

    def reply(request: dict[str, Any]) -> str:
        last = str(request["messages"][-1]["content"])
        if "progressive summary" in last:
            return STRUCTURED
        if failing.is_set():
            raise ConnectionResetError("dropped")  # the connection closes: no reply
        return "Every two days."

    with scripted_server(reply) as url:
        child = spawn(url, chatloop_home, project, 16, summaries="background", retries="0")
        child.sendline("How often should I water basil?")
        wait(child, "error")
        wait(child, ready(1))
        failing.clear()
        child.sendline("/retry")
        wait(child, "Forked:")
        wait(child, ready(1))
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
        paths = list(chatloop_home.rglob("*.md"))
        for path in paths:
            wait_for_lock(path)
    assert len(paths) == 2
    titles = {_read(p).meta.title for p in paths}
    assert titles == {"How often should I water basil?"}, titles


def _ended_within(path: Path, seconds: float) -> bool:
    """True once nobody holds ``path``'s lock, waited for at most ``seconds`` (the
    blocking wait in a thread of its own, joined with a deadline: an event, not a poll)."""
    waiter = threading.Thread(target=wait_for_lock, args=(path,), daemon=True)
    waiter.start()
    waiter.join(seconds)
    return not waiter.is_alive()


def test_a_summary_that_hangs_gives_way_to_the_fallback_within_the_workers_bound(
    chatloop_home: Path, project: Path
) -> None:
    """Issue 44: the server never answers the summary request; the worker gives the
    model ``summary_worker_timeout`` seconds (2 here, CHATLOOP_SUMMARY_WORKER_TIMEOUT;
    90 by default), then finalizes the session with the summary built from the
    transcript and ends (it stayed two read timeouts, 4 minutes, before)."""
    with held_server() as (url, held):
        done = subprocess.run(
            [chatloop_bin(), "--base-url", url, "How often should I water basil?"],
            cwd=project,
            env={**_env(chatloop_home), "CHATLOOP_SUMMARY_WORKER_TIMEOUT": "2"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert held.asked.wait(60)
        path = _only_session(chatloop_home)
        assert _ended_within(path, 60), "the worker still waits for the model"
        assert not held.release.is_set()  # the model never answered
        session = _read(path)
    assert session.meta.status == "closed" and session.meta.summary == "fallback"
    assert session.summary is not None and session.summary.fallback
    assert "water basil" in session.summary.text  # built from what was said
    assert [m.text for m in session.messages if m.is_query] == ["How often should I water basil?"]


def test_continue_goes_on_from_the_transcript_when_the_summary_being_written_hangs(
    chatloop_home: Path, project: Path
) -> None:
    """Issue 44: `-c` right after an exit whose summary the server holds waits
    ``summary_wait`` seconds (1 here, CHATLOOP_SUMMARY_WAIT; 5 by default), says so in
    one line, and answers from the summary built from the transcript while the
    worker is still at it (it waited as long as the worker did: 242 s, measured)."""
    with held_server() as (url, held):
        first = _chatloop(url, chatloop_home, project, "How often should I water basil?")
        assert first.returncode == 0, first.stderr
        assert held.asked.wait(60)
        parent = _only_session(chatloop_home)
        again = subprocess.run(
            [chatloop_bin(), "--base-url", url, "-c", "And in winter?"],
            cwd=project,
            env={**_env(chatloop_home), "CHATLOOP_SUMMARY_WAIT": "1"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == "Water it when the top of the soil is dry."
        said = [line for line in again.stderr.splitlines() if "still being written" in line]
        assert len(said) == 1 and "built from its transcript" in said[0], again.stderr
        assert lock_holder(parent) == SUMMARY_HOLDER  # the worker is still at it
        held.release.set()
        for path in chatloop_home.rglob("*.md"):
            assert _ended_within(path, 60)
    (child,) = [s for s in map(_read, chatloop_home.rglob("*.md")) if s.meta.parent_id]
    restoration = child.messages[0]
    assert restoration.restore and "water basil" in restoration.text
    assert [m.text for m in child.messages if m.is_query] == ["And in winter?"]
    assert _read(parent).meta.status == "closed"  # and the worker wrote the file's own


def test_a_try_stopped_by_the_mark_before_the_watch_looks_is_asked_again(tmp_path: Path) -> None:
    """The worker's ``Cancel`` looks at the person's mark itself (``Cancel.when``), so
    a try can stop before the watch's thread has seen the mark: that try was yielded
    all the same and is asked again, never taken for a failure (CI: the worker gave
    up and left the session open)."""
    from types import SimpleNamespace

    from chatloop.backends.base import Cancel, Cancelled
    from chatloop.chat import background, sharing
    from tests.hosts import TEST_SETTINGS

    server = SimpleNamespace(kind="openai", base_url="http://127.0.0.1:9/v1")
    shared = sharing.Shared(tmp_path, server, idle=0)  # type: ignore[arg-type]
    settings = TEST_SETTINGS._replace(summary_worker_patience=60, summary_worker_timeout=60)
    tries: list[bool] = []

    def ask(cancel: Cancel) -> str:
        tries.append(True)
        if len(tries) == 1:
            sharing.use(tmp_path, server)  # type: ignore[arg-type]  # the person comes
            assert cancel.is_set  # at once: the Cancel looked at the mark itself
            raise Cancelled("given up for the person")
        return "the summary"

    assert background._when_free(shared, settings, ask) == "the summary"
    assert len(tries) == 2
