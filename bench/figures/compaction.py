"""The compaction ratio: tokens of the restoration prompt for a 50-query session (its
deterministic summary, and a 500-word one as the worst case) against its transcript."""

from __future__ import annotations

from pathlib import Path

from bench.corpus import session
from bench.figure import Context, Figure
from bench.rows import Row, Rows
from chatloop.backends.base import estimate_tokens
from chatloop.chat import chain, prompts
from chatloop.format import Session, render_markdown


def compaction_ratio(ctx: Context) -> list[Row]:
    """The restoration prompt's tokens as a share of the transcript's."""
    rows = Rows()
    s = session(50, 2)
    transcript = render_markdown(Session(s.meta, s.messages[:-1])).decode()
    full_tokens = estimate_tokens(transcript)
    summary = prompts.fallback_summary(list(s.messages), None)
    parent = chain.Parent(Path("x.md"), s.meta, summary)
    restore = estimate_tokens(chain.restoration(parent, summary))
    worst = restore + estimate_tokens("word " * prompts.MAX_WORDS) - estimate_tokens(summary)
    rows.add(
        "compaction ratio, 50 queries",
        f"{restore:,} tok",
        f"transcript {full_tokens:,} tok",
        restore / full_tokens,
        "<= 15%",
        restore / full_tokens <= 0.15,
    )
    rows.add(
        "  same with a 500-word summary",
        f"{worst:,} tok",
        f"transcript {full_tokens:,} tok",
        worst / full_tokens,
        "<= 15%",
        worst / full_tokens <= 0.15,
    )
    return rows.rows


FIGURE = Figure("compaction", None, compaction_ratio)
