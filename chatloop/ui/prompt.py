"""The line editor of the chat: its history file, completion and keys.

Light on purpose: this module needs prompt_toolkit and the standard library
only (the command list and the agent names are looked up when Tab is first
pressed), so the first ``you>`` prompt is drawn before the rest of chatloop
(rich, httpx, the session format, the chat) has loaded (``chatloop.ui.start``).
"""

from __future__ import annotations

import errno
import os
import select
from collections.abc import Callable, Iterator
from contextlib import suppress
from datetime import datetime
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.input.typeahead import get_typeahead, store_typeahead
from prompt_toolkit.key_binding import KeyBindings, KeyPress, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.layout.processors import Processor, Transformation, TransformationInput
from prompt_toolkit.output import Output

from chatloop.errors import StoreError
from chatloop.store.fsio import FILE_MODE, atomic_rewrite, ensure_dir

HISTORY_FILE = "input_history"
PROMPT = "you> "


HISTORY_BYTES = 1 << 20  # past this, the history file keeps its newest half


class LineHistory(FileHistory):
    """The prompt's history file. A line it cannot store (a full disk, a read-only
    home, the file replaced by a link) is only not remembered: the chat goes on."""

    def store_string(self, string: str) -> None:
        entry = f"\n# {datetime.now()}\n" + "".join(f"+{line}\n" for line in string.split("\n"))
        with suppress(OSError):
            fd = os.open(self.filename, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.write(fd, entry.encode("utf-8", "surrogateescape"))
            finally:
                os.close(fd)


def file_history(project_dir: Path) -> History:
    """The history of the lines typed in this project (created 0600 if missing), cut to
    its newest half once it passes HISTORY_BYTES. Never through a symbolic link (the
    project folder or the file): then the lines are remembered for this run only."""
    path = project_dir / HISTORY_FILE
    try:
        if project_dir.is_symlink():
            raise OSError(errno.ELOOP, "a symbolic link")
        ensure_dir(project_dir)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE))
        _trim(path)
    except (OSError, StoreError):
        return InMemoryHistory()
    return LineHistory(str(path))


def _trim(path: Path, limit: int = HISTORY_BYTES) -> None:
    """Past ``limit`` bytes, rewrite ``path`` (atomically) with its newest whole entries
    in at most half of it."""
    size = os.stat(path, follow_symlinks=False).st_size
    if size <= limit:
        return
    with open(path, "rb") as handle:
        handle.seek(size - limit // 2)
        tail = handle.read()
    start = tail.find(b"\n# ")
    atomic_rewrite(path, tail[start:] if start >= 0 else b"")


class ChatCompleter(Completer):
    """Commands after a leading ``/``; agent names when a word starts with ``@``
    (their file stems, as ``--agent`` takes them). ``agents`` is called once, the
    first time a name is completed."""

    def __init__(self, agents: list[str] | Callable[[], list[str]]) -> None:
        self._agents = agents

    @property
    def agents(self) -> list[str]:
        if callable(self._agents):
            self._agents = self._agents()
        return self._agents

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterator[Completion]:
        text = document.text_before_cursor
        if text.startswith("/") and " " not in text:
            from chatloop.ui.commands import completions

            for word in completions():
                if word.startswith(text):
                    yield Completion(word, start_position=-len(text))
            return
        word = document.get_word_before_cursor(WORD=True)
        if word.startswith("@"):
            for name in self.agents:
                if name.startswith(word[1:]):
                    yield Completion(name, start_position=-len(word) + 1)


def key_bindings() -> KeyBindings:
    """Enter sends; Esc+Enter or a trailing backslash starts a new line instead; Ctrl-C
    clears a line that has text."""
    keys = KeyBindings()

    @keys.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.text.endswith("\\"):
            buffer.delete_before_cursor(1)
            buffer.insert_text("\n")
        else:
            buffer.validate_and_handle()

    @keys.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("c-c")
    def _interrupt(event: KeyPressEvent) -> None:
        """As in a shell: Ctrl-C with text on the line clears the line; on an empty
        line it interrupts (the loop then asks before leaving)."""
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt())

    return keys


def typed_unread(input: Input) -> list[KeyPress]:
    """The keys typed at a terminal that no prompt has read yet, taken out of its way:
    what a prompt read too early and kept for the next one (prompt_toolkit's
    typeahead), then what the terminal holds, a line not yet ended included (read in
    raw mode, without waiting). ``retype`` gives them to the next prompt, which then
    edits them as if typed at it. Input that is no terminal (a pipe, a script) gives
    nothing: there every key is written ahead and is read in its order."""
    try:
        terminal = os.isatty(input.fileno())
    except (NotImplementedError, OSError, ValueError):
        terminal = False
    if not terminal:
        return []
    keys = get_typeahead(input)
    fd = input.fileno()
    keys += _completed(fd)
    with input.raw_mode():
        while select.select([fd], [], [], 0)[0] and not input.closed:
            keys.extend(input.read_keys())
        keys.extend(input.flush_keys())  # an Escape with nothing after it yet
    # a terminal's late answer to an earlier prompt's cursor-position request is no key
    return [key for key in keys if key.key != Keys.CPRResponse]


def completed_unread(input: Input) -> bool:
    """Whether a line or a Ctrl-D was typed at the terminal while no prompt read it (a
    reply streamed): then ``typed_unread`` must take it before the next prompt, since a
    terminal drops a pending Ctrl-D when a prompt switches it to raw mode."""
    try:
        return os.isatty(input.fileno()) and bool(select.select([input.fileno()], [], [], 0)[0])
    except (NotImplementedError, OSError, ValueError):
        return False


def _completed(fd: int) -> list[KeyPress]:
    """What the terminal's line discipline completed while no prompt read (cooked mode:
    whole lines, and a Ctrl-D as an end of file, which raw mode would lose), as keys.
    A Ctrl-D ends it: nothing typed after one is read here."""
    import fcntl
    import struct
    import termios

    from prompt_toolkit.input.vt100_parser import Vt100Parser

    keys: list[KeyPress] = []
    parser = Vt100Parser(keys.append)
    while select.select([fd], [], [], 0)[0]:
        waiting = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        data = os.read(fd, max(waiting, 1))
        if not data:  # an end of file: Ctrl-D on an empty line
            keys.append(KeyPress(Keys.ControlD, "\x04"))
            break
        parser.feed(data.decode("utf-8", "replace"))
    parser.flush()
    return keys


def retype(input: Input, keys: list[KeyPress]) -> None:
    """``keys`` (from ``typed_unread``) are the next prompt's first keys."""
    store_typeahead(input, keys)


# Bidirectional overrides and isolates, drawn as a replacement character where they were
# typed or pasted (prompt_toolkit draws C0 and C1 controls as ^X and <9b> itself): one
# character for one, so the cursor stays where it is in the text.
_BIDI = str.maketrans({code: "\ufffd" for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})


class ShowBidi(Processor):
    """Draws the line's bidirectional controls as visible characters: pasted, they
    would reorder what the terminal shows of the line, not only be in it."""

    def apply_transformation(self, ti: TransformationInput) -> Transformation:
        return Transformation(
            [(piece[0], piece[1].translate(_BIDI), *piece[2:]) for piece in ti.fragments]
        )


def chat_prompt(
    agents: list[str] | Callable[[], list[str]],
    history: History | None = None,
    input: Input | None = None,
    output: Output | None = None,
) -> PromptSession[str]:
    """The chat's line editor (in-memory history unless one is given)."""
    return PromptSession(
        input=input,
        output=output,
        history=history or InMemoryHistory(),
        key_bindings=key_bindings(),
        completer=ChatCompleter(agents),
        complete_while_typing=False,
        input_processors=[ShowBidi()],
    )
