"""Start-up you feel: chatloop against the strongest baselines, in the same run.

- `chatloop --version` against `python -c pass` (the interpreter's own start);
- the `you>` prompt drawn by `chatloop` in a pseudo-terminal against a bare
  prompt_toolkit `PromptSession().prompt()` script, both timed from exec to the
  prompt on the screen, cursor-position requests answered, `delaybeforesend=0`.

Every pair runs interleaved A B A B; bytecode is compiled for both before timing
(chatloop's package and the baseline script alike); each ratio is chatloop ÷
baseline taken pair by pair, and the medians are printed with the load average.
The chat talks to bench/stream.py's scripted OpenAI-compatible server on
127.0.0.1 (it lists one model), so what is timed is chatloop's own start, not a
model's.

    python -m bench.startup              # 15 pairs each
    python -m bench.startup --pairs 5
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pexpect

from bench.stream import Script, leave, serve
from bench.timing import CHATLOOP

BARE = """\
from prompt_toolkit import PromptSession
PromptSession().prompt("you> ")
"""


def until_prompt(
    cmd: list[str], env: dict[str, str], ready: str | None = None, times: list[float] | None = None
) -> float:
    """Seconds from exec to ``you>`` on the screen; with ``ready``, then on to that text
    (chatloop's banner: the chat can start), its seconds appended to ``times``; then
    Ctrl-D and wait for the end."""
    started = time.perf_counter()
    child = pexpect.spawn(
        cmd[0], cmd[1:], env=env, encoding="utf-8", timeout=60, dimensions=(24, 80)
    )
    child.delaybeforesend = 0
    while child.expect_exact(["you>", "\x1b[6n"]) == 1:
        child.send("\x1b[1;1R")
    took = time.perf_counter() - started
    if ready is not None:
        while child.expect_exact([ready, "\x1b[6n"]) == 1:
            child.send("\x1b[1;1R")
        if times is not None:
            times.append(time.perf_counter() - started)
    leave(child)
    child.close()
    return took


def run(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def pairs(
    first: Callable[[], float], second: Callable[[], float], count: int
) -> tuple[list[float], list[float]]:
    """``count`` timings of each, interleaved A B A B, after one untimed warm-up of each."""
    first()
    second()
    ours, theirs = [], []
    for _ in range(count):
        ours.append(first())
        theirs.append(second())
    return ours, theirs


def report(
    label: str, ours: list[float], theirs: list[float], baseline: str, target: float
) -> None:
    ratio = statistics.median(o / t for o, t in zip(ours, theirs, strict=True))
    print(
        f"{label}: chatloop {statistics.median(ours) * 1000:.0f} ms, {baseline} "
        f"{statistics.median(theirs) * 1000:.0f} ms; chatloop ÷ {baseline} {ratio:.2f}x "
        f"(target <= {target}: {'met' if ratio <= target else 'MISSED'})",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15)
    args = parser.parse_args()
    chatloop = CHATLOOP
    import chatloop as package

    compileall.compile_dir(str(Path(package.__file__).parent), quiet=1)
    server, url = serve(Script())
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_prompt.py"
        bare.write_text(BARE)
        compileall.compile_file(str(bare), quiet=1)
        env = {
            **os.environ,
            "CHATLOOP_HOME": str(Path(tmp) / "home"),
            "CHATLOOP_CONFIG": "",
            "TERM": "xterm",
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        print(f"load average {os.getloadavg()[0]:.2f}; {args.pairs} pairs each", flush=True)
        ours, theirs = pairs(
            lambda: run([chatloop, "--version"], env),
            lambda: run([sys.executable, "-c", "pass"], env),
            args.pairs,
        )
        report("--version", ours, theirs, "python -c pass", 1.3)
        ours, theirs = pairs(
            lambda: until_prompt([chatloop, "--base-url", url, "--model", "bench"], env),
            lambda: until_prompt([sys.executable, str(bare)], env),
            args.pairs,
        )
        report("prompt drawn", ours, theirs, "bare prompt_toolkit", 1.2)
        print(f"load average {os.getloadavg()[0]:.2f} at the end", flush=True)
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
