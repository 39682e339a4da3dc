"""bench/person.py's pseudo-terminal read as a screen (pyte), the screen's landmarks,
and the home its chats run in: the environment, its workers and its files."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pexpect
import pyte

from bench.person_server import SUMMARY_LINES
from chatloop.format import parse_markdown
from chatloop.store.fsio import lock_path, wait_for_lock

ROWS, COLUMNS = 60, 120


class Term:
    """A child in a pseudo-terminal and the screen it draws (pyte); cursor-position
    requests answered as a terminal does."""

    def __init__(self, command: str, args: list[str], env: dict[str, str], cwd: str) -> None:
        self.spawned = time.monotonic()
        self.child = pexpect.spawn(
            command,
            args,
            env=env,
            cwd=cwd,
            encoding="utf-8",
            timeout=600,
            dimensions=(ROWS, COLUMNS),
        )
        self.child.delaybeforesend = 0
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.stream = pyte.Stream(self.screen)

    def until(self, seen: Callable[[pyte.Screen], bool], timeout: float = 600) -> float:
        """Read until ``seen(screen)``; returns the monotonic time it was first true."""
        deadline = time.monotonic() + timeout
        while not seen(self.screen):
            if time.monotonic() > deadline:
                shown = "\n".join(line.rstrip() for line in self.screen.display).strip()
                raise TimeoutError(f"not on the screen after {timeout:g} s:\n{shown}")
            try:
                data = self.child.read_nonblocking(65536, timeout=0.5)
            except pexpect.TIMEOUT:
                continue
            self.stream.feed(data)
            if "\x1b[6n" in data:
                cursor = self.screen.cursor
                self.child.send(f"\x1b[{cursor.y + 1};{cursor.x + 1}R")
        return time.monotonic()

    def leave(self) -> None:
        """Ctrl-D (again after a quiet moment: one sent as the prompt sets up can be
        lost) and wait for the end."""
        for _ in range(10):
            self.child.sendeof()
            if self.child.expect([pexpect.EOF, pexpect.TIMEOUT], timeout=5) == 0:
                break
        self.child.close()


def prompt_drawn(screen: pyte.Screen) -> bool:
    """``you>`` at the start of a line."""
    return any(line.startswith("you>") for line in screen.display)


def banner(screen: pyte.Screen) -> bool:
    """chatloop's banner: the agent, the backend and the server checked."""
    return any("chatloop · " in line for line in screen.display)


def reply_begun(question: str) -> Callable[[pyte.Screen], bool]:
    """True once a line below ``question``'s shows text of a reply: in the terminal's
    default colour, not chatloop's own (the banner, its notes, the toolbar, a prompt)."""

    def seen(screen: pyte.Screen) -> bool:
        rows = screen.display
        asked = next((i for i, line in enumerate(rows) if question in line), None)
        if asked is None:
            return False
        for y in range(asked + 1, ROWS):
            text = rows[y].strip()
            if not text or text.startswith(("you>", "(starting")) or "chatloop · " in text:
                continue
            x = len(rows[y]) - len(rows[y].lstrip())
            char = screen.buffer[y][x]
            if char.fg == "default" and not char.reverse:
                return True
        return False

    return seen


def turn_ended(queries: int) -> Callable[[pyte.Screen], bool]:
    """The toolbar once the prompt is back after ``queries`` messages."""
    return lambda screen: any(f" {queries}q · " in line for line in screen.display)


# -- the home, its workers, its files


def environment(home: Path, idle: float, real: bool) -> dict[str, str]:
    """chatloop's environment: defaults but the home, no config file, the window a
    person states (2,048), ``background_idle``; short replies from the real model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATLOOP_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        CHATLOOP_HOME=str(home),
        CHATLOOP_CONFIG="",
        CHATLOOP_CONTEXT_WINDOW="2048",
        CHATLOOP_BACKGROUND_IDLE=f"{idle:g}",
        TERM="xterm",
    )
    if real:
        env["CHATLOOP_MAX_TOKENS"] = "48"
    return env


def settle(home: Path) -> None:
    """Wait until every worker of ``home`` is done (every session's lock let go)."""
    for path in home.rglob("*.md"):
        wait_for_lock(path)


def holder(path: Path) -> int | None:
    """The pid named in ``path``'s lock file (its summary worker, after a hand-off)."""
    try:
        words = lock_path(path).read_text().split()
    except OSError:
        return None
    return int(words[0]) if words and words[0].isdigit() else None


def connected(pid: int, port: int) -> bool:
    """True while process ``pid`` has a TCP connection established to ``port`` on this
    machine (its request under way)."""
    try:
        inodes = {
            os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1]
            for fd in os.listdir(f"/proc/{pid}/fd")
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")
        }
    except OSError:
        return False
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port and inode in inodes:
                return True
    return False


def saved_cut(home: Path, real: bool) -> tuple[int, int, int]:
    """(summaries saved cut, the model's summaries, fallbacks) over every file of
    ``home``. Cut: marked as the model's, yet not the scripted summary whole (every
    line of it); against a real model, a summary without its last heading."""
    cut = model = fallback = 0
    for path in home.rglob("*.md"):
        session = parse_markdown(path.read_bytes()).session
        said = session.meta.summary
        text = session.summary.text if session.summary is not None else ""
        if said == "fallback":
            fallback += 1
        if said != "model":
            continue
        model += 1
        whole = "Pending" in text if real else all(line in text for line in SUMMARY_LINES)
        cut += not whole
    return cut, model, fallback
