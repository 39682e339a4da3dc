"""The session picker: filter by typing, search the index, preview, resume, fork,
and the numbered fallback (driven with a pipe input, in process)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.data_structures import Size
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from chatloop.chat import continuation
from chatloop.chat.host import Lookup, Picked
from chatloop.chat.lookup import summary_digest
from chatloop.chat.session import ChatSession
from chatloop.store.index import Index
from chatloop.store.rows import SessionRow
from chatloop.store.store import Store
from chatloop.ui.listing import handle_width
from chatloop.ui.picker import line_for, matches, pick, pick_numbered
from chatloop.ui.terminal_text import cells
from tests.conftest import T0
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import ScriptedHost, chat

DOWN, UP, ENTER, ESC, TAB, CTRL_F = "\x1b[B", "\x1b[A", "\r", "\x03", "\t", "\x06"  # ESC: Ctrl-C
TALKS = ("tomato beds on the balcony", "sourdough starter feeding", "bicycle chain cleaning")


@pytest.fixture
def sessions(store: Store) -> list[SessionRow]:
    """Three closed sessions (the last talked about is number 1), with summaries."""
    for text in TALKS:
        session, _ = chat(store, FakeBackend("A.", STRUCTURED))
        session.send(text)
        session.close()
    with Index(store) as index:
        index.sync()
        return index.list_sessions()


class Small(DummyOutput):
    """An output the size of a small terminal."""

    def __init__(self, rows: int = 24, columns: int = 80) -> None:
        self.size = Size(rows=rows, columns=columns)

    def get_size(self) -> Size:
        return self.size


def drive(rows: list[SessionRow], keys: str, lookup: Lookup | None = None) -> Picked | None:
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        return pick(rows, T0, lookup, input=pipe, output=Small())


@pytest.mark.parametrize(
    "keys, expected", [(ENTER, 0), (DOWN + ENTER, 1), (DOWN + DOWN + UP + ENTER, 1)]
)
def test_arrow_keys_move_and_enter_resumes(
    sessions: list[SessionRow], keys: str, expected: int
) -> None:
    assert drive(sessions, keys) == Picked(sessions[expected], fork=False)


def test_typing_filters_by_what_the_session_is_about(sessions: list[SessionRow]) -> None:
    assert [r.preview for r in sessions] == list(reversed(TALKS))
    picked = drive(sessions, "DOUGH" + ENTER)  # case-insensitive, part of a word
    assert picked is not None and picked.row.preview == "sourdough starter feeding"
    by_handle = drive(sessions, sessions[2].id[-8:] + ENTER)  # a handle typed in full
    assert by_handle is not None and by_handle.row == sessions[2]
    assert drive(sessions, "nothing-like-this" + ENTER + ESC) is None  # Enter: no match
    assert drive(sessions, "tomato chain" + ENTER + ESC) is None  # every word must match


def test_ctrl_f_forks_and_escape_cancels(sessions: list[SessionRow]) -> None:
    assert drive(sessions, DOWN + CTRL_F) == Picked(sessions[1], fork=True)
    assert drive(sessions, "bicycle" + ESC) is None


class Recording(ScriptedHost):
    """A host whose pick is the real picker, fed ``keys``; it keeps the previews."""

    keys = ""

    def pick(self, rows: list[SessionRow], lookup: Lookup | None = None) -> Picked | None:
        assert lookup is not None
        self.previews = [lookup.preview(r) for r in rows]
        return drive(rows, self.keys, lookup)


def picker_session(store: Store, keys: str) -> tuple[Any, Recording]:
    session, _ = chat(store, FakeBackend("Ready.", STRUCTURED))
    host = Recording()
    host.keys = keys
    session.host = host
    return session, host


def choose(session: ChatSession) -> Picked | None:
    """The picker as ``/resume`` alone opens it (``continuation.choose``)."""
    return continuation.choose(session.store, session.host.pick)


def test_tab_searches_every_word_of_every_session_as_typed(
    store: Store, sessions: list[SessionRow]
) -> None:
    # the summaries hold "drainage"; no title, agent or request does: the filter finds
    # nothing, the search finds it typed in part (a prefix, as while typing)
    assert drive(sessions, "drainag" + ENTER + ESC) is None
    session, _ = picker_session(store, TAB + "drainag" + ENTER)
    picked = choose(session)
    assert picked is not None and picked.row.id in {r.id for r in sessions}
    session, _ = picker_session(store, TAB + "drainag" + TAB + ENTER + ESC)  # back to the filter
    assert choose(session) is None


def test_preview_is_the_summary_in_a_few_lines(store: Store, sessions: list[SessionRow]) -> None:
    session, host = picker_session(store, ESC)
    assert choose(session) is None
    assert host.previews == [summary_digest(STRUCTURED)] * 3
    assert summary_digest(STRUCTURED).splitlines() == [
        "Topics Discussed: Watering schedule for basil in pots/basil.md",
        "Decisions Made: Water every 2 days, 250 ml each",
        "Pending: Check drainage",
    ]


def test_picking_fork_branches_and_leaves_the_session_as_it_was(
    store: Store, sessions: list[SessionRow]
) -> None:
    before = Path(sessions[1].path).read_bytes()
    session, _ = picker_session(store, DOWN + CTRL_F)
    assert session.resume("") is True
    session.send("and then?")  # a fork is written with it
    session.close()
    assert Path(sessions[1].path).read_bytes() == before
    with Index(store) as index:
        index.sync()
        forks = [r for r in index.list_sessions() if r.forked_at is not None]
    assert [f.parent_id for f in forks] == [sessions[1].id]


def test_lines_fit_a_small_terminal_and_show_no_control_characters(
    sessions: list[SessionRow],
) -> None:
    row = sessions[0]
    long = row._replace(title="x\x1b[31m" + "word " * 40)
    line = line_for(long, T0, 78)
    assert len(line) == 78 and "\x1b" not in line and line.endswith("…")
    assert matches(row, [row.handle]) and not matches(row, ["zzz"])


def test_a_line_of_wide_characters_fits_the_terminal(sessions: list[SessionRow]) -> None:
    # a wide character takes two cells: cut by characters, this line took 111 of 78
    line = line_for(sessions[0]._replace(title="漢字の題名" * 12), T0, 78)
    assert 77 <= cells(line) <= 78 and line.endswith("…") and "漢字" in line


def test_columns_line_up_when_a_handle_is_eight_digits(sessions: list[SessionRow]) -> None:
    """A handle of digits only is lengthened to eight (so it reads as no number): the
    columns after it moved two places on that line alone."""
    rows = [sessions[0]._replace(handle="20261122"), *sessions[1:]]
    for drawn in (pick_numbered_lines(rows), [line_for(r, T0, 100, False, 8) for r in rows]):
        assert len(drawn) == len(rows)
        starts = {re.search(r" \d+q  ", line).end() for line in drawn}  # type: ignore[union-attr]
        assert len(starts) == 1, drawn


def pick_numbered_lines(rows: list[SessionRow]) -> list[str]:
    shown: list[str] = []
    pick_numbered(rows, T0, read=lambda _: "", write=shown.append)
    return [line for line in shown if re.search(r" \d+q  ", line)]


def test_numbered_fallback_takes_a_number_a_handle_or_f_to_fork(
    sessions: list[SessionRow],
) -> None:
    def answers(*lines: str) -> Iterator[str]:
        yield from lines

    shown: list[str] = []
    for typed, expected in [
        (["2"], Picked(sessions[1], False)),
        ([sessions[2].handle], Picked(sessions[2], False)),
        (["f 1"], Picked(sessions[0], True)),
        (["bicycle", "1"], Picked(sessions[0], False)),  # 1 is still the first session
        ([""], None),
        (["9", ""], None),  # no such number: asked again, then cancelled
    ]:
        feed = answers(*typed)
        got = pick_numbered(sessions, T0, read=lambda _, feed=feed: next(feed), write=shown.append)
        assert got == expected, typed
    assert any("bicycle chain cleaning" in line for line in shown)

    def ends(_: str) -> str:
        raise EOFError

    assert pick_numbered(sessions, T0, read=ends, write=shown.append) is None


def test_a_summary_line_built_to_make_patterns_backtrack_is_read_in_one_pass() -> None:
    assert summary_digest("#" + " " * 20000 + ":x") == ""  # a heading with no items
    assert summary_digest("- " + "*" * 20000 + " done") == "done"


class Found:
    """A Lookup that finds the given rows, whatever is typed."""

    def __init__(self, rows: list[SessionRow]) -> None:
        self.rows = rows

    def search(self, text: str, prefix: bool = False) -> list[SessionRow]:
        return list(self.rows)

    def preview(self, row: SessionRow) -> str:
        return ""

    def words_pending(self) -> int:
        return 0


def test_search_hits_beyond_the_first_list_are_drawn_and_live_sessions_left_out(
    sessions: list[SessionRow],
) -> None:

    from chatloop.ui.picker import _Picker

    live = sessions[1]._replace(number=None, status="open", id="20261121-000000-0000live")
    picker = _Picker(sessions[:1], T0, Found([*sessions, live]))  # the list began with one
    picker.state.searching = True
    picker.query.text = "anything"  # the search finds the three, and a live one
    assert picker.state.shown == sessions
    picker.state.at = 2
    drawn = "".join(text for _, text in picker._list())
    wide = handle_width(sessions)  # 8 when a random handle is all digits
    assert f"> {line_for(sessions[2], T0, 77, False, wide)}" in drawn  # the chosen row is drawn
    assert picker._list_height().preferred == 3
    assert drive(sessions[:1], TAB + "x" + DOWN + DOWN + ENTER, Found([*sessions, live])) == (
        Picked(sessions[2], False)
    )


def test_the_numbered_fallback_names_projects_and_refuses_a_number_two_share(
    sessions: list[SessionRow],
) -> None:

    elsewhere = sessions[0]._replace(project="other-1234", id="20261121-000000-0ther001")
    rows = [*sessions, elsewhere]
    shown: list[str] = []
    feed = iter(["1", sessions[0].handle, ""])
    got = pick_numbered(rows, T0, read=lambda _: next(feed), write=shown.append)
    assert got == Picked(sessions[0], False)  # "1" named two sessions: asked again
    assert any(line.endswith("(other-1234)") for line in shown)


def test_search_resume_needs_a_terminal_and_no_json(
    store: Store,
    sessions: list[SessionRow],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chatloop.cli import main

    monkeypatch.chdir(store.cwd)
    assert main(["search", "sourdough", "--resume"]) == 2  # stdin is no terminal here
    assert "needs a terminal" in capsys.readouterr().err
    assert main(["search", "sourdough", "--resume", "--json"]) == 2
    assert "--json lists hits" in capsys.readouterr().err


def test_a_handle_of_eight_digits_is_taken_as_the_handle(sessions: list[SessionRow]) -> None:

    digits = sessions[2]._replace(id="20261121-000000-35680846", handle="35680846")
    rows = [*sessions[:2], digits]
    feed = iter(["35680846"])
    assert pick_numbered(rows, T0, read=lambda _: next(feed), write=lambda _: None) == Picked(
        digits, False
    )


def test_marks_survive_a_narrow_terminal_in_the_picker_and_in_slash_sessions(
    sessions: list[SessionRow],
) -> None:
    from rich.console import Console

    from chatloop.ui.render import sessions_table

    long = sessions[0]._replace(
        title="a very long title " * 6, status="interrupted", forked_at=2, chain=3
    )
    line = line_for(long, T0, 72)
    assert len(line) == 72 and "(interrupted) (fork)" in line and line.endswith("…")
    console = Console(width=80, record=True, force_terminal=False)
    console.print(sessions_table([long._replace(status="closed")], T0))
    shown = console.export_text()
    (line,) = [x for x in shown.splitlines() if "Simple Sally" in x]
    # (the handle is 4 characters, or 8 when they are all digits: the title gets the rest)
    assert "[fork after query 2] [chain of 3] a" in line and line.rstrip().endswith("…")
