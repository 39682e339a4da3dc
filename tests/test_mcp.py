"""Tools from MCP servers (issue 36 items 2-3): a real server (mcp-server-time) and
hostile ones (tests/hostile_mcp.py). The tiny demo model cannot call tools on cue,
so a scripted backend makes the calls; the servers are real processes."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from chatloop.backends.base import ChatMessage, Event, Finish, ToolCallEvent, UsageEvent
from chatloop.chat.agent import Agent, armed, load_agent
from chatloop.chat.approval import Approvals
from chatloop.chat.mcp_servers import McpServers, ServerSpec, specs_of
from chatloop.chat.session import ChatSession
from chatloop.format import ToolCall, parse_markdown, render_markdown
from chatloop.store.store import Store
from tests.fakes import FakeBackend
from tests.hosts import TEST_SETTINGS, ScriptedHost

HOSTILE = Path(__file__).resolve().parent / "hostile_mcp.py"
TIME_SERVER = shutil.which(
    "mcp-server-time", path=str(Path(sys.executable).parent)
) or shutil.which("mcp-server-time")
QUICK = (20.0, 3.0, 5.0)  # start, call, stop: a hung server costs a test 3 s


class Caller(FakeBackend):
    """A scripted model that calls ``calls`` (name, JSON arguments) in its first reply,
    then answers in text."""

    def __init__(self, *calls: tuple[str, str]) -> None:
        super().__init__(default="Done.")
        self.to_call = list(calls)

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Any = None,
        options: Any = None,
        cancel: Any = None,
    ) -> Iterator[Event]:
        if not self.to_call:
            yield from super().stream(messages, tools=tools, options=options, cancel=cancel)
            return
        self.calls.append({"messages": list(messages), "tools": tools, "options": options or {}})
        for n, (name, arguments) in enumerate(self.to_call):
            yield ToolCallEvent(f"call_{n}", name, arguments)
        self.to_call = []
        yield UsageEvent(10, 5)
        yield Finish("tool_calls")


def server_children() -> set[int]:
    """The pids of this process's children that are MCP servers of the tests."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and ("mcp-server-time" in cmdline or "hostile_mcp" in cmdline):
            found.add(int(entry.name))
    return found


def agent_with(spec: ServerSpec, servers: McpServers, approvals: Approvals | None = None) -> Agent:
    """An agent declaring ``spec``, armed with the tools ``servers`` offer, each acting
    as ``approvals`` decide (by default: nobody to ask, as in a one-shot)."""
    agent = Agent(name="Timely", system_prompt="You tell the time.", mcp=(spec,))
    return armed(agent, servers, approvals or Approvals(lambda line: None))


@pytest.fixture
def time_spec() -> ServerSpec:
    if TIME_SERVER is None:
        pytest.fail("mcp-server-time is not installed (pip install -e '.[dev]')")
    return ServerSpec("time", TIME_SERVER, ("--local-timezone", "UTC"), approve="allow")


def test_a_real_servers_tools_are_offered_called_recorded_and_the_server_stopped(
    store: Store, time_spec: ServerSpec
) -> None:
    said: list[str] = []
    servers = McpServers([time_spec], said.append, waits=QUICK)
    agent = agent_with(time_spec, servers)
    try:
        names = [tool.name for tool in agent.tools]
        assert {"time__get_current_time", "time__convert_time"} <= set(names)
        assert server_children()  # running
        backend = Caller(("time__get_current_time", '{"timezone": "Europe/Paris"}'))
        session = ChatSession(agent, backend, store, TEST_SETTINGS, ScriptedHost())
        session.send("What time is it in Paris?")
        offered = [t["function"]["name"] for t in backend.calls[0]["tools"]]
        assert "time__get_current_time" in offered
        session.close()
    finally:
        servers.close()
    assert server_children() == set()  # no orphan
    (entry,) = list(store.session_files())
    data = Path(entry.path).read_bytes()
    parsed = parse_markdown(data, Path(entry.path).stem)
    assert render_markdown(parsed.session) == data  # lossless, the call included
    (tool,) = [m for m in parsed.session.messages if m.role == "tool"]
    (result,) = tool.tool_results
    assert result.name == "time__get_current_time" and not result.is_error
    assert result.approved == "allow"  # its policy let it act, and the file says so
    assert json.loads(result.content)["timezone"] == "Europe/Paris"
    assert said == []


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("hang", "did not answer within 3 s"),
        ("die", "failed"),
        ("huge", "cut at 20000 characters"),
    ],
)
def test_a_hostile_server_costs_the_call_an_error_never_the_chat(
    store: Store, mode: str, said: str
) -> None:
    spec = ServerSpec("bad", sys.executable, (str(HOSTILE), mode), approve="allow")
    servers = McpServers([spec], lambda line: None, waits=QUICK)
    agent = agent_with(spec, servers)
    try:
        assert [tool.name for tool in agent.tools] == ["bad__echo"]
        backend = Caller(("bad__echo", '{"text": "hi"}'))
        session = ChatSession(agent, backend, store, TEST_SETTINGS, ScriptedHost())
        session.send("Echo hi")
        session.close()
    finally:
        servers.close()
    assert server_children() == set()
    (entry,) = list(store.session_files())
    messages = parse_markdown(Path(entry.path).read_bytes(), "x").session.messages
    (result,) = [r for m in messages if m.role == "tool" for r in m.tool_results]
    assert said in result.content and len(result.content) < 21000
    assert result.is_error == (mode != "huge")
    assert [m.text for m in messages if m.role == "assistant"][-1].strip() == "Done."


def test_a_server_that_never_starts_or_whose_command_is_missing_costs_one_line(
    store: Store,
) -> None:
    said: list[str] = []
    specs = [
        ServerSpec("mute", sys.executable, (str(HOSTILE), "mute")),
        ServerSpec("gone", "/nonexistent/server"),
    ]
    servers = McpServers(specs, said.append, waits=(2.0, 2.0, 2.0))
    try:
        assert servers.start() == []
    finally:
        servers.close()
    assert len(said) == 2 and "mute did not start within 2 s" in said[0]
    assert said[1].startswith("MCP server gone did not start:")
    assert server_children() == set()


def test_tool_names_and_descriptions_full_of_markup_stay_text(store: Store) -> None:
    spec = ServerSpec("bad", sys.executable, (str(HOSTILE), "markup"), approve="allow")
    servers = McpServers([spec], lambda line: None, waits=QUICK)
    try:
        (tool,) = servers.start()
    finally:
        servers.close()
    assert all(c.isalnum() or c in "_-" for c in tool.name) and len(tool.name) <= 64
    assert "\x1b" in tool.description  # the model reads it as the server wrote it;
    from chatloop.ui.terminal_text import visible  # the screen never gets it raw

    assert "\x1b" not in visible(tool.description)


def test_approval_asks_remembers_always_and_refuses_where_no_one_can_be_asked(
    store: Store, time_spec: ServerSpec
) -> None:
    asking = time_spec._replace(approve="ask")
    asked: list[str] = []
    answers = ["no", "always"]

    def approve(name: str, arguments: str) -> Any:
        asked.append(f"{name}({arguments})")
        return answers.pop(0)

    servers = McpServers([asking], lambda line: None, waits=QUICK)
    agent = agent_with(asking, servers, Approvals(lambda line: None, approve))
    call = ("time__get_current_time", '{"timezone": "UTC"}')
    try:
        session = ChatSession(agent, Caller(call, call), store, TEST_SETTINGS, ScriptedHost())
        session.send("time?")
        again = Caller(call)
        session.use_backend(again)
        session.send("and now?")
        session.close()
    finally:
        servers.close()
    said: list[str] = []
    one_shot = McpServers([asking], said.append, waits=QUICK)
    try:  # a one-shot: no one to ask
        unasked = agent_with(asking, one_shot, Approvals(said.append))
        result = unasked.run_tool(ToolCall("c", call[0], call[1]))
    finally:
        one_shot.close()
    assert server_children() == set()
    assert asked == ['time__get_current_time({"timezone": "UTC"})'] * 2  # "always": asked no more
    (entry,) = list(store.session_files())
    results = [
        r
        for m in parse_markdown(Path(entry.path).read_bytes(), "x").session.messages
        for r in m.tool_results
    ]
    assert results[0].is_error and "the person said no" in results[0].content
    assert not results[1].is_error and all(not r.is_error for r in results[1:])
    # each decision is in the file with the call's result: no, then always (asked),
    # then always (remembered)
    assert [r.approved for r in results] == ["no", "always", "always"]
    assert result.is_error and "no one could be asked" in result.content
    assert result.approved == "no"
    assert said and "not run (nobody to ask here" in said[0]


def test_declarations_are_read_from_a_markdown_agent_and_bad_entries_noted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "timely.md"
    path.write_text(
        "---\nname: Timely\nmcp:\n  time:\n    command: mcp-server-time\n"
        "    args: [--local-timezone, UTC]\n    approve: allow\n"
        "  broken: {args: [x]}\n  odd:\n    command: x\n    approve: sometimes\n"
        "---\nTell the time.\n"
    )
    agent = load_agent(path)
    assert agent.mcp[0] == ServerSpec(
        "time", "mcp-server-time", ("--local-timezone", "UTC"), (), "allow"
    )
    assert agent.mcp[1].name == "odd" and agent.mcp[1].approve == "ask"
    notes = "\n".join(agent.notes)
    assert "mcp server 'broken' has no command" in notes and "'sometimes' is not one of" in notes
    assert specs_of("not a mapping", "x")[1] == ["x: mcp is not a mapping of server names; ignored"]


def test_the_chat_asks_once_always_or_no_showing_the_call_as_text(store: Store) -> None:
    import io

    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output.plain_text import PlainTextOutput
    from rich.console import Console

    from chatloop.ui.repl import Repl
    from tests.conftest import Clock
    from tests.repl_driver import fake_server

    agent = Agent(name="Timely", system_prompt="Tell the time.")
    for typed, answer in (("y\r", "once"), ("a\r", "always"), ("\r", "no"), ("nope\r", "no")):
        out, prompts = io.StringIO(), io.StringIO()
        with create_pipe_input() as pipe:
            pipe.send_text(typed)
            repl = Repl(
                agent,
                fake_server([]),
                store,
                TEST_SETTINGS,
                Console(file=out, width=200),
                input=pipe,
                output=PlainTextOutput(prompts),
                clock=Clock(),
            )
            got = repl.approve("bad__echo\x1b[2J", '{"text": "\\u001b]52;c;x\\u0007"}')
        assert got == answer, typed
        asked = prompts.getvalue()
        assert "Run the tool bad__echo" in asked and "[y/a/N]" in asked
        assert "\x1b[2J" not in asked + out.getvalue()  # the call is shown as text
        decided = {"once": "allowed once", "always": "allowed for this session", "no": "not run"}
        assert decided[answer] in out.getvalue()


def test_switching_to_an_agent_with_servers_starts_them_until_the_chat_ends(
    store: Store, time_spec: ServerSpec, tmp_path: Path
) -> None:
    from tests.repl_driver import drive, fake_server

    folder = store.cwd / "agents"
    folder.mkdir()
    (folder / "timely.md").write_text(
        f"---\nname: Timely\nmcp:\n  time:\n    command: {time_spec.command}\n"
        f"    env: {{CHATLOOP_TEST_MARK: '{tmp_path}'}}\n---\nTell the time.\n"
    )
    _, shown = drive(store, fake_server([]), "/agent timely\ry\r/info\rexit\r")
    assert "with your permissions; sha256" in shown  # asked first (its servers run): a yes
    assert "Now talking with Timely." in shown
    (line,) = [x for x in shown.splitlines() if x.startswith("  tools ")]
    assert "time__get_current_time" in line  # started by /agent, offered at once
    assert marked(f"CHATLOOP_TEST_MARK={tmp_path}") == set()  # stopped with the chat


def test_always_is_forgotten_when_the_chat_leaves_its_session_file(store: Store) -> None:
    import io

    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output.plain_text import PlainTextOutput
    from rich.console import Console

    from chatloop.ui.repl import Repl
    from tests.conftest import Clock
    from tests.repl_driver import fake_server

    asked: list[str] = []
    with create_pipe_input() as pipe:
        pipe.send_text("hello\r/new\rhi again\r/info\rexit\r")
        repl = Repl(
            Agent(name="Timely", system_prompt="Tell the time."),
            fake_server([]),
            store,
            TEST_SETTINGS,
            Console(file=io.StringIO(), width=200),
            input=pipe,
            output=PlainTextOutput(io.StringIO()),
            clock=Clock(),
        )

        def approve(name: str, arguments: str) -> Any:
            asked.append(name)
            return "always"

        repl.approvals.approve = approve
        assert repl.approvals.decide("t", "ask", {}) == "always"  # said in the first file
        assert repl.approvals.decide("t", "ask", {}) == "always" and asked == ["t"]
        assert repl.run() == 0
    # /new left the first file: "always" is forgotten, the tool asks again
    assert repl.approvals.decide("t", "ask", {}) == "always" and asked == ["t", "t"]


def test_servers_in_the_persons_own_config_file_are_offered_to_any_agent(
    store: Store, time_spec: ServerSpec, tmp_path: Path
) -> None:
    """The person's own config file (``$XDG_CONFIG_HOME/chatloop/config.yaml``) runs its
    servers with no question; any other source asks first (tests/test_arming.py)."""
    import subprocess

    from tests.scripted_server import scripted_server

    config = tmp_path / "xdg" / "chatloop" / "config.yaml"
    config.parent.mkdir(parents=True)
    mark = f"CHATLOOP_TEST_MARK={tmp_path}"
    config.write_text(
        "mcp_servers:\n  time:\n"
        f"    command: {time_spec.command}\n    args: [--local-timezone, UTC]\n"
        f"    env: {{CHATLOOP_TEST_MARK: '{tmp_path}'}}\n"
        "  broken: {args: [x]}\n"
    )
    asked: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> str:
        asked.append(body)
        return "It is noon."

    with scripted_server(reply) as url:
        done = subprocess.run(
            [sys.executable, "-m", "chatloop.cli", "--base-url", url, "What time is it?"],
            cwd=store.cwd,
            env={
                "CHATLOOP_HOME": str(store.root),
                "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
                "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # (this chatloop's code)
                "HOME": str(store.root),
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert "MCP servers from" not in done.stderr  # the person's own: not named, not asked
    offered = {tool["function"]["name"] for tool in asked[0]["tools"]}
    assert {"time__get_current_time", "time__convert_time"} <= offered
    assert f"mcp_servers of {config}: mcp server 'broken' has no command; ignored" in done.stderr
    assert marked(mark) == set()  # the server did not outlive chatloop


def marked(mark: str) -> set[int]:
    """The pids of processes whose environment holds ``mark`` (any parent)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "environ").read_bytes().split(b"\0"):
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("CHATLOOP_SLOW"), reason="set CHATLOOP_SLOW=1 to run (fetches from npm)"
)
def test_an_npm_server_lists_and_reads_and_is_stopped(tmp_path: Path) -> None:
    """The reference filesystem server, from npm (Node is on the machine, or skip). Slow
    and on demand: a first run fetches it from the npm registry, which CI must not
    wait on."""
    if shutil.which("npx") is None:
        pytest.skip("Node (npx) is not on this machine")
    (tmp_path / "notes.md").write_text("kumquats by the wall\n")
    mark = ("CHATLOOP_TEST_MARK", str(tmp_path))
    spec = ServerSpec(
        "fs", "npx", ("-y", "@modelcontextprotocol/server-filesystem", str(tmp_path)), (mark,)
    )
    said: list[str] = []
    servers = McpServers([spec._replace(approve="allow")], said.append, waits=(180.0, 30.0, 5.0))
    try:
        tools = {tool.name: tool for tool in servers.start()}
        assert said == [] and {"fs__list_directory", "fs__write_file"} <= set(tools)
        listed = tools["fs__list_directory"].function(path=str(tmp_path))
        assert "notes.md" in listed
    finally:
        servers.close()
    assert marked(f"CHATLOOP_TEST_MARK={tmp_path}") == set()


def test_tool_names_that_read_alike_are_numbered_apart(store: Store) -> None:
    spec = ServerSpec("bad", sys.executable, (str(HOSTILE), "clash"), approve="allow")
    servers = McpServers([spec], lambda line: None, waits=QUICK)
    try:
        names = [tool.name for tool in servers.start()]
    finally:
        servers.close()
    assert len(names) == 7 and len(set(names)) == 7  # each its own, none waited on
    assert all(len(n) <= 64 and all(c.isalnum() or c in "_-" for c in n) for n in names)


def test_an_agents_own_tools_ask_unless_read_only_and_the_decision_is_kept(
    tmp_path: Path,
) -> None:
    from chatloop.chat.agent import bundled_agents

    path = tmp_path / "scribe.py"
    path.write_text(
        'NAME = "Scribe"\nSYSTEM_PROMPT = "You write."\n\n'
        "def note(text: str) -> str:\n"
        '    """Write a note."""\n'
        '    return "noted " + text\n\n'
        "def peek() -> dict:\n"
        '    """Look around."""\n'
        '    return {"seen": 1}\n\n'
        "def burn() -> str:\n"
        '    """Never."""\n'
        '    return "burnt"\n\n'
        "TOOLS = [note, peek, burn]\n"
        'READ_ONLY = ["peek"]\n'
        'APPROVE = {"burn": "deny", "note": "sometimes"}\n'
    )
    agent = load_agent(path)
    assert {t.name: t.policy for t in agent.tools} == {
        "note": "ask",
        "peek": "allow",
        "burn": "deny",
    }
    assert "APPROVE['note'] is not one of allow, ask, deny" in "\n".join(agent.notes)
    said: list[str] = []
    unasked = armed(agent, None, Approvals(said.append))  # a one-shot: no one to ask
    peek = unasked.run_tool(ToolCall("1", "peek", "{}"))
    assert not peek.is_error and json.loads(peek.content) == {"seen": 1}
    assert peek.approved == "allow"
    note = unasked.run_tool(ToolCall("2", "note", '{"text": "x"}'))
    assert note.is_error and note.approved == "no" and "no one could be asked" in note.content
    assert said == ["note: not run (nobody to ask here; approve: allow lets it run)"]
    asked = armed(agent, None, Approvals(said.append, lambda name, arguments: "once"))
    note = asked.run_tool(ToolCall("3", "note", '{"text": "x"}'))
    assert (note.content, note.approved, note.is_error) == ("noted x", "once", False)
    burn = asked.run_tool(ToolCall("4", "burn", "{}"))
    assert burn.is_error and burn.approved == "no" and "denied" in burn.content
    fiona = load_agent(bundled_agents() / "file_fiona.py")
    assert {t.policy for t in fiona.tools} == {"allow"}  # read-only: they never ask


def test_a_server_that_floods_stdout_with_garbage_costs_no_line_and_logs_to_a_file(
    store: Store, tmp_path: Path
) -> None:
    """The SDK logs each line it cannot parse with a traceback; they go to a private
    file in the home, bounded, and the chat's terminal gets none of them."""
    import subprocess

    from chatloop.chat.mcp_log import LOG_BYTES
    from tests.scripted_server import scripted_server

    config = tmp_path / "xdg" / "chatloop" / "config.yaml"  # the person's own: not asked
    config.parent.mkdir(parents=True)
    config.write_text(
        f"mcp_servers:\n  noisy:\n    command: {sys.executable}\n"
        f"    args: ['{HOSTILE}', garbage]\n    approve: allow\n"
    )
    asked: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> str:
        asked.append(body)
        return "It is noon."

    with scripted_server(reply) as url:
        done = subprocess.run(
            [sys.executable, "-m", "chatloop.cli", "--base-url", url, "What time is it?"],
            cwd=store.cwd,
            env={
                "CHATLOOP_HOME": str(store.root),
                "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
                "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # (this chatloop's code)
                "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                "HOME": str(store.root),
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    said = [x for x in done.stderr.splitlines() if not x.startswith("Saved session ")]
    assert len(said) <= 1, done.stderr[-2000:]
    assert done.stdout.strip() == "It is noon."
    assert "noisy__echo" in {tool["function"]["name"] for tool in asked[0]["tools"]}
    log = store.root / "logs" / "mcp.log"
    logged = log.read_text()
    assert "Failed to parse JSONRPC message from server" in logged
    assert "Traceback" not in logged and (log.stat().st_mode & 0o777) == 0o600
    assert all(p.stat().st_size <= LOG_BYTES + 4096 for p in log.parent.iterdir())


def test_a_grandchild_that_left_the_servers_session_is_ended_with_the_chat(
    tmp_path: Path,
) -> None:
    told = tmp_path / "orphan.pid"
    spec = ServerSpec(
        "bad", sys.executable, (str(HOSTILE), "orphan"), (("HOSTILE_ORPHAN_PID", str(told)),)
    )
    servers = McpServers([spec], lambda line: None, waits=QUICK)
    try:
        assert [tool.name for tool in servers.start()] == ["bad__echo"]
        orphan = int(told.read_text())
        assert alive(orphan)
    finally:
        servers.close()
    try:
        assert not alive(orphan)
    finally:
        if alive(orphan):
            os.kill(orphan, 9)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_a_server_runs_in_the_home_and_imports_nothing_from_where_the_person_is(
    chatloop_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    marker = tmp_path / "ran"
    (project / "sqlite3.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.chdir(project)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([".", os.environ.get("PYTHONPATH", "")]))
    run = f"import runpy; runpy.run_path({str(HOSTILE)!r}, run_name='__main__')"
    spec = ServerSpec("where", sys.executable, ("-c", run, "where"), approve="allow")
    servers = McpServers([spec], lambda line: None, waits=QUICK)
    try:
        (tool,) = servers.start()
        said = json.loads(tool.function(text="where?"))
    finally:
        servers.close()
    assert not marker.exists()  # the person's sqlite3.py never ran
    assert said["cwd"] == str(chatloop_home)
    assert str(project) not in said["path"] and "" not in said["path"] and "." not in said["path"]
    given = spec._replace(cwd=str(tmp_path))  # a declaration's own cwd is kept
    servers = McpServers([given], lambda line: None, waits=QUICK)
    try:
        (tool,) = servers.start()
        assert json.loads(tool.function(text="where?"))["cwd"] == str(tmp_path)
    finally:
        servers.close()
    assert not marker.exists()
    (_, relative), _ = specs_of({"x": {"command": "x"}, "y": {"command": "y", "cwd": "rel"}}, "")
    assert relative.cwd == ""
    assert specs_of({"y": {"command": "y", "cwd": "rel"}}, "here")[1] == [
        "here: mcp server 'y': cwd 'rel' is not an absolute path; it runs in the chatloop home"
    ]


def test_a_server_whose_tools_fill_the_window_is_named_as_the_cause(store: Store) -> None:
    from chatloop.errors import ChatloopError

    spec = ServerSpec("many", sys.executable, (str(HOSTILE), "many"), approve="allow")
    servers = McpServers([spec], lambda line: None, waits=QUICK)
    agent = agent_with(spec, servers)
    try:
        assert len(agent.tools) == 3000
        session = ChatSession(agent, FakeBackend(window=8192), store, TEST_SETTINGS, ScriptedHost())
        with pytest.raises(ChatloopError) as refused:
            session.send("hi")
        session.close()
    finally:
        servers.close()
    said = refused.value.message
    assert said.startswith("The tool definitions take about ") and "8,192-token" in said
    assert "MCP server many: 3,000 tools, about " in said
    assert "Remove the MCP server many" in refused.value.hint
