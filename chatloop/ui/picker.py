"""The session picker behind ``chatloop --resume`` and a bare ``/resume``.

A small prompt_toolkit application: one line per session (number, relative
time, queries, agent, branch, title or last question); Up/Down (or k/j) move,
Enter picks, Esc, q or Ctrl-C cancel. Devices are parameters so tests drive it
with a pipe input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from prompt_toolkit.application import Application
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.layout import Layout, Window
from prompt_toolkit.layout.controls import FormattedTextControl
from prompt_toolkit.output import Output

from chatloop.store.index import SessionRow
from chatloop.ui.listing import describe, relative_time


def line_for(row: SessionRow, now: datetime) -> str:
    """One picker line: number, when, queries, agent, branch, title or preview."""
    branch = f" [{row.git_branch}]" if row.git_branch else ""
    status = "" if row.status == "closed" else f" ({row.status})"
    return (f"{row.number or '*':>3}  {relative_time(row.updated, now):>9}  {row.queries:>3}q  "
            f"{row.agent}{branch}  {describe(row)[:60]}{status}")  # fmt: skip


def pick(
    rows: Sequence[SessionRow],
    now: datetime,
    *,
    input: Input | None = None,
    output: Output | None = None,
) -> SessionRow | None:
    """Let the person choose one of ``rows``; None if they cancel or there are none."""
    choices = [r for r in rows if r.number is not None]
    if not choices:
        return None
    state = _State()
    keys = KeyBindings()

    @keys.add("up")
    @keys.add("k")
    def _up(event: KeyPressEvent) -> None:
        state.at = max(0, state.at - 1)

    @keys.add("down")
    @keys.add("j")
    def _down(event: KeyPressEvent) -> None:
        state.at = min(len(choices) - 1, state.at + 1)

    @keys.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        state.chosen = state.at
        event.app.exit()

    @keys.add("escape", eager=True)
    @keys.add("q")
    @keys.add("c-c")
    def _cancel(event: KeyPressEvent) -> None:
        event.app.exit()

    def text() -> StyleAndTextTuples:
        head = "Resume which session? (↑/↓ to move, Enter to pick, Esc to cancel)\n"
        out: StyleAndTextTuples = [("bold", head)]
        for i, row in enumerate(choices):
            here = i == state.at
            out.append(("reverse" if here else "", ("> " if here else "  ") + line_for(row, now)))
            out.append(("", "\n"))
        return out

    app: Application[None] = Application(
        layout=Layout(Window(FormattedTextControl(text), always_hide_cursor=True)),
        key_bindings=keys, input=input, output=output, full_screen=False,
    )  # fmt: skip
    app.run()
    return None if state.chosen is None else choices[state.chosen]


@dataclass
class _State:
    at: int = 0
    chosen: int | None = None
