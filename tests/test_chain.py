"""Summaries, compaction and resume, with a scripted backend (tests/fakes.py)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest

from chatloop.backends.base import ChatMessage, ContextOverflow, estimate_prompt, estimate_tokens
from chatloop.chat import chain, ledger, prompts
from chatloop.chat.context import plan
from chatloop.config import DEFAULT_SUMMARY_MAX_TOKENS
from chatloop.errors import BackendError, ChatloopError
from chatloop.format import Message, ToolCall, ToolResult, Usage
from chatloop.store.store import Store
from chatloop.ui.listing import transcript_text
from tests.conftest import T0, exchange, new_meta
from tests.fakes import STRUCTURED, Capped, FakeBackend
from tests.hosts import TEST_SETTINGS, chat, files


def talk(n: int) -> list[Message]:
    return [m for i in range(1, n + 1) for m in exchange(i)]


# ---------------------------------------------------------------- summaries


def test_summary_request_is_one_message_without_tools_and_keeps_the_structure() -> None:
    backend = FakeBackend(STRUCTURED)
    outcome = chain.summarize(backend, talk(3), previous=None, window=8192)
    summary, entries = ledger.split(outcome.text)
    assert summary == STRUCTURED and not outcome.fallback and outcome.calls == 1
    assert entries == [ledger.Entry("goal", "Question number 1: what is in notes-1.txt?")]
    (call,) = backend.calls
    assert call["tools"] is None and len(call["messages"]) == 1
    prompt = call["messages"][0]["content"]
    assert 'write "Initial session."' in prompt and "do not invent anything" in prompt
    assert "User: Question number 3: what is in notes-3.txt?" in prompt
    assert 'Assistant called read_file({"path": "notes-1.txt"})' in prompt
    assert call["options"]["max_tokens"] == DEFAULT_SUMMARY_MAX_TOKENS


def test_previous_summary_is_given_to_condense() -> None:
    backend = FakeBackend(STRUCTURED)
    chain.summarize(
        backend, talk(1), previous="**Background Context:** x\nEarlier stuff", window=8192
    )
    prompt = backend.prompts()[0]
    assert "Previous summary:\n\n**Background Context:** x" in prompt
    assert prompts.BACKGROUND_RULE_CHAINED in prompt


def test_shapeless_output_is_wrapped_and_markers_are_stripped() -> None:
    raw = (
        "<!-- SESSION_SUMMARY_START -->\nWe talked about notes files.\n<!-- SESSION_SUMMARY_END -->"
    )
    outcome = chain.summarize(FakeBackend(raw), talk(2), previous=None, window=8192)
    assert not outcome.fallback and prompts.shape(outcome.text)
    assert "We talked about notes files." in outcome.text
    assert "SESSION_SUMMARY" not in outcome.text
    assert outcome.text.startswith("**Background Context:** Initial session.")


def test_one_retry_then_the_deterministic_fallback() -> None:
    retried = chain.summarize(
        FakeBackend(BackendError("boom", ""), STRUCTURED), talk(1), previous=None, window=8192
    )
    assert not retried.fallback and retried.calls == 2
    failing = FakeBackend(BackendError("boom", ""), "   ")  # an empty answer is a failure too
    outcome = chain.summarize(failing, talk(3), previous=STRUCTURED, window=8192)
    assert outcome.fallback and outcome.error == "The model returned an empty summary"
    assert len(failing.calls) == 2 and prompts.shape(outcome.text)
    text = outcome.text
    assert "Goal (first request): Question number 1: what is in notes-1.txt?" in text
    assert "Tools used: read_file" in text and "notes-3.txt" in text
    assert (
        "**Background Context:** Settled: Water every 2 days, 250 ml each. Earlier: "
        "Watering schedule for basil in pots/basil.md. Open then: Check drainage."
    ) in text
    assert "- Water every 2 days, 250 ml each" in text  # carried, word for word
    assert len(text.split()) < prompts.MAX_WORDS


def test_a_slow_model_times_out_and_falls_back() -> None:
    slow = FakeBackend(default="word " * 50, delay=0.02)
    outcome = chain.summarize(slow, talk(1), previous=None, window=8192, timeout=0.1)
    assert outcome.fallback and "took longer than" in (outcome.error or "")
    assert len(slow.calls) == 2


def test_long_transcripts_are_summarized_in_parts_within_the_window() -> None:
    window = 1024
    backend = FakeBackend(default="- notes on this part")
    long = talk(50)
    assert estimate_tokens("\n".join(prompts.transcript_lines(long))) > 3 * window
    outcome = chain.summarize(backend, long, previous=STRUCTURED, window=window)
    assert len(backend.calls) > 3 and outcome.calls == len(backend.calls)
    for call in backend.calls:  # every request leaves room for the reply
        sent = estimate_tokens(call["messages"][0]["content"])
        assert sent + call["options"]["max_tokens"] <= window
    assert "Part 1 of" in backend.prompts()[0]
    assert "Notes on the session, part by part" in backend.prompts()[-1]
    assert prompts.shape(outcome.text)


def test_summaries_stay_under_500_words() -> None:
    outcome = chain.summarize(
        FakeBackend(STRUCTURED + "\n- more" * 700), talk(1), previous=None, window=8192
    )
    assert len(ledger.split(outcome.text)[0].split()) <= prompts.MAX_WORDS + 1


def test_restoration_prompt_names_the_parent_and_asks_for_an_acknowledgment(
    store: Store,
) -> None:
    with store.create(new_meta(parent_id="20260101-000000-aaaaaaaa")) as writer:
        for m in talk(2):
            writer.append(m)
        writer.finalize(Message.create("summary", T0, text=STRUCTURED))
        parent = chain.closed_parent(writer)
    text = chain.restoration(parent, STRUCTURED)
    assert f"session {parent.meta.id} of 2026-11-21 14:30, 2 queries" in text
    assert "it continued session 20260101-000000-aaaaaaaa" in text
    assert STRUCTURED in text and "Acknowledge briefly (" in text


# ---------------------------------------------------------------- reading a parent


def closed_session(store: Store, summary: str | None = STRUCTURED, n: int = 2) -> Path:
    with store.create(new_meta()) as writer:
        for m in talk(n):
            writer.append(m)
        writer.finalize(Message.create("summary", T0, text=summary) if summary else None)
        return writer.path


def test_read_parent_takes_the_summary_from_the_tail_of_a_large_file(store: Store) -> None:
    big = "x" * 1_000_000
    with store.create(new_meta()) as writer:
        for _ in range(3):
            writer.append(Message.create("user", T0, text=big))
        writer.finalize(Message.create("summary", T0, text=STRUCTURED))
        path = writer.path
    parent = chain.read_parent(store, path)
    assert parent.summary == STRUCTURED and parent.note is None
    assert parent.meta.queries == 3 and path.stat().st_size > 3_000_000


def test_read_parent_reports_missing_damaged_and_stale_summaries(store: Store) -> None:
    assert chain.read_parent(store, closed_session(store, summary=None)).summary is None
    path = closed_session(store)
    data = path.read_bytes().replace(b"<!-- SESSION_SUMMARY_END -->", b"<!-- SESSION_SUMMARY_EN")
    path.write_bytes(data)
    damaged = chain.read_parent(store, path)
    assert damaged.summary == STRUCTURED and "edited or damaged" in (damaged.note or "")
    path.write_bytes(data + b"\n<!-- abcdefgh user 10:00:00 -->\nx\n<!-- /abcdefgh 00000000 -->\n")
    assert chain.read_parent(store, path).summary is None


# ---------------------------------------------------------------- the chat session
# These drive ChatSession directly with a scripted host (tests/hosts.py): the chain
# policy lives there, so no terminal is needed to test it.


def test_exit_writes_the_summary_between_markers_and_closes_the_file(store: Store) -> None:
    session, host = chat(store, FakeBackend("First answer.", STRUCTURED))
    session.send("plan the basil watering")
    closed = session.close()
    assert "Generating session summary..." in host.work and host.said("with its summary")
    assert closed.parent is not None and closed.unsaved == ()
    (found,) = files(store)
    assert found.meta.status == "closed" and found.meta.summary == "model"
    raw = Path(store.find_file(found.meta.id)).read_text()
    stored = ledger.join(STRUCTURED, [ledger.Entry("goal", "plan the basil watering")])
    assert f"<!-- SESSION_SUMMARY_START -->\n{stored}\n<!-- SESSION_SUMMARY_END -->" in raw


def test_compact_starts_a_linked_session_and_the_context_shrinks(store: Store) -> None:
    long = "details of the basil beds " * 120
    backend = FakeBackend("A.", "B.", STRUCTURED, "Acknowledged: basil, ready.", "C.", STRUCTURED)
    session, host = chat(store, backend)
    session.send(long)
    session.send("And the roses?")
    before_compact = session.plan().tokens
    session.compact()
    assert host.said("the new session begins with your next message")
    assert len(files(store)) == 1  # the child is written with the next message
    assert session.plan().tokens < before_compact / 2  # the context really shrank
    summarized = backend.prompts()[2]  # the summary covers what the child does not carry
    assert "details of the basil beds" in summarized and "And the roses?" not in summarized
    session.send("three")
    assert host.said("Session Restored")
    totals, base = session.totals, session.chain_base
    assert totals.queries == 1 and totals.restoration > 0 and base > 0
    session.close()
    parent, child = files(store)
    assert parent.meta.status == child.meta.status == "closed"
    assert child.meta.parent_id == parent.meta.id
    assert base == parent.meta.tokens_in + parent.meta.tokens_out + parent.meta.restoration_tokens
    child_path = store.find_file(child.meta.id)
    assert child.meta.parent_file == f"{parent.meta.id}.md"  # relative to its own folder
    assert store.parent_of(child_path, child.meta) == store.find_file(parent.meta.id)
    restore, ack, asked, answered, three, _ = child.messages[:6]
    assert restore.restore and ack.restore and ack.text.strip() == "Acknowledged: basil, ready."
    assert STRUCTURED in restore.text and three.text == "three"
    assert "Its last 2 messages follow word for word" in restore.text
    assert (asked.text, answered.text.strip()) == ("And the roses?", "B.")  # word for word
    assert asked.copy and answered.copy and asked.restore and not asked.is_query
    assert child.meta.queries == 1 and child.meta.restoration_tokens == totals.restoration
    assert "## Session restored" in Path(store.find_file(child.meta.id)).read_text()
    after = backend.calls[4]["messages"]  # the call that answers "three"
    roles = ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m["role"] for m in after] == roles
    assert after[1]["content"] == restore.text
    assert [m["content"].strip() for m in after[3:]] == ["And the roses?", "B.", "three"]
    ack_call = backend.calls[3]["messages"]  # the acknowledgment saw the prompt alone
    assert [m["role"] for m in ack_call] == ["system", "user"]
    before = backend.calls[1]["messages"]
    assert estimate_tokens(str(after)) < estimate_tokens(str(before)) / 2
    assert sum(s.meta.queries for s in files(store)) == 3


def test_a_resume_from_a_summary_carries_the_last_exchanges_word_for_word(
    store: Store,
) -> None:
    """`-r`/`/resume` from a summary: the child's first call is the restoration prompt,
    the acknowledgment, the parent's last exchanges as copies (recorded so in the file,
    counting nothing), then the new message."""
    first, _ = chat(store, FakeBackend("A.", "B.", "C.", STRUCTURED))
    for text in ("Basil?", "Roses?", "Tulips?"):
        first.send(text)
    first.close()
    backend = FakeBackend("Ready.", "D.", STRUCTURED)
    second, host = chat(store, backend)
    assert second.resume("1") is True
    assert host.said("Where it ended:\nYou: Tulips?")
    second.send("And lilies?")
    second.close()
    parent, child = files(store)
    assert child.meta.parent_id == parent.meta.id
    restore, ack, *rest = [m for m in child.messages if m.role != "summary"]
    assert restore.restore and ack.restore and "Its last 6 messages follow" in restore.text
    carried = [m for m in rest if m.copy]
    said = ["Basil?", "A.", "Roses?", "B.", "Tulips?", "C."]
    assert [m.text.strip() for m in carried] == said  # all of it fits a 4,096 window
    assert all(m.restore and not m.is_query for m in carried)
    assert child.meta.queries == 1  # the copies count nothing: their own file has
    assert child.meta.tokens_in + child.meta.tokens_out == sum(
        m.usage.total for m in rest if m.usage and not m.copy
    )
    ack_call, answer_call = backend.calls[0]["messages"], backend.calls[1]["messages"]
    assert [m["role"] for m in ack_call] == ["system", "user"]
    sent = [str(m["content"]).strip() for m in answer_call[3:]]
    assert sent == [*said, "And lilies?"]


def _answers(messages: Sequence[ChatMessage]) -> str:
    """Replies by request: a summary, an acknowledgment, or an answer."""
    last = str(messages[-1]["content"])
    if "progressive summary" in last:
        return STRUCTURED
    return "Ready." if "Acknowledge briefly" in last else "Noted, and watered."


def test_a_compaction_records_what_its_summary_leaves_and_a_resume_carries_it_or_summarizes_all(
    store: Store,
) -> None:
    """A compaction's summary leaves the carried exchanges out and says how many in the
    front matter; a later resume whose window cannot carry them all gets a summary of
    the whole parent instead (nothing is in neither the summary nor the child)."""
    note = "the north beds need water every other morning " * 6
    first, _ = chat(store, FakeBackend(default=_answers), context_window=2048)
    for n in range(1, 5):
        first.send(f"note {n}: {note}")
    first.compact()
    first.close()  # the person leaves before the child is written
    (parent,) = files(store)
    leaves = parent.meta.summary_leaves
    assert leaves >= 2 and parent.meta.status == "closed"
    backend = FakeBackend(default=_answers)
    small, host = chat(store, backend, context_window=700)
    assert small.resume("1")
    assert host.said("summarizing the whole session for this continuation")
    asked = [p for p in backend.prompts() if "progressive summary" in p]
    assert asked and "note 4:" in asked[-1]  # the whole parent, the part left out included
    small.close()


def test_a_message_that_leaves_no_room_for_the_copies_goes_with_fewer(store: Store) -> None:
    """A child not written yet carries copies; a long message that fits with its
    restoration prompt alone but not with them all is sent, and the oldest copies give
    way (said), instead of the message being refused."""
    note = "the north beds need water every other morning " * 6
    backend = FakeBackend(default=_answers)
    session, host = chat(store, backend, context_window=2048)
    for n in range(1, 5):
        session.send(f"note {n}: {note}")
    session.compact()
    long = "word " * 1200
    session.send(long)
    assert host.said("left out")
    session.close()
    child = files(store)[1]
    copies = [m for m in child.messages if m.copy]
    assert 0 < len(copies) < 6 and copies[0].role == "user"  # whole exchanges, fewer
    assert f"Its last {len(copies)} messages follow" in child.messages[0].text
    assert [m.text for m in child.messages if m.is_query] == [long]
    for call in backend.calls:
        assert estimate_prompt(call["messages"]) + call["options"]["max_tokens"] <= 2048


def test_an_acknowledgment_cut_by_its_cap_ends_at_its_last_whole_sentence(
    store: Store,
) -> None:
    cut = Capped("I remember the basil plan. We agreed to water every two")
    session, _ = chat(store, FakeBackend("A.", STRUCTURED, cut, "B.", STRUCTURED))
    session.send("Basil?")
    session.compact()
    session.send("And now?")
    session.close()
    child = files(store)[1]
    ack = child.messages[1]
    assert ack.restore and ack.text == "I remember the basil plan."


@pytest.mark.parametrize(
    ("cut", "kept"),
    [
        ("I am ready. We talked about basil and the", "I am ready."),
        ("Topics:\n1. Basil in pots\n2. Roses pruned in ear", "Topics:\n1. Basil in pots"),
        ("We discussed basil, e.g. watering", "We discussed basil, e.g. watering"),
        ("- basil\n- roses and th", "- basil"),
        ('Done! "Yes." And then', 'Done! "Yes."'),
    ],
)
def test_whole_sentences_stops_at_a_sentence_or_a_line_never_at_a_number(
    cut: str, kept: str
) -> None:
    assert prompts.whole_sentences(cut) == kept


def test_nothing_to_compact_is_an_error_that_changes_nothing(store: Store) -> None:
    session, _host = chat(store, FakeBackend())
    with pytest.raises(ChatloopError, match="Nothing to compact"):
        session.compact()
    assert files(store) == []


def test_resume_by_number(store: Store) -> None:
    first, _ = chat(store, FakeBackend("A.", STRUCTURED))
    first.send("first chat")
    first.close()
    backend = FakeBackend("Ready.", "B.", STRUCTURED)
    second, host = chat(store, backend)
    assert second.resume("1") is True
    second.send("second chat")
    second.close()
    one, two = files(store)
    assert two.meta.parent_id == one.meta.id and two.messages[0].restore
    assert STRUCTURED in backend.calls[0]["messages"][-1]["content"]
    picker, host = chat(store, FakeBackend("Ready.", STRUCTURED))
    host.pick_none = True
    assert picker.resume("") is False and host.said("Nothing resumed.")


def test_where_it_ended_says_what_a_reply_without_text_did(store: Store) -> None:
    with store.create(new_meta(title="tools")) as writer:
        for message in exchange(1)[:-1]:  # the question, a tool call, its result: no answer
            writer.append(message)
        writer.finalize()
    session, host = chat(store, FakeBackend("Ready.", STRUCTURED))
    assert session.resume("1") is True
    assert host.said("Simple Sally: (called read_file)") and not host.said("empty reply")


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ({}, "(the model sent an empty reply)"),
        ({"text": " \n "}, "(the model sent an empty reply)"),  # blank: empty, as in the chat
        ({"stop_reason": "length"}, "(no reply: the model reached its token limit)"),
        (
            {
                "interrupted": True,
                "stop_reason": "cancelled",
                "tool_calls": (ToolCall("c1", "read_file", "{}"),),
            },
            "(no reply: interrupted before any text arrived)",
        ),
    ],
)
def test_where_it_ended_says_what_show_says_of_a_reply_without_text(
    store: Store, reply: dict[str, object], said: str
) -> None:
    with store.create(new_meta(title="quiet")) as writer:
        writer.append(Message.create("user", T0, text="anyone there?"))
        writer.append(Message.create("assistant", T0, **reply))
        writer.finalize()
    session, host = chat(store, FakeBackend("Ready.", STRUCTURED))
    assert session.resume("1") is True
    assert host.said(f"Simple Sally: {said}")
    assert said in transcript_text(files(store)[0])  # the same words as `show`


def test_where_it_ended_says_a_blank_question_was_an_empty_message(store: Store) -> None:
    with store.create(new_meta(title="blank")) as writer:
        writer.append(Message.create("user", T0, text=" "))
        writer.append(Message.create("assistant", T0, text="fine"))
        writer.finalize()
    session, host = chat(store, FakeBackend("Ready.", STRUCTURED))
    assert session.resume("1") is True
    assert host.said("You: (an empty message)\nSimple Sally: fine")


def test_resume_full_restores_the_history_when_it_fits(store: Store) -> None:
    first, _ = chat(store, FakeBackend("Answer one.", STRUCTURED))
    first.send("first chat")
    first.close()
    backend = FakeBackend("B.", STRUCTURED)
    second, _ = chat(store, backend)
    assert second.resume("1", full=True)
    second.send("second")
    second.close()
    sent = backend.calls[0]["messages"]
    assert [m["content"].strip() for m in sent[1:]] == ["first chat", "Answer one.", "second"]
    _, child = files(store)
    assert child.meta.extra.get("restored") == "full" and child.meta.parent_id
    assert not any(m.restore for m in child.messages)
    big, _ = chat(store, FakeBackend("x", STRUCTURED), context_window=4000)
    big.send("word " * 400)
    big.close()
    tiny, host = chat(store, FakeBackend("Ready.", "y", STRUCTURED), context_window=300)
    assert tiny.resume("1", full=True)
    assert host.said("does not fit the budget") and host.said("using its summary instead")
    tiny.close()


def test_resume_of_an_interrupted_session_writes_its_summary_first(store: Store) -> None:
    writer = store.create(new_meta())
    for m in talk(2):
        writer.append(m)
    writer.close()  # never finalized: a crash
    session, host = chat(store, FakeBackend(STRUCTURED, "Ready.", "Go on.", STRUCTURED))
    assert session.resume("1")
    session.send("and then?")
    session.close()
    assert host.said("it has no summary") and host.said("Wrote the missing summary")
    parent, child = files(store)
    assert parent.summary is not None and parent.meta.status == "closed"
    assert child.meta.parent_id == parent.meta.id


def test_resume_of_a_file_that_is_gone_is_an_error_and_the_chat_goes_on(store: Store) -> None:
    session, _host = chat(store, FakeBackend("A.", "B.", STRUCTURED))
    session.send("hello")
    from chatloop.chat import continuation
    from chatloop.store.index import Index

    with Index(store) as index:
        index.sync()
        row = index.list_sessions()[0]
    gone = row._replace(path=str(store.project_dir / "20260101-000000-deadbeef.md"))
    with pytest.raises(ChatloopError, match="gone or unreadable"):
        continuation.locate(store, gone)
    session.send("still here")
    session.close()
    (only,) = files(store)
    assert [m.text for m in only.messages if m.is_query] == ["hello", "still here"]


def test_resume_goes_on_with_the_sessions_own_agent_unless_one_was_chosen(store: Store) -> None:
    """One rule (``continuation.agent_for``): the agent a session was held with goes
    on, said in a note, unless the person chose one for this run (--agent, /agent)."""
    first, _ = chat(store, FakeBackend("A.", STRUCTURED))
    first.send("hi")
    first.close()
    own, host = chat(store, FakeBackend("Ready.", STRUCTURED), agent="file_fiona.py")
    assert own.resume("1") and host.questions == []
    assert own.agent.name == "Simple Sally" and host.said("session's own agent, Simple Sally")
    own.close()
    chosen, host = chat(
        store, FakeBackend("Ready.", "Yes.", STRUCTURED), agent="file_fiona.py", agent_named=True
    )
    assert chosen.resume("1") and host.questions == []
    assert chosen.agent.name == "File Fiona"
    chosen.send("go on")
    chosen.close()
    assert len(files(store)) == 2


def test_resume_of_an_unknown_session_names_the_closest(store: Store) -> None:
    first, _ = chat(store, FakeBackend("A.", STRUCTURED))
    first.send("hi")
    first.close()
    (found,) = files(store)
    wrong = found.meta.id[:-1] + ("0" if found.meta.id[-1] != "0" else "1")
    session, _host = chat(store, FakeBackend())
    with pytest.raises(ChatloopError) as caught:
        session.resume(wrong)
    assert f"Did you mean {found.meta.id}?" in caught.value.hint
    with pytest.raises(ChatloopError, match="There is no session number 7"):
        session.resume("7")


def test_auto_compaction_keeps_every_message_and_links_the_chain(store: Store) -> None:
    typed = [
        f"message {i}: " + "tell me about the garden beds and their soil " * 3 for i in range(24)
    ]
    backend = FakeBackend(
        default=lambda msgs: (
            STRUCTURED if "progressive summary" in str(msgs[-1]["content"]) else "Short reply."
        )
    )
    session, host = chat(store, backend, context_window=900, auto_compact="on", max_tokens=64)
    for text in typed:
        session.send(text)
    session.close()
    chain_files = files(store)
    assert len(chain_files) >= 2 and not any(
        tone == "warn" and "error" in text for text, tone in host.notices
    )
    for parent, child in itertools.pairwise(chain_files):
        assert child.meta.parent_id == parent.meta.id
    sent = [m.text for s in chain_files for m in s.messages if m.is_query]
    assert sent == typed
    for call in backend.calls:  # nothing sent ever overflowed the window
        assert plan("", [], window=900).budget.window >= estimate_tokens(str(call["messages"]))


def test_ask_mode_asks_and_off_mode_only_warns(store: Store) -> None:
    text = "describe the soil " * 10
    settings = TEST_SETTINGS._replace(context_window=1200, compact_threshold=0.05)
    declined, host = chat(store, FakeBackend("A.", STRUCTURED), settings=settings, answers=[False])
    declined.send(text)
    assert host.questions == ["Compact now?"] and host.said("Context ") and host.said("full (")
    declined.close()
    assert len(files(store)) == 1
    agreed, host = chat(
        store, FakeBackend("A.", STRUCTURED, "Ack.", "B.", STRUCTURED), settings=settings
    )  # the default answer: yes
    agreed.send(text)
    agreed.send("and more")  # the child is written with the next message
    agreed.close()
    assert host.said("Session Restored") and len(files(store)) == 3
    off, host = chat(store, FakeBackend("A.", STRUCTURED), settings=settings, auto_compact="off")
    off.send(text)
    off.close()
    assert host.questions == [] and host.said("/compact continues in a new session")
    assert len(files(store)) == 4


def test_a_server_overflow_compacts_and_the_child_answers_the_message(store: Store) -> None:
    backend = FakeBackend(
        "A.",
        ContextOverflow("too long", "", window=2048),
        STRUCTURED,
        "Ack, and the answer.",
        STRUCTURED,
    )
    session, host = chat(store, backend)
    session.send("first")
    session.send("second")
    session.close()
    assert host.said("compacting")
    parent, child = files(store)
    assert [m.text for m in parent.messages if m.is_query] == ["first", "second"]
    failed = parent.messages[-2]  # the exchange that overflowed is marked in the parent
    assert failed.role == "assistant" and failed.interrupted and failed.stop_reason == "error"
    assert "Answer it after your acknowledgment:\n\nsecond" in child.messages[0].text
    assert child.meta.queries == 0 and parent.meta.queries == 2


def test_ctrl_c_during_the_summary_still_saves_with_the_fallback(store: Store) -> None:
    session, host = chat(store, FakeBackend("A.", KeyboardInterrupt()))
    session.send("remember pots/basil.md")
    session.close()
    assert host.said("Summary cut short")
    (found,) = files(store)
    assert found.meta.status == "closed" and found.meta.summary == "fallback"
    assert "pots/basil.md" in (found.summary.text if found.summary else "")


def test_tool_results_are_pruned_from_the_sent_copy_only() -> None:
    messages = []
    for i in range(6):
        call = ToolCall(f"c{i}", "read", "{}")
        result = ToolResult(f"c{i}", "read", "z" * 2000)
        messages += [
            Message.create("user", T0, text=f"q{i}"),
            Message.create("assistant", T0, tool_calls=(call,), usage=Usage(1, 1)),
            Message.create("tool", T0, tool_results=(result,)),
        ]
    full = plan("sys", messages, window=100_000)
    assert full.fits and full.pruned == 0
    tight = plan("sys", messages, window=2200, reserve=200)
    assert tight.fits and tight.pruned > 0
    assert tight.wire[-1]["content"] == "z" * 2000  # the latest result is kept
    assert "left out to save context" in str(tight.wire[3]["content"])
    assert messages[2].tool_results[0].content == "z" * 2000  # the transcript keeps it
    assert not plan("sys", messages, window=600, reserve=200).fits


class BudgetedModel:
    """A scripted model that always uses its whole ``max_tokens`` (as a base model does):
    replies of exactly that many estimated tokens, summaries in the proper shape."""

    def __call__(self, messages: list[dict[str, object]], limit: int) -> str:
        last = str(messages[-1]["content"])
        if "progressive summary" in last:
            pad = "\n".join(f"- settled point {i} about the beds" for i in range(limit))
            return prompts.cap_words(f"{STRUCTURED}\n{pad}", limit * 3 // 4)
        return "word " * (limit * 4 // 5)  # 5 characters: 1.25 estimated tokens a word


def test_a_2k_window_at_default_settings_compacts_every_eight_messages_or_more(
    store: Store,
) -> None:
    """The targets of issues 14 and 32 at default settings (only the window is given, as
    the server would): restoration prompt + acknowledgment within 25% of the window, and
    with the exchanges the child carries word for word within 35%; at least the last
    exchange carried; at least 8 messages of its own (about 40 words each) in every
    file; no request whose prompt plus its max_tokens passes the window."""
    window = 2048
    model = BudgetedModel()
    backend = FakeBackend()  # its reply depends on the max_tokens of the call it answers
    backend.default = lambda msgs: model(list(msgs), backend.calls[-1]["options"]["max_tokens"])
    session, host = chat(store, backend, context_window=window)
    typed = [
        f"note {i}: " + "the basil beds need water every other morning " * 5 for i in range(40)
    ]
    assert all(35 <= len(text.split()) <= 45 for text in typed)
    for text in typed:
        session.send(text)
    session.close()
    chain_files = files(store)
    assert len(chain_files) >= 3 and host.questions  # it asked (auto_compact: ask), Enter: yes
    for parent, child in itertools.pairwise(chain_files):
        own = [m for m in parent.messages if not m.restore and m.role != "summary"]
        assert len(own) >= 8, [s.meta.queries for s in chain_files]
        restore, ack = child.messages[:2]
        assert restore.restore and ack.restore
        overhead = estimate_tokens(restore.text) + estimate_tokens(ack.text) + 8
        assert overhead <= window // 4, overhead
        carried = [m for m in child.messages if m.copy]
        last = own[-2:]  # the parent's last exchange (a question and its reply)
        assert [m.text for m in carried[-2:]] == [m.text for m in last]
        opening = estimate_prompt(
            [{"role": m.role, "content": m.text} for m in [restore, ack, *carried]]
        )
        assert opening <= window * 35 // 100, opening
    for call in backend.calls:
        sent = estimate_prompt(call["messages"]) + call["options"]["max_tokens"]
        assert sent <= window, sent
    assert [m.text for s in chain_files for m in s.messages if m.is_query] == typed


def test_a_restoration_summary_fits_its_cap_in_the_models_tokens(store: Store) -> None:
    """With a tokenizer that counts identifiers and numbers as several tokens a word,
    the summary a restoration prompt carries is shortened until it fits the summary
    cap in those tokens, not only in words."""
    from chatloop.chat.context import summary_cap

    class Dense(FakeBackend):
        def count_tokens(self, text: str) -> int | None:
            return len(text) // 2  # about three tokens a word

        def chat_overhead(self) -> tuple[int, int] | None:
            return (5, 5)

    facts = "\n".join(f"- FACT-{n:03d}: gauge {n * 37}.5 at /srv/tide/{n}.csv" for n in range(60))
    summary = STRUCTURED.replace("- Water every 2 days, 250 ml each", facts)
    session, _ = chat(
        store,
        Dense("One.", summary, "Ack.", "Two.", STRUCTURED, default="Ok."),
        context_window=2048,
    )
    session.send("first")
    session.compact()
    session.send("second")
    session.close()
    child = files(store)[1]
    text = child.messages[0].text  # the restoration prompt: its summary, as written
    start, last = text.find(prompts.HEADINGS[0]), text.rfind(prompts.HEADINGS[4])
    carried = text[start : text.find("\n\n", last)] if start >= 0 and last >= 0 else ""
    assert carried and len(carried) // 2 <= summary_cap(2048)


def _read_ahead_run(
    when: object = None,
) -> tuple[FakeBackend, list[str], BaseException | None]:
    """A summary of 12 exchanges asked with ``read_ahead=32`` (a worker's) of a scripted
    backend: the calls it made, the last user text of each, and what it raised."""
    from chatloop.backends.base import Cancel

    messages = [m for n in range(12) for m in exchange(n)]
    backend = FakeBackend(default=STRUCTURED)
    cancel = Cancel(when=when)  # type: ignore[arg-type]
    raised: BaseException | None = None
    try:
        chain.summarize(backend, messages, previous=None, window=8192, cancel=cancel, read_ahead=32)
    except BaseException as exc:  # (Cancelled, asserted by the caller)
        raised = exc
    return backend, backend.prompts(), raised


def test_a_workers_prompt_is_read_in_pieces_each_a_beginning_of_the_next() -> None:
    """Issue 45: a summary worker's prompt goes to the server in pieces first (one-token
    requests of longer and longer beginnings of it), so that a server that reads a
    prompt without looking up keeps the person's request waiting for one piece at
    most; then the whole prompt is asked, as before."""
    backend, texts, raised = _read_ahead_run()
    assert raised is None
    *pieces, whole = texts
    assert len(pieces) >= 5, len(pieces)
    assert [c["options"] for c in backend.calls[:-1]] == [{"max_tokens": 1}] * len(pieces)
    assert backend.calls[-1]["options"]["max_tokens"] > 1
    ends = [len(p) for p in pieces] + [len(whole)]
    assert all(whole.startswith(p) for p in pieces) and ends == sorted(set(ends))
    steps = [ends[0]] + [b - a for a, b in itertools.pairwise(ends)]
    size = len(whole) * 32 // estimate_tokens(whole)  # characters in 32 tokens, here
    assert max(steps[:-1]) <= size and max(steps) <= size * 2  # (the last: the request's)
    assert all(whole[len(p)].isspace() for p in pieces)  # cut between words


def test_no_piece_is_sent_once_the_person_marked_the_server() -> None:
    """The worker's ``Cancel`` looks at the person's mark each time it is checked: the
    piece after the mark is never sent, nor the request; the summary is given up."""
    from chatloop.backends.base import Cancelled

    looks = itertools.count()
    _, texts, raised = _read_ahead_run(when=lambda: next(looks) >= 3)
    assert isinstance(raised, Cancelled)
    whole = _read_ahead_run()[1][-1]
    assert 1 <= len(texts) <= 3 and all(len(t) < len(whole) for t in texts)


def test_the_ledger_a_restoration_carries_is_counted_as_one_text_not_line_by_line() -> None:
    entries = [ledger.Entry("fact", f"FACT-{n:03d} the pump runs at {n} rpm.") for n in range(80)]
    asked: list[str] = []

    def server_count(text: str) -> int:  # a server that counts a third more than estimates
        asked.append(text)
        return estimate_tokens(text) * 4 // 3

    kept, left = chain.carried_ledger(entries, [], 300, server_count)
    assert 0 < len(kept) < len(entries) and left == len(entries) - len(kept)
    assert len(asked) <= 6  # the frame, then what was chosen (a few times at most)
    lines = "\n".join(e.carried() for e in kept)
    frame = server_count(prompts.ledger_block([], 1))
    assert server_count(lines) <= 300 - frame  # within the room, as the server counts
