"""Search and index at scale: `chatloop search` against `rg -il` and `grep -ril`.

For each size (default 1,000 and 10,000 sessions, about 75 KB each) writes the
sessions closed with their summary, as chatloop's finalize leaves them; their
messages are drawn from a Zipf-like vocabulary of 20,000 made-up words plus
English filler, with one common word (in about 80% of sessions) and one rare
word (in 1%). The chatloop timed is the one installed beside this interpreter
(not a shim first on PATH). Then:

- `chatloop reindex`, CPU (user + system) beside wall, against the floor that
  bench/fts_floor.py measures on the same files in the same run (reading the
  words, inserting them into FTS5, one merge); then the same words read in the
  background after the index is lost (`chatloop.store.index_text`, after a
  glance), against the same floor; index.db as a share of the sessions' size;
- for each word, runs interleaved A B C D E (chatloop search with default
  output, chatloop search listing every hit, `rg -il`, `grep -ril`, `python -c
  pass`: whole processes, page cache warm), wall and CPU medians, the load
  average, how many hits each side printed, and the ratios chatloop ÷ rg taken
  pair by pair (below 1: chatloop is faster);
- the same sessions as `grep -rilw` (whole words, as chatloop searches);
- peak RSS of the reindex, of the background read and of a search (GNU time).

The listing (`chatloop sessions` against `ls -l`) is bench/listing.py's.

    python -m bench.search                    # 1,000 and 10,000 sessions, 5 rounds
    python -m bench.search --sessions 500 --rounds 3
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
from pathlib import Path

from bench.corpus import COMMON, RARE, write_sessions
from bench.fts_floor import measure as fts
from bench.rows import Report, print_row
from bench.timing import CHATLOOP
from chatloop.format import skim
from chatloop.store.store import Store


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
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, str]]:
    """Wall and CPU seconds of each command, ``rounds`` times, run in turn
    (A B C A B C) after one untimed run of each (page cache warm, the index
    checked), and the output of that first run."""
    outs = {name: timed(cmd, cwd, env)[2] for name, cmd in cmds.items()}
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(rounds):
        for name, cmd in cmds.items():
            wall, cpu, _ = timed(cmd, cwd, env)
            walls[name].append(wall)
            cpus[name].append(cpu)
    return walls, cpus, outs


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


def floor_cpu(folder: Path) -> float:
    """CPU seconds of the floor under a build of ``folder``'s sessions
    (bench/fts_floor.py): reading their words with the format's skim, inserting them
    into a contentless ``detail=full`` FTS5 table in one transaction, one merge; no
    journal, nothing of the index's own rows or batches."""
    started = time.process_time()
    texts = [skim(p.read_bytes(), p.stem).text for p in sorted(folder.iterdir())]
    read = time.process_time() - started
    with tempfile.TemporaryDirectory() as where:
        inserted, merged, _, _ = fts("detail=full", texts, Path(where))
    return read + inserted + merged


def lose_index(home: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (home / f"index.db{suffix}").unlink(missing_ok=True)


GLANCE_ONLY = (  # a sync that glances, without starting the process that reads the words
    "import sys; from pathlib import Path; from chatloop.store import index_build; "
    "from chatloop.store.index_file import IndexFile; from chatloop.store.store import Store; "
    "f = IndexFile(Path(sys.argv[1]) / 'index.db'); index_build.sync(f, Store(Path(sys.argv[1])))"
)


def measure(sessions: int, rounds: int, text: str, report: Report) -> None:
    """Write the sessions, then time the builds against the floor and both searches
    against their baselines; each figure goes to ``report(figure, ours, baseline,
    ratio, target, met)``, the ratio chatloop ÷ baseline (below 1: chatloop is
    faster), each taken pair by pair from interleaved runs."""
    chatloop, rg = [CHATLOOP], shutil.which("rg")
    if rg is None:
        raise SystemExit("needs rg (ripgrep): `apt install ripgrep` (Debian)")
    python = [sys.executable, "-c", "pass"]  # the floor under any Python command
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
            f"{time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.2f}; "
            f"chatloop: {' '.join(chatloop)}",
            flush=True,
        )
        floor = floor_cpu(folder)
        wall, cpu, _ = timed([*chatloop, "reindex"], cwd, env)
        db = (home / "index.db").stat().st_size
        rss = peak_rss([*chatloop, "reindex"], cwd, env)
        report(
            f"reindex {sessions:,} sessions ({size / 1e6:,.0f} MB), CPU",
            f"{cpu:.1f} s CPU ({wall:.1f} s wall; peak RSS {rss})",
            f"floor {floor:.1f} s CPU (bench/fts_floor.py, same files)",
            cpu / floor,
            "<= 1.2x the floor",
            cpu <= 1.2 * floor,
        )
        lose_index(home)
        subprocess.run([sys.executable, "-c", GLANCE_ONLY, str(home)], env=env, check=True)
        texter = [sys.executable, "-m", "chatloop.store.index_text", str(home)]
        wall, cpu, _ = timed(texter, cwd, env)
        lose_index(home)
        subprocess.run([sys.executable, "-c", GLANCE_ONLY, str(home)], env=env, check=True)
        rss = peak_rss(texter, cwd, env)
        report(
            "  the words read in the background after the index is lost, CPU",
            f"{cpu:.1f} s CPU ({wall:.1f} s wall; peak RSS {rss})",
            f"floor {floor:.1f} s CPU",
            cpu / floor,
            "<= 1.2x the floor",
            cpu <= 1.2 * floor,
        )
        db = (home / "index.db").stat().st_size
        report(
            "index.db / sessions",
            f"{db / 1e6:,.0f} MB ({db / size:.1%})",
            f"sessions {size / 1e6:,.0f} MB",
            db / size,
            "<= 35% (issue 34)",
            db / size <= 0.35,
        )
        for label, word in (("common", COMMON), ("rare", RARE)):
            every = str(sessions)
            cmds = {
                "chatloop": [*chatloop, "search", word],
                "chatloop all": [*chatloop, "search", word, "--limit", every],
                "rg": [rg, "-il", word, str(folder)],
                "grep": ["grep", "-ril", word, str(folder)],
                "python": python,
            }
            times, cpus, outs = interleaved(cmds, rounds, cwd, env)
            found = timed([*chatloop, "search", word, "--json", "--limit", every], cwd, env)[2]
            ours = {hit["id"] for hit in json.loads(found)}
            theirs = {
                Path(p).stem
                for p in timed(["grep", "-rilw", word, str(folder)], cwd, env)[2].split()
            }
            median = {name: statistics.median(t) * 1000 for name, t in times.items()}
            cpu_ms = {name: statistics.median(t) * 1000 for name, t in cpus.items()}
            shown = _hit_lines(outs["chatloop"])
            listed = len(outs["rg"].split())
            print(
                f"  {label} word: load average {os.getloadavg()[0]:.2f}; python -c pass "
                f"{median['python']:.0f} ms wall (the floor under any Python command)",
                flush=True,
            )
            default_target = 1.0 if sessions < 5000 else 0.5  # (issue 34: 1,000 and 10,000)
            for name, what, target in (
                ("chatloop", f"default output: {shown} hits printed", default_target),
                ("chatloop all", f"every hit: {_hit_lines(outs['chatloop all'])} printed", 2.0),
            ):
                ratio = statistics.median(
                    c / r for c, r in zip(times[name], times["rg"], strict=True)
                )
                report(
                    f"search, {label} word ({len(theirs):,} sessions), {what}",
                    f"{median[name]:.0f} ms wall, {cpu_ms[name]:.0f} ms CPU",
                    f"rg -il {median['rg']:.0f} ms wall, {cpu_ms['rg']:.0f} ms CPU, "
                    f"{listed:,} files (grep -ril {median['grep']:.0f} ms)",
                    ratio,
                    f"<= {target}x rg",
                    ratio <= target,
                )
            report(
                f"  same sessions as grep -rilw, {label} word",
                f"{len(ours):,}",
                f"{len(theirs):,}",
                None,
                "identical",
                ours == theirs,
            )
        rss = peak_rss([*chatloop, "search", COMMON], cwd, env)
        print(f"  peak RSS of a search: {rss}", flush=True)


def _hit_lines(out: str) -> int:
    """The hits a search printed (its lines but the one saying how many more match)."""
    return sum(1 for line in out.splitlines() if line and not line.startswith("…"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sessions", default="1000,10000", help="sizes, comma-separated (default 1000,10000)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--text",
        choices=("zipf", "prose"),
        default="zipf",
        help="made-up Zipf vocabulary (default), or sentences of docs/",
    )
    args = parser.parse_args()
    for size in (int(n) for n in args.sessions.split(",")):
        measure(size, args.rounds, args.text, print_row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
