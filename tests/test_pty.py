"""The real installed ``chatloop`` program in a pseudo-terminal, against the real server."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from chatloop.transcript import parse_markdown

pytestmark = pytest.mark.e2e
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


def environment(home: Path, max_tokens: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATLOOP_")}
    env.update(CHATLOOP_HOME=str(home), CHATLOOP_MAX_TOKENS=str(max_tokens), TERM="xterm",
               CHATLOOP_CONFIG="", COLUMNS="100")  # fmt: skip
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


def spawn(url: str, home: Path, cwd: Path, max_tokens: int = 12) -> pexpect.spawn:
    child = pexpect.spawn(
        chatloop_bin(), ["--base-url", url], cwd=str(cwd), env=environment(home, max_tokens),
        encoding="utf-8", timeout=90, dimensions=(30, 100),
    )  # fmt: skip
    wait(child, READY)
    return child


def run(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([chatloop_bin(), *args], cwd=cwd, env=environment(home, 12),
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


def test_chat_list_search_show(llama_server: str, chatloop_home: Path, project: Path) -> None:
    child = spawn(llama_server, chatloop_home, project)
    child.sendline("zebracorn stories: once upon a time")
    wait(child, ready(1))
    child.sendline("The capital of France is")
    wait(child, ready(2))
    child.sendline("/sessions")
    wait(child, "title or last question")
    wait(child, ready(2))
    child.sendline("exit")
    child.expect("Saved session")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    listed = json.loads(run("sessions", "--json", home=chatloop_home, cwd=project).stdout)
    assert len(listed) == 1 and listed[0]["queries"] == 2 and listed[0]["status"] == "closed"
    hits = run("search", "zebracorn", home=chatloop_home, cwd=project).stdout
    assert listed[0]["id"] in hits
    shown = run("show", "1", home=chatloop_home, cwd=project)
    assert shown.returncode == 0 and "zebracorn stories" in shown.stdout


def test_ctrl_c_keeps_the_partial_reply(llama_server: str, chatloop_home: Path,
                                        project: Path) -> None:  # fmt: skip
    child = spawn(llama_server, chatloop_home, project, max_tokens=400)
    for attempt in range(4):
        child.sendline(f"Once upon a time, in story {attempt}, there")
        time.sleep(1.5)
        child.sendintr()
        if wait(child, "interrupted", "Leave chatloop") == 0:
            break
        child.sendline("n")  # the reply had already ended: try again
    else:
        pytest.fail("every reply ended before Ctrl-C could interrupt it")
    wait(child, ready(attempt + 1))
    child.sendeof()
    child.expect(pexpect.EOF)
    (path,) = (chatloop_home / "projects").glob("*/*.md")
    session = parse_markdown(path.read_bytes()).session
    assert session.messages[-1].role == "assistant" and session.messages[-1].interrupted
    assert session.messages[-2].text.startswith("Once upon a time")
    assert session.meta.status == "closed"


def test_sigkill_at_random_moments_loses_no_shown_message(
    llama_server: str, chatloop_home: Path, project: Path
) -> None:
    rng = random.Random(5)
    acknowledged: list[str] = []
    for run_number in range(8):
        child = spawn(llama_server, chatloop_home, project, max_tokens=24)
        for n in range(3):
            text = f"kill test {run_number}.{n} once upon a time"
            child.sendline(text)
            if n == 2:
                time.sleep(rng.uniform(0.0, 1.5))
                break
            wait(child, ready(n + 1))
            acknowledged.append(text)
        os.kill(child.pid, signal.SIGKILL)
        child.close(force=True)
    texts: list[str] = []
    for path in (chatloop_home / "projects").glob("*/*.md"):
        result = parse_markdown(path.read_bytes())
        assert {p.kind for p in result.problems} <= {"torn_tail"}, result.problems
        texts += [m.text for m in result.session.messages if m.role == "user"]
    for text in acknowledged:
        assert text in texts
    listed = json.loads(run("sessions", "--json", home=chatloop_home, cwd=project).stdout)
    assert len(listed) == 8 and {r["status"] for r in listed} == {"interrupted"}
