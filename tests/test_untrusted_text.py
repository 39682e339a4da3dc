"""Text from a model, a file, a tool or a person is never markup or terminal control."""

from __future__ import annotations

import json
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
    }
    skipped = {"exit", "resume", "new", "fork", "retry", "edit", "clear", "copy"}  # elsewhere
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
