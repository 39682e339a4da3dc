"""What SQLite's FTS5 alone costs on this machine: the floor under `chatloop reindex`.

Writes N sessions the way bench/search.py does (default 1,000, about 75 MB), reads
their searchable text into memory (what ``chatloop reindex`` inserts: the words of
every message, no markup, read by ``chatloop.format.skim`` before anything is
timed), then inserts it into contentless FTS5 tables of each ``detail`` level
(``full``: positions, what bm25 needs; ``column`` and ``none``: no positions), and
at ``full`` with the two other tokenizers SQLite has (``ascii``, and
``unicode61`` keeping diacritics). Reports, per table, the CPU seconds of the
inserts and of the final merge, scaled to 10,000 sessions, the table's size as a
share of the text, and whether bm25 ranks anything (distinct scores for a common
word). Nothing of chatloop is timed: no skim, no frame scanner, no Python per
word. A design that tokenizes every word with FTS5 cannot index faster than the
fastest row, nor smaller than the smallest row that ranks.

    python -m bench.fts_floor                 # 1,000 sessions, 3 rounds (medians)
    python -m bench.fts_floor --sessions 300 --rounds 1
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.corpus import COMMON, write_sessions  # the same corpus as bench/search.py
from chatloop.format import skim

TABLES = {  # label: the options of the FTS5 table after its column
    "full": "detail=full",
    "column": "detail=column",
    "none": "detail=none",
    "full, ascii": "detail=full, tokenize='ascii'",
    "full, unicode61 keeping diacritics": "detail=full, tokenize='unicode61 remove_diacritics 0'",
}


def measure(options: str, texts: list[bytes], where: Path) -> tuple[float, float, float, int]:
    """CPU seconds of the inserts and of the merge, the file's size, distinct scores."""
    path = where / "floor.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=off")
    db.execute("PRAGMA synchronous=off")
    db.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, content='', {options})")
    started = time.process_time()
    with db:
        db.executemany(
            "INSERT INTO t(rowid, text) VALUES (?, ?)",
            ((i, text) for i, text in enumerate(texts, 1)),
        )
    inserted = time.process_time() - started
    started = time.process_time()
    db.execute("INSERT INTO t(t) VALUES ('optimize')")
    db.commit()
    merged = time.process_time() - started
    try:
        scores = {row[0] for row in db.execute("SELECT bm25(t) FROM t WHERE t MATCH ?", (COMMON,))}
    except sqlite3.Error:
        scores = set()
    db.execute("VACUUM")
    db.close()
    return inserted, merged, float(path.stat().st_size), len(scores)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chatloop-fts-floor-") as tmp:
        where = Path(tmp)
        files = write_sessions(where / "sessions", args.sessions, random.Random(11))
        paths = sorted((where / "sessions").iterdir())
        started = time.process_time()
        texts = [skim(p.read_bytes(), p.stem).text for p in paths]
        skimmed = time.process_time() - started
        size = sum(map(len, texts))
        scale = 10_000 / args.sessions
        print(
            f"{args.sessions:,} sessions, {files / 1e6:.1f} MB, {size / 1e6:.1f} MB of "
            f"searchable text; SQLite {sqlite3.sqlite_version}; "
            f"load average {os.getloadavg()[0]:.2f}"
        )
        print(
            f"reading them (chatloop.format.skim, one process): {skimmed * scale:.1f} s of "
            "CPU at 10,000 (what reindex spends besides SQLite)"
        )
        runs: dict[str, list[tuple[float, float, float, int]]] = {}
        for _ in range(args.rounds):  # the tables interleaved, round after round
            for label, options in TABLES.items():
                runs.setdefault(label, []).append(measure(options, texts, where))
                (where / "floor.db").unlink()
        print(f"medians of {args.rounds} rounds")
        print(
            "| table | insert, CPU s at 10,000 | merge, CPU s at 10,000 | size / text "
            "| bm25 ranks |"
        )
        print("| --- | --- | --- | --- | --- |")
        for detail, results in runs.items():
            inserted = statistics.median(r[0] for r in results)
            merged = statistics.median(r[1] for r in results)
            _, _, bytes_, scores = results[0]
            print(
                f"| {detail} | {inserted * scale:.1f} | {merged * scale:.1f} | "
                f"{bytes_ / size:.1%} | {'yes' if scores > 1 else 'no'} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
