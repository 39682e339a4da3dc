"""The rows a figure reports: figure, chatloop's value, the baseline's, ratio, target,
met; collected in the order they are measured, and printed as they come."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# What a bench calls with each figure: (figure, ours, baseline, ratio, target, met).
Report = Callable[[str, str, str, "float | None", str, "bool | None"], None]


@dataclass
class Row:
    figure: str
    ours: str
    baseline: str
    ratio: str
    target: str
    met: str


@dataclass
class Rows:
    """The rows of one figure, in the order they were measured; each is printed as it
    is added (a ``Report``: benches that take one are given ``rows.add``)."""

    rows: list[Row] = field(default_factory=list)

    def add(
        self,
        figure: str,
        ours: str,
        baseline: str,
        ratio: float | None,
        target: str,
        met: bool | None,
    ) -> None:
        mark = "n/a" if met is None else ("yes" if met else "NO")
        row = Row(figure, ours, baseline, "" if ratio is None else f"{ratio:.2f}x", target, mark)
        self.rows.append(row)
        print(f"  {figure}: {ours} vs {baseline} → {row.ratio} ({target}: {mark})", flush=True)


def print_row(
    figure: str, ours: str, baseline: str, ratio: float | None, target: str, met: bool | None
) -> None:
    """A ``Report`` that prints one row: the figure, both sides, the ratio, the verdict."""
    shown = "" if ratio is None else f" → {ratio:.2f}x"
    mark = "n/a" if met is None else ("met" if met else "MISSED")
    print(f"{figure}: {ours} vs {baseline}{shown} ({target}: {mark})", flush=True)
