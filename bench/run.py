"""chatloop's benchmark: every figure against a baseline measured in the same run.

    python -m bench.run            the full run (peers installed from PyPI, 10,000 sessions)
    python -m bench.run --quick    small sizes, no peers (what CI runs to keep this alive)

Prints a table of medians and ratios and writes bench/RESULTS.md. Machines
here are noisy, so every figure is a median of several runs and is reported
as a ratio to something measured minutes earlier on the same machine.
bench/README.md explains each figure.

This module is the registry: ``FIGURES`` lists the figures in the order they run,
one module each under ``bench/figures/`` (``bench.figure`` says what they share). A
new figure is a module there and its line here.
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from bench.figure import Context, Figure
from bench.figures import (
    appends,
    chain,
    compaction,
    corpus,
    file_format,
    person,
    recall,
    resume,
    startup,
    streaming,
    waits,
)
from bench.rows import Row

FIGURES: tuple[Figure, ...] = (
    startup.FIGURE,
    appends.FIGURE,
    corpus.FIGURE,
    resume.FIGURE,
    compaction.FIGURE,
    chain.FIGURE,
    recall.FIGURE,
    file_format.FIGURE,
    streaming.FIGURE,
    waits.FIGURE,
    person.FIGURE,
)
PEERS = ("basic-agent-chat-loop", "llm")
HERE = Path(__file__).resolve().parent


def install_peers(folder: Path) -> Path | None:
    if (folder / "bin" / "chat_loop").exists() and (folder / "bin" / "llm").exists():
        return folder
    print(f"  installing the peers into {folder} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    done = subprocess.run(
        [str(folder / "bin" / "pip"), "install", "-q", *PEERS],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        print("  could not install the peers; their figures are skipped")
        return None
    return folder


def write_results(
    args: argparse.Namespace, ctx: Context, rows: list[Row], load: float, seconds: float
) -> None:
    lines = [
        "# Benchmark results",
        "",
        f"- command: `python -m bench.run{' --quick' if args.quick else ''}"
        f"{' --only ' + args.only if args.only else ''}`",
        f"- date: {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}",
        f"- run time: {seconds:.0f} s; medians of {ctx.runs} runs unless stated",
        f"- load average (1 min): {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end",
        "- every ratio is chatloop ÷ baseline, taken pair by pair from runs interleaved "
        "A B A B (below 1: chatloop is faster or smaller); bytecode compiled first",
        "",
        "| figure | chatloop | baseline (same run) | ratio | target | met |",
        "| --- | --- | --- | --- | --- | --- |",
        *(
            f"| {r.figure} | {r.ours} | {r.baseline} | {r.ratio} | {r.target} | {r.met} |"
            for r in rows
        ),
        "",
        "bench/README.md explains each figure and how to read the ratios.",
    ]
    out = Path(args.output)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"\nwrote {out}")


def main() -> int:
    if shutil.which("grep") is None:
        sys.exit("python -m bench.run needs grep on PATH")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, no peers (for CI)")
    parser.add_argument("--sessions", type=int, help="sessions for listing/search/reindex")
    parser.add_argument("--output", default=str(HERE / "RESULTS.md"), help="results file")
    parser.add_argument(
        "--only",
        choices=[figure.name for figure in FIGURES],
        help="run only this figure "
        "(format: parse MB/s, reindex/search/show/export/resume on one "
        "big file, markup ratio)",
    )
    parser.add_argument(
        "--peers-venv",
        default=str(Path(tempfile.gettempdir()) / "chatloop-bench-peers"),
        help="where the peers are installed",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    load = os.getloadavg()[0]
    import chatloop as package

    compileall.compile_dir(str(Path(package.__file__).parent), quiet=1)  # as installed
    print(f"load average {load:.2f}")
    chosen = [figure for figure in FIGURES if args.only in (None, figure.name)]
    wanted = not args.quick and any(figure.peers for figure in chosen)
    ctx = Context(
        quick=args.quick,
        runs=3 if args.quick else 7,
        sessions=args.sessions,
        peers=install_peers(Path(args.peers_venv)) if wanted else None,
    )
    rows: list[Row] = []
    for figure in chosen:
        if figure.heading:
            print(figure.heading)
        rows += figure.run(ctx)
    write_results(args, ctx, rows, load, time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
