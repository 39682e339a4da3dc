"""Recall (quick): bench/recall.py in this process, with no model."""

from __future__ import annotations

from bench.figure import Context, Figure
from bench.recall import run as replay
from bench.rows import Row, Rows
from chatloop.config import RECALL_SHARE


def recall_figures(ctx: Context) -> list[Row]:
    """bench/recall.py in-process with no model (scripted replies and summaries): a
    chain of ten compactions at 2,048 tokens, then a question about each fact planted
    early, asked with recall and without (interleaved), so that broken recall fails CI
    (the real model's run is ``python -m bench.recall`` itself)."""
    rows = Rows()
    f = replay(None, 2048, 160)
    rows.add(
        "recall: questions whose request carries the fact (10 compactions, 2,048)",
        f"{f.carried_recall}/{f.questions}",
        f"{f.carried_alone}/{f.questions} without recall",
        None,
        ">= 95%",
        f.carried_recall >= 0.95 * f.questions,
    )
    rows.add(
        "recall: recalled share of the window (most), over the window, lost",
        f"{f.share_max:.1%}, {f.over} over, {f.lost} lost",
        "",
        None,
        f"<= {1 / RECALL_SHARE:.1%}, 0, 0",
        f.share_max <= 1 / RECALL_SHARE and f.over == 0 and f.lost == 0,
    )
    rows.add(
        "recall: CPU of a question turn (lookup at Enter included)",
        f"{f.cpu_recall * 1000:.1f} ms",
        f"{f.cpu_alone * 1000:.1f} ms with /norecall",
        f.cpu_recall / f.cpu_alone if f.cpu_alone else None,
        "a few ms",
        f.lookup < 0.02,
    )
    return rows.rows


FIGURE = Figure("recall", "recall in a long chain", recall_figures)
