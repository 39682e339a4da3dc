"""What chatloop asks of a server besides the person's requests (issue 45, items 3
and 6), counted on a scripted server that records every request:

- the server's measurements (the tokenizer endpoint, the chat template's overhead,
  the window) are asked once per server and model, kept in ``<home>/probes.json``
  (``chatloop.backends.probes``), and asked again when the model changes;
- the start-up check asks nothing a busy server would queue (no generation, no
  count) before the banner, and a server that holds even its model list is not
  waited for past ``connect_timeout``;
- a turn asks the tokenizer about one text at most once the process knows the rest.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from chatloop.backends.openai_compat import OpenAICompatBackend
from tests.pty_driver import READY, chatloop_bin, environment, leave, ready, spawn, wait
from tests.scripted_server import scripted_server

if TYPE_CHECKING:  # (imported where used: this file also runs against the code before it)
    from chatloop.backends.probes import Probes

TEMPLATE = (3, 2)  # the scripted template's tokens: per message, per prompt
DISCOVERY = ("", "a b")  # the texts a tokenizer is looked for with


class Asked:
    """What one scripted server was asked: requests by method and path, the texts it
    counted, and the one-token completions (the template probes)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.counted: list[str] = []
        self.probes = 0
        self.replies = 0  # each reply says something new (no count serves twice)

    def reply(self, request: dict[str, Any]) -> str:
        if request.get("max_tokens") == 1 and not request.get("stream"):
            self.probes += 1
        self.replies += 1
        return "Basil likes sun." if self.replies == 1 else f"Basil likes sun {self.replies}."

    def clear(self) -> None:
        self.seen.clear()
        self.counted.clear()
        self.probes = 0

    @property
    def discovery(self) -> list[str]:
        return [t for t in self.counted if t in DISCOVERY]


def probes(home: Path) -> Probes:
    from chatloop.backends.probes import Probes

    return Probes(home)


def key(url: str, model: str = "scripted") -> str:
    from chatloop.backends.probes import probe_key

    return probe_key("openai", url, model, [model])


def one_shot(url: str, home: Path, cwd: Path, question: str) -> None:
    done = subprocess.run(
        [chatloop_bin(), "--base-url", url, question],
        cwd=cwd,
        env=environment(home, 12),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip().startswith("Basil likes sun")


def test_a_second_process_measures_nothing_the_first_measured(
    chatloop_home: Path, project: Path
) -> None:
    """The first one-shot looks for the tokenizer, measures the template (two one-token
    completions) and asks the window, once; the second, with the same home, asks
    none of it. The overhead kept is the one the server's template adds."""
    asked = Asked()
    with scripted_server(
        asked.reply, seen=asked.seen, tokenize=asked.counted.append, template=TEMPLATE
    ) as url:
        one_shot(url, chatloop_home, project, "Tell me about basil")
        assert asked.probes == 2 and asked.discovery == list(DISCOVERY)
        assert asked.seen.count("GET /props") == 1
        asked.clear()
        one_shot(url, chatloop_home, project, "And about mint?")
        assert asked.probes == 0 and asked.discovery == []
        assert "GET /props" not in asked.seen
    kept = probes(chatloop_home).get(key(url))
    assert kept.overhead == TEMPLATE and kept.tokenizer == "/tokenize"
    assert kept.window == 0  # the scripted server says no window: not asked again


def test_a_model_changed_on_the_same_url_is_measured_again(
    chatloop_home: Path, project: Path
) -> None:
    """The same URL serving another model file is another server to measure; going
    back to the first model measures nothing (its measurements are kept)."""
    asked = Asked()
    serving = ["basil-7b.gguf"]
    with scripted_server(
        asked.reply,
        model=lambda: serving[0],
        seen=asked.seen,
        tokenize=asked.counted.append,
        template=TEMPLATE,
    ) as url:
        one_shot(url, chatloop_home, project, "Tell me about basil")
        assert asked.probes == 2
        for model, probes in (("mint-3b.gguf", 2), ("basil-7b.gguf", 0)):
            serving[0] = model
            asked.clear()
            one_shot(url, chatloop_home, project, "And about mint?")
            assert asked.probes == probes, model
            assert len(asked.discovery) == probes, model


def test_a_damaged_file_is_ignored_and_rewritten(chatloop_home: Path) -> None:
    """Damage of any kind reads as nothing kept: the backend measures, and the file
    is whole again afterwards."""
    from chatloop.backends.probes import PROBES_NAME

    asked = Asked()
    path = chatloop_home / PROBES_NAME
    chatloop_home.mkdir(parents=True, exist_ok=True)
    with scripted_server(
        asked.reply, tokenize=asked.counted.append, template=TEMPLATE, seen=asked.seen
    ) as url:
        kept = key(url)
        for damage in (
            b"{not json",
            b"[1, 2]",
            b"\xff\xfe",
            json.dumps({"servers": {kept: {"tokenizer": "http://elsewhere/"}}}).encode(),
            json.dumps({"servers": {kept: {"overhead": [3, "two"], "window": True}}}).encode(),
        ):
            path.write_bytes(damage)
            asked.clear()
            backend = OpenAICompatBackend(url, "scripted", probes=probes(chatloop_home))
            try:
                assert backend.chat_overhead() == TEMPLATE, damage
            finally:
                backend.close()
            assert asked.probes == 2 and asked.discovery == list(DISCOVERY), damage
            assert probes(chatloop_home).get(kept).overhead == TEMPLATE
            assert json.loads(path.read_text())["version"] == 1


def test_a_probe_not_answered_in_time_is_not_kept(chatloop_home: Path) -> None:
    """A tokenizer that does not answer within the probe's bound (a busy server) is
    no tokenizer for this process only: the next one looks again."""
    release = threading.Event()

    def tokenize(text: str) -> None:
        release.wait(30)

    with scripted_server(lambda request: "Hi.", tokenize=tokenize) as url:
        backend = OpenAICompatBackend(url, "scripted", probes=probes(chatloop_home))
        try:
            assert backend.count_tokens("Tell me about basil") is None
        finally:
            release.set()
            backend.close()
        assert probes(chatloop_home).get(key(url)).tokenizer is None
        again = OpenAICompatBackend(url, "scripted", probes=probes(chatloop_home))
        try:
            assert again.count_tokens("Tell me about basil") == 4  # (a token a word)
        finally:
            again.close()
        assert probes(chatloop_home).get(key(url)).tokenizer == "/tokenize"


def test_a_server_without_a_tokenizer_is_known_as_such(chatloop_home: Path) -> None:
    """A refusal (404) is an answer: kept, so the next process asks nothing."""
    seen: list[str] = []
    with scripted_server(lambda request: "Hi.", seen=seen) as url:
        for tries in (2, 0):  # /tokenize, /extras/tokenize/count; then nothing
            seen.clear()
            backend = OpenAICompatBackend(url, "scripted", probes=probes(chatloop_home))
            try:
                assert backend.count_tokens("basil") is None
                assert backend.chat_overhead() is None
            finally:
                backend.close()
            assert len([s for s in seen if s.startswith("POST")]) == tries
    from chatloop.backends.probes import Measured

    kept = probes(chatloop_home).get(key(url))
    assert kept == Measured(tokenizer="", overhead=())


def test_the_start_up_check_asks_nothing_a_busy_server_would_queue(
    chatloop_home: Path, project: Path
) -> None:
    """Up to the banner a new chat asks only what a server answers at once (its model
    list, its properties): no generation and no count, which on a one-slot server
    wait behind the generation under way."""
    asked = Asked()
    with scripted_server(
        asked.reply, seen=asked.seen, tokenize=asked.counted.append, template=TEMPLATE
    ) as url:
        child = spawn(url, chatloop_home, project)  # (returns once the banner is up)
        try:
            before = list(asked.seen)
            child.sendline("Tell me about basil")
            wait(child, ready(1))
            leave(child)
        finally:
            child.close()
    assert before and all(s.startswith("GET ") for s in before), before
    assert Counter(asked.seen)["POST /v1/chat/completions"] >= 1


def test_a_busy_server_is_not_waited_for_at_start(chatloop_home: Path, project: Path) -> None:
    """A server that holds even its model list (llama-cpp-python queues it behind the
    generation under way): the banner comes after the check's bound, saying so, and
    the chat goes on; the first message is answered once the server is free."""
    release = threading.Event()
    seen: list[str] = []

    def models() -> bool:
        release.wait(60)
        return True

    with scripted_server(lambda request: "Basil likes sun.", models=models, seen=seen) as url:
        try:
            # the check's bound is its own (``STARTUP_CHECK_S``), not the connection's
            # timeout: with 30 s to connect the banner still comes within seconds
            child = spawn(
                url, chatloop_home, project, 12, ready_text="starting", connect_timeout="30"
            )
            child.timeout = 20  # (the check is held for 60 s: waiting for it fails here)
            wait(child, "is busy")
            wait(child, READY)
            assert not release.is_set() and all(s.startswith("GET ") for s in seen), seen
        finally:
            release.set()
        try:
            child.sendline("Tell me about basil")
            wait(child, ready(1))
            leave(child)
        finally:
            child.close()


@pytest.mark.parametrize("process", ["first", "second"])
def test_a_turn_asks_the_tokenizer_about_one_text_at_most(
    chatloop_home: Path, project: Path, process: str
) -> None:
    """Counted on the person's path, between two of their requests: the new message,
    and nothing else once the process knows the rest (a reply's length is the one
    the server reported; the system prompt was counted on the first turn)."""
    asked = Asked()
    with scripted_server(
        asked.reply, seen=asked.seen, tokenize=asked.counted.append, template=TEMPLATE
    ) as url:
        if process == "second":
            one_shot(url, chatloop_home, project, "Tell me about basil")
        child = spawn(url, chatloop_home, project)
        try:
            counts = []
            for n, line in enumerate(("Tell me about basil", "And mint?", "And thyme?")):
                asked.clear()
                child.sendline(line)
                wait(child, ready(n + 1))
                counts.append(Counter(asked.seen)["POST /tokenize"])
            leave(child)
        finally:
            child.close()
    # the first turn: the system prompt and the message (the first process ever also
    # looks for the tokenizer, "" and "a b", and counts the template probe's 3 texts)
    assert counts == [7 if process == "first" else 2, 1, 1], counts


def test_auto_detection_takes_a_busy_server_for_one(chatloop_home: Path) -> None:
    """A usual port whose server takes the connection but holds its model list (busy)
    is a server, not an empty port; one that answers goes before it."""
    from chatloop.backends.detect import Candidate, detect

    release = threading.Event()

    def models() -> bool:
        release.wait(30)
        return True

    with (
        scripted_server(lambda request: "Hi.", models=models) as busy,
        scripted_server(lambda request: "Hi.") as free,
    ):
        try:
            held = Candidate("busy", "openai", busy, "/models")
            answers = Candidate("free", "openai", free, "/models")
            nobody = Candidate("nobody", "openai", "http://127.0.0.1:9/v1", "/models")
            assert detect((nobody, held)) == held
            assert detect((held, answers)) == answers
        finally:
            release.set()
