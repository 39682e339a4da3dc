"""Resume preparation in this process: ``chain.read_parent`` and the restoration prompt
on a closed transcript as chatloop writes it, against a full parse of the file."""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.figure import Context, Figure
from bench.rows import Row, Rows
from bench.timing import median_time, ms
from bench.transcript import big_transcript
from chatloop.chat import chain
from chatloop.format import parse_markdown
from chatloop.store.store import Store


def resume_prep(ctx: Context) -> list[Row]:
    """``chain.read_parent`` and the restoration prompt on a closed transcript as
    chatloop writes it (its summary located in the front matter), in this process."""
    megabytes, runs, rows = 5 if ctx.quick else 100, ctx.runs, Rows()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "home", cwd=Path(tmp))
        path, _ = big_transcript(store, megabytes)
        size = path.stat().st_size

        def prepare() -> None:
            parent = chain.read_parent(store, path)
            assert parent.summary
            chain.restoration(parent, parent.summary)

        prepare()  # the modules it needs, loaded once
        ours = median_time(prepare, runs)
        full = median_time(lambda: parse_markdown(path.read_bytes()), max(1, runs // 3))
        rows.add(
            f"resume prep from {size / 1e6:,.0f} MB",
            ms(ours),
            f"full parse {ms(full)}",
            ours / full,
            "<= 0.1 s",
            ours <= 0.1,
        )
    return rows.rows


FIGURE = Figure("resume", "resume and parsing", resume_prep)
