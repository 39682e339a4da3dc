"""Issue 46, item 3: from Enter to the reply's first piece the screen says the model is
being waited for (a spinner and the time since), in the chat and on a one-shot's
stderr when it is a terminal; the reply replaces it. The scripted server holds the
reply until the test has seen the wait (an event, never a sleep)."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pexpect
import pytest

from chatloop.store.fsio import wait_for_lock
from chatloop.ui.terminal_text import visible
from chatloop.ui.waiting import WAITING
from tests.pty_driver import chatloop_bin, environment, leave, only_session, ready, spawn, wait
from tests.scripted_server import scripted_server

pytestmark = pytest.mark.e2e

ANSWER = "Water it when the top of the soil is dry."


def held_reply() -> tuple[threading.Event, Any]:
    release = threading.Event()

    def reply(body: dict[str, Any]) -> str:
        last = str(body["messages"][-1]["content"])
        if "progressive summary" not in last and "title" not in last.lower():
            release.wait(60)
        return ANSWER

    return release, reply


def test_the_chat_shows_the_wait_for_the_model_until_the_reply_comes(
    chatloop_home: Path, project: Path
) -> None:
    release, reply = held_reply()
    shown = io.StringIO()
    with scripted_server(reply) as url:
        child = spawn(url, chatloop_home, project, 16, log=shown)
        child.sendline("How often should I water basil?")
        wait(child, WAITING)
        wait(child, "0:01")  # its time goes on while the model is silent
        release.set()
        wait(child, ready(1))
        leave(child)
    screen = visible(shown.getvalue())
    assert screen.index(WAITING) < screen.rindex("top of the soil")
    assert only_session(chatloop_home).messages[1].text == ANSWER


def test_a_one_shot_shows_the_wait_on_a_terminal_and_erases_it(
    chatloop_home: Path, project: Path
) -> None:
    release, reply = held_reply()
    with scripted_server(reply) as url:
        child = pexpect.spawn(
            chatloop_bin(),
            ["--base-url", url, "How often should I water basil?"],
            cwd=str(project),
            env=environment(chatloop_home, 16),
            encoding="utf-8",
            timeout=90,
        )
        shown = io.StringIO()
        child.logfile_read = shown
        wait(child, WAITING)
        release.set()
        child.expect(pexpect.EOF)
        child.close()
    out = shown.getvalue()
    assert child.exitstatus == 0, out
    after = out[out.rindex(WAITING) :]
    assert "\r\x1b[K" + ANSWER in after  # erased, then the answer on a clean line


def test_a_one_shot_into_a_pipe_shows_no_wait(chatloop_home: Path, project: Path) -> None:
    import subprocess

    with scripted_server(lambda body: ANSWER) as url:
        done = subprocess.run(
            [chatloop_bin(), "--base-url", url, "How often should I water basil?"],
            cwd=project,
            env=environment(chatloop_home, 16),
            capture_output=True,
            text=True,
            timeout=90,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ANSWER + "\n" and WAITING not in done.stderr


def test_leaving_right_after_the_first_reply_never_waits_for_its_title(
    chatloop_home: Path, project: Path
) -> None:
    """The title is asked off the person's path; a Ctrl-D before it has come leaves at
    once (the summary worker is handed the first request's line as the title), never
    waiting out ``title_timeout`` on a busy server."""
    asked, release = threading.Event(), threading.Event()

    def reply(body: dict[str, Any]) -> str:
        if "Write a title of at most" in str(body["messages"][-1]["content"]):
            asked.set()
            release.wait(120)  # a busy server: no title until the test is done
            return "Basil"
        return ANSWER

    with scripted_server(reply) as url:
        child = spawn(
            url,
            chatloop_home,
            project,
            16,
            titles="model",
            title_timeout="600",
            summaries="background",
        )
        child.sendline("How often should I water basil?")
        wait(child, ready(1))
        assert asked.wait(30)
        child.sendeof()
        wait(child, "Saved session")  # (within the pty's 90 s wait, far below the 600 s bound)
        child.expect(pexpect.EOF)
        child.close()
        left = not release.is_set()
        release.set()
        for path in chatloop_home.rglob("*.md"):
            wait_for_lock(path)
    assert left and child.exitstatus == 0
    session = only_session(chatloop_home)
    assert session.meta.title == "How often should I water basil?"
