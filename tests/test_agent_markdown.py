"""Markdown agents (issue 36 item 1): Claude Code's agent format loads as it is, the
body is the system prompt, nothing runs, and what chatloop cannot use is noted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chatloop.chat.agent import agent_names, bundled_agents, find_agent_file, load_agent
from chatloop.errors import UsageError
from chatloop.store.store import Store
from tests.scripted_server import scripted_server


def one_shot(store: Store, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``chatloop --base-url URL ARGS…`` in the store's project, as a person runs it."""
    return subprocess.run(
        [sys.executable, "-m", "chatloop.cli", "--base-url", url, *args],
        cwd=store.cwd,
        env={
            "CHATLOOP_HOME": str(store.root),
            "CHATLOOP_CONFIG": "",
            "PATH": "/usr/bin:/bin",
            "HOME": str(store.root),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # (this chatloop's code)
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


CLAUDE_CODE_AGENT = """\
---
name: code-reviewer
description: Reviews code for correctness and style.
tools: Read, Grep, Glob
model: sonnet
color: blue
---
You are a careful code reviewer.

Point out bugs first, then style.
"""


def test_a_claude_code_agent_file_loads_as_it_is_with_what_is_not_used_noted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "code-reviewer.md"
    path.write_text(CLAUDE_CODE_AGENT)
    agent = load_agent(path)
    assert agent.name == "code-reviewer" and agent.description.startswith("Reviews code")
    assert agent.system_prompt == (
        "You are a careful code reviewer.\n\nPoint out bugs first, then style."
    )
    assert agent.tools == () and agent.model == ""  # sonnet names no local model
    notes = "\n".join(agent.notes)
    assert "unknown key 'color' ignored" in notes
    assert "model 'sonnet' is Claude Code's" in notes
    assert "tools (Read, Grep, Glob) are not offered" in notes


def test_markdown_agents_are_listed_and_found_beside_python_ones(tmp_path: Path) -> None:
    (tmp_path / "reviewer.md").write_text(CLAUDE_CODE_AGENT)
    (tmp_path / "README.md").write_text("# my agents\n")
    (tmp_path / "both.py").write_text('NAME = "Py"\nSYSTEM_PROMPT = "py"\n')
    (tmp_path / "both.md").write_text("---\nname: Md\n---\nmd\n")
    names = agent_names([tmp_path, bundled_agents()])
    assert {"reviewer", "both", "simple_sally", "terse_tom"} <= set(names)
    assert "README" not in names
    assert find_agent_file("reviewer", [tmp_path]).suffix == ".md"
    assert find_agent_file("both", [tmp_path]).suffix == ".py"  # a folder's .py first
    assert load_agent(find_agent_file("terse_tom", [bundled_agents()])).name == "Terse Tom"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("---\nname: [unclosed\n---\nbody\n", "its front matter is not valid YAML (line 1"),
        ("---\nname: x\n", "has no closing --- line"),
        ("---\nname: x\n---\n\n", "has no system prompt"),
        ("---\noptions: [1, 2]\n---\nbody\n", "options is not a mapping"),
        ("---\nname: [a, b]\n---\nbody\n", "name is not a text"),
    ],
)
def test_a_markdown_agent_that_cannot_be_one_is_one_line(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "bad.md"
    path.write_text(text)
    with pytest.raises(UsageError) as refused:
        load_agent(path)
    assert refused.value.message.startswith("bad.md") and said in refused.value.message


def test_a_projects_markdown_agent_runs_with_its_prompt_options_and_model_unasked(
    store: Store,
) -> None:
    """A Python agent in a project's agents/ needs a yes (it runs code); a markdown one
    runs nothing: a one-shot, which cannot ask, uses it at once."""
    folder = store.cwd / "agents"
    folder.mkdir()
    (folder / "gardener.md").write_text(
        "---\nname: Gardener Gil\nmodel: tiny-model\noptions: {temperature: 0.25}\n"
        "tools: [read_file]\n---\nYou are Gardener Gil. Answer about plants only.\n"
    )
    asked: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> str:
        asked.append(body)
        return "Basil likes sun."

    with scripted_server(reply, model="tiny-model") as url:
        done = one_shot(store, url, "--agent", "gardener", "Where does basil go?")
    assert done.returncode == 0, done.stderr
    turn = asked[0]
    assert turn["messages"][0] == {
        "role": "system",
        "content": "You are Gardener Gil. Answer about plants only.",
    }
    assert turn["model"] == "tiny-model" and turn["temperature"] == 0.25
    assert "tools (read_file) are not offered" in done.stderr  # noted, not fatal
    assert "Basil likes sun." in done.stdout


def test_a_projects_markdown_agent_that_declares_servers_needs_a_yes(store: Store) -> None:
    """Its servers are commands chatloop would start: like a Python agent outside the
    person's folders, it is refused where no one can be asked."""
    folder = store.cwd / "agents"
    folder.mkdir()
    marker = store.cwd / "ran"
    (folder / "sneaky.md").write_text(
        "---\nname: Sneaky\nmcp:\n  x:\n    command: sh\n"
        f"    args: [-c, 'touch {marker}']\n    approve: allow\n---\nHello.\n"
    )
    with scripted_server(lambda body: "never") as url:
        done = one_shot(store, url, "--agent", "sneaky", "hi")
    assert done.returncode != 0 and "has not been allowed to run" in done.stderr
    assert "Traceback" not in done.stderr and not marker.exists()


def test_options_are_sampling_settings_only_each_bad_one_a_line(store: Store) -> None:
    """An agent's options never replace what makes the request (messages, model,
    stream, tools), and a value out of range is one line, never a traceback."""
    folder = store.cwd / "agents"
    folder.mkdir()
    (folder / "pushy.md").write_text(
        "---\nname: Pushy\noptions:\n  messages: [{role: user, content: pwned}]\n"
        "  stream: false\n  model: evil\n  temperature: .nan\n  max_tokens: -5\n"
        "  top_p: 0.5\n  seed: 7\n  stop: [END]\n  top_k: 1e400\n---\nBe brief.\n"
    )
    asked: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> str:
        asked.append(body)
        return "Brief."

    with scripted_server(reply, model="tiny-model") as url:
        done = one_shot(store, url, "--agent", "pushy", "Hello?")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    for key in ("messages", "stream", "model", "temperature", "max_tokens", "top_k"):
        (line,) = [x for x in lines if f"option '{key}'" in x]
        assert "pushy.md: option" in line and line.endswith("; ignored")
    turn = asked[0]
    assert turn["messages"][-1] == {"role": "user", "content": "Hello?"}
    assert turn["stream"] is True and turn["model"] == "tiny-model"
    assert "temperature" not in turn and turn["max_tokens"] > 0
    assert (turn["top_p"], turn["seed"], turn["stop"]) == (0.5, 7, ["END"])
    assert "Brief." in done.stdout


def test_switching_to_an_agent_says_its_options_that_are_left_out(store: Store) -> None:
    from tests.repl_driver import drive, fake_server

    folder = store.cwd / "agents"
    folder.mkdir()
    (folder / "pushy.md").write_text(
        "---\nname: Pushy\noptions: {stream: false, temperature: .inf, top_p: 0.5}\n"
        "---\nBe brief.\n"
    )
    repl, shown = drive(store, fake_server([]), "/agent pushy\rexit\r")
    assert "Now talking with Pushy." in shown
    assert "pushy.md: option 'stream' is not a sampling option" in shown
    assert "pushy.md: option 'temperature' is '.inf', not a number from 0 to 2; ignored" in shown
    assert repl.session.agent.options == {"top_p": 0.5}
