"""Nothing runs or redirects without the person's say (promise 24, docs/security.md):
an agent file outside chatloop's own folder and the person's runs only after a yes,
remembered per (path, sha256); a config file inside the home or the project that
changes ``agent`` or ``base_url`` is named at start."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pexpect
import pytest

from chatloop.chat import trust
from chatloop.config import load_settings
from chatloop.format import SessionMeta
from chatloop.format.yaml_strict import load as read_yaml
from chatloop.store.store import Store
from tests.pty_driver import chatloop_bin, environment, leave, ready, spawn, wait
from tests.repl_driver import drive
from tests.test_switches import server


def evil_project(project: Path, marker: Path, name: str = "evil") -> Path:
    """A cloned project carrying ``agents/<name>.py``, which leaves ``marker`` when run."""
    folder = project / "agents"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(
        f"open({str(marker)!r}, 'a').write('ran\\n')\nNAME = 'Evil'\nSYSTEM_PROMPT = 'x'\n"
    )
    return path


class Asker:
    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.questions: list[str] = []

    def __call__(self, question: str, default: bool) -> bool:
        assert default is False
        self.questions.append(question)
        return self.answers.pop(0)


# ---------------------------------------------------------------- the decision


def test_the_persons_own_folder_and_the_bundled_one_run_without_a_question(
    chatloop_home: Path, tmp_path: Path
) -> None:
    own = chatloop_home / "agents"
    own.mkdir(parents=True)
    (own / "mine.py").write_text("NAME = 'Mine'\nSYSTEM_PROMPT = 'x'\n")
    assert trust.load(own / "mine.py", chatloop_home, None).name == "Mine"
    bundled = trust.trusted_folders(chatloop_home)[1] / "simple_sally.py"
    assert trust.load(bundled, chatloop_home, None).name == "Simple Sally"
    assert not (chatloop_home / trust.TRUST_NAME).exists()


def test_a_project_agent_is_refused_without_a_question_and_on_no(
    chatloop_home: Path, project: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    path = evil_project(project, marker)
    with pytest.raises(trust.Unapproved) as refused:
        trust.load(path, chatloop_home, None)
    assert "has not been allowed to run" in refused.value.message
    assert "--agent" in refused.value.hint
    asker = Asker(False)
    with pytest.raises(trust.Unapproved):
        trust.load(path, chatloop_home, asker)
    assert len(asker.questions) == 1 and str(path) in asker.questions[0]
    assert not marker.exists()
    assert not (chatloop_home / trust.TRUST_NAME).exists()


def test_a_yes_is_remembered_per_path_and_content_in_a_private_file(
    chatloop_home: Path, project: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    path = evil_project(project, marker)
    asker = Asker(True)
    assert trust.load(path, chatloop_home, asker).name == "Evil"
    assert marker.read_text() == "ran\n"
    record = chatloop_home / trust.TRUST_NAME
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert trust.load(path, chatloop_home, None).name == "Evil"  # no second question
    path.write_text(path.read_text() + "# changed\n")
    with pytest.raises(trust.Unapproved):
        trust.load(path, chatloop_home, None)
    again = Asker(True)
    trust.load(path, chatloop_home, again)
    assert "changed since you allowed it" in again.questions[0]
    assert not [p for p in chatloop_home.iterdir() if ".tmp" in p.name]


def test_a_damaged_record_asks_again(chatloop_home: Path, project: Path, tmp_path: Path) -> None:
    path = evil_project(project, tmp_path / "marker")
    trust.load(path, chatloop_home, Asker(True))
    (chatloop_home / trust.TRUST_NAME).write_text("{not json")
    asker = Asker(True)
    trust.load(path, chatloop_home, asker)
    assert len(asker.questions) == 1


def test_what_runs_is_the_content_that_was_checked(
    chatloop_home: Path, project: Path, tmp_path: Path
) -> None:
    path = evil_project(project, tmp_path / "marker")
    source = trust.approved_source(path, chatloop_home, Asker(True))
    path.write_text("raise SystemExit('swapped')\n")  # after the check, before the import
    from chatloop.chat.agent import load_agent

    assert load_agent(path, source).name == "Evil"


# ---------------------------------------------------------------- in the REPL


def test_agent_command_asks_before_a_project_agent_runs(store: Store, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    evil_project(store.cwd, marker)
    _, shown = drive(store, server([]), "/agent evil\rn\rhi\rexit\r")
    assert "not in your agent folders" in shown and "[y/N]" in shown
    assert "Not run: the agent file" in shown
    assert not marker.exists()
    _, shown = drive(store, server([]), "/agent evil\ry\rhi\rexit\r")
    assert "Now talking with Evil" in shown
    assert marker.exists()


def evil_session(store: Store, marker: Path) -> SessionMeta:
    """A closed session held with the project's agent ``evil`` (which would create
    ``marker`` if it ran), in the store's project; its front matter."""
    from chatloop.format import Message, Session, render_markdown
    from tests.conftest import T0, new_meta

    evil_project(store.cwd, marker)
    meta = new_meta(id="20261121-143045-0e0e0e0e", agent="Evil", agent_name="evil", status="closed")
    messages = (
        Message.create("user", T0, text="hi"),
        Message.create("summary", T0, text="**Pending:** none"),
    )
    store.project_dir.mkdir(parents=True, exist_ok=True)
    (store.project_dir / f"{meta.id}.md").write_bytes(render_markdown(Session(meta, messages)))
    return meta


def test_resume_asks_before_the_sessions_project_agent_runs(store: Store, tmp_path: Path) -> None:
    """``/resume`` of a session whose agent is a project file: asked first (``_adopt``);
    a no leaves the chat as it was."""
    marker = tmp_path / "marker"
    meta = evil_session(store, marker)
    _, shown = drive(store, server([]), f"/resume {meta.id}\rn\rexit\r")
    assert "[y/N]" in shown and "Not run: the agent file" in shown
    assert not marker.exists()


# ---------------------------------------------------------------- config notices


def settings_warnings(config_file: str | None = None) -> list[str]:
    return load_settings(config_file=config_file, read_yaml=read_yaml)[1]


def test_a_home_config_that_redirects_is_named(chatloop_home: Path) -> None:
    chatloop_home.mkdir(parents=True)
    (chatloop_home / "config.yaml").write_text("base_url: http://10.9.9.9:8080/v1\nagent: x\n")
    said = settings_warnings()
    assert len(said) == 2
    assert str(chatloop_home / "config.yaml") in said[0]
    assert "sets agent to x" in said[0] and "inside the chatloop home" in said[0]
    assert "sets base_url to http://10.9.9.9:8080/v1" in said[1]


def test_the_persons_own_config_and_a_named_one_are_not_noticed(
    chatloop_home: Path, tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "xdg-config" / "chatloop" / "config.yaml"
    own.parent.mkdir(parents=True)
    own.write_text("base_url: http://10.9.9.9:8080/v1\n")
    monkeypatch.chdir(tmp_path)  # the person's own config is inside the working directory
    assert settings_warnings() == []
    (project / "c.yaml").write_text("agent: x\n")
    monkeypatch.chdir(project)
    assert settings_warnings(str(project / "c.yaml")) == []
    monkeypatch.setenv("CHATLOOP_CONFIG", "c.yaml")  # e.g. set by a project's .envrc
    (said,) = settings_warnings()
    assert "inside this project" in said and "sets agent to x" in said


# ---------------------------------------------------------------- the real program


@pytest.mark.e2e
def test_a_one_shot_refuses_a_project_agent_and_names_a_redirecting_home_config(
    chatloop_home: Path, project: Path, tmp_path: Path
) -> None:
    from tests.scripted_server import scripted_server

    marker = tmp_path / "marker"
    evil_project(project, marker)
    env = environment(chatloop_home, 12)
    with scripted_server(lambda request: "Fine.") as url:
        result = subprocess.run(
            [chatloop_bin(), "--base-url", url, "--agent", "evil", "q"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1, result.stderr
        assert "Not run: the agent file" in result.stderr and "--agent" in result.stderr
        assert "Traceback" not in result.stderr
        assert not marker.exists()
        piped = subprocess.run(
            [chatloop_bin(), "--base-url", url, "--agent", "evil"],
            cwd=project,
            env=env,
            input="q",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert piped.returncode == 1 and not marker.exists()
        chatloop_home.mkdir(parents=True, exist_ok=True)
        (chatloop_home / "config.yaml").write_text(f"base_url: {url}\n")
        noticed = subprocess.run(
            [chatloop_bin(), "q"], cwd=project, env=env, capture_output=True, text=True, timeout=60
        )
        assert noticed.returncode == 0, noticed.stderr
        (line,) = [x for x in noticed.stderr.splitlines() if "config.yaml" in x]
        assert str(chatloop_home / "config.yaml") in line and f"sets base_url to {url}" in line
        doctor = subprocess.run(
            [chatloop_bin(), "doctor"], cwd=project, env=env, capture_output=True, text=True
        )
        assert f"sets base_url to {url}" in doctor.stdout + doctor.stderr


@pytest.mark.e2e
def test_a_terminal_chat_asks_once_and_again_when_the_file_changes(
    chatloop_home: Path, project: Path, tmp_path: Path
) -> None:
    from tests.scripted_server import scripted_server

    marker = tmp_path / "marker"
    path = evil_project(project, marker)
    with scripted_server(lambda request: "Fine.") as url:
        child = spawn(url, chatloop_home, project, 12, "--agent", "evil", ready_text="[y/N]")
        assert not marker.exists()  # asked before the file is imported
        child.sendline("y")
        wait(child, ready(0))
        assert marker.read_text() == "ran\n"
        child.sendline("exit")
        child.expect(pexpect.EOF)
        child = spawn(url, chatloop_home, project, 12, "--agent", "evil")  # no question
        assert marker.read_text() == "ran\nran\n"
        child.sendline("hello")
        wait(child, ready(1))
        leave(child)
        path.write_text(path.read_text() + "# edited\n")
        child = spawn(url, chatloop_home, project, 12, "--agent", "evil", ready_text="[y/N]")
        child.sendline("n")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 1
        assert marker.read_text() == "ran\nran\n"
    assert os.stat(chatloop_home / trust.TRUST_NAME).st_mode & 0o077 == 0


@pytest.mark.e2e
def test_continuing_a_session_whose_agent_is_a_project_file_asks_first(
    chatloop_home: Path, project: Path, tmp_path: Path
) -> None:
    """``chatloop -c`` in a terminal (``cli.chat.chat``): the session's agent, found in
    the project's ``agents/``, is asked about before it is imported; a no exits 1."""
    from chatloop.format import Message, Session, render_markdown
    from tests.conftest import T0, new_meta
    from tests.scripted_server import scripted_server

    marker = tmp_path / "marker"
    evil_project(project, marker)
    folder = Store(chatloop_home, cwd=project).project_dir
    folder.mkdir(parents=True)
    meta = new_meta(id="20261121-143045-0e0e0e0e", agent="Evil", agent_name="evil", status="closed")
    messages = (
        Message.create("user", T0, text="hi"),
        Message.create("summary", T0, text="**Pending:** none"),
    )
    (folder / f"{meta.id}.md").write_bytes(render_markdown(Session(meta, messages)))
    with scripted_server(lambda request: "Ready.") as url:
        child = spawn(url, chatloop_home, project, 12, "-c", ready_text="[y/N]")
        child.sendline("n")
        child.expect(pexpect.EOF)
        child.close()
    assert child.exitstatus == 1
    assert not marker.exists()


@pytest.mark.e2e
def test_continuing_asks_about_no_configured_agent_the_session_does_not_use(
    chatloop_home: Path, project: Path, tmp_path: Path
) -> None:
    """Issue 31: `-c` loaded (and so asked about, or refused) the configured agent before
    choosing the session's own. A project agent configured, a session held with Simple
    Sally: `-c "q"` goes on with Sally; the project file is never run nor asked about."""
    from tests.scripted_server import scripted_server

    marker = tmp_path / "marker"
    evil_project(project, marker)
    env = environment(chatloop_home, 12)
    with scripted_server(lambda request: "Fine.") as url:
        first = subprocess.run(
            [chatloop_bin(), "--base-url", url, "first question"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert first.returncode == 0, first.stderr
        again = subprocess.run(
            [chatloop_bin(), "--base-url", url, "-c", "go on"],
            cwd=project,
            env={**env, "CHATLOOP_AGENT": "evil"},  # configured, not named
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert again.returncode == 0, again.stderr
    assert "Not run" not in again.stderr and not marker.exists()
    assert again.stdout.strip() == "Fine."
    child = max(chatloop_home.rglob("*.md"), key=lambda p: p.stat().st_mtime_ns)
    assert "agent_name: simple_sally" in child.read_text()


def test_a_no_to_the_resumed_sessions_agent_leaves_the_chat_in_its_own_session(
    store: Store, tmp_path: Path
) -> None:
    """Issue 35: after a no, the next message went to a new session."""
    marker = tmp_path / "marker"
    meta = evil_session(store, marker)
    script = f"first here\r/resume {meta.id}\rn\rsecond here\rexit\r"
    _, shown = drive(store, server([]), script)
    assert "Not run: the agent file" in shown and not marker.exists()
    ours = [
        s
        for s in (store.read(Path(e.path)).session for e in store.session_files())
        if s.meta.id != meta.id
    ]
    assert len(ours) == 1  # one session: the chat went on in it
    said = [m.text for m in ours[0].messages if m.role == "user"]
    assert said == ["first here", "second here"]
