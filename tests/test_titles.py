"""Session titles: made after the first exchange (by the model, bounded in time, or
from the first request), written to the front matter, shown in listings; a name
the person gave always wins, and continuations keep their parent's title."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chatloop.chat import prompts, titles
from chatloop.chat.session import ChatSession
from chatloop.config import DEFAULT_TITLE_MAX_TOKENS, load_settings
from chatloop.errors import BackendError, UsageError
from chatloop.format import Session, parse_markdown
from chatloop.format.yaml_strict import load as yaml_load
from chatloop.store.index import Index
from chatloop.store.store import Store
from chatloop.ui.listing import sessions_text
from chatloop.ui.oneshot import settings_once
from tests.conftest import T0, Clock, fill
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import ScriptedHost, chat, continue_file
from tests.scripted_server import scripted_server

ROOT = Path(__file__).resolve().parent.parent
ASKED = "How often should I water basil?\nIt sits on a sunny balcony, in a clay pot."
FIRST_LINE = "How often should I water basil?"
REPLY = "Every two days in summer, when the top of the soil is dry."


def files(store: Store) -> list[Session]:
    found = [parse_markdown(Path(e.path).read_bytes()).session for e in store.session_files()]
    return sorted(found, key=lambda s: (s.meta.created, s.meta.id))


def title_requests(backend: FakeBackend) -> list[dict[str, object]]:
    return [c for c in backend.calls if "Write a title of at most" in str(c["messages"][-1])]


def on_disk(session: ChatSession) -> str:
    """The title in the session's file as it is now (not as the writer remembers it)."""
    assert session.writer is not None
    return parse_markdown(session.writer.path.read_bytes()).session.meta.title


def listed(store: Store) -> str:
    with Index(store) as index:
        index.sync()
        return sessions_text(index.list_sessions(), T0)


def named(
    store: Store, answer: object, **changes: object
) -> tuple[ChatSession, ScriptedHost, FakeBackend]:
    """A session with model titles whose first exchange is ASKED → REPLY and whose
    title request gets ``answer`` (asked off the person's path: taken here, as before
    the person's next request or at close)."""
    backend = FakeBackend(REPLY, answer, STRUCTURED)  # type: ignore[arg-type]
    session, host = chat(store, backend, titles="model", **changes)
    session.send(ASKED)
    session.take_title()
    return session, host, backend


# ------------------------------------------------------------------ the model's title


def test_a_model_title_is_written_to_the_front_matter_and_listed(store: Store) -> None:
    session, host, backend = named(store, "Basil watering schedule")
    assert on_disk(session) == "Basil watering schedule" == session.title  # taken, not at exit
    (request,) = title_requests(backend)
    assert request["tools"] is None and len(request["messages"]) == 1  # type: ignore[arg-type]
    assert request["options"] == {"max_tokens": DEFAULT_TITLE_MAX_TOKENS, "temperature": 0.2}
    sent = str(request["messages"][0]["content"])  # type: ignore[index]
    assert ASKED in sent and REPLY in sent
    assert host.work == [] and host.replies == [(REPLY + " ", False, False)]  # nobody waited
    session.send("And in winter?")  # one title: the second exchange asks for none
    session.close()
    assert len(title_requests(backend)) == 1
    (found,) = files(store)
    assert found.meta.title == "Basil watering schedule" and found.meta.status == "closed"
    assert "Basil watering schedule" in listed(store)
    assert "And in winter?" not in listed(store)  # the title, not the last question


def test_the_title_prompt_carries_the_start_of_the_conversation_only() -> None:
    prompt = prompts.title_prompt("q" * 2000, "r" * 2000)
    assert "q" * 499 + "…" in prompt and "q" * 500 not in prompt
    assert "r" * 499 + "…" in prompt and "r" * 500 not in prompt
    assert "at most 6 words" in prompt


@pytest.mark.parametrize(
    "answer, title",
    [
        ('**Title:** "Basil care on a balcony"', "Basil care on a balcony"),
        ("Title:\n\n# Watering   basil\n\nI hope this helps!", "Watering basil"),
        ("- [Basil](https://example.com) _watering_ `plan`.", "Basil watering plan"),
        ("\x1b[31mRed\x1b[0m basil\x07 \u202eplan\u202c\r\nmore", "Red basil plan"),
        ("'Session title: Herb garden'", "Herb garden"),
        ("Title-based routing", "Title-based routing"),  # a word, not a label
        ("“Basil, sun and water” ", "Basil, sun and water"),
        (
            "Watering basil in clay pots on a sunny balcony through the long hot summer",
            "Watering basil in clay pots on a sunny balcony through the…",
        ),
        # what the demo (base) model wraps its answers in: template tokens, HTML
        ("[/INST] Herb pots on a sunny balcony", "Herb pots on a sunny balcony"),
        ("<h2>Tomato beds</h2>", "Tomato beds"),
        ("<<SYS>>\n<b>Raised bed depth</b>", "Raised bed depth"),
        ("<start_of_turn>model\nGarden plan<end_of_turn>", "Garden plan"),
        ("<|im_start|>Balcony herbs<|im_end|>", "Balcony herbs"),
        ("Using <vector> in C++", "Using <vector> in C++"),  # no HTML: words kept
        ("<|im_start|>assistant\nCompost ratios<|im_end|>", "Compost ratios"),
        ("<|start_header_id|>assistant<|end_header_id|>\n\nCompost ratios", "Compost ratios"),
        ("<think>they want a title\nshort</think>Compost ratios", "Compost ratios"),
        ("Using <think> tags in Qwen", "Using <think> tags in Qwen"),  # not a block: words
    ],
)
def test_the_models_answer_is_cleaned(store: Store, answer: str, title: str) -> None:
    session, _host, _backend = named(store, answer)
    assert on_disk(session) == title
    assert len(title) <= titles.MAX_CHARS and "\n" not in title


@pytest.mark.parametrize(
    "answer",
    [
        "",  # nothing (a base model often says nothing)
        "   \n\t\n",
        "*** --- ...",  # markup without a word
        "```\n```",
        prompts.title_prompt(ASKED, REPLY),  # the prompt echoed back
        "First request:\n\nHow often",
        "Second request:",  # the real base model carries on the prompt's pattern
        "Reply with the title only, on one line",
        "Sure! " + "Basil needs water when the soil is dry, and more in summer. " * 3,  # a reply
        "\x1b]0;owned\x07\x1b[2J",  # terminal sequences only
    ],
)
def test_an_answer_that_is_no_title_gives_the_first_line(store: Store, answer: str) -> None:
    session, _host, backend = named(store, answer)
    assert len(title_requests(backend)) == 1
    assert on_disk(session) == FIRST_LINE


def test_a_failing_server_gives_the_first_line(store: Store) -> None:
    session, host, _ = named(store, BackendError("Cannot reach the model server", "Start it."))
    assert on_disk(session) == FIRST_LINE
    assert host.notices == []  # cosmetic: nothing to tell the person about
    session.send("still here?")  # the chat goes on
    assert session.title == FIRST_LINE


def test_a_title_request_that_hangs_gives_up_within_the_bound(store: Store) -> None:
    # The title reply would take 400 x 20 ms = 8 s; the bound is 0.2 s.
    backend = FakeBackend(REPLY, "word " * 400, STRUCTURED, delay=0.02)
    session, host = chat(store, backend, titles="model", title_timeout=0.2)
    started = time.monotonic()
    session.send("Why do tomatoes split?")
    session.take_title()
    elapsed = time.monotonic() - started
    backend.delay = 0.0
    assert elapsed < 3.0, elapsed  # the reply (12 words) and at most the bound, not 8 s
    assert on_disk(session) == "Why do tomatoes split?" and host.notices == []
    assert len(backend.calls) == 2  # the reply and the title request, cancelled: no retry


def test_ctrl_c_during_the_title_request_gives_the_first_line(store: Store) -> None:
    session, host, _ = named(store, KeyboardInterrupt())
    assert on_disk(session) == FIRST_LINE
    assert host.replies == [(REPLY + " ", False, False)]  # the reply itself was not cut
    session.send("and then?")  # no traceback, no lost state: the chat goes on
    session.close()
    (found,) = files(store)
    assert found.meta.title == FIRST_LINE and found.meta.queries == 2


def test_a_title_the_disk_refuses_is_written_at_close(small_disk: Path) -> None:
    store = Store(small_disk / "home", cwd=small_disk / "project", clock=Clock())
    (small_disk / "project").mkdir()
    filler: list[Path] = []

    def fill_then_answer(messages: object) -> str:
        filler.append(fill(small_disk))  # the disk fills while the model thinks
        return "Basil watering schedule"

    session, host = chat(store, FakeBackend(REPLY, fill_then_answer, STRUCTURED), titles="model")
    session.send(ASKED)  # no StoreError: a title is cosmetic
    session.take_title()
    assert session.title == "Basil watering schedule" and on_disk(session) == ""
    assert session.unsaved == 0 and not host.said("Could not")
    os.unlink(filler[0])
    session.close()
    (found,) = files(store)
    assert found.meta.title == "Basil watering schedule" and found.meta.status == "closed"


def test_a_reply_cut_short_asks_for_no_title_until_an_exchange_ends_well(store: Store) -> None:
    backend = FakeBackend(KeyboardInterrupt(), REPLY, "Basil watering schedule", STRUCTURED)
    session, host = chat(store, backend, titles="model")
    session.send(ASKED)  # Ctrl-C before any text: the person wants the prompt back
    assert title_requests(backend) == [] and on_disk(session) == "" and host.work == []
    session.send("Again: how often?")
    session.take_title()
    (request,) = title_requests(backend)
    assert ASKED in str(request["messages"][0]["content"])  # type: ignore[index]
    assert on_disk(session) == "Basil watering schedule"


@pytest.mark.parametrize("mode", ["model", "first", "off"])
def test_a_session_whose_only_reply_was_cut_short_is_named_at_close(
    store: Store, mode: str
) -> None:
    # Ctrl-C (or a one-shot's reader who left) on the only reply: no exchange ended well,
    # so the session is named from its first request's line when it closes, unasked
    backend = FakeBackend(KeyboardInterrupt(), STRUCTURED)
    session, _ = chat(store, backend, titles=mode)
    session.send(ASKED)
    session.close()
    (found,) = files(store)
    assert title_requests(backend) == []
    assert found.meta.title == ("" if mode == "off" else FIRST_LINE)


def test_ask_says_why_it_fell_back() -> None:
    down = titles.ask(FakeBackend(BackendError("Cannot reach the model server", "")), ASKED, REPLY)
    assert down == titles.Title(FIRST_LINE, True, "Cannot reach the model server")
    slow = titles.ask(FakeBackend("word " * 100, delay=0.02), ASKED, REPLY, timeout=0.1)
    assert slow == titles.Title(FIRST_LINE, True, "no title within 0.1 s")
    empty = titles.ask(FakeBackend(""), ASKED, REPLY)
    assert empty == titles.Title(FIRST_LINE, True, "the model's answer was no title")
    assert titles.ask(FakeBackend("Basil care"), ASKED, REPLY) == titles.Title("Basil care", False)


# ------------------------------------------------------------------ what wins


def test_a_rename_before_the_first_message_is_kept_and_no_title_is_asked(store: Store) -> None:
    backend = FakeBackend(REPLY, STRUCTURED)
    session, _ = chat(store, backend, titles="model")
    session.rename("Balcony garden plan")
    session.send(ASKED)
    assert title_requests(backend) == [] and on_disk(session) == "Balcony garden plan"
    session.close()
    assert files(store)[0].meta.title == "Balcony garden plan"


def test_a_rename_after_the_title_replaces_it_for_good(store: Store) -> None:
    session, _host, backend = named(store, "Basil watering schedule")
    session.rename("Balcony garden plan")
    session.send("And in winter?")
    session.close()
    assert len(title_requests(backend)) == 1
    (found,) = files(store)
    assert found.meta.title == "Balcony garden plan"
    assert "Balcony garden plan" in listed(store) and "Basil watering" not in listed(store)


def test_continuations_keep_the_parents_title_and_ask_for_none(store: Store) -> None:
    backend = FakeBackend(
        REPLY,
        "Basil watering schedule",
        STRUCTURED,
        "Ack.",
        "Two.",
        STRUCTURED,
        "Ready.",
        "Three.",
        STRUCTURED,
    )
    session, _ = chat(store, backend, titles="model")
    session.send(ASKED)
    session.compact()
    session.send("And in winter?")  # the child: restoration, acknowledgment, this exchange
    child_path = session.writer.path if session.writer else None
    session.close()
    resumed, _ = chat(store, backend, titles="model")
    assert child_path is not None
    continue_file(resumed, child_path)
    resumed.send("And in spring?")
    resumed.close()
    assert len(title_requests(backend)) == 1  # the first exchange of the chain only
    by_parent = {s.meta.parent_id: s for s in files(store)}
    root = by_parent[None]
    child = by_parent[root.meta.id]
    grandchild = by_parent[child.meta.id]
    assert {root.meta.title, child.meta.title, grandchild.meta.title} == {"Basil watering schedule"}


def test_a_continuation_of_an_untitled_session_stays_untitled(store: Store) -> None:
    backend = FakeBackend(REPLY, STRUCTURED, "Ack.", "Two.", STRUCTURED)
    session, _ = chat(store, backend, titles="off")
    session.send(ASKED)
    session.close()
    resumed, _ = chat(store, backend, titles="model")
    continue_file(resumed, next(iter(store.session_files())).path)
    resumed.send("And in winter?")
    resumed.close()
    assert title_requests(backend) == []
    assert [s.meta.title for s in files(store)] == ["", ""]


# ------------------------------------------------------------------ the setting


def test_titles_first_names_the_session_by_its_first_line_without_asking(store: Store) -> None:
    backend = FakeBackend(REPLY, STRUCTURED)
    session, host = chat(store, backend, titles="first")
    session.send("\x1b[1m## Soil for **tomatoes**\x1b[0m\nand peppers")
    assert on_disk(session) == "Soil for tomatoes" and host.work == []
    session.close()
    assert len(backend.calls) == 2  # the reply and the summary: nothing else was asked
    assert "Soil for tomatoes" in listed(store)


def test_titles_off_writes_none_and_the_listing_falls_back(store: Store) -> None:
    backend = FakeBackend(REPLY, STRUCTURED)
    session, _ = chat(store, backend, titles="off")
    session.send(ASKED)
    session.close()
    assert len(backend.calls) == 2 and files(store)[0].meta.title == ""
    assert FIRST_LINE in listed(store)  # the listing shows the question, as before titles


def test_a_long_first_line_is_cut_at_a_word(store: Store) -> None:
    backend = FakeBackend(REPLY, STRUCTURED)
    session, _ = chat(store, backend, titles="first")
    session.send("Please explain " + "how the roots of basil take up water " * 4)
    title = on_disk(session)
    assert title == "Please explain how the roots of basil take up water how the…"
    assert len(title) <= titles.MAX_CHARS


def test_the_setting_is_validated_and_read_as_a_word(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("titles: off\ntitle_timeout: 3\n")
    settings, warnings = load_settings(config_file=str(config), environ={}, read_yaml=yaml_load)
    assert (settings.titles, settings.title_timeout, warnings) == ("off", 3.0, [])
    assert load_settings(environ={}, read_yaml=yaml_load)[0].titles == "model"  # the default
    with pytest.raises(UsageError, match="titles must be model, first or off, not 'maybe'"):
        load_settings(environ={"CHATLOOP_TITLES": "maybe"}, read_yaml=yaml_load)
    with pytest.raises(UsageError, match="title_timeout must be between"):
        load_settings(environ={"CHATLOOP_TITLE_TIMEOUT": "0"}, read_yaml=yaml_load)


def test_a_one_shot_question_is_named_by_its_first_line_with_one_request(
    chatloop_home: Path, tmp_path: Path
) -> None:
    """The installed program's one-shot mode against a scripted server: the question,
    then the exit summary; no title request, whatever ``titles`` says (unless off)."""
    asked: list[str] = []

    def reply(request: dict[str, object]) -> str:
        last = str(request["messages"][-1]["content"])  # type: ignore[index]
        asked.append(last)
        return STRUCTURED if "progressive summary" in last else "Every two days."

    project = tmp_path / "project"
    project.mkdir()
    # PYTHONPATH: the chatloop of this tree, not whichever is installed
    env = {
        "CHATLOOP_HOME": str(chatloop_home),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "CHATLOOP_TITLES": "model",
        "CHATLOOP_SUMMARIES": "wait",
    }
    with scripted_server(reply) as url:
        done = subprocess.run(
            [sys.executable, "-m", "chatloop.cli", "--base-url", url, ASKED],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert len(asked) == 2 and not any("Write a title" in a for a in asked)
    assert "Naming the session" not in done.stderr
    found = Store(chatloop_home, cwd=project)
    listing = subprocess.run(
        [sys.executable, "-m", "chatloop.cli", "sessions", "--json"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert [row["title"] for row in json.loads(listing.stdout)] == [FIRST_LINE]
    assert [s.meta.title for s in files(found)] == [FIRST_LINE]
    assert settings_once(load_settings(environ={}, read_yaml=yaml_load)[0]).titles == "first"
    assert (
        settings_once(
            load_settings(environ={"CHATLOOP_TITLES": "off"}, read_yaml=yaml_load)[0]
        ).titles
        == "off"
    )


class SilentFirst(FakeBackend):
    """A server that sends nothing for ``wait`` seconds when asked for a title."""

    def __init__(self, *replies: object, wait: float) -> None:
        super().__init__(*replies)  # type: ignore[arg-type]
        self.wait = wait
        self.released = threading.Event()

    def stream(self, messages, **kwargs):  # type: ignore[no-untyped-def,override]
        if "Write a title of at most" in str(messages[-1]):
            self.released.wait(self.wait)  # nothing at all arrives meanwhile
        return super().stream(messages, **kwargs)


def test_a_server_silent_before_its_first_byte_holds_the_prompt_no_longer_than_the_bound(
    store: Store,
) -> None:
    backend = SilentFirst(REPLY, "Basil watering schedule", STRUCTURED, wait=30)
    session, host = chat(store, backend, titles="model", title_timeout=0.2)
    started = time.monotonic()
    session.send(ASKED)
    session.take_title()
    waited = time.monotonic() - started
    backend.released.set()  # let the abandoned request end
    assert waited < 10, waited  # 0.2 s of bound, not the 30 s the server takes
    assert on_disk(session) == FIRST_LINE and host.notices == []


def test_a_conversation_no_title_fits_asks_for_one_once(store: Store) -> None:
    backend = FakeBackend(REPLY, BackendError("boom", ""), REPLY, REPLY, STRUCTURED)
    session, _ = chat(store, backend, titles="model")
    session.send("?")  # no words to fall back on, and the model fails
    session.take_title()
    session.send("and then?")
    session.send("and after that?")
    assert len(title_requests(backend)) == 1 and on_disk(session) == ""


def test_a_huge_first_line_is_read_only_as_far_as_a_title_needs() -> None:
    line = "__x " * 16000  # underscores everywhere: the emphasis pattern's worst case
    assert titles.fallback(line) == titles.fallback(line[: titles.READ_CHARS])
    assert len(titles.fallback(line)) <= titles.MAX_CHARS


def test_the_title_is_asked_off_the_persons_path_and_gives_way_to_their_next_request(
    store: Store,
) -> None:
    """The title request goes after the reply, and the prompt comes back at once (no
    "Naming the session" to wait for). The person's next request goes first: a title
    not come yet is cancelled, and asked again after that exchange."""
    asked, release = threading.Event(), threading.Event()

    def held_title(messages: object) -> str:
        asked.set()
        release.wait(30)  # a busy server: nothing comes until the test is done
        return "Basil watering schedule"

    backend = FakeBackend(REPLY, held_title, REPLY, "Basil in winter", STRUCTURED)
    session, host = chat(store, backend, titles="model", title_timeout=30)
    try:
        started = time.monotonic()
        session.send(ASKED)
        assert time.monotonic() - started < 15  # not the title's 30 s bound
        assert host.work == [] and asked.wait(30)  # asked, in the background
        session.send("And in winter?")  # while the title is held: it gives way
        assert on_disk(session) == ""  # the held one was not taken
        session.close()  # (the second is taken, waited for)
    finally:
        release.set()
    assert len(title_requests(backend)) == 2
    (found,) = files(store)
    assert found.meta.title == "Basil in winter" and found.meta.queries == 2
