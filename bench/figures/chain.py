"""A chain (quick): bench/chain.py in this process, with no model."""

from __future__ import annotations

from bench.chain import run as replay
from bench.figure import Context, Figure
from bench.rows import Row, Rows


def chain_figures(ctx: Context) -> list[Row]:
    """bench/chain.py in-process, with no model (scripted replies, the scripted competent
    summarizer), at 2,048 tokens: a chain's machinery and its recall, so that a broken
    chain bench fails CI (the real model's run is bench/chain.py itself)."""
    messages, rows = 40 if ctx.quick else 120, Rows()
    figures = replay(None, 2048, messages, "competent")
    rows.add(
        f"chain, {messages} messages at 2,048 (scripted): files, lost, over the window",
        f"{figures.files} files, {figures.lost} lost, {figures.over} over",
        "",
        None,
        "0 lost, 0 over",
        figures.lost == 0 and figures.over == 0 and figures.files >= 2,
    )
    rows.add(
        "chain: restoration + acknowledgment + carried, of the window",
        f"{figures.opening_max:.1%}",
        f"without the carried {figures.overhead_max:.1%}",
        None,
        "<= 35% (<= 25% without)",
        figures.opening_max <= 0.35 and figures.overhead_max <= 0.25,
    )
    kept = total = 0
    for kind in ("fact", "decision", "pin"):
        got, of = figures.recall[kind][1]
        kept, total = kept + got, total + of
    rows.add(
        "chain: facts, decisions and pins in the next session (k+1)",
        f"{kept}/{total}",
        f"{figures.not_carried} said not carried, {figures.silent} dropped silently",
        None,
        "100%, 0 dropped silently",
        total > 0 and kept == total and figures.silent == 0,
    )
    return rows.rows


FIGURE = Figure("chain", "a chain", chain_figures)
