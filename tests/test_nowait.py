"""Issue 45, item 5: a compaction never waits for a model summary, and the child's first
reply never waits for a separate acknowledgment call.

A real chat session over HTTP to a scripted OpenAI-compatible server on 127.0.0.1,
and the real summary worker (a child process): the server holds every summary request
until the test lets it go, so "the compaction did not wait for it" is seen (the chat
went on while no summary had been answered), not timed. Then the worker writes the
model's summary into the parent, and the child's next request carries it in its
restoration's place, once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from chatloop.chat import server
from chatloop.chat.restoration import revised
from chatloop.format import parse_markdown
from chatloop.store.fsio import SUMMARY_HOLDER, lock_holder, wait_for_lock
from chatloop.store.store import Store
from tests.fakes import STRUCTURED
from tests.hosts import TEST_SETTINGS, chat
from tests.pty_driver import run
from tests.scripted_server import scripted_server

pytestmark = pytest.mark.e2e  # (a worker process and a local HTTP server)

ASK = "Acknowledge briefly"
SUMMARY = "progressive summary"


class Served:
    """What the scripted server was asked, and the summary it holds until ``release``."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []
        self.release = threading.Event()
        self.summary_asked = threading.Event()
        self.summaries_served = 0
        self.summary_requests: list[str] = []  # each summary request's last message
        self.lock = threading.Lock()

    def reply(self, request: dict[str, Any]) -> str:
        messages = request["messages"]
        last = str(messages[-1]["content"])
        if SUMMARY in last:
            with self.lock:
                self.summary_requests.append(last)
            self.summary_asked.set()
            assert self.release.wait(120), "the summary was never let go"
            with self.lock:
                self.summaries_served += 1
            return STRUCTURED
        with self.lock:
            self.requests.append(messages)
        if ASK in last:
            return "Ready to continue."
        return "Water them early in the morning, twice a week."

    def asked(self, text: str) -> list[list[dict[str, Any]]]:
        with self.lock:
            return [r for r in self.requests if text in str(r[-1]["content"])]


def _session(store: Store, url: str, **changes: Any) -> tuple[Any, Any]:
    settings = TEST_SETTINGS._replace(
        backend="openai",
        base_url=url,
        model="scripted",
        context_window=2048,
        summaries="background",
        acknowledgment="written",
        background_idle=0.2,
        summary_worker_patience=120,
        summary_worker_timeout=120,
        **changes,
    )
    home = Path(store.root)
    backend = server.make(settings, home=home)
    return chat(store, backend, settings=settings)


def _read(path: Path) -> Any:
    return parse_markdown(path.read_bytes(), path.stem).session


class Compacted:
    """A chat of two exchanges compacted without waiting (``compacted``): its session
    and host, the server's record, the store and the parent's file."""

    def __init__(self, served: Served, store: Store, url: str) -> None:
        self.served, self.store, self.url = served, store, url
        self.session, self.host = _session(store, url)
        self.session.send("How often should I water the basil on the north side?")
        self.session.send("And the thyme beside it?")
        self.parent_path: Path = self.session.writer.path
        self.session.compact()  # /compact: returns with no summary answered


@contextmanager
def compacted(tmp_path: Path) -> Iterator[Compacted]:
    """A ``Compacted`` chat against a scripted server that holds every summary until
    ``served.release`` is set; at the end the summaries are let go and the chat closed."""
    served = Served()
    with scripted_server(served.reply) as url:
        made = None
        try:
            made = Compacted(served, Store(Path(tmp_path / "home")), url)
            yield made
        finally:
            served.release.set()
            if made is not None:
                made.session.close()
                made.session.backend.close()


def test_a_compaction_begins_the_child_at_once_and_the_model_summary_revises_it_later(
    tmp_path: Path,
) -> None:
    with compacted(tmp_path) as made:
        served, store, session, host = made.served, made.store, made.session, made.host
        parent_path = made.parent_path
        assert served.summaries_served == 0
        assert host.said("without waiting for the model")
        assert lock_holder(parent_path) == SUMMARY_HOLDER  # the worker writes it

        session.send("What about the mint?")  # the child's first message
        child_path = session.writer.path
        assert child_path != parent_path
        assert served.summaries_served == 0  # still held: nothing waited for it
        assert served.asked(ASK) == []  # no acknowledgment call before the reply
        first = served.asked("What about the mint?")[0]
        restoration = str(first[1]["content"])  # (after the system prompt)
        assert restoration.startswith("We are continuing an earlier conversation")
        assert "Water every 2 days" not in restoration  # the transcript's summary
        child = _read(child_path)
        ack = child.messages[1]
        assert ack.role == "assistant" and ack.restore and ack.fallback

        served.release.set()  # the model's summary may come now
        assert wait_for_lock(parent_path, 120), "the worker never finished"
        parent = _read(parent_path)
        summary = parent.messages[-1]
        assert summary.role == "summary" and not summary.fallback
        assert "Water every 2 days" in summary.text
        assert parent.meta.extra.get("summary_leaves") or parent.meta.summary_leaves

        session.send("Should I cut the flowers?")
        last = served.asked("Should I cut the flowers?")[0]
        firsts = [str(m["content"]) for m in last if m["role"] == "user"]
        assert "Water every 2 days" in firsts[0]  # the model's summary, in first place
        restorations = [t for t in firsts if t.startswith("We are continuing")]
        assert len(restorations) == 1  # sent once
        assert host.said("takes the place")
        child = _read(child_path)
        prompts = [m for m in child.messages if m.role == "user" and m.restore and not m.copy]
        assert len(prompts) == 2  # both kept in the file
        assert "Water every 2 days" not in prompts[0].text
        assert "Water every 2 days" in prompts[1].text
        assert session.previous is not None and "Water every 2 days" in session.previous
        shown = run("show", child_path.stem, home=store.root, cwd=store.cwd).stdout
        assert "── Summary revised (" in shown  # the revision, labelled as one
        assert "(written by chatloop): Understood" in shown  # not the model's words


def test_a_child_left_before_its_parents_summary_is_written_continues_from_it(
    tmp_path: Path,
) -> None:
    """The child of a compaction that did not wait is left (its summary handed to a
    worker) while the parent's model summary is still being written: the child's
    summary continues from the parent's model summary, not from nothing."""
    with compacted(tmp_path) as made:
        served, session, parent_path = made.served, made.session, made.parent_path
        session.send("What about the mint?")
        child_path = session.writer.path
        session.close()  # the child's summary goes to a worker of its own
        assert lock_holder(child_path) == SUMMARY_HOLDER
        served.release.set()
        assert wait_for_lock(parent_path, 120) and wait_for_lock(child_path, 120)
        child = _read(child_path)
        assert child.messages[-1].role == "summary" and not child.messages[-1].fallback
        asked = [r for r in served.summary_requests if "What about the mint?" in r]
        assert asked, served.summary_requests
        assert all("Water every 2 days" in r for r in asked)  # the parent's, as its past


def test_leaving_and_continuing_right_after_such_a_compaction_say_what_is_so(
    tmp_path: Path,
) -> None:
    """Leaving at once after a compaction that did not wait says the parent's summary
    is being written; ``-c`` then (the summary still held) goes on from the
    transcript's summary and counts the parent's queries, which its file's front
    matter gets only when the worker ends."""
    from tests.hosts import continue_file

    with compacted(tmp_path) as made:
        store, url, session, host = made.store, made.url, made.session, made.host
        parent_path = made.parent_path
        session.close()
        assert host.said("its summary is being written in the background")
        assert not host.said("as it was")
        again, told = _session(store, url, summary_wait=0.2)
        continue_file(again, parent_path)
        assert told.said("(2 queries) from its summary"), told.notices
        again.close()
        again.backend.close()
    assert wait_for_lock(parent_path, 120)


def test_the_summary_worker_never_asks_the_server_to_count(tmp_path: Path) -> None:
    """On llama.cpp's server any request, a token count included, cuts the reply under
    way; the worker's own request yields to the person, so it is its only one: the
    summary is sized by estimates, and a server with a tokenizer is asked to count
    nothing from the moment the chat has handed the session over."""
    served = Served()
    counted: list[str] = []
    store = Store(Path(tmp_path / "home"))
    with scripted_server(served.reply, tokenize=counted.append) as url:
        session, _ = _session(store, url)
        try:
            session.send("How often should I water the basil on the north side?")
            path = session.writer.path
            session.close()  # handed to the worker
            before = len(counted)
            served.release.set()
            assert wait_for_lock(path, 120)
            summary = _read(path).messages[-1]
            assert summary.role == "summary" and not summary.fallback  # the model's, asked
            assert len(counted) == before, counted[before:]
        finally:
            served.release.set()
            session.close()
            session.backend.close()


def test_revised_sends_the_last_restoration_once_in_the_first_place() -> None:
    from datetime import datetime

    from chatloop.format import Message

    at = datetime(2026, 12, 7, tzinfo=UTC)
    first = Message.create(
        "user", at, text="We are continuing an earlier conversation: A", restore=True
    )
    ack = Message.create("assistant", at, text="ok", restore=True)
    asked = Message.create("user", at, text="q1")
    later = Message.create(
        "user", at, text="We are continuing an earlier conversation: B", restore=True
    )
    copy = Message.create(
        "user", at, text="We are continuing an earlier conversation: C", restore=True, copy=True
    )
    out = revised([first, ack, asked, later, copy])
    assert [m.text for m in out] == [
        "We are continuing an earlier conversation: B",
        "ok",
        "q1",
        "We are continuing an earlier conversation: C",
    ]
    assert revised([first, ack, asked]) == [first, ack, asked]


def test_the_page_and_show_label_a_revision_and_chatloops_acknowledgment(
    store: Store,
) -> None:
    """``show`` and the HTML page say which restoration revises the first, and that an
    acknowledgment flagged ``fallback`` is chatloop's, not the model's."""
    from chatloop.chat.restoration import acknowledgment
    from chatloop.format import Message
    from tests.conftest import T0, new_meta

    with store.create(new_meta(title="child", parent_id="20250101-000000-aaaaaaaa")) as writer:
        for message in (
            Message.create("user", T0, text="We are continuing an earlier conversation: A",
                           restore=True),
            acknowledgment("20250101-000000-aaaaaaaa", T0),
            Message.create("user", T0, text="a question"),
            Message.create("assistant", T0, text="an answer"),
            Message.create("user", T0, text="We are continuing an earlier conversation: B",
                           restore=True),
        ):  # fmt: skip
            writer.append(message)
        writer.finalize()
    shown = run("show", writer.path.stem, home=store.root, cwd=store.cwd).stdout
    assert shown.count("── Session restored (") == 1 and "── Summary revised (" in shown
    assert "(written by chatloop): Understood" in shown
    page = run(
        "export", writer.path.stem, "--format", "html", home=store.root, cwd=store.cwd
    ).stdout
    assert "Summary revised" in page and "acknowledgment written by chatloop" in page
