"""Promise 26: every tool source and every approval comes from the person.

MCP servers declared anywhere but the person's own config file (a home's
``config.yaml``, a project's file named by ``CHATLOOP_CONFIG`` or ``--config``,
``CHATLOOP_MCP_SERVERS``) start only once the person allowed that declaration;
a one-shot leaves them out with one line. And every entry point arms its agent
the same way (``chat.arming``): a tool that is not read-only asks in a chat and
is refused in a one-shot, after ``/resume`` and ``/agent`` as after ``-r``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chatloop.chat import trust
from chatloop.chat.approval import Approvals
from chatloop.chat.arming import Arming
from chatloop.config import Declared, Settings, own_config
from chatloop.errors import Unapproved
from chatloop.format import ToolCall
from chatloop.store.store import Store
from tests.fakes import FakeBackend
from tests.hosts import chat
from tests.pty_driver import chatloop_bin, environment
from tests.scripted_server import scripted_server

TOOL_AGENT = '''
NAME = "Toucher Tom"
SYSTEM_PROMPT = "You touch files."


def touch(path: str) -> str:
    """Create a file.

    Args:
        path: the file
    """
    open(path, "w").close()
    return "done"


TOOLS = [touch]
'''


def declaration(marker: Path, approve: str = "allow") -> dict[str, object]:
    """A server whose command leaves ``marker`` when it is started (it then exits: no
    MCP server, which costs one line)."""
    return {
        "marker": {
            "command": sys.executable,
            "args": ["-c", f"open({str(marker)!r}, 'w').close()"],
            "approve": approve,
        }
    }


class Asker:
    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.questions: list[str] = []

    def __call__(self, question: str, default: bool) -> bool:
        self.questions.append(question)
        return self.answers.pop(0)


def arming(home: Path, servers: str, declared: Declared, **how: object) -> Arming:
    said: list[str] = []
    made = Arming(
        home,
        Settings(mcp_servers=servers),
        declared,
        Approvals(said.append),
        said.append,
        **how,  # type: ignore[arg-type]
    )
    made.said = said  # type: ignore[attr-defined]
    return made


SALLY = Path(__file__).resolve().parent.parent / "agents" / "simple_sally.py"


def test_servers_from_a_file_not_the_persons_own_start_only_once_allowed(
    chatloop_home: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    servers = json.dumps(declaration(marker))
    project_config = Declared(str(tmp_path / "project" / "config.yaml"), own=False)

    one_shot = arming(chatloop_home, servers, project_config)
    agent = one_shot.arm(SALLY)
    one_shot.close()
    assert agent.name == "Simple Sally" and not marker.exists()  # left out, the agent goes on
    (line,) = one_shot.said  # type: ignore[attr-defined]
    assert line.startswith("Not started: the MCP servers marker declared in ")

    with pytest.raises(Unapproved):  # a new chat's first prompt: asked on the terminal
        arming(chatloop_home, servers, project_config, later=True).arm(SALLY)

    said_no = Asker(False)
    refused = arming(chatloop_home, servers, project_config, ask=said_no)
    refused.arm(SALLY)
    refused.arm(SALLY)  # (asked once a run)
    refused.close()
    assert not marker.exists() and len(said_no.questions) == 1
    assert "start the MCP servers marker declared in" in said_no.questions[0]

    allowed = arming(chatloop_home, servers, project_config, ask=Asker(True))
    allowed.arm(SALLY)
    allowed.close()
    assert marker.exists()
    assert any("MCP servers from " in line for line in allowed.said)  # type: ignore[attr-defined]
    marker.unlink()

    remembered = arming(chatloop_home, servers, project_config)  # no one to ask: remembered
    remembered.arm(SALLY)
    remembered.close()
    assert marker.exists()
    marker.unlink()

    changed = json.dumps(declaration(marker, approve="ask"))
    asked_again = Asker(False)
    arming(chatloop_home, changed, project_config, ask=asked_again).arm(SALLY)
    assert asked_again.questions and "changed since you allowed" in asked_again.questions[0]
    assert not marker.exists()


def test_servers_of_the_persons_own_config_start_without_a_question(
    chatloop_home: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    own = arming(chatloop_home, json.dumps(declaration(marker)), Declared("mine", own=True))
    own.arm(SALLY)
    own.close()
    assert marker.exists()


def test_an_agent_file_record_and_a_server_record_live_side_by_side(
    chatloop_home: Path, tmp_path: Path
) -> None:
    project_agent = tmp_path / "agents" / "tom.py"
    project_agent.parent.mkdir()
    project_agent.write_text(TOOL_AGENT, encoding="utf-8")
    trust.approved_source(project_agent, chatloop_home, Asker(True))
    assert trust.approved_servers("/x/config.yaml", "{}", chatloop_home, Asker(True))
    assert trust.approved_source(project_agent, chatloop_home, None)  # both remembered
    assert trust.approved_servers("/x/config.yaml", "{}", chatloop_home, None)


@pytest.mark.parametrize("where", ["home", "CHATLOOP_CONFIG", "CHATLOOP_MCP_SERVERS", "own"])
def test_a_one_shot_starts_only_the_servers_of_the_persons_own_config(
    chatloop_home: Path, tmp_path: Path, project: Path, where: str
) -> None:
    marker = tmp_path / "started"
    servers = declaration(marker)
    env = environment(chatloop_home, 16)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    text = "mcp_servers: " + json.dumps(servers) + "\n"
    if where == "home":
        chatloop_home.mkdir(parents=True, exist_ok=True)
        (chatloop_home / "config.yaml").write_text(text, encoding="utf-8")
    elif where == "CHATLOOP_CONFIG":
        (project / "chatloop.yaml").write_text(text, encoding="utf-8")
        env["CHATLOOP_CONFIG"] = str(project / "chatloop.yaml")
    elif where == "CHATLOOP_MCP_SERVERS":
        env["CHATLOOP_MCP_SERVERS"] = json.dumps(servers)
    else:
        mine = own_config(env)
        mine.parent.mkdir(parents=True)
        mine.write_text(text, encoding="utf-8")
    with scripted_server(lambda request: "Fine.") as url:
        done = subprocess.run(
            [chatloop_bin(), "--base-url", url, "hello"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    if where == "own":
        assert marker.exists()
    else:
        assert not marker.exists()
        refusals = [line for line in done.stderr.splitlines() if "Not started: the MCP" in line]
        assert len(refusals) == 1, done.stderr


def _tool_agent(home: Path) -> Path:
    path = home / "agents" / "toucher_tom.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TOOL_AGENT, encoding="utf-8")
    return path


def test_resume_arms_the_sessions_own_agent_as_r_does(store: Store, tmp_path: Path) -> None:
    """``/resume`` to a session held with another agent: that agent's tool that is not
    read-only asks (a chat) or is refused (no one to ask); it never just runs."""
    from chatloop.chat.agent import load_agent

    first, _ = chat(store, FakeBackend())
    first.agent = load_agent(_tool_agent(store.root))
    first.send("Touch something for me.")
    first.close()

    session, _host = chat(store, FakeBackend())
    asked: list[str] = []

    def approve(name: str, arguments: str) -> str:
        asked.append(name)
        return "no"

    session.arming.approvals.approve = approve  # type: ignore[assignment]
    assert session.resume("1")
    assert session.agent.name == "Toucher Tom"
    target = tmp_path / "touched"
    result = session.agent.run_tool(ToolCall("c1", "touch", json.dumps({"path": str(target)})))
    assert asked == ["touch"] and result.approved == "no" and result.is_error
    assert not target.exists()

    session.arming.approvals.approve = None  # a one-shot: no one to ask
    result = session.agent.run_tool(ToolCall("c2", "touch", json.dumps({"path": str(target)})))
    assert result.approved == "no" and not target.exists()
    session.close()


def test_agent_switch_in_a_chat_arms_the_new_agent(store: Store, tmp_path: Path) -> None:
    from tests.repl_driver import drive, fake_server

    _tool_agent(store.root)
    repl, out = drive(store, fake_server([]), "/agent toucher_tom\nexit\n")
    assert "Now talking with Toucher Tom" in out
    target = tmp_path / "touched"
    call = ToolCall("c1", "touch", json.dumps({"path": str(target)}))
    repl.approvals.approve = lambda name, arguments: "no"
    result = repl.session.agent.run_tool(call)
    assert result.approved == "no" and not target.exists()


def _touching(marker: Path) -> object:
    """A scripted model that calls ``touch(marker)`` whenever it is offered tools and
    has not had a result yet, and summarizes when asked to."""
    from tests.fakes import STRUCTURED

    def reply(request: dict[str, object]) -> str:
        messages = request["messages"]
        assert isinstance(messages, list)
        if "progressive summary" in str(messages[-1]["content"]):
            return STRUCTURED
        if request.get("tools") and messages[-1]["role"] != "tool":
            return "CALL touch " + json.dumps({"path": str(marker)})
        return "I could not."

    return reply


def test_every_one_shot_entry_refuses_a_tool_that_asks(
    chatloop_home: Path, tmp_path: Path, project: Path
) -> None:
    """A new one-shot, ``-c`` and ``-r`` arm the agent the same way: the tool that is
    not read-only is refused (no one to ask), said on stderr, and never runs."""
    _tool_agent(chatloop_home)
    marker = tmp_path / "touched"
    env = environment(chatloop_home, 16)
    with scripted_server(_touching(marker)) as url:  # type: ignore[arg-type]
        for args in (["--agent", "toucher_tom"], ["-c"], ["-r", "1"]):
            done = subprocess.run(
                [chatloop_bin(), "--base-url", url, *args, "touch it"],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            assert "touch: not run (nobody to ask here" in done.stderr, (args, done.stderr)
            assert not marker.exists(), args
