"""Text from a model, a file, a tool or a person is never markup or terminal control."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.format import Message
from chatloop.store.store import Store
from chatloop.ui import commands
from chatloop.ui.terminal_text import _VISIBLE, visible
from tests.conftest import T0, new_meta
from tests.repl_driver import drive, reply_body
from tests.scripted_server import scripted_server
from tests.strategies import examples

HOSTILE = (
    "[/INST] [bold]loud[/bold] \x1b[2J\x1b]52;c;ZXZpbA==\x07\x1b]0;pwned\x07 "
    "\x9b31m <img src=x onerror=alert(1)> <<SYS>> \u202eevil"
)
CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")


def test_visible_shows_every_control_character() -> None:
    shown = visible(HOSTILE + "\ttab\nline")
    assert not any(c in shown for c in CONTROLS)
    assert "[/INST]" in shown and "<<SYS>>" in shown and "\ttab\nline" in shown
    assert "\u241b" in shown  # ESC as its picture


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",))))
def test_visible_replaces_exactly_what_the_full_table_replaces(text: str) -> None:
    # visible() skips the per-character table for text with nothing to replace: the
    # outcome must be the table's, for any text (ASCII or not, hostile or not)
    assert visible(text) == text.translate(_VISIBLE)
    assert visible(text + HOSTILE) == (text + HOSTILE).translate(_VISIBLE)


def test_show_prints_every_field_of_every_kind_of_message_as_text() -> None:
    from chatloop.format import Session, Thinking, ToolCall, ToolResult
    from chatloop.ui.listing import transcript_text

    meta = new_meta(title=HOSTILE, agent=HOSTILE, parent_id=HOSTILE, id=HOSTILE)
    messages = (
        Message.create("user", T0, text=HOSTILE),
        Message.create("user", T0, text=HOSTILE, restore=True, interrupted=True),
        Message.create(
            "assistant",
            T0,
            text=HOSTILE,
            thinking=(Thinking(HOSTILE, HOSTILE),),
            tool_calls=(ToolCall(HOSTILE, HOSTILE, HOSTILE),),
            stop_reason=HOSTILE,
        ),
        Message.create("assistant", T0, interrupted=True, stop_reason=HOSTILE),
        Message.create(
            "tool",
            T0,
            tool_results=(
                ToolResult(HOSTILE, HOSTILE, HOSTILE, True),
                ToolResult("c", "n", f"\n {HOSTILE}\nmore"),
            ),
        ),
        Message.create("summary", T0, text=HOSTILE),
    )
    shown = transcript_text(Session(meta, messages))
    assert not any(c in shown for c in CONTROLS)
    assert shown.count("[/INST]") >= 9  # every field was shown, made visible


def test_the_repl_shows_hostile_replies_and_titles_as_text(store: Store) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):  # hostile model names, for /model
            return httpx.Response(200, json={"data": [{"id": HOSTILE}, {"id": "fake-model"}]})
        return httpx.Response(200, content=reply_body(HOSTILE))

    backend = OpenAICompatBackend(
        "http://fake/v1", "fake-model", client=httpx.Client(transport=httpx.MockTransport(handler))
    )
    arguments = {
        "rename": HOSTILE,
        "export": str(store.cwd / "exported.md"),
        "pin": HOSTILE,
        "unpin": "1",
        "search": HOSTILE,
        "recall": HOSTILE,
        "norecall": HOSTILE,
    }
    skipped = {
        "exit",
        "resume",
        "new",
        "fork",
        "retry",
        "edit",
        "clear",
        "copy",
        "file",
    }  # elsewhere
    every = [
        f"/{spec.name} {arguments.get(spec.name, '')}".rstrip()
        for spec in commands.TABLE
        if spec.name not in skipped
    ]
    every.sort(key=lambda line: line.startswith("/compact"))  # last: it ends this file
    script = "\r".join([HOSTILE, *every, HOSTILE, "/copy", "exit"]) + "\r"
    _, shown = drive(store, backend, script)
    assert "[/INST]" in shown and "<<SYS>>" in shown and "<img src=x" in shown
    assert "Session Restored" in shown and "Exported to" in shown  # /compact and /export ran
    ours = re.compile(r"\x1b\]52;c;[A-Za-z0-9+/=]*\x07")  # /copy's own OSC 52, base64 only
    assert len(ours.findall(shown)) == 1
    assert not any(c in ours.sub("", shown) for c in CONTROLS)
    assert "error:" not in shown


def test_the_toolbar_shows_names_from_servers_and_files_as_text() -> None:
    from chatloop.ui.render import toolbar

    for width in (None, 60):  # (a narrow toolbar drops some of them: each way is checked)
        drawn = "".join(
            text
            for _, text in toolbar(
                {
                    "agent": HOSTILE,
                    "model": HOSTILE,
                    "session": HOSTILE,
                    "queries": 1,
                    "tokens": 5,
                    "used": 10,
                    "window": 100,
                },
                width,
            )
        )
        assert HOSTILE[:7] in drawn or width is not None
        assert not any(c in drawn for c in CONTROLS)


def test_every_subcommand_prints_hostile_text_as_text(store: Store, tmp_path: Path) -> None:
    writer = store.create(new_meta(title=HOSTILE))
    writer.append(Message.create("user", T0, text=f"findme {HOSTILE}"))
    writer.append(Message.create("assistant", T0, text=HOSTILE))
    writer.finalize(Message.create("summary", T0, text=HOSTILE))
    writer.close()
    env = {"CHATLOOP_HOME": str(store.root), "PATH": "/usr/bin:/bin"}
    for args in (
        ["show", "1"],
        ["sessions"],
        ["sessions", "--all"],
        ["search", "findme"],
        ["tree", "1"],
    ):
        out = subprocess.run(
            [sys.executable, "-m", "chatloop.cli", *args],
            cwd=store.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, (args, out.stderr)
        assert not any(c in out.stdout + out.stderr for c in CONTROLS), args
        assert "[/INST]" in out.stdout or args[0] == "sessions", args
    command = [sys.executable, "-m", "chatloop.cli", "sessions", "--json"]
    listed = subprocess.run(
        command, cwd=store.cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert json.loads(listed.stdout)[0]["title"] == HOSTILE  # JSON keeps the exact text


def test_one_shot_output_shows_hostile_tool_names_as_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import io

    from chatloop.backends.base import ToolCallEvent
    from chatloop.ui.oneshot import PrintedReply

    view = PrintedReply(io.StringIO(), terminal=True)
    view.on_event(ToolCallEvent("c1", "x\x1b]0;PWNED\x07\x1b[2J", "{}"))
    assert "\x1b" not in capsys.readouterr().err


# ------------------------------------------------ every output command, pipe and pty

SWEEP = (
    "\x1b]52;c;ZXZpbA==\x07 \x1b]0;pwned\x07 \x1b[2J \x9b31m \u202eevil \u2066iso\u2069 "
    "[a link](http://evil.example/x)"
)
# What may never reach a screen: C0 but tab, newline and carriage return (a pty writes
# \r\n), DEL, C1 and the bidirectional controls; SGR colour sequences chatloop writes
# itself are taken out first.
RAW_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
OWN_STYLE = re.compile(r"\x1b\[[0-9;]*m")
OUTPUT_COMMANDS = [
    ["sessions"],
    ["sessions", "--json"],
    ["show", "1"],
    ["show", "1", "--raw"],
    ["search", "findme"],
    ["search", "findme", "--json"],
    ["tree", "1"],
    ["export", "1"],
    ["export", "1", "--format", "json"],
    ["doctor"],
]


def hostile_session(store: Store) -> Path:
    writer = store.create(new_meta(title=SWEEP, model=SWEEP, agent=SWEEP))
    writer.append(Message.create("user", T0, text=f"findme {SWEEP}"))
    writer.append(Message.create("assistant", T0, text=SWEEP, model=SWEEP))
    writer.finalize(Message.create("summary", T0, text=SWEEP))
    writer.close()
    return writer.path


def sweep_env(store: Store) -> dict[str, str]:
    """The program's environment (of this tree: PYTHONPATH is passed on)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATLOOP_")}
    env.update(CHATLOOP_HOME=str(store.root), CHATLOOP_CONFIG="", COLUMNS="100", TERM="xterm")
    return env


def strings(value: object) -> list[str]:
    """Every string in a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [s for v in value for s in strings(v)] if isinstance(value, list) else []


def assert_no_raw_control(shown: str, args: list[str]) -> None:
    found = RAW_CONTROL.findall(OWN_STYLE.sub("", shown))
    assert not found, (args, found, shown[:2000])


def test_every_output_command_through_a_pipe_is_exact_or_escaped(store: Store) -> None:
    path = hostile_session(store)
    raw = path.read_bytes()
    with scripted_server(lambda request: "ok", model=SWEEP) as url:
        for args in OUTPUT_COMMANDS:
            command = [*args, "--base-url", url] if args == ["doctor"] else args
            done = subprocess.run(
                [sys.executable, "-m", "chatloop.cli", *command],
                cwd=store.cwd,
                env=sweep_env(store),
                capture_output=True,
                timeout=60,
            )
            out, err = done.stdout.decode(), done.stderr.decode()
            assert done.returncode == 0 and "Traceback" not in err, (args, err)
            assert_no_raw_control(err, args)
            if args in (["show", "1", "--raw"], ["export", "1"]):
                assert done.stdout == raw, args  # to a pipe, byte for byte
                continue
            assert_no_raw_control(out, args)
            if "--json" in args or "json" in args:
                texts = strings(json.loads(out))  # read back exact (search: a snippet)
                assert any(SWEEP in t or "\x1b]52;c;ZXZpbA==\x07" in t for t in texts), args
            else:
                assert "\u241b]52;c;" in out, args  # shown, made visible


def test_every_output_command_in_a_terminal_shows_no_control(store: Store) -> None:
    import pexpect

    hostile_session(store)
    with scripted_server(lambda request: "ok", model=SWEEP) as url:
        for args in OUTPUT_COMMANDS:
            command = [*args, "--base-url", url] if args == ["doctor"] else args
            child = pexpect.spawn(
                sys.executable,
                ["-m", "chatloop.cli", *command],
                cwd=str(store.cwd),
                env=sweep_env(store),
                timeout=60,
                dimensions=(30, 100),
            )
            shown = child.read().decode("utf-8", "backslashreplace")
            child.close()
            assert child.exitstatus == 0 and "Traceback" not in shown, (args, shown)
            assert_no_raw_control(shown, args)
            if "json" not in " ".join(args):
                assert "\u241b]52;c;" in shown, args  # shown, made visible


def test_visible_bytes_joins_characters_split_between_chunks() -> None:
    import io

    from chatloop.ui.terminal_text import VisibleBytes

    data = f"café ✓ 𝄞 {SWEEP}\n".encode() + b"\xff\xc3"  # ends inside a character
    for size in (1, 2, 3, 7, len(data)):
        out = io.BytesIO()
        sink = VisibleBytes(out)  # type: ignore[arg-type]
        for at in range(0, len(data), size):
            sink.write(data[at : at + size])
        sink.close()
        shown = out.getvalue().decode()
        assert shown == visible(f"café ✓ 𝄞 {SWEEP}\n") + "\\xff\\xc3", size


@settings(max_examples=examples(200), deadline=None)
@given(st.text(), st.sampled_from([*CONTROLS, "\x7f", "\x85", "\u2066", "\x1b[2J"]))
def test_json_output_escapes_every_control_and_reads_back_exact(text: str, control: str) -> None:
    from chatloop.ui.as_json import escaped

    value = {"title": text + control + text, "n": [control]}
    written = escaped(json.dumps(value, ensure_ascii=False))
    assert not RAW_CONTROL.search(written.replace("\n", ""))
    assert json.loads(written) == value


def test_a_link_in_a_reply_shows_its_target_and_is_no_hyperlink() -> None:
    import io

    from rich.console import Console

    from chatloop.backends.base import Finish, TextDelta
    from chatloop.ui.render import StreamView

    out = io.StringIO()
    view = StreamView(Console(file=out, force_terminal=True, width=100), "agent")
    view.on_event(TextDelta("Read [the docs](http://evil.example/steal) or http://b.example.\n"))
    view.on_event(Finish("stop"))
    view.close()
    shown = out.getvalue()
    assert "http://evil.example/steal" in shown and "http://b.example" in shown
    assert "\x1b]8;" not in shown  # no OSC 8 hyperlink
