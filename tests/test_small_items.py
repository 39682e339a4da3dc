"""Issue 31's smaller items, each through the installed program."""

from __future__ import annotations

from pathlib import Path

from chatloop.format import Message
from chatloop.store.store import Store
from tests.conftest import T0, new_meta
from tests.pty_driver import run


def test_a_multi_line_title_is_listed_on_one_line(store: Store) -> None:
    title = "first line\nsecond line\r\nthird\u2028fourth\tfifth"
    with store.create(new_meta(title=title)) as writer:
        writer.append(Message.create("user", T0, text="hello"))
        writer.finalize()
    for args in (("sessions",), ("show", "1")):
        done = run(*args, home=store.root, cwd=store.cwd)
        assert done.returncode == 0, done.stderr
        lines = [line for line in done.stdout.splitlines() if "first line" in line]
        assert lines and all("second line third fourth fifth" in line for line in lines), (
            args,
            done.stdout,
        )


def test_the_input_history_is_never_written_through_a_link_and_stays_bounded(
    tmp_path: Path,
) -> None:
    """Issue 31: the prompt's history was written through a symlinked project folder
    and grew without bound."""
    from chatloop.ui.prompt import HISTORY_FILE, LineHistory, file_history

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked = tmp_path / "projects" / "linked"
    linked.parent.mkdir()
    linked.symlink_to(elsewhere)
    history = file_history(linked)
    history.store_string("a secret typed here")
    assert not isinstance(history, LineHistory) and list(elsewhere.iterdir()) == []

    real = tmp_path / "projects" / "real"
    (real / HISTORY_FILE).parent.mkdir()
    (real / HISTORY_FILE).symlink_to(elsewhere / "target")
    history = file_history(real)
    history.store_string("another")
    assert not (elsewhere / "target").exists()
    (real / HISTORY_FILE).unlink()

    history = file_history(real)
    assert isinstance(history, LineHistory)
    big = "x" * 1000
    for n in range(1500):  # about 1.5 MB of lines
        history.store_string(f"{n} {big}")
    size = (real / HISTORY_FILE).stat().st_size
    assert size > 1 << 20
    again = file_history(real)  # the next run cuts it to its newest half
    assert (real / HISTORY_FILE).stat().st_size <= (1 << 20) // 2
    kept = list(again.load_history_strings())
    assert kept[0] == f"1499 {big}" and all(s.endswith(big) for s in kept)
    assert oct((real / HISTORY_FILE).stat().st_mode & 0o777) == "0o600"


def test_a_summary_frame_after_damage_is_not_shown_as_the_sessions_summary(
    store: Store,
) -> None:
    """Issue 31: a message torn by a crash, whose text held a whole summary frame,
    made `show` present that inner frame as the session's summary."""
    from chatloop.format import render_frame

    pasted = render_frame(
        Message.create("summary", T0, text="**Decisions Made:** - X"), new_meta(), 0
    )
    with store.create(new_meta(title="Torn")) as writer:
        writer.append(Message.create("user", T0, text="hello"))
        writer.append(Message.create("assistant", T0, text="hi"))
        path = writer.path
    torn = render_frame(Message.create("user", T0, text="note:\n" + pasted.decode()), new_meta(), 2)
    with open(path, "ab") as handle:
        handle.write(torn[: torn.rindex(b"<!-- /")])  # the crash: no close marker
    done = run("show", "1", home=store.root, cwd=store.cwd)
    assert done.returncode == 0, done.stderr
    assert "── Summary ──" not in done.stdout
    assert "── Summary? (after damage" in done.stdout and "- X" in done.stdout
    assert "damaged" in done.stderr


def test_marks_never_wrap_a_narrow_listing_and_a_fork_at_the_start_says_so(
    store: Store,
) -> None:
    """Issue 35: at 60 columns the marks wrapped mid-word; "fork after query 0" read as
    if something had been carried."""
    from datetime import timedelta

    from chatloop.store.rows import SessionRow
    from chatloop.ui.listing import sessions_text

    row = SessionRow(
        number=1,
        id="20261121-120000-abcd1234",
        path="/x",
        project="p",
        title="A title",
        agent="Simple Sally",
        agent_name="simple_sally",
        model="m",
        created=T0.isoformat(),
        updated=T0.isoformat(),
        status="interrupted",
        queries=3,
        tokens_in=0,
        tokens_out=0,
        restoration_tokens=0,
        parent_id="20261121-110000-0000aaaa",
        parent_file=None,
        git_branch=None,
        preview="",
        has_summary=False,
        legacy=False,
        problems=0,
        handle="abcd",
        forked_at=0,
    )._replace(chain=4)
    later = T0 + timedelta(hours=1)
    wide = sessions_text([row], later, columns=200)
    assert "[interrupted] [fork from the start] [chain of 4]" in wide
    assert "after query 0" not in wide
    for columns in (60, 72, 80):
        (line,) = sessions_text([row], later, columns=columns).splitlines()
        assert len(line) <= columns, (columns, line)
        marks = line[line.index("[") :] if "[" in line else ""
        for mark in ("[interrupted]", "[fork from the start]", "[chain of 4]"):
            piece = mark.split()[0]
            assert mark in marks or piece not in marks, (columns, line)  # whole or absent


def test_a_summary_being_made_is_named_once_and_copy_says_where_it_went(
    store: Store,
) -> None:
    """Issue 35: "Generating session summary..." appeared twice; /copy said it copied
    where a terminal drops OSC 52."""
    import io

    from rich.console import Console

    from chatloop.ui import render
    from tests.repl_driver import drive, fake_server

    out = io.StringIO()  # a terminal: the spinner is drawn (a pipe gets none)
    console = Console(file=out, force_terminal=True, width=80)
    with render.spinner(console, "Generating session summary...") as step:
        step("part 1 of 2")
    drawn = out.getvalue()
    assert drawn.count("Generating session summary...") == 1 and "(part 1 of 2)" in drawn
    _, shown = drive(store, fake_server([]), "hello\r/copy\rexit\r")
    assert "Sent the last reply to your terminal's clipboard (OSC 52)" in shown
    assert "Copied the last reply" not in shown
