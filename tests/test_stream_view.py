"""The streaming reply view: a long reply is shown whole, once, in order, while the
live region (redrawn at each refresh) stays about a screenful (issue 15: CPU per
token that does not grow with the reply)."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from rich.console import Console

from chatloop.backends.base import Finish, TextDelta, ThinkingDelta, ToolCallEvent
from chatloop.format import Message, ToolResult
from chatloop.ui.render import LIVE_CHARS, LIVE_LINES, StreamView, finished_paragraphs


def stream(text: str, pieces: list[str] | None = None) -> tuple[str, int]:
    """Show ``text`` token by token; what was printed, and the largest live text."""
    out = io.StringIO()
    view = StreamView(Console(file=out, width=80, force_terminal=False), "Agent")
    largest = 0
    for piece in pieces if pieces is not None else text.split(" "):
        view.on_event(TextDelta(piece if pieces is not None else piece + " "))
        largest = max(largest, len(view._shown.plain))
    view.on_event(Finish("stop"))
    view.close()
    return out.getvalue(), largest


def test_a_long_reply_of_paragraphs_is_shown_once_in_order_with_a_small_live_region() -> None:
    paragraphs = [
        " ".join(f"p{p}w{w}" for w in range(30)) + "\nand a second line" for p in range(200)
    ]
    text = "\n\n".join(paragraphs)
    shown, largest = stream(text)
    assert shown.split() == text.split()
    assert largest < 2 * LIVE_LINES * 90  # a screenful or two, never the whole reply
    assert largest < len(text) // 20


def test_one_paragraph_without_a_break_is_printed_as_it_comes() -> None:
    text = " ".join(f"w{i}" for i in range(4000))
    shown, largest = stream(text)
    assert shown.split() == text.split()
    assert largest <= LIVE_CHARS + 10


def test_a_code_block_is_never_cut_and_keeps_its_lines() -> None:
    code = "\n".join(f"    line_{i} = {i}" for i in range(200))
    text = "Here it is:\n\n```python\n" + code + "\n\n```\n\nThat was all."
    pieces = [line + "\n" for line in text.split("\n")]
    shown, _ = stream(text, pieces)
    assert [w for w in shown.split() if w.startswith("line_")] == [f"line_{i}" for i in range(200)]
    assert shown.count("Here it is:") == 1 and shown.count("That was all.") == 1


def test_finished_paragraphs_end_at_the_last_blank_line_outside_a_fence() -> None:
    assert finished_paragraphs("one\n\ntwo") == len("one\n\n")
    assert finished_paragraphs("one\n\n```\na\n\nb") == len("one\n\n")  # not inside
    assert finished_paragraphs("no break at all") == 0
    assert finished_paragraphs("one\n\n") == 0  # nothing after it yet


def shown_by(events: list[object], acknowledgment: bool = False, **close: bool) -> str:
    out = io.StringIO()
    view = StreamView(Console(file=out, width=80, force_terminal=False), "Agent", acknowledgment)
    for event in events:
        if isinstance(event, Message):
            view.tool_results(event)
        else:
            view.on_event(event)  # type: ignore[arg-type]
    view.close(**close)
    return out.getvalue()


def test_an_empty_reply_is_said_to_be_empty_and_a_failed_or_cut_one_is_not() -> None:
    assert "(the model sent an empty reply)" in shown_by([Finish("stop")])
    assert "(the model sent an empty reply)" in shown_by([TextDelta(" \n "), Finish("stop")])
    assert "empty" not in shown_by([TextDelta("Hello"), Finish("stop")])
    assert "empty" not in shown_by([])  # the stream failed: no Finish, the error says it
    assert "empty" not in shown_by([Finish("stop")], interrupted=True, saved=False)
    # a reply that called a tool said something; the reply after the results did not
    result = Message.create(
        "tool", datetime.now(UTC), tool_results=(ToolResult("c1", "clock", "12:00"),)
    )
    called = [ToolCallEvent("c1", "clock", "{}"), Finish("tool_calls")]
    assert "empty" not in shown_by(called)
    assert "(the model sent an empty reply)" in shown_by([*called, result, Finish("stop")])
    assert "empty" not in shown_by([*called, result, TextDelta("Noon."), Finish("stop")])


def test_an_acknowledgment_is_labelled_so_it_does_not_read_as_the_answer() -> None:
    shown = shown_by(
        [TextDelta("Understood, "), TextDelta("I have the summary."), Finish("stop")],
        acknowledgment=True,
    )
    label = shown.index("The model acknowledges the summary:")
    assert label < shown.index("Understood, I have the summary.")
    assert "acknowledges" not in shown_by([TextDelta("An answer."), Finish("stop")])
    assert "(the model sent an empty acknowledgment)" in shown_by(
        [Finish("stop")], acknowledgment=True
    )


def test_a_reply_that_only_thought_or_hit_its_limit_says_so_not_empty() -> None:
    thought = [ThinkingDelta("let me see"), Finish("stop")]
    assert "(the model thought, then sent no reply)" in shown_by(thought)
    limited = [ThinkingDelta("let me see"), Finish("length")]
    assert "(no reply: the model reached its token limit while thinking)" in shown_by(limited)
    assert "(no reply: the model reached its token limit)" in shown_by([Finish("length")])


def test_a_one_shot_says_an_empty_acknowledgment_is_one(capsys: pytest.CaptureFixture[str]) -> None:
    from chatloop.ui.oneshot import PlainHost

    host = PlainHost(io.StringIO())
    for acknowledgment, text in ((True, ""), (False, "The answer.")):
        view = host.reply_view(acknowledgment)
        if text:
            view.on_event(TextDelta(text))
        view.on_event(Finish("stop"))
        view.close(False, False)
    said = capsys.readouterr().err
    assert "(the model sent an empty acknowledgment)" in said and "empty reply" not in said


def test_a_one_shot_acknowledgment_is_labelled_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from chatloop.ui.oneshot import PlainHost

    view = PlainHost(io.StringIO()).reply_view(acknowledgment=True)
    view.on_event(TextDelta("Noted: the pots."))
    view.on_event(Finish("stop"))
    view.close(False, False)
    err = capsys.readouterr().err
    assert err.index("The model acknowledges the summary:") < err.index("Noted: the pots.")


def test_search_hits_keep_their_columns_whatever_the_handles() -> None:
    from chatloop.store.rows import SearchHit, SessionRow
    from chatloop.ui.listing import hit_line

    def row(handle: str) -> SessionRow:
        return SessionRow(
            1,
            "20261122-113134-" + handle.ljust(8, "0"),
            "/x.md",
            "p",
            "",
            "A",
            "a",
            "m",
            "",
            "",
            "closed",
            1,
            0,
            0,
            0,
            None,
            None,
            None,
            "",
            True,
            False,
            0,
            handle,
        )

    lines = [hit_line(SearchHit(row(h), "user", "the [word]")) for h in ("6f07", "2696241b")]
    assert len({line.index("user") for line in lines}) == 1, lines


def test_listings_fit_a_terminal_and_keep_their_marks() -> None:
    # in a terminal of 80 columns a long title or snippet is cut with "…" (wide characters
    # count twice), so no line wraps mid-word; a status such as [chain of 2] stays whole
    from datetime import UTC, datetime

    from chatloop.store.rows import SearchHit, SessionRow
    from chatloop.ui.listing import hit_line, sessions_text
    from chatloop.ui.terminal_text import cells

    def row(title: str, chain: int, status: str = "closed") -> SessionRow:
        return SessionRow(
            1,
            "20261122-113134-6f070000",
            "/x.md",
            "p",
            title,
            "Simple Sally",
            "a",
            "m",
            "",
            "2026-11-22T11:31:34+00:00",
            status,
            3,
            0,
            0,
            0,
            None,
            None,
            None,
            "",
            True,
            False,
            0,
            "6f07",
            chain=chain,
        )

    now = datetime(2026, 11, 22, 12, tzinfo=UTC)
    long = "Which herbs grow well in the capital of France on a balcony " + "日本語" * 8
    for columns in (80, 100):
        text = sessions_text([row(long, 2), row("Short", 1, "interrupted")], now, columns=columns)
        first, second = text.splitlines()
        assert cells(first) < columns and first.endswith("… [chain of 2]")
        assert second.endswith("Short [interrupted]")
        hit = hit_line(SearchHit(row("t", 1), "assistant", long), columns=columns)
        assert cells(hit) < columns and hit.endswith("…")
    # narrower, the agent's column goes first, then marks, whole: no line wraps
    narrow = sessions_text([row(long, 2, "interrupted")], now, columns=60)
    assert cells(narrow) <= 60 and "Simple Sally" not in narrow
    assert narrow.endswith("… [interrupted] …")  # the chain's mark gave way, not cut
    assert "[interrupted] [chain of 2]" in sessions_text(
        [row(long, 2, "interrupted")], now, columns=100
    )
    assert long in sessions_text([row(long, 1)], now) or long[:70] in sessions_text(
        [row(long, 1)], now
    )  # a pipe gets the line whole (the title to 70 characters)
    assert hit_line(SearchHit(row("t", 1), "user", long)).endswith(long)


def test_a_reply_that_only_calls_tools_has_no_empty_speaker_line() -> None:
    from chatloop.format import Session, Thinking, ToolCall
    from chatloop.ui.listing import transcript_text
    from tests.conftest import T0, new_meta

    calls = Message.create("assistant", T0, tool_calls=(ToolCall("c1", "list_dir", "{}"),))
    empty = Message.create("assistant", T0)
    shown = transcript_text(Session(new_meta(agent="File Fiona"), (calls, empty)))
    assert "File Fiona: \n" not in shown + "\n" and "  → list_dir({})" in shown
    assert "File Fiona: (the model sent an empty reply)" in shown  # said, as in the chat
    # cut by Ctrl-C after thinking and a call, before any text: said, before its arrow
    cut = Message.create(
        "assistant",
        T0,
        thinking=(Thinking("let me look"),),
        tool_calls=(ToolCall("c2", "read_file", "{}"),),
        interrupted=True,
        stop_reason="cancelled",
    )
    lines = transcript_text(Session(new_meta(agent="File Fiona"), (cut,))).splitlines()
    said = lines.index("File Fiona: (no reply: interrupted before any text arrived)")
    assert said < lines.index("  → read_file({})")


def drawn(text: str) -> tuple[str, str]:
    """A finished reply as the terminal shows it once the live text is replaced: the
    text, and the same with its colours (ANSI sequences of rich's own)."""
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=True, color_system="truecolor")
    view = StreamView(console, "Agent")
    view.on_event(TextDelta(text))
    view.on_event(Finish("stop"))
    view.close()
    # the live text is erased line by line (erase-line sequences), then the rendering
    coloured = out.getvalue().rsplit("\x1b[2K", 1)[-1]
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", coloured), coloured


def test_every_reply_is_rendered_as_markdown_and_its_angle_brackets_are_text() -> None:
    reply = (
        "# Comparing\n\n"
        "When **a < b** holds, `List<String>` is <b>sorted</b>; "
        "<script>alert(1)</script> and <<SYS>> stay text.\n\n"
        "<div>a raw block</div>\n\n"
        '```python\nif a < b:\n    print("<tag>")\n```\n'
    )
    shown, coloured = drawn(reply)
    assert "# Comparing" not in shown and "**" not in shown  # markdown, rendered
    assert "Comparing" in shown and "When a < b holds" in shown
    for text in ("List<String>", "<b>sorted</b>", "<script>alert(1)</script>", "<<SYS>>"):
        assert text in shown, text  # HTML as written: never interpreted, never dropped
    assert "<div>a raw block</div>" in shown
    assert "if a < b:" in shown and 'print("<tag>")' in shown
    code = coloured[coloured.index("if") :]
    assert "\x1b[38;2;" in code  # the code block is highlighted (truecolor foregrounds)
    assert "\x1b]8;" not in coloured  # no hyperlink escapes


def test_a_reply_of_hostile_text_rendered_as_markdown_keeps_no_terminal_control() -> None:
    shown, coloured = drawn("**bold** \x1b]52;c;ZXZpbA==\x07 <b>\x1b[2J</b> \u202eevil")
    assert "bold" in shown and "**" not in shown and "<b>" in shown
    for control in ("\x1b]52", "\x1b[2J", "\x07", "\u202e"):
        assert control not in coloured
