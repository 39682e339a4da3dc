"""Promise 25: no child process imports from where the person stands, nor from the home.

A cloned repository can carry a ``sqlite3.py``, an ``httpx.py`` or a ``chatloop/``
package at its top; a copied home can too. Each planted module, if ever imported,
appends a line to a marker file. Every command that starts a child runs with them
planted, through the installed ``chatloop`` (whose own path never holds the
working directory), then waits for its children to end: the marker must not exist.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatloop import children
from chatloop.store.fsio import wait_for_lock
from chatloop.store.index_build import GLANCE_FROM
from chatloop.store.store import Store
from tests.fakes import STRUCTURED
from tests.pty_driver import chatloop_bin, environment
from tests.scripted_server import scripted_server
from tests.test_index_glance import WORD, finalized, lose_index, wait_gone

PLANTED = ("sqlite3.py", "httpx.py", "json.py", "chatloop/__init__.py")


def plant(folder: Path, marker: Path) -> None:
    """Modules in ``folder`` that shadow what chatloop imports; each writes ``marker``."""
    for name in PLANTED:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"open({str(marker)!r}, 'a').write({str(path)!r} + '\\n')\n"
            "raise SystemExit('a planted module ran')\n",
            encoding="utf-8",
        )


def _run(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [chatloop_bin(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done


def _reply(request: dict[str, object]) -> str:
    messages = request["messages"]
    assert isinstance(messages, list)
    return STRUCTURED if "progressive summary" in str(messages[-1]["content"]) else "Fine."


@pytest.fixture
def planted(tmp_path: Path, chatloop_home: Path) -> Path:
    """The marker file every planted module writes (in the project folder, which the
    ``store`` and ``project`` fixtures name too, and in the home)."""
    marker = tmp_path / "MARKER"
    chatloop_home.mkdir(parents=True, exist_ok=True)
    plant(tmp_path / "project", marker)
    plant(chatloop_home, marker)
    return marker


def test_the_words_process_imports_nothing_from_the_working_directory_or_the_home(
    store: Store, planted: Path
) -> None:
    project = store.cwd
    finalized(store, GLANCE_FROM + 8)
    env = {**environment(store.root, 16), "CHATLOOP_HOME": str(store.root)}
    for command in (["sessions"], ["sessions", "--all"], ["search", WORD, "--all"]):
        lose_index(store.root)  # a first run, an upgrade, an `rm index.db`
        _run(project, env, *command)
        wait_gone(store.root)
    assert not planted.exists(), planted.read_text()


@pytest.mark.parametrize("pythonpath", ["", "."], ids=["plain", "relative-PYTHONPATH"])
def test_the_summary_worker_imports_nothing_from_the_working_directory_or_the_home(
    chatloop_home: Path, project: Path, planted: Path, pythonpath: str
) -> None:
    """An exit hands the summary to a worker; with a relative ``PYTHONPATH`` entry too,
    which would name the worker's own working directory (the home)."""
    env = {**environment(chatloop_home, 16), "CHATLOOP_SUMMARIES": "background"}
    if pythonpath:
        # (the person's own process imports from the relative entry as Python does: the
        # planted cwd copies go, and only the home's, where the worker runs, remain)
        for name in PLANTED:
            (project / name).unlink()
        (project / "chatloop").rmdir()
        given = env.get("PYTHONPATH")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, given]))
    with scripted_server(_reply) as url:
        done = _run(project, env, "--base-url", url, "How often should I water basil?")
        assert "summary is being written in the background" in done.stderr
        (path,) = chatloop_home.rglob("*.md")
        wait_for_lock(path)
    assert "status: closed" in path.read_text(encoding="utf-8")  # the worker did run
    assert not planted.exists(), planted.read_text()


def test_a_childs_environment_holds_absolute_paths_only_and_says_safe_path() -> None:
    import chatloop

    root = str(Path(chatloop.__file__).resolve().parent.parent)
    env = children.environment({"PYTHONPATH": os.pathsep.join([".", "lib", "/abs/x", ""])})
    assert env["PYTHONPATH"].split(os.pathsep) == [root, "/abs/x"]
    assert env["PYTHONSAFEPATH"] == "1"
    foreign = children.environment({"PYTHONPATH": "rel"}, ours=False)
    assert "PYTHONPATH" not in foreign and foreign["PYTHONSAFEPATH"] == "1"
    assert children.python_command("chatloop.x", "a")[:4] == [
        sys.executable,
        "-P",
        "-m",
        "chatloop.x",
    ]
    assert children.workdir(Path("relative")) == os.path.abspath(os.sep)


def test_an_mcp_server_run_as_a_module_imports_nothing_from_there_either(
    chatloop_home: Path, project: Path, planted: Path, tmp_path: Path
) -> None:
    """``python -m server`` puts its working directory first on its path unless told
    not to: a server from the person's own config, run by a one-shot in the planted
    project, starts (its tools are offered) and imports nothing planted."""
    config = tmp_path / "xdg" / "chatloop" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(
        "mcp_servers:\n  time:\n"
        f"    command: {sys.executable}\n"
        "    args: [-m, mcp_server_time, --local-timezone, UTC]\n",
        encoding="utf-8",
    )
    asked: list[dict[str, object]] = []

    def reply(request: dict[str, object]) -> str:
        asked.append(request)
        return _reply(request)

    env = {**environment(chatloop_home, 16), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    with scripted_server(reply) as url:
        _run(project, env, "--base-url", url, "What time is it?")
        for path in chatloop_home.rglob("*.md"):
            wait_for_lock(path)
    assert not planted.exists(), planted.read_text()  # (at 9df2931 the project's json.py ran)
    tools = asked[0].get("tools")
    assert isinstance(tools, list) and any("time__" in str(tool) for tool in tools)
