"""The bench is a package (issue 47): every figure module is registered in
``bench.run`` with the one interface, and no bench edits ``sys.path``.

Nothing is measured here: CI's ``python -m bench.run --quick`` runs the figures.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from bench.figure import Context, Figure
from bench.figures.compaction import FIGURE as COMPACTION
from bench.rows import Row
from bench.run import FIGURES

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_every_figure_module_is_in_the_registry_once() -> None:
    modules = sorted(p.stem for p in (BENCH / "figures").glob("*.py") if p.stem != "__init__")
    defined = [importlib.import_module(f"bench.figures.{name}").FIGURE for name in modules]
    assert all(isinstance(figure, Figure) for figure in defined)
    assert sorted(f.name for f in defined) == sorted(f.name for f in FIGURES)
    assert len({f.name for f in FIGURES}) == len(FIGURES)


def test_a_figure_returns_its_rows() -> None:
    """The one figure that needs no child process: its rows come back as values."""
    rows = COMPACTION.run(Context(quick=True, runs=1))
    assert rows and all(isinstance(row, Row) for row in rows)
    assert rows[0].figure == "compaction ratio, 50 queries" and rows[0].met == "yes"


def test_no_bench_edits_sys_path() -> None:
    edits = []
    for path in sorted(BENCH.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            named = isinstance(node, ast.Attribute) and node.attr == "path"
            if named and isinstance(node.value, ast.Name) and node.value.id == "sys":
                edits.append(f"{path.relative_to(BENCH.parent)}:{node.lineno}")
    assert edits == []
