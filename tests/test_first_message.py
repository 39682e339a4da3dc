"""Issue 31, item 2: the first message of a new chat is on disk before anything else
happens, even while the agent and the server are still being checked ("starting…").

The scripted server holds its check (``GET /v1/models``) until the test lets it go (an
event, never a sleep); the program says it is waiting for that check only after it has
saved the message, so "saved while starting" is seen, not timed."""

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
from tests.pty_driver import chatloop_bin, environment, ready, run, spawn, wait
from tests.scripted_server import scripted_server

pytestmark = pytest.mark.e2e

QUESTION = "How often should I water basil?"
ANSWER = "Water it when the top of the soil is dry."
STARTING = "(starting: checking the agent and the server"


class HeldCheck:
    """A server whose check waits for ``release``; ``answers`` says how it ends."""

    def __init__(self, answers: bool = True) -> None:
        self.release = threading.Event()
        self.asked = threading.Event()
        self.answers = answers

    def models(self) -> bool:
        self.asked.set()
        self.release.wait(120)
        return self.answers


@contextmanager
def held_check(answers: bool = True) -> Iterator[tuple[str, HeldCheck]]:
    held = HeldCheck(answers)

    def reply(request: dict[str, Any]) -> str:
        return ANSWER

    with scripted_server(reply, models=held.models) as url:
        try:
            yield url, held
        finally:
            held.release.set()  # (before the server stops: no request is left waiting)


def _sessions(home: Path) -> list[Session]:
    return [parse_markdown(p.read_bytes()).session for p in sorted(home.rglob("*.md"))]


def _starting(url: str, home: Path, cwd: Path) -> pexpect.spawn:
    """The program in a pty, its first message sent while the server's check is held,
    and seen waiting for it (which it says after saving the message)."""
    # (a check held past connect_timeout is a busy server, which the chat does not wait
    # for: here it is held on purpose, and waited for)
    child = spawn(url, home, cwd, 16, ready_text="starting", connect_timeout="120")
    child.sendline(QUESTION)
    wait(child, STARTING)
    return child


def test_a_message_sent_while_starting_survives_a_kill_and_is_resumable(
    chatloop_home: Path, project: Path
) -> None:
    with held_check() as (url, held):
        child = _starting(url, chatloop_home, project)
        assert held.asked.is_set() and not held.release.is_set()
        os.kill(child.pid, signal.SIGKILL)
        child.close()
        held.release.set()
        (saved,) = _sessions(chatloop_home)
        assert [(m.role, m.text) for m in saved.messages] == [("user", QUESTION)]
        assert saved.meta.status == "open"  # unanswered, as a chat killed mid-reply
        env = environment(chatloop_home, 16)
        resumed = subprocess.run(
            [chatloop_bin(), "--base-url", url, "-c", "And in winter?"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == ANSWER
    parent, child_session = sorted(_sessions(chatloop_home), key=lambda s: bool(s.meta.parent_id))
    assert child_session.meta.parent_id == parent.meta.id
    assert [m.text for m in parent.messages if m.is_query] == [QUESTION]  # kept, once
    assert parent.meta.status == "closed" and parent.summary is not None


def test_a_message_sent_while_starting_is_answered_in_the_file_it_was_saved_in(
    chatloop_home: Path, project: Path
) -> None:
    with held_check() as (url, held):
        child = _starting(url, chatloop_home, project)
        (early,) = list(chatloop_home.rglob("*.md"))
        first = parse_markdown(early.read_bytes()).session
        assert [m.text for m in first.messages] == [QUESTION] and first.meta.agent == ""
        held.release.set()
        wait(child, ready(1))
        child.sendline("exit")
        child.expect("Saved session")
        child.expect(pexpect.EOF)
        child.close()
    assert list(chatloop_home.rglob("*.md")) == [early]  # one file: the one made first
    (session,) = _sessions(chatloop_home)
    assert [(m.role, m.text) for m in session.messages if m.role != "summary"] == [
        ("user", QUESTION),
        ("assistant", ANSWER),
    ]
    meta = session.meta
    assert meta.agent == "Simple Sally" and meta.agent_name == "simple_sally"
    assert meta.model == "scripted" and meta.backend_url == url
    assert meta.status == "closed" and meta.queries == 1 and meta.title


def test_a_chat_that_cannot_start_keeps_the_message_marked_as_not_sent(
    chatloop_home: Path, project: Path
) -> None:
    """Issue 46: the server is down; the message typed at "starting" stays on disk,
    marked as not sent, and the person is told where, before the reason."""
    with held_check(answers=False) as (url, held):
        child = _starting(url, chatloop_home, project)
        assert len(list(chatloop_home.rglob("*.md"))) == 1  # saved while it waited
        held.release.set()  # the check fails: the chat never starts
        child.expect(pexpect.EOF)
        child.close()
    shown = " ".join((child.before or "").split())
    assert child.exitstatus != 0
    assert "answered 503" in shown and "Traceback" not in shown
    (saved,) = _sessions(chatloop_home)
    assert [(m.text, m.unsent) for m in saved.messages] == [(QUESTION, True)]
    assert (
        "your message was not sent; it is kept in session "
        f"{saved.meta.id}, marked as not sent" in shown
    ), shown
    assert shown.index("marked as not sent") < shown.index("answered 503")
    listed = run("sessions", home=chatloop_home, cwd=project)
    assert f"(not sent) {QUESTION}" in listed.stdout, listed.stdout  # not "(no messages)"


def test_ctrl_c_while_starting_keeps_the_message_and_says_where(
    chatloop_home: Path, project: Path
) -> None:
    with held_check() as (url, held):
        child = _starting(url, chatloop_home, project)
        child.sendintr()
        wait(child, "it is saved in session")
        child.expect(pexpect.EOF)
        child.close()
        held.release.set()
    (saved,) = _sessions(chatloop_home)
    assert [m.text for m in saved.messages] == [QUESTION]


MARK = "QX-7731 the first message after the compaction"


def test_the_first_message_after_compact_is_on_disk_while_the_acknowledgment_streams(
    chatloop_home: Path, project: Path
) -> None:
    """``/compact``, then a message: when the server is asked to count it, it is in
    the child's file already; the server holds the acknowledgment's request until the
    test lets it go, and a kill -9 there keeps the message (``-c`` goes on from that
    child)."""
    from tests.fakes import STRUCTURED

    asked, release = threading.Event(), threading.Event()
    counted: list[bool] = []  # for each count of the message: was it on disk then?

    def tokenize(text: str) -> None:
        if MARK in text:
            counted.append(any(MARK in p.read_text() for p in chatloop_home.rglob("*.md")))

    def reply(request: dict[str, Any]) -> str:
        last = str(request["messages"][-1]["content"])
        if "progressive summary" in last:
            return STRUCTURED
        if last.startswith("We are continuing an earlier conversation"):
            asked.set()  # the acknowledgment: held
            release.wait(120)
            return "Ready to continue."
        return ANSWER

    with scripted_server(reply, tokenize=tokenize) as url:
        try:
            # (the model writes the acknowledgment here: ``acknowledgment: model``)
            child = spawn(url, chatloop_home, project, 16, acknowledgment="model")
            child.sendline(QUESTION)
            wait(child, ready(1))
            child.sendline("/compact")
            wait(child, "Continuing session")
            child.sendline(MARK)
            assert asked.wait(60), "the acknowledgment was never asked for"
            assert counted and all(counted), counted
            held = [s for s in _sessions(chatloop_home) if s.meta.parent_id]
            assert [[m.text for m in s.messages if m.is_query] for s in held] == [[MARK]]
            os.kill(child.pid, signal.SIGKILL)
            child.close()
        finally:
            release.set()
        resumed = subprocess.run(
            [chatloop_bin(), "--base-url", url, "-c", "And in winter?"],
            cwd=project,
            env=environment(chatloop_home, 16),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert resumed.returncode == 0, resumed.stderr
    queries = [m.text for s in _sessions(chatloop_home) for m in s.messages if m.is_query]
    assert queries.count(MARK) == 1 and QUESTION in queries and "And in winter?" in queries
