"""Timing shared by every bench: what is timed (the chatloop beside this interpreter),
medians, pair-by-pair ratios, and whole child processes (wall time, peak RSS, CPU)."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# The chatloop installed beside this interpreter (a venv's or a pyenv version's own
# bin), never a shim found first on PATH: a pyenv shim is a shell script that costs
# more than a listing. Every bench times this one.
CHATLOOP = shutil.which("chatloop", path=str(Path(sys.executable).parent)) or "chatloop"
PYTHON = sys.executable  # the floor: the same interpreter doing nothing
TIME = Path("/usr/bin/time")  # GNU time: the peak RSS of one child


def median_time(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def proc(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    subprocess.run(
        cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 0.001 else f"{seconds * 1000:.1f} ms"


def paired(ours: list[float], theirs: list[float]) -> float:
    """The median of the pair-by-pair ratios ours ÷ theirs."""
    return statistics.median(o / t for o, t in zip(ours, theirs, strict=True))


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) of process ``pid`` so far, in clock ticks' seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wall_and_rss(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, int, str]:
    """Wall seconds, peak RSS (bytes) of the child, exit status and stderr of one run,
    stdout to /dev/null."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        if TIME.exists():
            wrapped = [str(TIME), "-f", "%M", "-o", rss.name, *cmd]
        else:
            wrapped = [
                PYTHON,
                "-c",
                "import os,sys\npid=os.fork()\nif pid==0:\n"
                " os.execvp(sys.argv[2],sys.argv[2:])\n_,st,ru=os.wait4(pid,0)\n"
                "open(sys.argv[1],'w').write(str(ru.ru_maxrss))\n"
                "sys.exit(os.waitstatus_to_exitcode(st))",
                rss.name,
                *cmd,
            ]
        started = time.perf_counter()
        done = subprocess.run(
            wrapped, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        seconds = time.perf_counter() - started
        last = (rss.read().strip().splitlines() or ["0"])[-1]
    kb = int(last) if last.isdigit() else 0
    return seconds, kb * 1024, done.returncode, done.stderr
