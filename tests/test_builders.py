"""Each continuation kind built on its own, without a session (``chat.builders``):
from a summary, with the whole history (``--full``), a fork; the child each is
written as, and what is said when it is."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from chatloop.chat import builders, chain, restoration
from chatloop.chat.state import Branch, WithHistory
from chatloop.chat.tokens import TokenCount
from chatloop.format import Message, SessionMeta
from tests.conftest import T0
from tests.fakes import STRUCTURED

FOLDER = Path("/sessions/projects/garden")
SIZES = restoration.Sizes.of(4096, TokenCount(), 0, 512)


def meta(**fields: Any) -> SessionMeta:
    base = SessionMeta(id="", created=T0, updated=T0, agent="sally", model="small")
    return replace(base, **fields)


PARENT = chain.Parent(
    FOLDER / "20261121-143045-aaaaaaaa.md",
    meta(id="20261121-143045-aaaaaaaa", title="Basil", queries=2, extra={"forked_at": 1}),
    STRUCTURED,
)
TEMPLATE = meta(title="", extra={"forked_at": 1, "note": "kept"})


def said(*texts: str) -> tuple[Message, ...]:
    return tuple(
        Message.create("user" if i % 2 == 0 else "assistant", T0, text=t)._replace(
            restore=True, copy=True
        )
        for i, t in enumerate(texts)
    )


def test_from_a_summary_the_preview_is_the_prompt_the_child_is_written_with() -> None:
    carried = said("how much water", "250 ml")
    waiting = builders.from_summary(
        PARENT, STRUCTURED, TEMPLATE, ("Budget 3,000 EUR",), SIZES, T0, carried=carried
    )
    assert waiting.preview.restore and "Budget 3,000 EUR" in waiting.preview.text
    assert waiting.preview.text == restoration.build(
        PARENT, STRUCTURED, ("Budget 3,000 EUR",), SIZES, None, 2
    )
    assert waiting.template.pins == ("Budget 3,000 EUR",)
    child = builders.child_of(waiting, ("Budget 3,000 EUR",), "other", "", T0, FOLDER)
    prompt, *copies = child.opening
    assert prompt.text == waiting.preview.text and tuple(copies) == carried
    assert child.previous == STRUCTURED and child.prefix == ()
    assert child.meta.parent_id == PARENT.meta.id and child.meta.model == "other"
    assert child.meta.parent_file == PARENT.path.name  # relative to its folder
    assert child.meta.title == "Basil"  # the parent's, none given
    # a continuation of a fork is a continuation, not a fork; a person's key is kept
    assert child.meta.extra == {"note": "kept"}
    assert builders.begun(waiting, "c1") == (
        f"Session Restored: c1 continues {PARENT.meta.id} (2 queries), carrying its last "
        "2 messages word for word."
    )


def test_with_the_whole_history_the_child_holds_only_the_link() -> None:
    history = said("first", "one", "second", "two")
    full = WithHistory(PARENT, STRUCTURED, TEMPLATE, history)
    child = builders.child_of(full, (), "small", "Renamed", T0, FOLDER)
    assert child.opening == () and child.prefix == history
    assert child.meta.extra == {"note": "kept", "restored": "full"}
    assert child.meta.title == "Renamed"
    assert builders.begun(full, "c2").endswith("(2 queries).")


def test_a_fork_carries_its_copies_and_says_where_it_branched() -> None:
    copies = said("first", "one")
    fork = Branch(PARENT, "what it began from", TEMPLATE, copies, 1)
    child = builders.child_of(fork, (), "small", "", T0, FOLDER)
    assert child.opening == copies and child.previous == "what it began from"
    assert child.meta.extra["forked_at"] == 1
    assert builders.begun(fork, "c3") == (
        f"Forked: c3 branches from {PARENT.meta.id} after query 1 (2 messages carried)."
    )
    at_start = Branch(PARENT, None, TEMPLATE, (), 0)
    assert builders.begun(at_start, "c4").endswith("at its start (none of its exchanges carried).")


def test_a_fork_built_copies_what_was_said_and_keeps_what_was_brought_in() -> None:
    brought = Message.create("user", T0, text="restoration", restore=True)
    history = (brought, *(m._replace(restore=False, copy=False) for m in said("q", "a")))
    fork = builders.branch(PARENT, history, 1, TEMPLATE, ("pin",), "began from")
    assert fork.copies[0] == brought  # as it was marked
    assert all(m.restore and m.copy for m in fork.copies[1:])
    assert fork.template.title == "Basil" and fork.template.pins == ("pin",)
    assert fork.template.extra == {"forked_at": 1, "note": "kept"} and fork.forked_at == 1
    assert fork.previous == "began from"
    full = builders.with_history(PARENT, history, TEMPLATE, ("pin",))
    assert full.history == history and full.summary == STRUCTURED
    assert full.template.pins == ("pin",)


def test_a_fork_point_is_after_a_querys_answer_and_refuses_what_is_not_there() -> None:
    import pytest

    from chatloop.errors import ChatloopError

    q1, a1, q2, a2 = (m._replace(restore=False, copy=False) for m in said("q1", "a1", "q2", "a2"))
    messages = [q1, a1, q2, a2]
    assert builders.fork_point(messages, 1) == (2, 1)
    assert builders.fork_point(messages, 0) == (0, 0)
    assert builders.fork_point(messages, None) == (4, 2)
    with pytest.raises(ChatloopError, match="no query 3"):
        builders.fork_point(messages, 3)
    with pytest.raises(ChatloopError, match="Nothing to fork"):
        builders.fork_point([], None)
    assert builders.merged(("a", "b"), ("b", "c")) == ("a", "b", "c")
