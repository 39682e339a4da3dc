"""The corpus: bench/search.py's figures (reindex, index size, searches against rg and
grep, the same hits as grep), bench/listing.py's (the listing against ls -l at 1,000
sessions and at ``--sessions``; the first listing after the index is lost), then the
listing against the seed project's."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench.corpus import make_sessions
from bench.figure import Context, Figure
from bench.listing import measure as listing_figures
from bench.rows import Row, Rows
from bench.search import measure as search_figures
from bench.timing import CHATLOOP, median_time, ms, paired, proc
from chatloop.store.store import Store

PEER_SEED = (
    Path(__file__).resolve().parent.parent / "peer_seed.py"
)  # run by path, in the peers' venv


def corpus(ctx: Context) -> list[Row]:
    """bench/search.py's figures (reindex, index size, searches vs rg and grep, same
    hits as grep), bench/listing.py's (the listing vs ls -l at 1,000 sessions and at
    ``count``), then the listing against the seed project's."""
    count = ctx.sessions or (300 if ctx.quick else 10_000)
    peers, runs, rows = ctx.peers, ctx.runs, Rows()
    search_figures(count, runs, "zipf", rows.add)
    listing_figures(sorted({min(1000, count), count}), max(runs, 11), rows.add)
    if peers is None:
        return rows.rows
    with tempfile.TemporaryDirectory() as tmp:
        root, cwd = Path(tmp) / "home", Path(tmp) / "proj"
        cwd.mkdir()
        store = Store(root, cwd=cwd)
        size = make_sessions(store, count, 8, "zebracornqq", every=97)
        env = {**os.environ, "CHATLOOP_HOME": str(root), "CHATLOOP_CONFIG": ""}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run(
            [CHATLOOP, "reindex"],
            cwd=cwd,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        subprocess.run(
            [
                str(peers / "bin" / "python"),
                str(PEER_SEED),
                "make",
                str(Path(tmp) / "seed"),
                str(count),
                str(size // count),
            ],
            check=True,
        )
        ours, theirs = [], []
        for _ in range(runs):  # interleaved A B A B
            ours.append(median_time(lambda: proc([CHATLOOP, "sessions"], cwd, env), 1))
            theirs.append(
                median_time(
                    lambda: proc(
                        [str(peers / "bin" / "chat_loop"), "--list-sessions"], Path(tmp) / "seed"
                    ),
                    1,
                )
            )
        ratio = paired(ours, theirs)
        rows.add(
            f"listing {count:,} vs chat_loop --list-sessions",
            ms(statistics.median(ours)),
            ms(statistics.median(theirs)),
            ratio,
            "< 1x (faster)",
            ratio < 1,
        )
    return rows.rows


FIGURE = Figure("corpus", "corpus", corpus, peers=True)
