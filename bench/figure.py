"""What every figure of ``bench.run`` is: a name, a heading, and ``run(ctx) -> rows``.

A figure module (``bench/figures/``) defines ``FIGURE = Figure(...)``; ``bench.run``
lists them in its registry, in the order they run. Everything a figure reads of the
run comes in its ``Context``; everything it measured goes out as its rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.rows import Row


@dataclass(frozen=True)
class Context:
    """One run's settings: ``quick`` (small sizes: what CI runs), ``runs`` (the medians'
    runs, 3 quick, 7 in full), ``sessions`` (``--sessions``, None for the default) and
    ``peers`` (the virtual environment holding the peers, None when not installed)."""

    quick: bool
    runs: int
    sessions: int | None = None
    peers: Path | None = None


@dataclass(frozen=True)
class Figure:
    """``name``: what ``--only`` takes; ``heading``: printed before it runs (None: it
    continues the figure before); ``peers``: it measures against the peers too;
    ``run``: measures, printing each row as it comes, and returns the rows."""

    name: str
    heading: str | None
    run: Callable[[Context], list[Row]]
    peers: bool = False
