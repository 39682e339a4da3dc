"""Waits for bookkeeping (issue 32): bench/waits.py's Ctrl-D, one-shot, /fork, /retry,
/edit and pipe waits, background summaries against ``summaries: wait``, and the
compaction turn with its summary prepared while the person reads."""

from __future__ import annotations

from bench.figure import Context, Figure
from bench.rows import Row, Rows
from bench.waits import compaction_figures
from bench.waits import measure as wait_figures


def bookkeeping_waits(ctx: Context) -> list[Row]:
    """bench/waits.py: what the person waits for a summary (issue 32), with the
    background worker against ``summaries: wait`` (every earlier chatloop's way), A B A B
    against a scripted server whose summaries take ``summary_seconds``."""
    pairs, summary_seconds = (1, 2.0) if ctx.quick else (3, 30.0)
    rows = Rows()
    targets = {"Ctrl-D to the shell": 0.5, "one-shot: last word to its end": 0.3}
    targets["/fork to the prompt"] = 0.5
    targets["/retry to the prompt (answered)"] = 0.5
    targets["/edit to the prompt (answered)"] = 0.5
    targets['`chatloop "q" | head -1`: line to end'] = 0.3
    for what, background, waited in wait_figures(pairs, summary_seconds):
        rows.add(
            f"{what} ({summary_seconds:g} s summaries)",
            f"{background:.2f} s",
            f"summaries: wait {waited:.2f} s",
            background / waited,
            f"<= {targets[what]:g} s",
            background <= targets[what],
        )
    (_, compacted, before), (_, normal, _) = compaction_figures(pairs, summary_seconds)
    rows.add(
        f"compaction turn, summary prepared while reading ({summary_seconds:g} s summaries)",
        f"{compacted:.2f} s",
        f"a normal turn {normal:.2f} s (prepare_compaction: off {before:.2f} s)",
        compacted / normal,
        "<= 1.5x a normal turn",
        compacted <= 1.5 * normal,
    )
    return rows.rows


FIGURE = Figure("waits", "waits for bookkeeping", bookkeeping_waits)
