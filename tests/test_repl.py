"""The REPL in process: pipe input, a dummy output, a rich console on a StringIO."""

from __future__ import annotations

import io
import re
from pathlib import Path

import httpx
import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.chat.agent import load_agent
from chatloop.chat.context import reply_cap
from chatloop.config import Settings, load_settings
from chatloop.errors import UsageError
from chatloop.format import parse_markdown
from chatloop.format.yaml_strict import load as yaml_load
from chatloop.store.store import Store
from chatloop.ui import commands
from chatloop.ui.repl import Repl
from tests.conftest import Clock
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import TEST_SETTINGS, chat
from tests.repl_driver import AGENTS, drive, fake_server, only_session


def test_a_whole_conversation_with_commands(store: Store) -> None:
    requests: list[dict[str, object]] = []
    script = (
        "hello there\r/info\r/infoo\rsecond question\\\rwith two lines\r/context\r"
        "/rename Garden plans\r/sessions\r/help\rexit\r"
    )
    _, shown = drive(store, fake_server(requests), script)
    assert "Reply number 1 here" in shown and "Reply number 2 here" in shown
    assert "Unknown command /infoo" in shown and "Did you mean /info?" in shown
    # /info after one exchange: the window the plans assume, tokens as the toolbar counts
    assert "context window  unknown: the server does not say; planned as 4,096" in shown
    assert re.search(r"tokens +25 \(in 20, out 5\)", shown), shown
    assert "next call: 5 messages" in shown
    assert "Saved session" in shown
    session = parse_markdown(only_session(store).read_bytes()).session
    assert session.meta.status == "closed" and session.meta.title == "Garden plans"
    assert [m.text for m in session.messages if m.role == "user"] == [
        "hello there",
        "second question\nwith two lines",
    ]
    assert session.meta.queries == 2 and session.meta.tokens_in == 40
    second = requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]  # type: ignore[index]
    # the agent's own cap (512), scaled to the window assumed when the server names none
    assert all(r["max_tokens"] == reply_cap(None, 0, 512) == 4096 // 24 for r in requests[:2])
    (summary_request,) = requests[2:]  # on exit: one summary request, no tools, no history
    assert "tools" not in summary_request and len(summary_request["messages"]) == 1  # type: ignore[arg-type]
    assert "progressive summary" in summary_request["messages"][0]["content"]  # type: ignore[index]
    assert session.summary is not None and "**Topics Discussed:**" in session.summary.text


def test_unknown_commands_and_bare_words() -> None:
    assert commands.parse("/qit") == commands.Unknown("qit", "/quit")
    assert commands.parse("bye") == commands.Command(commands.spec("exit"))
    assert commands.parse("resume 3") == commands.Command(commands.spec("resume"), "3")
    assert commands.parse("resume the story please") == commands.Text("resume the story please")
    assert commands.parse("//etc/hosts is a path") == commands.Text("/etc/hosts is a path")
    assert commands.parse("  /RENAME  New title ") == commands.Command(
        commands.spec("rename"), "New title"
    )


def test_nothing_typed_means_no_file(store: Store) -> None:
    _, shown = drive(store, fake_server([]), "/help\r\x04")
    assert list(store.session_files()) == [] and "/compact" in shown


def test_server_failure_keeps_the_message_and_the_loop(store: Store) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    client = httpx.Client(transport=httpx.MockTransport(handler))
    backend = OpenAICompatBackend("http://down/v1", "m", client=client, retries=0)
    _, shown = drive(store, backend, "are you there?\rstill there?\rquit\r")
    assert shown.count("error: Cannot reach the model server") == 2
    assert "The model could not summarize (Cannot reach the model server" in shown
    session = parse_markdown(only_session(store).read_bytes()).session
    assert [m.text for m in session.messages if m.role == "user"] == [
        "are you there?",
        "still there?",
    ]
    # the server never answered, yet the session is closed with a resumable summary
    assert session.meta.status == "closed" and session.meta.summary == "fallback"
    assert session.summary is not None and "Unanswered: still there?" in session.summary.text


def test_export_writes_a_copy(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _, shown = drive(store, fake_server([]), "hi\r/export out.md\r/export out.md\rexit\r")
    assert "Exported to out.md" in shown and "out.md already exists" in shown
    assert b"## Query 1\nhi\n" in (tmp_path / "out.md").read_bytes()


def test_settings_precedence_and_unknown_keys(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("model: from-file\nbase_url: http://file/v1\ncolour: blue\nretries: 5\n")
    env = {"CHATLOOP_MODEL": "from-env"}
    settings, warnings = load_settings(
        read_yaml=yaml_load,
        flags={"model": None, "base_url": "http://flag/v1"},
        config_file=str(config),
        environ=env,
    )
    assert settings.model == "from-env" and settings.base_url == "http://flag/v1"
    assert settings.retries == 5 and "colour" in warnings[0]
    with pytest.raises(UsageError):
        load_settings(
            read_yaml=yaml_load, flags={}, environ={}, config_file=str(tmp_path / "missing.yaml")
        )
    home = tmp_path / "home-with-config"
    home.mkdir()
    (home / "config.yaml").write_text("model: from-home\n")  # a home that carries its settings
    xdg = tmp_path / "xdg"
    (xdg / "chatloop").mkdir(parents=True)
    (xdg / "chatloop" / "config.yaml").write_text("model: from-xdg\n")
    roots = {"CHATLOOP_HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}
    assert load_settings(read_yaml=yaml_load, environ=roots)[0].model == "from-home"
    (home / "config.yaml").unlink()
    assert load_settings(read_yaml=yaml_load, environ=roots)[0].model == "from-xdg"
    config.write_text("retries: many\n")
    with pytest.raises(UsageError, match="retries"):
        load_settings(read_yaml=yaml_load, flags={}, config_file=str(config), environ={})


@pytest.mark.e2e
def test_two_real_messages_against_the_llama_server(store: Store, llama_server: str) -> None:
    backend = OpenAICompatBackend(llama_server)
    settings = Settings(max_tokens=12, summary_max_tokens=48, summaries="wait")  # titles: model
    _, shown = drive(
        store, backend, "Once upon a time\rThe capital of France is\r\x04", settings=settings
    )
    result = parse_markdown(only_session(store).read_bytes())
    assert result.problems == ()
    session = result.session
    roles = [m.role for m in session.messages]
    assert roles == ["user", "assistant", "user", "assistant", "summary"]  # Ctrl-D summarizes
    assert session.summary is not None and "**Pending:**" in session.summary.text
    assert all(m.usage is not None and m.usage.input > 0 for m in session.messages[1::2])
    assert session.meta.status == "closed" and session.meta.queries == 2
    assert "Saved session" in shown and "Naming the session" not in shown  # leaves no line
    # the base model's words, cleaned, or the first request: one short line either way
    assert session.meta.title and "\n" not in session.meta.title
    assert len(session.meta.title) <= 60


def test_commands_and_agent_names_complete(store: Store) -> None:
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    from chatloop.chat.agent import agent_names
    from chatloop.ui.prompt import ChatCompleter

    asked: list[int] = []

    def names() -> list[str]:  # looked up on the first completion of a name, once
        asked.append(1)
        return agent_names([AGENTS])

    assert names() == ["file_fiona", "simple_sally", "terse_tom"]  # Python and markdown
    completer = ChatCompleter(names)

    def complete(text: str) -> list[str]:
        found = completer.get_completions(Document(text), CompleteEvent())
        return [c.text for c in found]

    assert complete("/com") == ["/compact"]
    assert "/resume" in complete("/re")
    assert complete("ask @fi") == ["file_fiona"]
    assert complete("plain words") == []
    assert complete("@s") == ["simple_sally"]
    assert len(asked) == 2  # the check above, then the completer's one look-up


def test_ctrl_c_at_an_empty_prompt_asks_before_leaving(store: Store) -> None:
    requests: list[dict[str, object]] = []
    # Ctrl-C, answer "n" (stay), send a message, Ctrl-C again, answer "y" (leave)
    _, shown = drive(store, fake_server(requests), "\x03n\rstill here\r\x03y\r")
    assert "Reply number 1 here" in shown and "Saved session" in shown
    session = parse_markdown(only_session(store).read_bytes()).session
    assert [m.text for m in session.messages if m.is_query] == ["still here"]


def test_ctrl_c_with_text_on_the_line_clears_it_as_a_shell_does(store: Store) -> None:
    requests: list[dict[str, object]] = []
    _, shown = drive(store, fake_server(requests), "half typed thought\x03kept\rexit\r")
    assert "Leave chatloop?" not in shown
    session = parse_markdown(only_session(store).read_bytes()).session
    assert [m.text for m in session.messages if m.is_query] == ["kept"]  # the cleared line is gone


def test_a_question_never_eats_a_message(store: Store) -> None:
    """Typed ahead while "Compact now?" waits: the line is no answer, so it counts as
    no and is sent next; nothing typed is lost."""
    from tests.fakes import STRUCTURED, FakeBackend

    settings = Settings(
        context_window=1200, compact_threshold=0.05, titles="first", summaries="wait"
    )
    text = "describe the soil " * 10
    _, shown = drive(
        store,
        FakeBackend("A.", "B.", STRUCTURED),
        f"{text}\rtyped ahead\rn\rexit\r",
        settings=settings,
    )
    assert "Compact now? [Y/n]" in shown and "not a yes or no" in shown  # (one line)
    session = parse_markdown(only_session(store).read_bytes()).session
    assert [m.text for m in session.messages if m.is_query] == [text, "typed ahead"]


def test_info_writes_the_file_path_unbroken_in_a_narrow_terminal(store: Store) -> None:
    repl, shown = drive(store, fake_server([]), "hello there\r/info\rexit\r", width=40)
    assert repl.session.writer is None  # (closed: its path is the only session file)
    path = str(only_session(store))
    assert len(path) > 40 and path in shown  # the terminal wraps it, not a line break


def test_the_leave_question_keeps_a_typed_line(store: Store) -> None:
    requests: list[dict[str, object]] = []
    _, shown = drive(store, fake_server(requests), "\x03was typed right after\rexit\r")
    assert "Leave chatloop? [y/N]" in shown and "Reply number 1 here" in shown  # (one line)
    session = parse_markdown(only_session(store).read_bytes()).session
    assert [m.text for m in session.messages if m.is_query] == ["was typed right after"]


def test_a_bug_is_one_line_and_the_chat_goes_on(store: Store) -> None:
    from tests.fakes import STRUCTURED, FakeBackend

    backend = FakeBackend(RuntimeError("a bug"), "Fine again.", STRUCTURED)
    _, shown = drive(store, backend, "first\rsecond\rexit\r")
    assert "error: Internal error: RuntimeError: a bug" in shown and "Traceback" not in shown
    assert "Fine again." in shown and "Saved session" in shown
    session = parse_markdown(only_session(store).read_bytes()).session
    assert [m.text for m in session.messages if m.is_query] == ["first", "second"]


def test_help_fits_an_80_column_terminal_and_wraps_under_itself() -> None:
    import io
    from types import SimpleNamespace

    from rich.console import Console

    out = io.StringIO()
    commands.spec("help").run(SimpleNamespace(console=Console(file=out, width=80)), "")
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert max(len(line) for line in lines) <= 80
    column = len("  ") + commands.USAGE_WIDTH + 1
    for line in lines:  # a wrapped explanation continues in its own column
        assert (
            not line
            or line.startswith("  /")
            or line.startswith(" " * column)
            or (line.startswith("  ") and line[2] in "EC")
        )  # the two lines about keys
    words = " ".join(line.strip() for line in lines)
    assert all(spec.help in words for spec in commands.TABLE)


def test_the_toolbar_keeps_the_counts_and_the_meter_on_a_narrow_terminal() -> None:
    from chatloop.ui.render import toolbar

    parts = {
        "agent": "Simple Sally",
        "model": "gemma-3-270m-it-Q4_K_M.gguf",
        "session": "20261122-060426-3d469a99",
        "queries": 12,
        "tokens": 3456,
        "chain_tokens": 12345,
        "used": 1843,
        "window": 2048,
        "unsaved": 1,
    }

    def shown(width: int | None) -> str:
        return "".join(fragment[1] for fragment in toolbar(parts, width))

    assert "(chain 12,345)" in shown(None) and "gemma-3-270m" in shown(None)
    for width in (160, 120, 100, 80, 72):
        line = shown(width)
        assert len(line) <= width, (width, line)
        assert " 12q · 3,456 tok" in line and "1,843/2,048 90%" in line, line
        assert "1 not yet saved" in line and "Simple Sally" in line
    assert "3d469a99" in shown(100) and "gemma" not in shown(80)  # the model goes first
    assert "3d469a99" not in shown(60)
    parts["estimated"] = True  # counted by chatloop, not the server: marked as /info does
    assert " 12q · ~3,456 tok" in shown(80)


def test_help_and_completion_come_from_one_table(store: Store) -> None:
    _, shown = drive(store, fake_server([]), "/help\rexit\r")
    for spec in commands.TABLE:
        assert f"{spec.usage:<18} {spec.help}" in shown
        assert f"/{spec.name}" in commands.completions()


def test_new_closes_the_session_with_its_summary_and_starts_an_unlinked_one(
    store: Store,
) -> None:
    requests: list[dict[str, object]] = []
    _, shown = drive(store, fake_server(requests), "first\r/new\r/new\rsecond\r/exit\r")
    assert "New session: your next message starts it." in shown
    assert "This is a new session already" in shown
    found = (parse_markdown(Path(e.path).read_bytes()).session for e in store.session_files())
    sessions = sorted(found, key=lambda s: s.meta.created)
    assert [[m.text for m in s.messages if m.is_query] for s in sessions] == [["first"], ["second"]]
    assert all(s.meta.status == "closed" and s.summary is not None for s in sessions)
    assert sessions[1].meta.parent_id is None


def test_info_names_the_continuation_a_resume_has_made_ready(store: Store) -> None:
    first, _ = chat(store, FakeBackend("A.", STRUCTURED))
    first.send("first chat")
    first.close()
    parent = next(iter(store.session_files())).name.removesuffix(".md")
    _, shown = drive(store, FakeBackend("Ready.", STRUCTURED), "/resume 1\r/info\r/exit\r")
    flat = " ".join(shown.split())
    assert f"session (your next message continues {parent} from its summary)" in flat


def test_info_and_the_toolbar_count_tokens_alike_after_a_compaction(store: Store) -> None:
    """After /compact and one message: /info's tokens are the toolbar's and the exit
    line's (what the replies used, the file's tokens_in + tokens_out); the
    restoration prompt and its acknowledgment are listed apart."""
    backend = FakeBackend("One.", STRUCTURED, "Understood.", "Two.", STRUCTURED)
    _, shown = drive(store, backend, "first\r/compact\rsecond\r/info\rexit\r")
    child = max(
        (parse_markdown(Path(e.path).read_bytes()).session for e in store.session_files()),
        key=lambda s: s.meta.created,
    )
    used = child.meta.tokens_in + child.meta.tokens_out
    assert child.meta.restoration_tokens > 0 and used > 0
    assert re.search(rf"tokens +{used:,} \(in", shown), shown
    assert re.search(rf"restoration +{child.meta.restoration_tokens:,} tokens", shown)
    assert f"1 query, {used:,} tokens" in shown  # the exit line


def test_the_toolbar_counts_what_the_replies_used_and_the_chain_the_rest(store: Store) -> None:
    backend = FakeBackend("One.", STRUCTURED, "Understood.", "Two.", STRUCTURED)
    with create_pipe_input() as pipe:
        repl = Repl(
            load_agent(AGENTS / "simple_sally.py"),
            backend,
            store,
            TEST_SETTINGS,  # type: ignore[arg-type]
            Console(file=io.StringIO(), width=240),
            input=pipe,
            output=DummyOutput(),
            clock=Clock(),
        )
        session = repl.session
        session.send("first")
        session.compact()
        session.send("second")
        totals, before = session.totals, session.chain_base
        bar = "".join(text for _, text in repl.toolbar())
        session.close()
    assert totals.restoration > 0 and totals.tokens > 0 and before > 0
    assert f" 1q · {totals.tokens:,} tok" in bar, bar  # not with the restoration's
    assert f"(chain {before + totals.tokens + totals.restoration:,})" in bar, bar


def test_a_resume_that_finds_nothing_hints_at_the_chats_own_listing(store: Store) -> None:
    _, shown = drive(store, FakeBackend("A.", STRUCTURED), "/resume zzzz\rexit\r")
    flat = " ".join(shown.split())
    assert "No session with id 'zzzz'" in flat and "/sessions" in flat


@pytest.mark.parametrize("ack", ["Understood.", "failed"])
def test_the_answer_is_labelled_only_after_an_acknowledgment_that_showed(
    store: Store, ack: str
) -> None:
    from chatloop.errors import BackendError

    said: object = BackendError("server down", "") if ack == "failed" else ack
    backend = FakeBackend("One.", STRUCTURED, said, "Two.", STRUCTURED)  # type: ignore[arg-type]
    _, shown = drive(store, backend, "first\r/compact\rsecond\rexit\r")
    assert "Two." in shown
    labelled = "Its answer to your message:" in shown
    assert labelled == (ack != "failed"), shown


def test_a_guessed_window_is_said_when_the_chat_starts_and_a_known_one_is_not(
    store: Store,
) -> None:
    from tests.hosts import TEST_SETTINGS
    from tests.repl_driver import drive, fake_server

    guessed = "The server does not say its context window: chatloop plans with 4,096"
    _, shown = drive(store, fake_server([]), "exit\r", settings=TEST_SETTINGS)
    assert guessed in shown and "CHATLOOP_CONTEXT_WINDOW=2048" in shown
    told = TEST_SETTINGS._replace(context_window=2048)
    _, shown = drive(store, fake_server([]), "exit\r", settings=told)
    assert guessed not in shown


def test_a_model_the_server_does_not_list_is_said_when_the_chat_starts(
    store: Store, tmp_path: Path
) -> None:
    import subprocess
    import sys

    from tests.scripted_server import scripted_server

    with scripted_server(lambda body: "Fine.", model="qwen2.5-7b") as url:
        env = {
            "CHATLOOP_HOME": str(store.root),
            "CHATLOOP_CONFIG": "",
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
        }
        for model, said in (
            ("qwen2.5-7", "does not list the model 'qwen2.5-7' (did you mean qwen2.5-7b?)"),
            ("llama3", "does not list the model 'llama3' (it lists: qwen2.5-7b)"),
            ("qwen2.5-7b", None),
        ):
            out = subprocess.run(
                [sys.executable, "-m", "chatloop.cli", "--base-url", url, "--model", model, "hi"],
                cwd=store.cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            notes = [line for line in out.stderr.splitlines() if "does not list" in line]
            if said is None:
                assert notes == [], out.stderr
            else:
                assert len(notes) == 1 and said in notes[0], out.stderr


def test_info_lists_the_tools_offered(store: Store) -> None:
    _, shown = drive(store, fake_server([]), "/info\rexit\r")
    assert "  tools           none" in shown  # Simple Sally has none
    _, shown = drive(store, fake_server([]), "/info\rexit\r", agent="file_fiona.py")
    (line,) = [x for x in shown.splitlines() if x.startswith("  tools ")]
    assert "list_dir" in line and "read_file" in line


def test_keys_typed_before_a_question_are_taken_for_the_next_prompt() -> None:
    """What a terminal holds unread when a question is about to be drawn is taken out
    of its way (``typed_unread``) and given to the next prompt (``retype``), which
    reads it as typed; a pipe holds no "before": its keys are read in order."""
    import os
    import select

    from prompt_toolkit.input.vt100 import Vt100Input

    from chatloop.ui.prompt import chat_prompt, retype, typed_unread

    master, slave = os.openpty()
    try:
        with open(slave, closefd=False) as stdin:
            terminal = Vt100Input(stdin)
            os.write(master, b"yes\r")  # typed while a reply streamed
            assert select.select([slave], [], [], 30)[0]  # the line is in the terminal
            unread = typed_unread(terminal)
            assert "".join(key.data for key in unread).strip() == "yes"
            assert not select.select([slave], [], [], 0)[0]  # nothing left for a question
            retype(terminal, unread)
            assert chat_prompt([], input=terminal, output=DummyOutput()).prompt("you> ") == "yes"
    finally:
        os.close(master)
        os.close(slave)
    with create_pipe_input() as pipe:
        pipe.send_text("y\r")
        assert typed_unread(pipe) == []  # a script's answer stays for its question
        assert chat_prompt([], input=pipe, output=DummyOutput()).prompt("? ") == "y"
