"""The habits people bring from llm and aichat: -m for the model, -s for a system
prompt, -f (and /file in the chat) to attach a file, each as the server receives it
and as the session file keeps it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from chatloop.format import parse_markdown
from chatloop.store.store import Store
from tests.repl_driver import drive, fake_server
from tests.scripted_server import scripted_server


def one_shot(store: Store, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "CHATLOOP_HOME": str(store.root),
        "CHATLOOP_CONFIG": "",
        "CHATLOOP_SUMMARIES": "wait",
        "PATH": "/usr/bin:/bin",
        "HOME": str(store.root),
    }
    return subprocess.run(
        [sys.executable, "-m", "chatloop.cli", "--base-url", url, *args],
        cwd=store.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def only_file(store: Store) -> Any:
    (entry,) = list(store.session_files())
    return parse_markdown(Path(entry.path).read_bytes(), Path(entry.path).stem).session


def test_m_and_s_set_the_model_and_the_system_prompt_and_the_file_keeps_it(
    store: Store,
) -> None:
    asked: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> str:
        asked.append(body)
        return "Bien sûr."

    with scripted_server(reply, model="tiny") as url:
        done = one_shot(store, url, "-m", "tiny", "-s", "Answer in French.", "Say hi")
    assert done.returncode == 0, done.stderr
    turn = asked[0]
    assert turn["model"] == "tiny"
    assert turn["messages"][0] == {"role": "system", "content": "Answer in French."}
    meta = only_file(store).meta
    assert meta.system == "Answer in French." and meta.model == "tiny"
    assert "system: Answer in French." in Path(next(store.session_files()).path).read_text()


def test_f_attaches_files_after_the_question_in_a_fence_none_of_their_lines_closes(
    store: Store, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Plan\n```python\nprint('a fence inside')\n```\n")
    other = tmp_path / "todo.txt"
    other.write_text("water the mint\n")
    asked: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> str:
        asked.append(body)
        return "Read them."

    with scripted_server(reply) as url:
        done = one_shot(store, url, "-f", str(notes), "-f", str(other), "What is missing?")
    assert done.returncode == 0, done.stderr
    sent = asked[0]["messages"][-1]["content"]
    size = notes.stat().st_size
    assert sent == (
        f"What is missing?\n\nAttached file {notes} ({size:,} bytes):\n````\n"
        f"{notes.read_text().rstrip()}\n````\n\n"
        f"Attached file {other} (15 bytes):\n```\nwater the mint\n```"
    )
    (query,) = [m for m in only_file(store).messages if m.role == "user"]
    assert query.text == sent  # the transcript keeps what was sent


def test_f_refuses_what_it_cannot_attach_in_one_line(store: Store, tmp_path: Path) -> None:
    binary = tmp_path / "image.bin"
    binary.write_bytes(b"\x89PNG\0\0")
    with scripted_server(lambda body: "never") as url:
        cases = (
            (["-f", str(binary), "look"], 1, "is not text"),
            (["-f", str(tmp_path / "gone.md"), "look"], 1, "is no file"),
            (["-f", str(tmp_path), "look"], 1, "is a folder"),
            (["-f", str(binary)], 2, "-f attaches a file to a question"),
        )
        for args, code, said in cases:
            done = one_shot(store, url, *args)
            assert done.returncode == code and said in done.stderr, (args, done.stderr)
            assert "Traceback" not in done.stderr
    assert list(store.session_files()) == []  # nothing saved for a refused question


def test_file_in_the_chat_sends_the_text_with_the_file_attached(
    store: Store, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("kumquats by the wall\n")
    requests: list[dict[str, Any]] = []
    _, shown = drive(store, fake_server(requests), f"/file {notes} where do they go?\rexit\r")
    sent = requests[0]["messages"][-1]["content"]  # type: ignore[index]  (the turn; a summary follows)
    assert sent == (
        f"where do they go?\n\nAttached file {notes} (21 bytes):\n```\nkumquats by the wall\n```"
    )
    _, shown = drive(store, fake_server([]), "/file\rexit\r")
    assert "Give the file to attach" in shown
