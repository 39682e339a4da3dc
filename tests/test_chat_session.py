"""ChatSession on its own: the message in hand, failed exchanges, totals, a full disk.

These drive the conversation library with a scripted host (tests/hosts.py)
and the scripted backend; the disk-full cases use a real, size-limited tmpfs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from chatloop.backends.base import ChatMessage, Event, TextDelta
from chatloop.errors import BackendError, ChatloopError, StoreError
from chatloop.format import Message, Session, Totals, parse_markdown
from chatloop.store.store import Store
from chatloop.ui.listing import transcript_text
from tests.conftest import T0, Clock, fill
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import chat, continue_file


def files(store: Store) -> list[Session]:
    found = [parse_markdown(Path(e.path).read_bytes()).session for e in store.session_files()]
    return sorted(found, key=lambda s: (s.meta.created, s.meta.id))


def queries(store: Store) -> list[str]:
    return [m.text for s in files(store) for m in s.messages if m.is_query]


def test_a_failed_exchange_is_marked_in_the_file_and_the_chat_goes_on(store: Store) -> None:
    backend = FakeBackend(
        BackendError("Cannot reach the server", "Start it."), "Back again.", STRUCTURED
    )
    session, host = chat(store, backend)
    with pytest.raises(BackendError, match="Cannot reach"):
        session.send("are you there?")
    assert host.replies == [("", False, False)]  # the error itself is what the screen shows
    session.send("and now?")
    session.close()
    (found,) = files(store)
    user, mark, user2, reply, _summary = found.messages
    assert (user.text, mark.role, mark.text, mark.interrupted, mark.stop_reason) == (
        "are you there?",
        "assistant",
        "",
        True,
        "error",
    )
    assert user2.text == "and now?" and reply.text.strip() == "Back again."
    assert "(no reply: the request failed)" in transcript_text(found)  # what `show` prints


def test_ctrl_c_before_any_text_is_marked_cancelled(store: Store) -> None:
    session, host = chat(store, FakeBackend(KeyboardInterrupt(), STRUCTURED))
    result = session.send("a long question")
    assert result.interrupted and host.replies == [("", True, False)]
    session.close()
    (found,) = files(store)
    assert found.messages[1].stop_reason == "cancelled" and found.messages[1].interrupted
    assert "(no reply: interrupted before any text arrived)" in transcript_text(found)


class CutMidReply(FakeBackend):
    """Sends a few words of its first reply, then the person presses Ctrl-C (before
    the server's usage, which comes last, as real servers send it)."""

    def stream(self, messages: Sequence[ChatMessage], **options: Any) -> Iterator[Event]:
        if len(self.calls) > 0:
            yield from super().stream(messages, **options)
            return
        self.calls.append({"messages": list(messages)})
        yield TextDelta("Once upon a time, in a garden of tomatoes, ")
        raise KeyboardInterrupt


def test_a_reply_cut_by_ctrl_c_counts_estimated_tokens_not_none(store: Store) -> None:
    """The counts after a cut reply were 0 (the toolbar read "0 tok · ctx 0/2,048"):
    the prompt was read and text came back, so both are estimated, marked so."""
    session, _host = chat(store, CutMidReply(default=STRUCTURED))
    assert session.send("tell me a long story").interrupted
    totals = session.totals
    assert totals.estimated and totals.tokens_in > 0 and totals.tokens_out > 0
    assert totals.last_call == totals.tokens_in + totals.tokens_out  # the window's meter
    session.close()
    (found,) = files(store)
    usage = found.messages[1].usage
    assert usage is not None and usage.estimated and found.messages[1].interrupted
    assert (found.meta.tokens_in, found.meta.tokens_out) == (usage.input, usage.output)


def test_totals_are_one_notion_from_the_file_to_the_toolbar(store: Store) -> None:
    backend = FakeBackend("One.", "Two.", STRUCTURED, "Ack.", "Three.", STRUCTURED)
    session, _host = chat(store, backend)
    session.send("first")
    session.send("second")
    before = session.totals
    assert before == Totals.of(session.messages) and before.queries == 2 and before.tokens > 0
    session.compact()
    session.send("third")
    child_totals = session.totals
    session.close()
    parent, child = files(store)
    assert (parent.meta.queries, parent.meta.tokens_in, parent.meta.tokens_out) == (
        2,
        before.tokens_in,
        before.tokens_out,
    )
    assert child_totals.fields() == {
        "queries": child.meta.queries,
        "tokens_in": child.meta.tokens_in,
        "tokens_out": child.meta.tokens_out,
        "restoration_tokens": child.meta.restoration_tokens,
    }
    assert child_totals.restoration > 0 and child_totals.queries == 1


# ---------------------------------------------------------------- a full disk


def test_disk_full_during_automatic_compaction_loses_no_message(small_disk: Path) -> None:
    store = Store(small_disk / "home", cwd=small_disk / "project")
    (small_disk / "project").mkdir()
    typed = [
        f"message {i}: " + "the soil of the garden beds and their drainage " * 4 for i in range(30)
    ]
    backend = FakeBackend(
        default=lambda msgs: (
            STRUCTURED if "progressive summary" in str(msgs[-1]["content"]) else "Short reply."
        )
    )
    session, host = chat(
        store, backend, context_window=700, auto_compact="on", max_tokens=32, compact_threshold=1.0
    )  # compaction only when a message does not fit
    session.clock = Clock()
    sent = 0
    while session.plan([Message.create("user", session.clock(), text=typed[sent])]).fits:
        session.send(typed[sent])
        sent += 1
    assert sent >= 2
    filler = fill(small_disk)
    # the next message does not fit: it is saved, then compaction runs, and cannot write
    # the summary
    for text in typed[sent : sent + 2]:
        with pytest.raises(StoreError) as caught:
            session.send(text)
        assert caught.value.message.startswith("Could not compact")
        assert "saved in this session but was not sent" in caught.value.hint
    assert session.unsaved == 0 and session.writer is not None  # the session goes on
    os.unlink(filler)
    session.send(typed[sent + 2])  # space again: compact, then the queued messages, then this
    session.close()
    assert session.unsaved == 0
    assert queries(store) == typed[: sent + 3]  # every typed message, once, in order
    chain = files(store)
    assert len(chain) >= 2 and all(s.meta.status == "closed" for s in chain)
    assert chain[1].meta.parent_id == chain[0].meta.id
    assert host.said("Session Restored")


def test_a_full_disk_at_exit_hands_back_what_it_could_not_save(small_disk: Path) -> None:
    store = Store(small_disk / "home", cwd=small_disk / "project")
    (small_disk / "project").mkdir()
    session, host = chat(store, FakeBackend("Fine.", STRUCTURED))
    session.send("saved before the disk filled")
    fill(small_disk)
    with pytest.raises(StoreError):
        session.send("typed when the disk was full " * 400)  # more than a page: must allocate
    closed = session.close()
    assert [m.text for m in closed.unsaved] == ["typed when the disk was full " * 400]
    assert host.said("Could not")
    assert queries(store) == ["saved before the disk filled"]  # the file is still whole


def test_a_continuation_that_cannot_be_written_waits_for_the_next_try(small_disk: Path) -> None:
    """After /compact the child is written with the next message; on a full disk that
    fails, the message stays queued and the continuation pending; with space again,
    the child is made (restoration, acknowledgment) and the message goes in it."""
    store = Store(small_disk / "home", cwd=small_disk / "project")
    (small_disk / "project").mkdir()
    backend = FakeBackend("One.", STRUCTURED, "Ack.", "Two.", STRUCTURED)
    session, _host = chat(store, backend)
    session.send("before the compaction")
    session.compact()
    status = session.describe()
    assert status.phase == "waiting"
    parent_id = status.continues
    filler = fill(small_disk)
    with pytest.raises(StoreError):
        session.send("typed on a full disk")
    assert session.describe().phase == "waiting" and session.unsaved == 1
    os.unlink(filler)
    session.send("typed with space again")
    session.close()
    parent, child = files(store)
    assert parent.meta.id == parent_id and child.meta.parent_id == parent_id
    assert [m.text for m in child.messages if m.is_query] == [
        "typed on a full disk",
        "typed with space again",
    ]
    assert child.messages[0].restore and child.messages[1].restore


def test_pinned_facts_survive_six_compactions_word_for_word(store: Store) -> None:
    """A model whose summaries lose everything (the fallback-prone demo model does):
    pinned facts are in every restoration prompt of the chain, and in every file's
    front matter, exactly as typed; /unpin drops one from the next prompt on."""

    def model(msgs: Sequence[dict[str, object]]) -> str:
        summary = "progressive summary" in str(msgs[-1]["content"])
        return "**Topics Discussed:** nothing kept" if summary else "Ok."

    backend = FakeBackend(default=model)
    session, _host = chat(store, backend)
    session.pin("FACT-001: the budget is 3,000 EUR, not 30,000")
    session.send("start")
    session.pin("FACT-002: pots are 25 cm deep")
    for round_number in range(6):
        session.compact()
        session.send(f"message after compaction {round_number}")
    session.unpin(1)
    session.compact()
    session.send("last")
    session.close()
    chain = files(store)
    assert len(chain) == 8
    for child in chain[1:7]:
        restore = child.messages[0].text
        assert "FACT-001: the budget is 3,000 EUR, not 30,000" in restore
        assert "FACT-002: pots are 25 cm deep" in restore
    assert "FACT-001" not in chain[7].messages[0].text and "FACT-002" in chain[7].messages[0].text
    assert chain[7].meta.pins == ("FACT-002: pots are 25 cm deep",)
    with pytest.raises(ChatloopError, match="no pinned fact 9"):
        session.unpin(9)


def test_what_is_pinned_or_renamed_while_a_continuation_waits_goes_into_it(
    store: Store,
) -> None:
    session, _host = chat(store, FakeBackend("One.", STRUCTURED, "Ack.", "Two.", STRUCTURED))
    session.send("first")
    session.compact()
    session.pin("FACT-009: the gate code is 4711")
    session.rename("Garden, continued")
    session.send("second")
    session.close()
    _parent, child = files(store)
    assert child.meta.title == "Garden, continued"
    assert child.meta.pins == ("FACT-009: the gate code is 4711",)
    assert "FACT-009: the gate code is 4711" in child.messages[0].text


def test_unsaved_messages_never_move_into_another_conversation(small_disk: Path) -> None:
    store = Store(small_disk / "home", cwd=small_disk / "project")
    (small_disk / "project").mkdir()
    other, _ = chat(store, FakeBackend("B.", STRUCTURED))
    other.send("the other conversation")
    other.close()
    session, _host = chat(store, FakeBackend("A.", STRUCTURED, "Ack.", "B2.", STRUCTURED))
    session.send("first of this one")
    filler = fill(small_disk)
    with pytest.raises(StoreError):
        session.send("my tax id is 12-345 " * 300)  # more than a page: must allocate
    with pytest.raises(ChatloopError, match="Not resumed: 1 message"):
        session.resume(other_id(store))
    os.unlink(filler)
    assert session.resume(other_id(store))  # space again: saved here first, then resumed
    session.send("now in the other chain")
    session.close()
    mine = next(s for s in files(store) if any(m.text == "first of this one" for m in s.messages))
    assert any(m.text.startswith("my tax id") for m in mine.messages)
    child = next(s for s in files(store) if s.meta.parent_id == other_id(store))
    assert not any("tax id" in m.text for m in child.messages)


def other_id(store: Store) -> str:
    return next(
        s.meta.id
        for s in files(store)
        if any(m.text == "the other conversation" for m in s.messages)
    )


def test_a_full_history_that_stops_fitting_continues_from_the_summary(store: Store) -> None:
    """--full, then a message that does not fit with the whole history: chatloop
    continues from the parent's summary, and the message is answered in that child."""
    first, _ = chat(store, FakeBackend("Answer one.", STRUCTURED), context_window=1200)
    first.send("first chat " + "about the soil of the beds " * 60)
    first.close()
    backend = FakeBackend("Ack.", "The answer.", STRUCTURED)
    session, host = chat(store, backend, context_window=1200)
    assert session.resume("1", full=True)
    # fits the window after the restoration prompt (about 600 tokens), not after the
    # whole history (about 500)
    session.send("and now a long question " + "with many words " * 150)
    session.close()
    assert host.said("continuing from the summary")
    parent, child = files(store)
    restore, ack, question, reply = child.messages[:4]
    assert restore.restore and ack.restore and question.text.startswith("and now a long")
    assert reply.text.strip() == "The answer." and child.meta.parent_id == parent.meta.id


def test_fit_keeps_every_heading_when_one_paragraph_is_too_long() -> None:
    from chatloop.chat import prompts

    long = prompts.assemble(
        "Initial session.",
        topics=["basil"],
        decisions=["water daily"],
        pending=["drainage"],
        narrative="word " * 240,
    )
    fitted = prompts.fit(long, 100)
    assert prompts.shape(fitted) and len(fitted.split()) <= 100
    assert "- water daily" in fitted and "- drainage" in fitted


def test_fit_always_ends_within_its_budget() -> None:
    """Every budget, from absurdly small to roomy, on summaries of every shape."""
    import random

    from chatloop.chat import prompts

    rng = random.Random(7)
    for _ in range(300):
        rows = [
            rng.choice(
                [
                    "- short",
                    "- a longer bullet with several words in it",
                    "word " * rng.randint(1, 120),
                    "",
                    "plain line",
                ]
            )
            for _ in range(rng.randint(0, 12))
        ]
        text = prompts.assemble(
            "Initial session.",
            topics=["basil"],
            decisions=["d"],
            pending=["p"],
            narrative="\n".join(rows),
        )
        budget = rng.randint(1, 300)
        fitted = prompts.fit(text, budget)
        assert len(fitted.split()) <= max(budget, 0) + 1


def test_facts_a_summarizer_keeps_in_decisions_survive_six_compactions(store: Store) -> None:
    """A scripted model that writes proper summaries and lists every fact it was shown
    (typed, or in the previous summary) under Decisions Made: every fact typed in the
    chain is in the last restoration prompt, word for word, at default settings on a
    2,048-token window."""
    import re

    def model(msgs: Sequence[dict[str, object]]) -> str:
        prompt = str(msgs[-1]["content"])
        if "progressive summary" not in prompt:
            return "Noted."
        facts = sorted(set(re.findall(r"FACT-\d{3}: [a-z ]+ is \d+", prompt)))
        decisions = "\n".join(f"- {fact}" for fact in facts) or "- None."
        return (
            "**Background Context:** A chat about the harbour.\n\n"
            "**Current Session Summary:**\n\n**Topics Discussed:**\n- The harbour\n\n"
            f"**Decisions Made:**\n{decisions}\n\n**Pending:**\n- None."
        )

    session, _host = chat(store, FakeBackend(default=model, window=2048))
    typed = [f"FACT-{n:03d}: the tide gauge reading is {n * 37}" for n in range(1, 8)]
    for fact in typed[:6]:
        session.send(f"Please remember this. {fact}")
        session.compact()
    session.send(typed[6])
    session.close()
    chain = files(store)
    assert len(chain) == 7
    last_restoration = chain[-1].messages[0].text
    assert chain[-1].messages[0].restore
    for fact in typed[:6]:
        assert fact in last_restoration, (fact, last_restoration)


def test_a_wrapped_summary_keeps_no_name_the_transcript_never_had(store: Store) -> None:
    """The demo model writes unstructured text with invented identifiers: the wrapped
    summary keeps its sentences that name only what was typed, and none of the rest."""

    def model(msgs: Sequence[dict[str, object]]) -> str:
        if "progressive summary" in str(msgs[-1]["content"]):
            return (
                "The keeper logged FACT-001 at the pier. FACT-042 was set to 9,999 "
                "by the council. The boats waited for the light."
            )
        return "Noted."

    session, _host = chat(store, FakeBackend(default=model, window=2048))
    session.send("FACT-001: the pier light is green")
    session.close()
    (only,) = files(store)
    summary = only.summary.text if only.summary else ""
    assert "The keeper logged FACT-001 at the pier." in summary
    assert "The boats waited for the light." in summary
    assert "FACT-042" not in summary and "9,999" not in summary


def test_ctrl_c_during_the_compaction_a_message_needs_keeps_the_message(store: Store) -> None:
    """The window is full when a message is sent: the message is saved, compaction
    starts, the person presses Ctrl-C while the model summarizes. The summary built from
    the transcript is used, and the child answers the message (its restoration carries
    it, as for a message the server refused)."""
    backend = FakeBackend("First answer.", KeyboardInterrupt(), "Second answer.")
    session, host = chat(
        store, backend, context_window=700, auto_compact="on", max_tokens=32, compact_threshold=0.99
    )
    in_hand = "the message in hand: " + "the tide came in over the stones " * 40
    session.send("first " + "harbour lights and the keeper's log " * 30)
    session.send(in_hand)  # fits alone, not after the first
    session.close()
    assert host.said("the new session answers your message") and host.said("Summary cut short")
    parent, child = files(store)
    assert parent.meta.summary == "fallback" and parent.meta.status == "closed"
    assert [m.text for m in parent.messages if m.is_query][-1] == in_hand  # saved first
    restoration, answer = child.messages[:2]
    assert restoration.restore and in_hand.strip() in restoration.text
    assert answer.role == "assistant" and answer.text.strip() == "Second answer."


def test_a_fork_carries_the_history_up_to_its_point_and_nothing_after(store: Store) -> None:
    backend = FakeBackend("One.", "Two.", "Three.", STRUCTURED, "Branch answer.", STRUCTURED)
    session, host = chat(store, backend)
    for text in ("first question", "second question", "third question"):
        session.send(text)
    session.fork(2)
    session.send("a different third question")
    session.close()
    parent, fork = files(store)
    assert [m.text for m in parent.messages if m.is_query] == [
        "first question",
        "second question",
        "third question",
    ]
    assert parent.meta.status == "closed" and parent.summary is not None
    assert fork.meta.parent_id == parent.meta.id and fork.meta.extra["forked_at"] == 2
    assert [m.text for m in fork.messages if m.is_query] == ["a different third question"]
    carried = [m for m in fork.messages if m.restore]
    assert [m.text.strip() for m in carried] == [
        "first question",
        "One.",
        "second question",
        "Two.",
    ]
    sent = [str(m["content"]) for m in backend.calls[4]["messages"]]  # the branch's first call
    assert "second question" in sent and "third question" not in sent
    assert not any("Three" in text for text in sent)
    assert sent[-1] == "a different third question"
    assert host.said("Forked:")


def test_a_forks_summary_covers_what_it_carried_and_its_child_says_it_branched(
    store: Store,
) -> None:
    """The copies a fork carries are its own past: its summary covers them (by the
    model, or built from the transcript), so resuming the branch keeps them; the
    restoration prompt of its child says the fork branched from its parent."""
    backend = FakeBackend(
        "One.", "Two.", STRUCTURED, "Branch answer.", STRUCTURED, "Ready.", "Later.", STRUCTURED
    )
    session, _ = chat(store, backend)
    session.send("tomatoes need six hours of sun")
    session.send("the second question")
    session.fork(1)
    session.send("should I use a trellis")
    session.close()
    asked = " ".join(str(m["content"]) for m in backend.calls[4]["messages"])  # its summary
    assert "tomatoes need six hours of sun" in asked and "should I use a trellis" in asked
    assert "the second question" not in asked
    parent, fork = files(store)
    again, _ = chat(store, backend)
    assert again.resume(fork.meta.id)
    again.send("go on")
    again.close()
    (child,) = [s for s in files(store) if s.meta.parent_id == fork.meta.id]
    assert f"it branched from session {parent.meta.id}" in child.messages[0].text
    # built from the transcript (leaving on a signal): the carried question is the goal
    third, _ = chat(store, FakeBackend("Three.", STRUCTURED, "Four."))
    third.send("cucumbers climb")
    third.fork(1)
    third.send("what about shade")
    third.leaving = True
    third.close()
    (branch,) = [
        s
        for s in files(store)
        if s.meta.extra.get("forked_at") and s.meta.parent_id not in (parent.meta.id,)
    ]
    assert branch.summary is not None
    assert "Goal (first request): cucumbers climb" in branch.summary.text


def test_a_compacted_fork_continues_as_a_continuation_not_as_a_fork(store: Store) -> None:
    backend = FakeBackend(
        "One.",
        "Two.",
        STRUCTURED,
        "Branch answer.",
        STRUCTURED,
        "Ready.",
        "Later answer.",
        STRUCTURED,
    )
    session, _ = chat(store, backend)
    for text in ("first question", "second question"):
        session.send(text)
    session.fork(1)
    session.send("a branch question")
    session.compact()
    session.send("after the compaction")
    session.close()
    parent, fork, child = files(store)
    assert fork.meta.extra["forked_at"] == 1 and fork.meta.parent_id == parent.meta.id
    assert child.meta.parent_id == fork.meta.id
    assert "forked_at" not in child.meta.extra and "restored" not in child.meta.extra


def test_a_fork_too_long_to_carry_whole_carries_a_summary(store: Store) -> None:
    """A session held with a large window, branched with a small one (chatloop -r N
    --fork on another model): its history cannot be carried whole, so a summary is."""
    long = "the tide came in over the stones and the boats waited " * 30
    first, _ = chat(store, FakeBackend("A.", "B.", STRUCTURED), context_window=8000)
    first.send("FACT-001 first " + long)
    first.send("second " + long)
    first.close()
    (entry,) = store.session_files()
    before = entry.path
    untouched = Path(before).read_bytes()
    backend = FakeBackend(STRUCTURED, "Branch.", STRUCTURED)
    session, host = chat(store, backend, context_window=700, max_tokens=32)
    continue_file(session, before, fork=True)
    assert host.said("does not fit whole")
    session.send("go on")
    session.close()
    assert Path(before).read_bytes() == untouched  # the forked session stays as it is
    _parent, fork = files(store)
    (carried,) = [m for m in fork.messages if m.restore]
    assert "Decisions Made" in carried.text and fork.meta.extra["forked_at"] == 2
    assert [m.text for m in fork.messages if m.is_query] == ["go on"]


def test_fork_needs_a_query_and_a_real_query_number(store: Store) -> None:
    session, _ = chat(store, FakeBackend("One."))
    with pytest.raises(ChatloopError, match="Nothing to fork"):
        session.fork()
    session.send("only question")
    with pytest.raises(ChatloopError, match="no query 5"):
        session.fork(5)
    session.close()


def test_retry_and_edit_ask_again_in_a_branch_that_never_saw_the_first_answer(
    store: Store,
) -> None:
    backend = FakeBackend(
        "One.", "Two.", STRUCTURED, "Two again.", STRUCTURED, "Two, edited.", STRUCTURED
    )
    session, host = chat(store, backend)
    session.send("first question")
    session.send("second question")
    session.again()
    sent = [str(m["content"]) for m in backend.calls[3]["messages"]]
    assert sent[-1] == "second question" and not any("Two" in text for text in sent)
    session.again("second question, put better")
    session.close()
    original, retried, edited = files(store)
    assert [m.text for m in original.messages if m.is_query] == [
        "first question",
        "second question",
    ]
    assert retried.meta.parent_id == original.meta.id and retried.meta.extra["forked_at"] == 1
    assert [m.text for m in retried.messages if m.is_query] == ["second question"]
    assert edited.meta.parent_id == retried.meta.id and edited.meta.extra["forked_at"] == 0
    assert [m.text for m in edited.messages if m.is_query] == ["second question, put better"]
    assert [m.text.strip() for m in edited.messages if m.restore] == ["first question", "One."]
    forked = [text for text, _ in host.notices if text.startswith("Forked: ")]
    assert forked[0].endswith(
        f"branches from {original.meta.id} after query 1 (2 messages carried)."
    )
    # the branch of the branch begins at its start, with the two copies it began with
    assert forked[1].endswith("at its start, carrying the 2 messages it began with."), forked


def test_retry_before_any_message_says_so(store: Store) -> None:
    session, _ = chat(store, FakeBackend())
    with pytest.raises(ChatloopError, match="Nothing to ask again"):
        session.again()


def test_counts_of_queries_read_as_english(store: Store) -> None:
    """One query is "1 query" in what the person is told and in the restoration prompt."""
    session, host = chat(store, FakeBackend(STRUCTURED, default="Noted."))
    session.send("just one question")
    session.compact()
    assert host.said("(1 query) from its summary")
    session.send("and another")
    assert host.said("(1 query).")  # Session Restored … continues … (1 query).
    restoration = session.messages[0].text
    assert ", 1 query, " in restoration and "1 queries" not in restoration
    session.send("and a third")
    session.close()
    assert host.said("with its summary: 1 query,")  # the parent, at the compaction
    assert host.said("with its summary: 2 queries,")  # the child, at the end
    assert not host.said("1 queries")


def test_ctrl_c_while_the_call_is_planned_is_a_cancelled_reply(store: Store) -> None:
    """Planning may ask the server to count tokens: Ctrl-C there is recorded as a
    cancelled reply, as during the stream (it escaped the turn, leaving the message
    unanswered and unmarked)."""
    from chatloop.chat.turn import run_turn

    recorded: list[Message] = []

    def planning(messages: Sequence[Message]) -> list[ChatMessage]:
        raise KeyboardInterrupt

    session, _host = chat(store, FakeBackend("unused"))
    result = run_turn(
        session.agent,
        session.backend,
        [Message.create("user", T0, text="hi")],
        build_context=planning,
        record=recorded.append,
        clock=Clock(),
    )
    assert result.interrupted
    (reply,) = recorded
    assert reply.interrupted and reply.stop_reason == "cancelled" and reply.usage is None


def test_what_a_summary_counts_as_said_in_a_fork_of_a_continued_session() -> None:
    """A fork of a continued session carries its restoration prompt and acknowledgment
    too: those stay apart (the summary they hold is given separately); the copies of
    what was said count as said."""
    from chatloop.chat import prompts

    prompt = prompts.restoration_prompt(
        session_id="s1",
        date="2026-11-21 10:00",
        queries=1,
        tokens=10,
        summary="**Background Context:** x",
    )
    carried = [
        Message.create("user", T0, text=prompt, restore=True),
        Message.create("assistant", T0, text="Ready.", restore=True),
        Message.create("user", T0, text="a question said in the parent", restore=True),
        Message.create("assistant", T0, text="its answer", restore=True),
        Message.create("user", T0, text="said in the branch"),
    ]
    said = prompts.as_said(carried)
    assert [m.restore for m in said] == [True, True, False, False, False]
    assert [m.text for m in said] == [m.text for m in carried]


def test_a_chat_writes_each_time_to_the_second(store: Store) -> None:
    """A chat's clock is its store's, which keeps whole seconds by default, so each
    frame's time is written as a short ``HH:MM:SS`` on the session's first day
    (format 2), not as full ISO text with microseconds (which also kept `show` and
    `export` off their fast path)."""
    import re

    from chatloop.chat.agent import load_agent
    from chatloop.chat.session import ChatSession
    from tests.hosts import AGENTS, TEST_SETTINGS, ScriptedHost

    store = Store(store.root, cwd=store.cwd)  # (the fixture's clock has microseconds)
    session = ChatSession(
        load_agent(AGENTS / "simple_sally.py"),
        FakeBackend("Fine."),
        store,
        TEST_SETTINGS,
        ScriptedHost(),
    )
    session.send("what time is it")
    session.close()
    (found,) = files(store)
    assert found.meta.created.microsecond == 0
    raw = Path(next(iter(store.session_files())).path).read_bytes()
    heads = re.findall(rb"\n<!-- [a-z2-7]{8} (user|assistant|summary) (\S+)", raw)
    assert heads and all(re.fullmatch(rb"\d\d:\d\d:\d\d", at) for _, at in heads), heads


@pytest.mark.parametrize("how", ["compact", "resume"])
def test_the_first_message_of_a_continuation_is_on_disk_before_the_acknowledgment(
    store: Store, how: str
) -> None:
    """Issue 31: after /compact (or a resume from a summary) the message the person types
    is saved in the child before the acknowledgment streams; the acknowledgment is asked
    without it and stands before it in the file, so the file reads as always."""
    seen: list[list[str]] = []

    def ack(messages: Sequence[ChatMessage]) -> str:
        child = max(store.project_dir.glob("*.md"), key=lambda p: p.stat().st_mtime_ns)
        seen.append([m.text for m in parse_markdown(child.read_bytes()).session.messages])
        assert "keep going" not in str(messages)  # asked without the typed message
        return "Ack."

    backend = FakeBackend("One.", STRUCTURED, ack, "Two.", STRUCTURED)
    session, _host = chat(store, backend)
    session.send("first question")
    if how == "compact":
        session.compact()
    else:
        session.close()
        session, _host = chat(store, backend)
        assert session.resume("1")
    session.send("keep going")
    session.close()
    (on_disk,) = seen
    # the restoration, the exchange a resume carries word for word (a compaction leaves the
    # first exchange to the summary), then the message
    carried = [] if how == "compact" else ["first question", "One."]
    assert [t.strip() for t in on_disk[1:]] == [*carried, "keep going"]
    child = files(store)[1]
    roles = [(m.role, m.restore, m.text.strip()) for m in child.messages if m.role != "summary"]
    copies = [("user", True, "first question"), ("assistant", True, "One.")]
    assert roles[1:] == [
        ("assistant", True, "Ack."),
        *(copies if carried else []),
        ("user", False, "keep going"),
        ("assistant", False, "Two."),
    ]
    for path in store.project_dir.glob("*.md"):
        assert parse_markdown(path.read_bytes()).problems == (), path


def test_a_message_too_long_for_the_window_is_refused_not_saved(store: Store) -> None:
    """Counted before it is saved: a message that cannot be sent even alone is refused
    with nothing written (Up recalls it), so the history never holds it."""
    session, _host = chat(store, FakeBackend("One.", "Two.", STRUCTURED), context_window=700)
    session.send("hello")
    with pytest.raises(ChatloopError, match="does not fit") as refused:
        session.send("paste " + "lorem ipsum dolor sit amet " * 300)
    assert "nothing was sent" in refused.value.message
    session.send("a short one")
    session.close()
    assert queries(store) == ["hello", "a short one"]


def test_the_first_message_too_long_for_the_window_is_kept_unsent(store: Store) -> None:
    """Saved first, then counted: a new session's first message that cannot be sent
    stays in the file it began, marked as not sent (never a query, never sent, never
    only in the input history); the refusal says where; the chat goes on there."""
    session, _host = chat(store, FakeBackend("Short answer.", STRUCTURED), context_window=700)
    long = "paste " + "lorem ipsum dolor sit amet " * 300
    with pytest.raises(ChatloopError, match="does not fit") as refused:
        session.send(long)
    assert session.writer is not None
    assert f"kept in session {session.writer.meta.id}, marked as not sent" in refused.value.hint
    session.send("hello")
    session.close()
    assert queries(store) == ["hello"]
    (found,) = files(store)
    kept, asked = found.messages[0], found.messages[1]
    assert kept.text == long and kept.unsent and not kept.is_query
    assert asked.text == "hello" and found.meta.queries == 1
    sent = [str(m["content"]) for c in session.backend.calls for m in c["messages"]]  # type: ignore[attr-defined]
    assert all("lorem ipsum" not in text for text in sent)  # never part of the conversation
    assert "── Not sent" in transcript_text(found)
