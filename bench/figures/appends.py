"""Appends: one ``SessionWriter.append`` (write + fsync) at message 10, 1,000 and
10,000 of a session, and the seed project's ``save_conversation`` (bench/peer_seed.py,
in the peers' venv) on a session of 5,000 queries."""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

from bench.corpus import TZ, message, session
from bench.figure import Context, Figure
from bench.rows import Row, Rows
from bench.timing import ms
from chatloop.format import Session, render_markdown
from chatloop.store.store import Store

PEER_SEED = (
    Path(__file__).resolve().parent.parent / "peer_seed.py"
)  # run by path, in the peers' venv


def appends(ctx: Context) -> list[Row]:
    sizes, peers, peer_queries = [10, 100] if ctx.quick else [10, 1_000, 10_000], ctx.peers, 5_000
    rows = Rows()
    costs: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "home", cwd=Path(tmp))
        for n in sizes:
            s = session(n // 2, n)
            s = Session(s.meta, s.messages[:-1])  # no summary: still open
            store.project_dir.mkdir(parents=True, exist_ok=True)
            path = store.project_dir / f"{s.meta.id}.md"
            path.write_bytes(render_markdown(s))
            with store.open(path) as writer:
                at = datetime.now(TZ)
                items = [message("user", i, at) for i in range(30)]
                times = []
                for m in items:
                    started = time.perf_counter()
                    writer.append(m)
                    times.append(time.perf_counter() - started)
            costs[n] = statistics.median(times)
            rows.add(
                f"append message {n:,} (fsync)",
                ms(costs[n]),
                f"at message {sizes[0]}: {ms(costs[sizes[0]])}",
                costs[n] / costs[sizes[0]],
                "<= 1.2x at 10,000",
                costs[n] / costs[sizes[0]] <= 1.2 if n == sizes[-1] else None,
            )
    if peers is not None:
        out = subprocess.run(
            [
                str(peers / "bin" / "python"),
                str(PEER_SEED),
                "save",
                str(peer_queries),
                "5",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        theirs = float(out.stdout.strip())
        ours = costs[sizes[-1]]
        rows.add(
            f"persist at {peer_queries:,} queries vs seed project",
            ms(ours),
            ms(theirs),
            ours / theirs,
            "<= 0.02x (50x cheaper)",
            ours / theirs <= 0.02,
        )
    return rows.rows


FIGURE = Figure("append", "persisting", appends, peers=True)
