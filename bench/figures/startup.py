"""Start-up: ``chatloop --version`` and the ``you>`` prompt drawn, against ``python -c
pass``, a bare prompt_toolkit prompt and the peers (bench/startup.py's comparisons)."""

from __future__ import annotations

import compileall
import functools
import os
import statistics
import tempfile
from pathlib import Path

from bench.figure import Context, Figure
from bench.rows import Row, Rows
from bench.startup import BARE, pairs, run, until_prompt
from bench.stream import Script, serve
from bench.timing import CHATLOOP, PYTHON, ms, paired


def startup(ctx: Context) -> list[Row]:
    """bench/startup.py's comparisons, interleaved A B A B, ratios taken pair by pair."""
    runs, peers, rows = ctx.runs, ctx.peers, Rows()
    env = {**os.environ, "CHATLOOP_CONFIG": "", "TERM": "xterm"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    server, url = serve(Script())
    with tempfile.TemporaryDirectory() as tmp:
        env["CHATLOOP_HOME"] = str(Path(tmp) / "home")
        bare = Path(tmp) / "bare_prompt.py"
        bare.write_text(BARE)
        compileall.compile_file(str(bare), quiet=1)
        quick = max(runs, 7) * 3  # 30 ms each: three times the pairs, for a steadier median
        ours, theirs = pairs(
            lambda: run([CHATLOOP, "--version"], env),
            lambda: run([PYTHON, "-c", "pass"], env),
            quick,
        )
        ratio = paired(ours, theirs)
        rows.add(
            f"start-up: chatloop --version ({quick} pairs)",
            ms(statistics.median(ours)),
            f"python -c pass {ms(statistics.median(theirs))}",
            ratio,
            "<= 1.3x",
            ratio <= 1.3,
        )
        banner: list[float] = []
        ours, theirs = pairs(
            lambda: until_prompt(
                [CHATLOOP, "--base-url", url, "--model", "bench"],
                env,
                "/help for commands",
                banner,
            ),
            lambda: until_prompt([PYTHON, str(bare)], env),
            runs,
        )
        ratio = paired(ours, theirs)
        rows.add(
            "start-up: you> prompt drawn (pty)",
            ms(statistics.median(ours)),
            f"bare prompt_toolkit {ms(statistics.median(theirs))}",
            ratio,
            "<= 1.2x",
            ratio <= 1.2,
        )
        ready = paired(banner[1:], theirs)  # banner[0]: the untimed warm-up's
        rows.add(
            "  same, until the banner (agent, backend and server check loaded)",
            ms(statistics.median(banner[1:])),
            f"bare prompt_toolkit {ms(statistics.median(theirs))}",
            ready,
            "(reported)",
            None,
        )
        for name, cmd in (("chat_loop --version", "chat_loop"), ("llm --version", "llm")):
            if peers is None:
                break
            peer = [str(peers / "bin" / cmd), "--version"]
            ours, theirs = pairs(
                lambda: run([CHATLOOP, "--version"], env), functools.partial(run, peer, env), runs
            )
            ratio = paired(ours, theirs)
            rows.add(
                f"start-up: chatloop --version vs {name}",
                ms(statistics.median(ours)),
                ms(statistics.median(theirs)),
                ratio,
                "< 1x (faster)",
                ratio < 1,
            )
    server.shutdown()
    return rows.rows


FIGURE = Figure("startup", "start-up", startup, peers=True)
