"""The person first (issue 45): bench/person.py's rows."""

from __future__ import annotations

from bench.figure import Context, Figure
from bench.person import measure as person_rows
from bench.rows import Row, Rows


def person_first(ctx: Context) -> list[Row]:
    """bench/person.py (issue 45): a new chat's banner and first token right after a
    one-shot against nothing running, the first session's summary landing once the
    person stops, summaries saved cut, Enter to the first token against a minimal
    httpx loop; a scripted one-slot server that queues (``--quick``: one pair, 2 s
    summaries, 1 s ``background_idle``, the mid-summary variant)."""
    rows = Rows()
    if ctx.quick:
        found = person_rows(1, 2.0, 1.0, 5, ("mid-summary",), show=False)
    else:
        found = person_rows(3, 30.0, 3.0, 15, show=False)
    for row in found:
        rows.add(row.what, row.ours, row.baseline, row.ratio, row.target, row.met)
    return rows.rows


FIGURE = Figure("person", "the person first", person_first)
