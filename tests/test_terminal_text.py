"""Text as a terminal shows it: widths by grapheme, cuts never inside one."""

from __future__ import annotations

import pytest

from chatloop.ui.terminal_text import cells, clip, visible

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # man ZWJ woman ZWJ girl: one picture
RAINBOW_FLAG = "\U0001f3f3\ufe0f\u200d\U0001f308"  # white flag VS16 ZWJ rainbow


@pytest.mark.parametrize(
    ("text", "width"),
    [
        ("abc", 3),
        ("中文", 4),
        ("e\u0301", 1),
        (FAMILY, 2),
        (RAINBOW_FLAG, 2),
        (f"a{FAMILY}b", 4),
        ("\u2400", 1),
    ],
)
def test_cells_are_what_the_terminal_draws(text: str, width: int) -> None:
    # an emoji joined by ZWJ was counted per code point (the flag: 5 cells)
    assert cells(text) == width


def test_a_cut_never_splits_a_grapheme() -> None:
    text = ("ab" + FAMILY) * 10
    for room in range(8, 30):
        cut = clip(text, room)
        assert cells(cut) <= room and cut.endswith("…")
        kept = cut[:-1]
        assert text.startswith(kept) and kept.count("\u200d") == 2 * kept.count("\U0001f468")
    assert clip(FAMILY * 3, 8) == FAMILY * 3  # 6 cells: fits whole
    assert clip("e\u0301" * 20, 8) == "e\u0301" * 7 + "…"  # marks stay with their letter


def test_visible_leaves_the_joiners_and_shows_the_controls() -> None:
    assert visible(f"{FAMILY}\x1b[2J\u202e") == f"{FAMILY}\u241b[2J\\u202e"
