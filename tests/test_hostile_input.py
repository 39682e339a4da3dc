"""Input no program of ours wrote: bytes the locale cannot decode piped into a one-shot
question (or typed on its command line), and numbers in a session file's front
matter out of every range. Each is kept or becomes a problem on that file: exit 0 or
1, never a traceback, never a question lost."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from chatloop.format import Message, parse_markdown
from chatloop.format.front_matter import read_head
from chatloop.store.store import Store
from tests.conftest import T0, new_meta
from tests.scripted_server import scripted_server


def run(
    args: Sequence[str | bytes], home: Path, cwd: Path, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    """The program (of this tree: ``PYTHONPATH`` is passed on) with ``stdin`` piped in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATLOOP_")}
    env.update(
        CHATLOOP_HOME=str(home),
        CHATLOOP_CONFIG="",
        CHATLOOP_TITLES="first",
        CHATLOOP_SUMMARIES="wait",
    )
    return subprocess.run(
        [sys.executable, "-m", "chatloop.cli", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def no_traceback(done: subprocess.CompletedProcess[bytes], *allowed: int) -> None:
    said = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in said, said
    assert done.returncode in (allowed or (0,)), said


def test_undecodable_piped_bytes_are_kept_as_escapes(store: Store) -> None:
    asked: list[dict[str, Any]] = []

    def reply(request: dict[str, Any]) -> str:
        asked.append(request)
        return "seen"

    with scripted_server(reply) as url:
        done = run(
            ["--base-url", url, "x"], store.root, store.cwd, stdin=b"\xff\xfe abc \xc3 caf\xc3\xa9"
        )
    no_traceback(done)
    assert done.stdout.decode() == "seen\n"
    (path,) = store.root.glob("projects/*/*.md")
    typed = [m.text for m in parse_markdown(path.read_bytes()).session.messages if m.role == "user"]
    assert typed == ["x\n\n\\xff\\xfe abc \\xc3 café"]  # every byte kept, the rest decoded
    sent = [m["content"] for m in asked[0]["messages"] if m["role"] == "user"]
    assert sent[-1] == typed[0]
    shown = run(["show", "1"], store.root, store.cwd)
    no_traceback(shown)
    assert b"\\xff\\xfe abc \\xc3 caf\xc3\xa9" in shown.stdout


def test_undecodable_bytes_on_the_command_line_are_kept_as_escapes(store: Store) -> None:
    with scripted_server(lambda request: "seen") as url:
        done = run(["--base-url", url, b"why \xff?"], store.root, store.cwd)
    no_traceback(done)
    (path,) = store.root.glob("projects/*/*.md")
    typed = [m.text for m in parse_markdown(path.read_bytes()).session.messages if m.role == "user"]
    assert typed == ["why \\xff?"]


HOSTILE_NUMBERS = [
    "100000000000000000000000",  # an int no seek can take
    "1e23",
    "-5",
    "true",
    "2.5",
    "[1]",
    "'12345678901234567890123456789012345678901234567890'",
]


@pytest.mark.parametrize("value", HOSTILE_NUMBERS)
def test_a_summary_offset_out_of_range_is_a_problem_on_the_file(value: str) -> None:
    head = read_head(
        f"---\nformat: 2\nid: 20261121-143045-aaaaaaaa\nsummary_key: abcdefgh\n"
        f"summary_at: {value}\n---\n".encode(),
        "x",
    )
    assert head.meta.summary_at is None and head.meta.summary_key is None
    assert [kind for kind, _ in head.problems] == ["range"]
    assert "summary_at" in head.problems[0][1]


def test_a_summary_offset_in_range_is_read() -> None:
    head = read_head(
        b"---\nformat: 2\nid: 20261121-143045-aaaaaaaa\nsummary_key: abcdefgh\n"
        b"summary_at: 1234\n---\n",
        "x",
    )
    assert (head.meta.summary_key, head.meta.summary_at, head.problems) == ("abcdefgh", 1234, [])


def closed_session(store: Store, edit: dict[str, str]) -> Path:
    """A closed session whose front matter lines ``key: value`` are set to ``edit``."""
    writer = store.create(new_meta(title="numbers"))
    writer.append(Message.create("user", T0, text="hello"))
    writer.append(Message.create("assistant", T0, text="hi"))
    writer.finalize(Message.create("summary", T0, text="the summary"))
    writer.close()
    (path,) = store.root.glob("projects/*/*.md")
    text = path.read_text()
    for key, value in edit.items():
        text, count = re.subn(rf"(?m)^{key}: .*$", f"{key}: {value}", text)
        assert count == 1, key
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "edit",
    [
        {"summary_at": "100000000000000000000000"},
        {"summary_at": "1e23"},
        {"summary_at": "-1", "queries": "1e23"},
        {"summary_at": "true", "queries": "-100000000000000000000000"},
    ],
    ids=lambda edit: ",".join(f"{k}={v}" for k, v in edit.items()),
)
def test_hostile_numbers_in_front_matter_break_no_command(
    store: Store, edit: dict[str, str]
) -> None:
    closed_session(store, edit)
    with scripted_server(lambda request: "go on") as url:
        continued = run(["--base-url", url, "-c", "and then?"], store.root, store.cwd)
    no_traceback(continued, 0, 1)
    assert continued.returncode == 0  # the summary is found by reading the file
    for args in (["show", "2"], ["show", "2", "--raw"], ["sessions"], ["sessions", "--json"]):
        no_traceback(run(args, store.root, store.cwd), 0, 1)
