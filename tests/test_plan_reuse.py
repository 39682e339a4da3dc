"""Plans that reuse what earlier plans made (``chatloop.chat.context.Sent``).

A long conversation must cost each turn about what a short one does: a plan
converts and counts only the messages it has not seen. Reuse must never change
a plan: the property test compares every plan made with reuse to the same plan
made from scratch, through growth, edits, pruning and a change of counting basis.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from chatloop.chat.context import Sent, plan
from chatloop.chat.tokens import TokenCount
from chatloop.format import Message, ToolCall, ToolResult
from chatloop.store.store import Store
from tests.fakes import FakeBackend
from tests.hosts import chat
from tests.strategies import examples

AT = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


def message(kind: int, size: int, n: int) -> Message:
    """A message of a few shapes: a question, a reply, a reply calling a tool, and
    the tool's result (the only kind that pruning shortens)."""
    text = f"words of message {n} " * size
    if kind == 0:
        return Message.create("user", AT, text=text)
    if kind == 1:
        return Message.create("assistant", AT, text=text)
    if kind == 2:
        call = ToolCall(f"call{n}", "read_file", '{"path": "notes.txt"}')
        return Message.create("assistant", AT, text="", tool_calls=(call,))
    result = ToolResult(f"call{n}", "read_file", text * 4)
    return Message.create("tool", AT, tool_results=(result,))


class Counting(TokenCount):
    """Estimates (no tokenizer) that count how often a chat message is counted."""

    def __init__(self) -> None:
        super().__init__()
        self.counted = 0

    def content(self, message):  # type: ignore[no-untyped-def]
        self.counted += 1
        return super().content(message)


operation = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 3), st.integers(1, 40)),
    st.tuples(st.just("replace"), st.integers(0, 50), st.integers(1, 40)),
    st.tuples(st.just("cut"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("learn"), st.integers(50, 300), st.just(0)),
)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(operation, min_size=1, max_size=40), st.sampled_from([None, 400, 2000]))
def test_a_reused_plan_is_the_plan_made_from_scratch(
    operations: list[tuple[str, int, int]], window: int | None
) -> None:
    count, sent = TokenCount(), Sent()
    messages: list[Message] = []
    for n, (op, a, b) in enumerate(operations):
        if op == "add":
            messages.append(message(a, b, n))
        elif op == "replace" and messages:
            messages[a % len(messages)] = message(a % 4, b, n)
        elif op == "cut":
            del messages[a % (len(messages) + 1) :]
        elif op == "learn" and messages:  # the estimate's scale moves: counts are redone
            made = plan("be brief", messages, window=window, count=count)
            count.learn(made.wire, made.tokens * a // 100, 0, made.content)
        reused = plan("be brief", messages, window=window, count=count, sent=sent)
        fresh = plan("be brief", list(messages), window=window, count=count)
        assert reused == fresh


def test_a_turn_counts_only_what_is_new() -> None:
    count, sent = Counting(), Sent()
    plan("be brief", [], window=None, count=count)
    system = count.counted  # the system prompt, counted in every plan (it is one message)
    messages: list[Message] = []
    per_turn = []
    for n in range(300):
        messages += [message(0, 3, n), message(1, 5, n)]
        before = count.counted
        for _ in range(3):  # a turn plans about three times
            plan("be brief", messages, window=None, count=count, sent=sent)
        per_turn.append(count.counted - before)
    assert per_turn == [2 + 3 * system] * 300  # the two new messages once, at any length


def test_a_long_session_plans_each_turn_from_what_it_made(store: Store) -> None:
    """The session's own plans (send, the call, the threshold check) reuse their work:
    the wire sent at turn 40 is the one a plan from scratch makes."""
    backend = FakeBackend(window=1_000_000)
    session, _ = chat(store, backend)
    for n in range(40):
        session.send(f"question {n}")

    def fresh(messages: list[Message]) -> object:
        return plan(
            session.agent.system_prompt,
            messages,
            window=session.window(),
            count=session.tokens,
            reserve=session.reply_options().get("max_tokens"),
        )

    assert len(backend.calls) == 40
    assert session.plan() == fresh(session.messages)
    sent = fresh(session.messages[:-1]).wire  # type: ignore[attr-defined]
    assert backend.calls[-1]["messages"] == sent and len(sent) == 1 + 79
