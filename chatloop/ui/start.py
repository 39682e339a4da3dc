"""The first prompt, on the screen before the slow parts of chatloop have loaded.

A new interactive chat draws ``you>`` with prompt_toolkit alone, then loads
everything else in a thread: the agent, the backend client (and its check of
the server), rich and the chat itself. The person types meanwhile. When the
load is done, its banner is printed above the prompt and the toolbar fills in;
if it fails (no such agent, a server that refuses), the prompt ends at once
with that error, as if it had happened before the prompt. A line sent before
the load is done waits for it; Ctrl-D leaves without waiting.

Light on purpose, like ``chatloop.ui.prompt``: nothing here imports more than
prompt_toolkit and the standard library. What is loaded is the caller's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Generic, TypeVar

from prompt_toolkit import PromptSession
from prompt_toolkit.application import Application, run_in_terminal
from prompt_toolkit.application.current import set_app
from prompt_toolkit.formatted_text import StyleAndTextTuples

from chatloop.errors import Unapproved
from chatloop.ui.prompt import PROMPT

if TYPE_CHECKING:
    from chatloop.store.store import Store
    from chatloop.store.writer import SessionWriter
    from chatloop.ui.repl import Repl

T = TypeVar("T")
WAIT_NOTE_S = 0.5  # a line sent before the load is done waits this long before a note says so
Replay = Callable[[], str]  # the first prompt's outcome: its line, or the same exception
Prompt = PromptSession[str]  # the line editor a new chat's REPL takes over


class Startup(Generic[T]):
    """Loads ``load()`` in a thread once the first prompt is on the screen.

    ``announce(loaded)`` prints what the person should know first (the banner);
    it runs exactly once, above the prompt while it waits, or after it when the
    line was sent first. ``toolbar(loaded)`` draws the bottom toolbar once
    loaded ("starting…" until then)."""

    def __init__(
        self,
        prompt: PromptSession[str],
        load: Callable[[], T],
        announce: Callable[[T], None],
        toolbar: Callable[[T], StyleAndTextTuples],
    ) -> None:
        self.prompt = prompt
        self._load, self._announce, self._toolbar = load, announce, toolbar
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._started = False
        self._announced = False
        self._pending: object = None  # the banner's task, kept from the collector
        self.default = ""  # the first prompt's text to begin with (carried from before)
        self.unsent = ""  # what was typed, not sent, when a failed load ended the prompt
        self._line: str | None = None  # the first line, once sent

    def first_line(self) -> Replay | None:
        """Draw the prompt (beginning with ``default``), start loading, and read the
        first line. Returns a replay of the outcome (``str``, or raising
        KeyboardInterrupt), or None when the person left (Ctrl-D). A load that fails
        ends the prompt with its error; an ``Unapproved`` one carries what was typed
        (``typed``), here or from ``loaded`` once the line was sent (``sent``)."""
        app = self.prompt.app
        app.after_render += self._on_drawn
        try:
            line = self.prompt.prompt(PROMPT, bottom_toolbar=self._bar, default=self.default)
        except KeyboardInterrupt:
            return _raising(KeyboardInterrupt)
        except EOFError:
            return None
        except Unapproved as refused:  # the load ended the prompt: what was typed goes on
            refused.typed, refused.sent = self.unsent, False
            raise
        finally:
            app.after_render -= self._on_drawn
            self._begin()  # a prompt that never drew (no terminal) loads now
        self._line = line
        return lambda: line

    def loaded(self) -> T:
        """What ``load`` returned, once it has (announced if it was not yet); raises
        what it raised."""
        self._begin()
        if not self._done.wait(WAIT_NOTE_S):
            print("(starting: checking the agent and the server…)", flush=True)
            self._done.wait()
        if self._error is not None:
            if isinstance(self._error, Unapproved) and self._line is not None:
                self._error.typed, self._error.sent = self._line, True  # the next chat's first
            raise self._error
        assert self._value is not None
        if not self._announced:
            self._announced = True
            self._announce(self._value)
        return self._value

    # -- the loading thread
    def _on_drawn(self, app: Application[str]) -> None:
        self._begin()

    def _begin(self) -> None:
        if not self._started:
            self._started = True
            threading.Thread(target=self._run, name="chatloop-start", daemon=True).start()

    def _run(self) -> None:
        try:
            self._value = self._load()
        except BaseException as exc:  # handed to the main thread, raised there
            self._error = exc
        self._done.set()
        loop = self.prompt.app.loop
        if loop is not None:
            with suppress(RuntimeError):  # the prompt is over and its loop closed
                loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        """On the prompt's own loop: end it with the load's error, or print the
        banner above it and redraw the toolbar."""
        app = self.prompt.app
        if self._announced or not app.is_running or app.future is None or app.future.done():
            return  # the line was sent meanwhile: ``loaded`` takes over
        if self._error is not None:
            self.unsent = app.current_buffer.text  # kept for the prompt after a question
            app.erase_when_done = True  # the error takes the prompt's place
            app.exit(exception=self._error)
            return
        assert self._value is not None
        value = self._value
        self._announced = True
        with set_app(app):
            self._pending = run_in_terminal(lambda: self._announce(value))
        app.invalidate()

    def _bar(self) -> StyleAndTextTuples:
        if self._done.is_set() and self._value is not None:
            return self._toolbar(self._value)
        return [("", " starting… ")]


def _raising(kind: type[BaseException]) -> Replay:
    def replay() -> str:
        raise kind

    return replay


def save_first(store: Store, first: Replay) -> SessionWriter | None:
    """The first line, when it was sent and is a message, saved as a new session's first
    message before the agent and the server are known (the chat completes its front
    matter: ``ChatSession.send_saved``), so a crash while they load loses nothing. None
    for a command, a blank line, Ctrl-C, or a file that cannot be made now (the chat
    then saves the message as any other, and says why it cannot)."""
    from chatloop.errors import StoreError
    from chatloop.format import Message, SessionMeta
    from chatloop.ui import commands

    try:
        line = first()
    except KeyboardInterrupt:
        return None
    parsed = commands.parse(line)
    if not line.strip() or not isinstance(parsed, commands.Text):
        return None
    now = store.clock()
    try:  # as a chat saves its first message: the file, then the message appended
        writer = store.create(SessionMeta(id="", created=now, updated=now))
    except StoreError:
        return None
    try:
        writer.append(Message.create("user", now, text=parsed.text))
    except StoreError:
        store.discard(writer)
        return None
    except BaseException:  # a signal in between: no session is left holding nothing
        store.discard(writer)
        raise
    return writer


def keep_unsent(saved: SessionWriter) -> None:
    """The chat could not start (the server is down, the agent failed): the message
    ``save_first`` saved stays in its session, marked as not sent (``Message.unsent``),
    and a line on stderr says where, before the reason is shown. Left as it is (saved,
    unmarked) when the file cannot be rewritten or someone changed it meanwhile."""
    import sys

    from chatloop.errors import StoreError

    message = saved.last_message
    try:
        marked = message is not None and saved.set_aside(message)
    except StoreError:
        marked = False
    saved.close()
    how = "marked as not sent" if marked else "unanswered"
    print(
        f"The chat could not start: your message was not sent; it is kept in session "
        f"{saved.meta.id}, {how} (Up recalls it at the next prompt).",
        file=sys.stderr,
    )


def confirm(question: str, default: bool) -> bool:
    """A yes/no question on the terminal before any chat has started (an agent file to
    allow): ``question`` shown as text, Enter takes ``default``, only y/yes is yes;
    Ctrl-C or Ctrl-D mean no."""
    from prompt_toolkit import prompt

    from chatloop.ui.terminal_text import visible

    choices = "[Y/n] " if default else "[y/N] "
    try:
        typed = prompt([("bold", f"{visible(question)} "), ("", choices)])
    except (KeyboardInterrupt, EOFError):
        return False
    word = typed.strip().lower()
    return default if not word else word in ("y", "yes")


def start_new_chat(
    store: Store, load: Callable[[Prompt], Repl], carried: str = "", sent: bool = False
) -> int:
    """A new interactive chat, its prompt drawn first: ``load(prompt)`` makes the REPL
    (the agent, the backend and its check of the server) behind it. Returns the exit
    code. Until the loop takes over (it saves what was said), SIGTERM and SIGHUP end
    the prompt as Ctrl-C would, once (later ones are ignored, so nothing cuts short
    the terminal's restoring): nothing was sent yet, so there is nothing to save; a
    line typed while the rest loaded is shown, so it is not lost silently.

    A load refused for an agent file nobody approved (``Unapproved``) carries what was
    typed meanwhile (``typed``, and ``sent`` when Enter was pressed): the caller asks,
    then starts again with it as ``carried`` (the first line when ``sent``, else the
    text the prompt begins with), so nothing typed in that moment is lost."""
    import signal
    import sys

    from chatloop.ui.prompt import chat_prompt, file_history

    def agent_names() -> list[str]:
        from chatloop.chat.agent import agent_dirs, agent_names

        return agent_names(agent_dirs(store.cwd, store.root))

    prompt = chat_prompt(agent_names, file_history(store.project_dir))
    startup = Startup(
        prompt,
        lambda: load(prompt),
        announce=lambda repl: repl.banner(),
        toolbar=lambda repl: repl.toolbar(),
    )
    signalled: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        signalled.append(signum)
        raise KeyboardInterrupt

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for sig in previous:
            signal.signal(sig, on_signal)
        startup.default = "" if sent else carried
        first = (lambda: carried) if sent else startup.first_line()
        if first is None or signalled:  # Ctrl-D (or a signal) before anything was said
            return 0
        saved = None
        try:
            saved = save_first(store, first)
            repl = startup.loaded()
        except KeyboardInterrupt:
            if saved is not None:  # kept, unanswered: resumable like any interrupted chat
                saved.close()
                print(
                    "The chat had not started: your message was not sent; it is saved in "
                    f"session {saved.meta.id} (chatloop -c goes on from it).",
                    file=sys.stderr,
                )
            if not signalled:
                raise
            if saved is None:
                from chatloop.ui.terminal_text import visible  # typed text: shown, not acted on

                print(
                    f"Signal received before the chat had started; not sent: {visible(first())}",
                    file=sys.stderr,
                )
            return 0
        except BaseException:  # the chat cannot start: its message was never sent
            if saved is not None:
                keep_unsent(saved)
            raise
        try:  # the loop puts its own handlers in, and back (ours) when it ends
            return repl.run(first=first, saved=saved)
        finally:
            repl.session.backend.close()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
