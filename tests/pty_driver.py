"""The installed ``chatloop`` program in a pseudo-terminal (pexpect), as the
end-to-end tests drive it: its environment, waiting for what it shows (answering
a terminal's cursor-position requests), the screen a redrawn view leaves."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pexpect
import pytest

from chatloop.format import Session, parse_markdown

READY = "new session"  # the toolbar before the first message


def ready(queries: int) -> str:
    """What the toolbar shows once the prompt is back after ``queries`` messages."""
    return f" {queries}q · "


def chatloop_bin() -> str:
    found = shutil.which("chatloop", path=str(Path(sys.executable).parent)) or shutil.which(
        "chatloop"
    )
    if not found:
        pytest.fail("the chatloop console script is not installed (pip install -e .)")
    return found


def environment(home: Path, max_tokens: int, summary_tokens: int = 48) -> dict[str, str]:
    """The program's environment. Titles come from the first request: a title request
    after the first reply would take a Ctrl-C meant for the reply, or a scripted answer;
    ``titles="model"`` (a ``spawn`` setting) asks the real model for one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATLOOP_")}
    env.update(
        CHATLOOP_HOME=str(home),
        CHATLOOP_MAX_TOKENS=str(max_tokens),
        TERM="xterm",
        CHATLOOP_CONFIG="",
        COLUMNS="100",
        CHATLOOP_TITLES="first",
        CHATLOOP_SUMMARIES="wait",  # written before the program ends: the tests read it
        # a summary worker (where a test asks for one) asks the model once the person has
        # left the server alone this long (chat.sharing), not 15 s
        CHATLOOP_BACKGROUND_IDLE="0.2",
        CHATLOOP_PREPARE_COMPACTION="off",  # nothing asked of the server at a moment untold
        CHATLOOP_SUMMARY_MAX_TOKENS=str(summary_tokens),
    )
    return env


CPR_REQUEST = "\x1b[6n"


def wait(child: pexpect.spawn, *patterns: str) -> int:
    """Expect one of ``patterns``, answering cursor-position requests as a terminal does
    (prompt_toolkit draws its bottom toolbar only once the terminal has answered)."""
    while True:
        index = child.expect_exact([*patterns, CPR_REQUEST])
        if index < len(patterns):
            return index
        child.send("\x1b[1;1R")


class Screen:
    """What a terminal of ``rows`` x ``columns`` shows of a child's output (pyte): for
    views that redraw in place, where the bytes hold only what changed."""

    def __init__(self, child: pexpect.spawn, rows: int = 24, columns: int = 80) -> None:
        import pyte

        self.child, self.screen = child, pyte.Screen(columns, rows)
        self.stream = pyte.Stream(self.screen)

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait(self, text: str, timeout: float = 60) -> None:
        """Read until ``text`` is on the screen, answering cursor-position requests."""
        self.wait_until(lambda shown: text in shown, repr(text), timeout)

    def wait_until(self, seen: Callable[[str], bool], what: str, timeout: float = 60) -> None:
        """Read until ``seen(the screen's text)``, answering cursor-position requests."""
        deadline = time.monotonic() + timeout
        while not seen(self.text()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not on the screen:\n{self.text()}")
            try:
                data = self.child.read_nonblocking(65536, timeout=0.5)
            except pexpect.TIMEOUT:
                continue
            self.stream.feed(data)
            if CPR_REQUEST in data:
                cursor = self.screen.cursor
                self.child.send(f"\x1b[{cursor.y + 1};{cursor.x + 1}R")


def spawn(
    url: str,
    home: Path,
    cwd: Path,
    max_tokens: int = 12,
    *args: str,
    summary_tokens: int = 48,
    ready_text: str = READY,
    log: io.StringIO | None = None,
    **settings: str,
) -> pexpect.spawn:
    """The installed program in a pty; ``settings`` become CHATLOOP_<KEY> variables."""
    env = environment(home, max_tokens, summary_tokens)
    env.update({f"CHATLOOP_{key.upper()}": value for key, value in settings.items()})
    child = pexpect.spawn(
        chatloop_bin(),
        ["--base-url", url, *args],
        cwd=str(cwd),
        env=env,
        encoding="utf-8",
        timeout=90,
        dimensions=(30, 100),
    )
    child.logfile_read = log  # everything the program showed, when asked for
    wait(child, ready_text)
    return child


def leave(child: pexpect.spawn) -> None:
    """Type exit, see the session saved, and wait for the program to end."""
    child.sendline("exit")
    child.expect("Saved session")
    child.expect(pexpect.EOF)


def only_session(home: Path) -> Session:
    """The one session file under ``home``, parsed."""
    (path,) = (home / "projects").glob("*/*.md")
    return parse_markdown(path.read_bytes()).session


def run(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chatloop_bin(), *args],
        cwd=cwd,
        env=environment(home, 12),
        capture_output=True,
        text=True,
        timeout=60,
    )
