"""bench/person.py's row 3: Enter to the first token on screen in a chat against a
minimal loop, turns interleaved, against the scripted server answering at once."""

from __future__ import annotations

import compileall
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyte

from bench.person_server import FIRST, Log, queueing_server
from bench.person_term import Term, banner, environment, prompt_drawn, settle, turn_ended
from bench.timing import CHATLOOP, cpu_seconds

LOOP = '''"""A minimal chat loop: one httpx.Client kept open, a streamed POST a turn."""
import json
import sys

import httpx

url, model = sys.argv[1], sys.argv[2]
client = httpx.Client(timeout=None)
messages = []
while True:
    try:
        line = input("you> ")
    except EOFError:
        break
    messages.append({"role": "user", "content": line})
    said = []
    body = {"model": model, "messages": messages, "stream": True}
    with client.stream("POST", url + "/chat/completions", json=body) as reply:
        for raw in reply.iter_lines():
            if not raw.startswith("data: ") or raw == "data: [DONE]":
                continue
            choices = json.loads(raw[6:]).get("choices") or [{}]
            piece = choices[0].get("delta", {}).get("content")
            if piece:
                said.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()
    print()
    messages.append({"role": "assistant", "content": "".join(said)})
'''


@dataclass
class Turns:
    """Row 3: Enter to the first token on screen (s) and CPU per turn (s), each side."""

    ours: list[float] = field(default_factory=list)
    loop: list[float] = field(default_factory=list)
    ours_cpu: float = 0.0
    loop_cpu: float = 0.0
    requests: list[int] = field(default_factory=list)
    ours_sent: list[float] = field(default_factory=list)  # Enter to the request at the server
    loop_sent: list[float] = field(default_factory=list)


def enter_to_token(
    term: Term, text: str, back: Callable[[pyte.Screen], bool], log: Log | None = None
) -> tuple[float, float]:
    """Seconds from sending ``text`` to its reply's first token on the screen (then on
    to the prompt back, ``back``), and from sending it to its request at the scripted
    server (``log``'s first ``queued`` after it; 0 without ``log``)."""
    term.screen.reset()
    before = len(log.events) if log is not None else 0
    started = time.monotonic()
    term.child.sendline(text)
    seen = term.until(lambda screen: any(FIRST in line for line in screen.display))
    term.until(back)
    arrived = started
    if log is not None:
        arrived = next(t for t, e, _ in log.events[before:] if e == "queued")
    return seen - started, arrived - started


def turns(count: int) -> Turns:
    """``count`` turns of a chat and of the minimal loop, interleaved, after one untimed
    turn each (the chat's first turn asks for a title), against the scripted server."""
    found = Turns()
    with queueing_server(1.0) as (url, log), tempfile.TemporaryDirectory() as tmp:
        home, cwd = Path(tmp, "home"), Path(tmp, "project")
        cwd.mkdir()
        script = Path(tmp, "person_loop.py")
        script.write_text(LOOP)
        compileall.compile_file(str(script), quiet=1)
        env = environment(home, 0.5, False)  # (no session ends before the last turn)
        chat = Term(CHATLOOP, ["--base-url", url, "--model", "bench"], env, str(cwd))
        chat.until(prompt_drawn)
        chat.until(banner)
        # imported, not run by path, so that its compiled bytecode is used as chatloop's is
        beside = [tmp, *filter(None, [env.get("PYTHONPATH")])]
        loop_env = {**env, "PYTHONPATH": os.pathsep.join(beside)}
        loop = Term(sys.executable, ["-c", "import person_loop", url, "bench"], loop_env, str(cwd))
        loop.until(prompt_drawn)
        prompt_back = prompt_drawn
        enter_to_token(chat, "message 0", turn_ended(1))
        enter_to_token(loop, "message 0", prompt_back)
        ours_cpu = loop_cpu = 0.0
        for n in range(1, count + 1):
            asked = len(log.events)
            cpu = cpu_seconds(chat.child.pid)
            seen, sent = enter_to_token(chat, f"message {n}", turn_ended(n + 1), log)
            ours_cpu += cpu_seconds(chat.child.pid) - cpu
            found.ours.append(seen)
            found.ours_sent.append(sent)
            found.requests.append(sum(1 for _, e, _ in log.events[asked:] if e == "queued"))
            cpu = cpu_seconds(loop.child.pid)
            seen, sent = enter_to_token(loop, f"message {n}", prompt_back, log)
            loop_cpu += cpu_seconds(loop.child.pid) - cpu
            found.loop.append(seen)
            found.loop_sent.append(sent)
        found.ours_cpu, found.loop_cpu = ours_cpu / count, loop_cpu / count
        loop.leave()
        chat.leave()
        settle(home)
    return found
