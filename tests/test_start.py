"""The first prompt drawn before the rest loads (chatloop.ui.start), in process.

The prompt reads from a pipe and draws to a dummy output; the load is a function
the test holds back with events, so every order of "loaded" and "line sent" is
forced, never left to timing. The installed program's side (what is imported
when the prompt is first drawn) is in tests/test_pty.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput

from chatloop.errors import Unapproved, UsageError
from chatloop.ui.prompt import chat_prompt
from chatloop.ui.start import Startup

WAIT_S = 30.0  # an upper bound for events that come within milliseconds


@pytest.fixture
def pipe() -> Iterator[PipeInput]:
    with create_pipe_input() as made:
        yield made


def startup(
    pipe: PipeInput,
    load: Callable[[], str],
    announced: list[str],
    shown: threading.Event | None = None,
) -> Startup[str]:
    """A Startup whose banner is recorded in ``announced`` (and sets ``shown``)."""

    def announce(value: str) -> None:
        announced.append(value)
        if shown is not None:
            shown.set()

    prompt = chat_prompt([], input=pipe, output=DummyOutput())
    return Startup(prompt, load, announce, toolbar=lambda value: [("", value)])


def send_when(event: threading.Event, pipe: PipeInput, text: str) -> threading.Thread:
    """Type ``text`` once ``event`` is set (from a thread: the prompt holds this one)."""

    def typing() -> None:
        assert event.wait(WAIT_S)
        pipe.send_text(text)

    thread = threading.Thread(target=typing, daemon=True)
    thread.start()
    return thread


def test_the_banner_is_printed_above_a_waiting_prompt_once(pipe: PipeInput) -> None:
    announced: list[str] = []
    shown = threading.Event()
    start = startup(pipe, lambda: "loaded", announced, shown)
    typist = send_when(shown, pipe, "hello\r")  # typed only once the banner is up
    replay = start.first_line()
    typist.join(WAIT_S)
    assert replay is not None and replay() == "hello"
    assert start.loaded() == "loaded"
    assert announced == ["loaded"]  # above the prompt, and not again after it


def test_a_line_sent_before_the_load_is_done_waits_for_it(pipe: PipeInput) -> None:
    announced: list[str] = []
    release, loading = threading.Event(), threading.Event()

    def load() -> str:
        loading.set()
        assert release.wait(WAIT_S)
        return "loaded"

    start = startup(pipe, load, announced)
    typist = send_when(loading, pipe, "early words\r")  # sent while the load is held
    replay = start.first_line()
    typist.join(WAIT_S)
    assert replay is not None and replay() == "early words"
    assert announced == []  # nothing loaded yet, nothing announced
    release.set()
    assert start.loaded() == "loaded"
    assert announced == ["loaded"]  # announced after the line, before it is answered


def test_a_load_that_fails_ends_the_prompt_with_its_error(pipe: PipeInput) -> None:
    def load() -> str:
        raise UsageError("No agent named 'nobody'", "chatloop --agent simple_sally")

    start = startup(pipe, load, [])
    with pytest.raises(UsageError, match="nobody"):
        start.first_line()  # nothing typed: the error alone ends the prompt


def test_a_load_that_fails_after_the_line_was_sent_raises_on_loaded(pipe: PipeInput) -> None:
    release, loading = threading.Event(), threading.Event()

    def load() -> str:
        loading.set()
        assert release.wait(WAIT_S)
        raise UsageError("the server refused", "start it")

    start = startup(pipe, load, [])
    typist = send_when(loading, pipe, "hi\r")
    replay = start.first_line()
    typist.join(WAIT_S)
    assert replay is not None and replay() == "hi"
    release.set()
    with pytest.raises(UsageError, match="refused"):
        start.loaded()


def test_ctrl_d_leaves_without_waiting_and_ctrl_c_is_replayed(pipe: PipeInput) -> None:
    release, loading = threading.Event(), threading.Event()

    def load() -> str:
        loading.set()
        assert release.wait(WAIT_S)
        return "loaded"

    start = startup(pipe, load, [])
    typist = send_when(loading, pipe, "\x04")  # Ctrl-D while the load is held
    assert start.first_line() is None  # returns with the load still held
    typist.join(WAIT_S)
    release.set()

    with create_pipe_input() as other:
        start = startup(other, lambda: "loaded", [])
        other.send_text("\x03")  # Ctrl-C on the empty line: the loop asks to leave
        replay = start.first_line()
        assert replay is not None
        with pytest.raises(KeyboardInterrupt):
            replay()
        assert start.loaded() == "loaded"


def test_the_toolbar_says_starting_until_loaded(pipe: PipeInput) -> None:
    release = threading.Event()
    start = startup(pipe, lambda: "loaded" if release.wait(WAIT_S) else "", [])
    assert start._bar() == [("", " starting… ")]
    start._begin()
    release.set()
    assert start.loaded() == "loaded"
    assert start._bar() == [("", "loaded")]


def _refused() -> Unapproved:
    return Unapproved("Not run: the agent file agents/evil.py is new", "Say yes to run it.")


def test_a_line_sent_before_an_agent_question_is_carried_to_the_chat_after_it(
    pipe: PipeInput,
) -> None:
    """Issue 31: a line sent in the moment before the load stopped for an agent file
    nobody approved was lost; it comes with the refusal, as the next chat's first."""
    release, loading = threading.Event(), threading.Event()

    def load() -> str:
        loading.set()
        assert release.wait(WAIT_S)
        raise _refused()

    start = startup(pipe, load, [])
    typist = send_when(loading, pipe, "the first words\r")
    replay = start.first_line()
    typist.join(WAIT_S)
    assert replay is not None and replay() == "the first words"
    release.set()
    with pytest.raises(Unapproved) as refused:
        start.loaded()
    assert (refused.value.typed, refused.value.sent) == ("the first words", True)


def test_a_line_half_typed_when_the_agent_question_came_begins_the_next_prompt(
    pipe: PipeInput,
) -> None:
    """What was typed, not sent, when the refusal ended the prompt, comes with it; the
    next prompt begins with it (``default``), and Enter sends it whole."""
    loading = threading.Event()
    holder: list[Startup[str]] = []

    def load() -> str:
        loading.set()
        buffer = holder[0].prompt.app.current_buffer
        deadline = time.monotonic() + WAIT_S
        while buffer.text != "half typ" and time.monotonic() < deadline:
            time.sleep(0.01)  # until the prompt has taken the keys (a condition, bounded)
        raise _refused()

    start = startup(pipe, load, [])
    holder.append(start)
    typist = send_when(loading, pipe, "half typ")
    with pytest.raises(Unapproved) as refused:
        start.first_line()
    typist.join(WAIT_S)
    assert (refused.value.typed, refused.value.sent) == ("half typ", False)

    with create_pipe_input() as other:
        again = startup(other, lambda: "loaded", [])
        again.default = refused.value.typed
        other.send_text("ed\r")
        replay = again.first_line()
        assert replay is not None and replay() == "half typed"
