"""The streaming reply view: a long reply is shown whole, once, in order, while the
live region (redrawn at each refresh) stays about a screenful (issue 15: CPU per
token that does not grow with the reply)."""

from __future__ import annotations

import io

from rich.console import Console

from chatloop.backends.base import Finish, TextDelta
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
    paragraphs = [" ".join(f"p{p}w{w}" for w in range(30)) + "\nand a second line"
                  for p in range(200)]  # fmt: skip
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
    assert [w for w in shown.split() if w.startswith("line_")] == [
        f"line_{i}" for i in range(200)]  # fmt: skip
    assert shown.count("Here it is:") == 1 and shown.count("That was all.") == 1


def test_finished_paragraphs_end_at_the_last_blank_line_outside_a_fence() -> None:
    assert finished_paragraphs("one\n\ntwo") == len("one\n\n")
    assert finished_paragraphs("one\n\n```\na\n\nb") == len("one\n\n")  # not inside
    assert finished_paragraphs("no break at all") == 0
    assert finished_paragraphs("one\n\n") == 0  # nothing after it yet
