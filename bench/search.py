"""Search and index at scale: `chatloop search` against `rg -il` and `grep -ril`.

Writes N sessions (default 10,000, about 100 KB each) whose messages are drawn
from a Zipf-like vocabulary of 20,000 made-up words plus English filler, with
one common word (in about 80% of sessions) and one rare word (in 1%). Then:

- `chatloop reindex`: wall time, and CPU time of the process (user + system,
  its workers included), index.db as a share of the sessions' size;
- for each word, runs interleaved C R G C R G (chatloop search with default
  output, `rg -il`, `grep -ril`, whole processes, page cache warm), medians and
  the ratio chatloop ÷ rg taken pair by pair (below 1: chatloop is faster);
- the same sessions as `grep -rilw` (whole words, as chatloop searches);
- peak RSS of one run of each chatloop command (GNU time).

The listing (`chatloop sessions` against `ls -l`) is bench/listing.py's.

    python bench/search.py                    # 10,000 sessions, 5 rounds
    python bench/search.py --sessions 500 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from chatloop.format import Message, Session, SessionMeta, Usage, render_markdown
from chatloop.store.store import Store

COMMON, RARE = "harbourmaster", "zebracornqq"
FILLER = [
    "the",
    "and",
    "of",
    "to",
    "a",
    "in",
    "is",
    "that",
    "it",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
    "this",
    "be",
    "from",
    "or",
    "have",
    "not",
    "are",
    "but",
    "an",
    "they",
    "which",
    "one",
    "you",
    "were",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
]


def vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(4, 10))) for _ in range(20000)]


def texts(rng: random.Random, words: list[str], count: int) -> list[str]:
    """``count`` message texts of 80-400 words: filler and Zipf-weighted vocabulary."""
    weights = [1 / (rank + 1) for rank in range(len(words))]
    out = []
    for _ in range(count):
        n = rng.randint(80, 400)
        picked = rng.choices(words, weights, k=n)
        out.append(" ".join(w if rng.random() < 0.6 else rng.choice(FILLER) for w in picked))
    return out


def prose(rng: random.Random, count: int) -> list[str]:
    """``count`` message texts of real English: runs of sentences from this project's
    documentation (docs/, README.md), for the index size of natural text."""
    root = Path(__file__).resolve().parent.parent
    sentences = [
        s.strip()
        for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
        for s in p.read_text(encoding="utf-8").replace("\n", " ").split(". ")
        if len(s.split()) > 3
    ]
    out = []
    for _ in range(count):
        start = rng.randrange(len(sentences))
        out.append(". ".join(sentences[start : start + rng.randint(3, 15)]))
    return out


def write_sessions(folder: Path, count: int, rng: random.Random, natural: bool = False) -> int:
    pool = prose(rng, 400) if natural else texts(rng, vocabulary(rng), 400)
    folder.mkdir(parents=True)
    total = 0
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(count):
        at = start + timedelta(minutes=i)
        messages = []
        for q in range(rng.randint(20, 45)):
            user = rng.choice(pool)[:600]
            if q == 3 and rng.random() < 0.8:
                user = f"{user} {COMMON}"
            if q == 5 and i % 100 == 0:
                user = f"{user} {RARE}"
            messages.append(Message.create("user", at, text=user))
            messages.append(
                Message.create(
                    "assistant", at, text=rng.choice(pool), usage=Usage(300, 120), duration=1.0
                )
            )
        meta = SessionMeta(
            id=f"{at:%Y%m%d-%H%M%S}-{i:08x}",
            created=at,
            updated=at,
            agent="Bench",
            status="closed",
            queries=len(messages) // 2,
        )
        data = render_markdown(Session(meta, tuple(messages)))
        (folder / f"{meta.id}.md").write_bytes(data)
        total += len(data)
    return total


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds of the child (and its children), and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True).stdout
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out


def interleaved(
    cmds: dict[str, list[str]], rounds: int, cwd: Path, env: dict[str, str]
) -> dict[str, list[float]]:
    """Wall seconds of each command, ``rounds`` times, run in turn (A B C A B C) after
    one untimed run of each (page cache warm, the index checked)."""
    for cmd in cmds.values():
        timed(cmd, cwd, env)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(rounds):
        for name, cmd in cmds.items():
            times[name].append(timed(cmd, cwd, env)[0])
    return times


Report = Callable[[str, str, str, "float | None", str, "bool | None"], None]


def print_row(
    figure: str, ours: str, baseline: str, ratio: float | None, target: str, met: bool | None
) -> None:
    """A ``Report`` that prints one row: the figure, both sides, the ratio, the verdict."""
    shown = "" if ratio is None else f" → {ratio:.2f}x"
    mark = "n/a" if met is None else ("met" if met else "MISSED")
    print(f"{figure}: {ours} vs {baseline}{shown} ({target}: {mark})", flush=True)


TIME = Path("/usr/bin/time")  # GNU time: one child's peak RSS


def peak_rss(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    """The peak RSS of one run of ``cmd`` (GNU time), as text; "?" without GNU time."""
    if not TIME.exists():
        return "?"
    done = subprocess.run(
        [str(TIME), "-f", "%M", *cmd],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return f"{int(done.stderr.strip().splitlines()[-1]) / 1024:.0f} MB"


def measure(sessions: int, rounds: int, text: str, report: Report) -> None:
    """Write the sessions, then time reindex and both searches against
    their baselines; each figure goes to ``report(figure, ours, baseline, ratio,
    target, met)``, the ratio chatloop ÷ baseline (below 1: chatloop is faster)."""
    chatloop, rg = shutil.which("chatloop"), shutil.which("rg")
    if chatloop is None or rg is None:
        raise SystemExit(
            "needs chatloop and rg (ripgrep) on PATH: `pip install -e .` for "
            "chatloop, `apt install ripgrep` (Debian) for rg"
        )
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as tmp:
        home, cwd = Path(tmp) / "home", Path(tmp) / "proj"
        cwd.mkdir()
        env = {**os.environ, "CHATLOOP_HOME": str(home), "CHATLOOP_CONFIG": ""}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        folder = Store(home, cwd=cwd).project_dir
        started = time.perf_counter()
        size = write_sessions(folder, sessions, rng, natural=text == "prose")
        print(
            f"  {sessions:,} sessions ({text}), {size / 1e6:,.0f} MB, written in "
            f"{time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        wall, cpu, _ = timed([chatloop, "reindex"], cwd, env)
        db = (home / "index.db").stat().st_size
        rss = peak_rss([chatloop, "reindex"], cwd, env)
        report(
            f"reindex {sessions:,} sessions ({size / 1e6:,.0f} MB)",
            f"{cpu:.1f} s CPU ({wall:.1f} s wall; peak RSS {rss})",
            "",
            None,
            "<= 6 s CPU",
            cpu <= 6,
        )
        report(
            "index.db / sessions",
            f"{db / 1e6:,.0f} MB ({db / size:.1%})",
            f"sessions {size / 1e6:,.0f} MB",
            db / size,
            "<= 15%",
            db / size <= 0.15,
        )
        for label, word in (("common", COMMON), ("rare", RARE)):
            cmds = {
                "chatloop": [chatloop, "search", word],
                "rg": [rg, "-il", word, str(folder)],
                "grep": ["grep", "-ril", word, str(folder)],
            }
            times = interleaved(cmds, rounds, cwd, env)
            ratio = statistics.median(
                c / r for c, r in zip(times["chatloop"], times["rg"], strict=True)
            )
            found = timed([chatloop, "search", word, "--json", "--limit", "100000"], cwd, env)[2]
            ours = {hit["id"] for hit in json.loads(found)}
            theirs = {
                Path(p).stem
                for p in timed(["grep", "-rilw", word, str(folder)], cwd, env)[2].split()
            }
            median = {name: statistics.median(t) * 1000 for name, t in times.items()}
            rss = peak_rss([chatloop, "search", word], cwd, env)
            report(
                f"search, {label} word ({len(theirs):,} sessions)",
                f"{median['chatloop']:.0f} ms (peak RSS {rss})",
                f"rg -il {median['rg']:.0f} ms (grep -ril {median['grep']:.0f} ms)",
                ratio,
                "< 1x rg, same hits as grep -rilw",
                ratio < 1 and ours == theirs,
            )
            report(
                f"  same sessions as grep -rilw, {label} word",
                f"{len(ours):,}",
                f"{len(theirs):,}",
                None,
                "identical",
                ours == theirs,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--text",
        choices=("zipf", "prose"),
        default="zipf",
        help="made-up Zipf vocabulary (default), or sentences of docs/",
    )
    args = parser.parse_args()

    measure(args.sessions, args.rounds, args.text, print_row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
