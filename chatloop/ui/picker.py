"""The session picker behind ``chatloop --resume``, a bare ``/resume`` and
``chatloop search WORDS --resume``.

A small prompt_toolkit application drawn below the cursor (never full screen):
a line to type in, one line per session (number, handle, relative time,
queries, agent, branch, title or last request) and a preview of the chosen
session (its summary, else its last request). Typing filters the list by
title, agent, handle and request; Tab switches to a search of every word of
every session (the index), and back. Up/Down (PageUp/PageDown) move, Enter
resumes, Ctrl-F forks, Esc or Ctrl-C cancel. It fits an 80x24 terminal.

Where the terminal cannot draw it (not a terminal, ``TERM=dumb``), ``pick``
degrades to a numbered list and a line to answer: a number or handle, with
``f`` before it to fork. Devices are parameters so tests drive both with a
pipe input.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from prompt_toolkit.application import Application
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.layout import HSplit, Layout, Window
from prompt_toolkit.layout.controls import BufferControl, FormattedTextControl
from prompt_toolkit.layout.dimension import Dimension
from prompt_toolkit.output import Output

from chatloop.chat.host import Lookup, Picked
from chatloop.ids import tail_of
from chatloop.store.rows import SessionRow
from chatloop.ui.listing import describe, handle_width, queries_of, relative_time
from chatloop.ui.terminal_text import clip, visible

PREVIEW_LINES = 4
NUMBERED_LINES = 30  # sessions the numbered fallback lists before "and N more"
MAX_LIST_LINES = 12  # with the head, the input, the preview and the footer: 20 lines
CHROME_LINES = 4 + PREVIEW_LINES  # everything that is not the list


def line_for(
    row: SessionRow, now: datetime, width: int = 80, project: bool = False, handles: int = 6
) -> str:
    """One picker line: number, handle, when, queries, agent, branch, title or request
    (and its project, with ``project``: numbers count per project); cut to ``width``
    terminal cells and made safe to draw. ``handles``: the handle column's width
    (``listing.handle_width`` of the rows drawn), so that the columns line up."""
    branch = f" [{row.git_branch}]" if row.git_branch else ""
    status = "" if row.status == "closed" else f" ({row.status})"
    fork = " (fork)" if row.forked_at is not None else ""
    chain = f" (chain of {row.chain})" if row.chain > 1 else ""
    when = relative_time(row.updated, now)
    number = row.number or ("*" if row.live else "-")
    text = (
        f"{number:>3}  {row.handle or '-':<{handles}}  {when:>9}  "
        f"{queries_of(row):>3}q  {row.agent[:16]}{branch}{status}{fork}{chain}  "
        f"{describe(row)}"
    )
    # (the marks before the title: a line cut to the width keeps them)
    if project:
        text += f"  ({row.project})"
    return _cut(visible(" ".join(text.split("\n"))), width)


def matches(row: SessionRow, words: Sequence[str]) -> bool:
    """True when every word (case-insensitive) occurs in the session's title, agent,
    handle, number or last request, or begins its id's random part (a handle typed
    longer than it is shown)."""
    hay = " ".join(
        (
            row.title,
            row.agent,
            row.agent_name,
            row.handle,
            row.preview,
            str(row.number or ""),
            row.git_branch or "",
        )
    ).casefold()
    random_part = (tail_of(row.id) or "").casefold()
    return all(
        word in hay or (len(word) >= 4 and random_part.startswith(word))
        for word in (w.casefold() for w in words)
    )


def pick(
    rows: Sequence[SessionRow],
    now: datetime,
    lookup: Lookup | None = None,
    *,
    input: Input | None = None,
    output: Output | None = None,
) -> Picked | None:
    """Let the person choose one of ``rows`` (live sessions are left out) to resume or
    fork; None if they cancel or there is none. ``lookup`` searches the index and
    reads previews; without it, Tab does nothing and the preview is the last request."""
    choices = [r for r in rows if not r.live]
    if not choices:
        return None
    if input is None and output is None and not can_draw():
        return pick_numbered(choices, now, lookup)
    return _Picker(choices, now, lookup).run(input, output)


def can_draw() -> bool:
    """True when stdin and stdout are a terminal that can take a cursor-addressed view
    with room for a few sessions besides the picker's own lines."""
    if os.environ.get("TERM", "") in ("dumb", "unknown"):
        return False
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return False
    size = shutil.get_terminal_size((80, 24))
    return size.lines >= CHROME_LINES + 4 and size.columns >= 40


def pick_numbered(
    rows: Sequence[SessionRow],
    now: datetime,
    lookup: Lookup | None = None,
    *,
    read: Callable[[str], str] = input,
    write: Callable[[str], None] = print,
) -> Picked | None:
    """The picker for a terminal that cannot draw one: the sessions as a numbered list,
    then one answer: a number or handle resumes, ``f`` and one forks, a word filters
    (or searches, with ``/`` before it), empty or end of input cancels."""
    shown = list(rows)
    several = len({r.project for r in rows}) > 1
    while True:
        handles = handle_width(shown[:NUMBERED_LINES])
        for row in shown[:NUMBERED_LINES]:
            write(line_for(row, now, 100, several, handles))
        if len(shown) > NUMBERED_LINES:
            write(f"… and {len(shown) - NUMBERED_LINES} more: a word narrows the list")
        if not shown:
            write("No session matches.")
        try:
            answer = read(
                "Resume which? (number or handle; f N forks; a word filters, /word "
                "searches; Enter cancels) "
            ).strip()
        except (EOFError, KeyboardInterrupt):
            return None
        if not answer:
            return None
        fork = False
        head, _, rest = answer.partition(" ")
        if head.lower() == "f" and rest.strip():
            fork, answer = True, rest.strip()
        chosen = _by_ref(rows, answer) or _by_ref(shown, answer)
        if chosen is not None:
            return Picked(chosen, fork)
        if answer.startswith("/") and lookup is not None:
            shown = [r for r in lookup.search(answer[1:], True) if not r.live]
        else:
            shown = [r for r in rows if matches(r, answer.split())]


def _by_ref(rows: Sequence[SessionRow], ref: str) -> SessionRow | None:
    """The one row whose number, handle or id is ``ref`` (the start of an id's random
    part as a handle, at least 4 characters); None when none or several are."""
    if ref.isdigit():  # a number, or a handle of eight digits (as ``Index.find`` reads it)
        found = [r for r in rows if r.number == int(ref)]
        if not found and len(ref) == 8:
            found = [r for r in rows if tail_of(r.id) == ref]
    elif len(ref) < 4:
        return None
    else:
        found = [r for r in rows if r.id == ref or (tail_of(r.id) or "").startswith(ref)]
    return found[0] if len(found) == 1 else None


def _cut(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal cells (a wide character takes two)."""
    return clip(text, width, 1) if width > 0 else ""


@dataclass
class _State:
    shown: list[SessionRow]
    at: int = 0
    top: int = 0
    searching: bool = False
    chosen: Picked | None = None
    previews: dict[str, str] = field(default_factory=dict)


class _Picker:
    """The drawn picker: one filter line, the list, the preview, the keys."""

    def __init__(self, rows: list[SessionRow], now: datetime, lookup: Lookup | None) -> None:
        self.rows, self.now, self.lookup = rows, now, lookup
        self.several = len({r.project for r in rows}) > 1  # numbers repeat: name projects
        self.state = _State(list(rows))
        self.query = Buffer(multiline=False, on_text_changed=lambda _: self._refresh())

    def run(self, input: Input | None, output: Output | None) -> Picked | None:
        app: Application[None] = Application(
            layout=Layout(
                HSplit(
                    [
                        Window(FormattedTextControl(self._head), height=1),
                        Window(BufferControl(self.query), height=1, get_line_prefix=self._prompt),
                        Window(FormattedTextControl(self._list), height=self._list_height),
                        Window(FormattedTextControl(self._preview), height=PREVIEW_LINES + 1),
                        Window(FormattedTextControl(self._footer), height=1),
                    ]
                ),
                focused_element=self.query,
            ),
            key_bindings=self._keys(),
            input=input,
            output=output,
            full_screen=False,
            erase_when_done=True,
        )
        self.app = app
        app.run()
        return self.state.chosen

    # ------------------------------------------------------------------ keys
    def _keys(self) -> KeyBindings:
        keys = KeyBindings()
        state = self.state

        @keys.add("up")
        @keys.add("c-p")
        def _up(event: KeyPressEvent) -> None:
            self._move(-1)

        @keys.add("down")
        @keys.add("c-n")
        def _down(event: KeyPressEvent) -> None:
            self._move(1)

        @keys.add("pageup")
        def _page_up(event: KeyPressEvent) -> None:
            self._move(-self._visible())

        @keys.add("pagedown")
        def _page_down(event: KeyPressEvent) -> None:
            self._move(self._visible())

        @keys.add("tab")
        def _mode(event: KeyPressEvent) -> None:
            if self.lookup is not None:
                state.searching = not state.searching
                self._refresh()

        @keys.add("enter")
        def _resume(event: KeyPressEvent) -> None:
            self._choose(event, fork=False)

        @keys.add("c-f")
        def _fork(event: KeyPressEvent) -> None:
            self._choose(event, fork=True)

        @keys.add("escape", eager=True)
        @keys.add("c-c")
        def _cancel(event: KeyPressEvent) -> None:
            event.app.exit()

        return keys

    def _choose(self, event: KeyPressEvent, fork: bool) -> None:
        if self.state.shown:
            self.state.chosen = Picked(self.state.shown[self.state.at], fork)
            event.app.exit()

    def _move(self, step: int) -> None:
        state = self.state
        state.at = max(0, min(len(state.shown) - 1, state.at + step))

    def _refresh(self) -> None:
        """The list for what is typed: a filter of the rows, or the index's hits."""
        state, text = self.state, self.query.text
        if state.searching and self.lookup is not None and text.strip():
            found = self.lookup.search(text, True)
            state.shown = [r for r in found if not r.live]  # live ones: not to pick
        else:
            state.shown = [r for r in self.rows if matches(r, text.split())]
        state.at = state.top = 0

    # ------------------------------------------------------------------ drawing
    def _width(self) -> int:
        try:
            return max(20, self.app.output.get_size().columns - 1)
        except (AttributeError, OSError):
            return 79

    def _visible(self) -> int:
        try:
            rows = self.app.output.get_size().rows
        except (AttributeError, OSError):
            rows = 24
        return max(1, min(MAX_LIST_LINES, rows - CHROME_LINES - 1))

    def _list_height(self) -> Dimension:
        """As many lines as the most there is to show (search may find more sessions than
        the list began with), within the terminal."""
        most = max(len(self.rows), len(self.state.shown), 1)
        return Dimension.exact(min(self._visible(), most))

    def _head(self) -> StyleAndTextTuples:
        mode = "search all text" if self.state.searching else "filter"
        count = f"{len(self.state.shown)} of {len(self.rows)}"
        if self.state.searching:
            pending = self.lookup.words_pending() if self.lookup is not None else 0
            # (a picker never waits for the words an index is still reading)
            count = f"{len(self.state.shown)} found" + (
                f"; {pending:,} sessions' words still being indexed" if pending else ""
            )
        return [("bold", _cut(f"Resume which session? Type to {mode} ({count})", self._width()))]

    def _prompt(self, line: int, wrap: int) -> StyleAndTextTuples:
        return [("bold", "search: " if self.state.searching else "filter: ")]

    def _list(self) -> StyleAndTextTuples:
        state, height, width = self.state, self._visible(), self._width()
        if not state.shown:
            return [("italic", "  no session matches" if self.query.text else "  no sessions")]
        state.top = min(state.top, max(0, len(state.shown) - height))  # a grown terminal
        if state.at < state.top:
            state.top = state.at
        elif state.at >= state.top + height:
            state.top = state.at - height + 1
        out: StyleAndTextTuples = []
        drawn = range(state.top, min(len(state.shown), state.top + height))
        handles = handle_width([state.shown[i] for i in drawn])
        for i in drawn:
            here = i == state.at
            text = ("> " if here else "  ") + line_for(
                state.shown[i], self.now, width - 2, self.several, handles
            )
            out += [("reverse" if here else "", text), ("", "\n")]
        return out[:-1]

    def _preview(self) -> StyleAndTextTuples:
        state, width = self.state, self._width()
        out: StyleAndTextTuples = [("", "─" * min(width, 78) + "\n")]
        if not state.shown:
            return out
        row = state.shown[state.at]
        if row.id not in state.previews:
            text = self.lookup.preview(row) if self.lookup is not None else ""
            state.previews[row.id] = text or (
                f"Last request: {row.preview}" if row.preview else "(no summary)"
            )
        lines = [
            _cut(visible(line), width)
            for line in state.previews[row.id].splitlines()
            if line.strip()
        ][:PREVIEW_LINES]
        out.append(("italic", "\n".join(lines)))
        return out

    def _footer(self) -> StyleAndTextTuples:
        tab = "  Tab: filter" if self.state.searching else "  Tab: search text"
        keys = "↑/↓ move  Enter resume  Ctrl-F fork" + (tab if self.lookup else "") + "  Esc cancel"
        return [("reverse", _cut(keys, self._width()))]
