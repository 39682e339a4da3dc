"""The owners of a session's title (``chat.naming.Naming``) and of its pins
(``chat.pins``) on their own, without a ``ChatSession``: the naming's phases as a
value that returns what to write, the pins' checks as pure functions."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from chatloop.backends.base import Cancel, ChatMessage, Event
from chatloop.chat import ledger, prompts, titles
from chatloop.chat import pins as pinning
from chatloop.chat.naming import Naming, first_request, given
from chatloop.errors import ChatloopError
from chatloop.format import Message
from chatloop.format.front_matter import MAX_PIN_CHARS, MAX_PINS, MAX_TITLE_CHARS
from chatloop.store.store import Store
from tests.conftest import T0, new_meta
from tests.fakes import FakeBackend

ASKED = [
    Message.create("user", T0, text="How often should I water basil?\nOn a balcony."),
    Message.create("assistant", T0, text="Every other day in summer."),
]


def words(text: str) -> int:
    """A text's tokens, a word a token."""
    return len(text.split())


class Held(FakeBackend):
    """A fake whose reply waits until ``go`` is set (or the request is cancelled)."""

    def __init__(self, *replies: str) -> None:
        super().__init__(*replies)
        self.go = threading.Event()

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        options: dict[str, Any] | None = None,
        cancel: Cancel | None = None,
    ) -> Iterator[Event]:
        while not self.go.wait(0.01):
            if cancel is not None and cancel.is_set:
                break
        yield from super().stream(messages, tools=tools, options=options, cancel=cancel)


# ------------------------------------------------------------------ naming


def phase_of(naming: Naming) -> str:
    """The naming's phase, read afresh (a method call changes it)."""
    return naming.phase


def test_first_names_by_the_first_request_once_and_asks_nothing() -> None:
    naming, backend = Naming(), FakeBackend()
    made = naming.after_exchange(new_meta(), ASKED, "Every other day.", "first", backend)
    assert made is not None and made.text == "How often should I water basil?" and made.fallback
    assert naming.phase == "done" and backend.calls == []
    naming.written(made.text, saved=True)
    assert naming.title == made.text
    # named already: a later exchange makes none
    assert naming.after_exchange(new_meta(), ASKED, "More.", "first", backend) is None


def test_off_a_parent_or_a_title_in_the_file_makes_none() -> None:
    backend = FakeBackend()
    assert Naming().after_exchange(new_meta(), ASKED, "r", "off", backend) is None
    child = new_meta(parent_id="20260102-030405-0123abcd")
    assert Naming().after_exchange(child, ASKED, "r", "model", backend) is None
    assert Naming().after_exchange(new_meta(title="Mine"), ASKED, "r", "model", backend) is None
    assert backend.calls == []


def test_a_model_title_is_asked_then_taken_to_be_written() -> None:
    naming = Naming()
    backend = FakeBackend("Basil watering schedule")
    assert naming.after_exchange(new_meta(), ASKED, "Every other day.", "model", backend) is None
    assert naming.phase == "asking"
    made = naming.take(wait=True)
    assert made is not None and made.text == "Basil watering schedule" and not made.fallback
    assert phase_of(naming) == "done" and naming.title == ""  # (the caller writes it: ``written``)
    assert naming.take(wait=True) is None  # taken once


def test_a_title_not_come_before_the_next_request_is_cancelled_and_asked_again() -> None:
    naming, backend = Naming(), Held("Too late")
    naming.after_exchange(new_meta(), ASKED, "r", "model", backend, timeout=5)
    assert naming.take(wait=False) is None
    assert naming.phase == "untried"  # asked after the next exchange that ends well
    backend.go.set()
    assert naming.after_exchange(new_meta(), ASKED, "r", "model", FakeBackend("Again")) is None
    made = naming.take(wait=True)
    assert made is not None and made.text == "Again"


def test_the_persons_title_wins_over_one_being_asked() -> None:
    naming = Naming()
    naming.after_exchange(new_meta(), ASKED, "r", "model", FakeBackend("The model's"))
    naming.named(given("Balcony garden plan"))
    assert naming.take(wait=True) is None
    assert (naming.title, naming.phase) == ("Balcony garden plan", "done")
    assert naming.late(new_meta(title=naming.title), ASKED, "model") == {}


def test_a_title_the_file_refused_is_given_to_the_close() -> None:
    naming = Naming()
    naming.written("Basil", saved=False)
    assert naming.phase == "unsaved"
    assert naming.late(new_meta(), ASKED, "model") == {"title": "Basil"}
    assert naming.late(new_meta(title="Since"), ASKED, "model") == {}


def test_a_session_never_named_is_named_at_close_by_its_first_line() -> None:
    assert Naming().late(new_meta(), ASKED, "model") == {"title": "How often should I water basil?"}
    assert Naming().late(new_meta(), [], "model") == {}  # no words to make one of
    assert Naming().late(new_meta(), ASKED, "off") == {}


def test_a_given_title_is_cut_and_an_empty_one_refused() -> None:
    assert given("t" * (MAX_TITLE_CHARS + 5)) == "t" * MAX_TITLE_CHARS
    with pytest.raises(ChatloopError, match="Give the new title"):
        given("")
    assert first_request(ASKED[1:]) == ""


# ------------------------------------------------------------------ pins


def test_a_pin_is_added_folded_and_removed_by_its_number() -> None:
    pins = pinning.added((), "  The budget   is 3,000 EUR ", 100, words)
    pins = pinning.added(pins, "Pots are 25 cm deep", 100, words)
    assert pins == ("The budget is 3,000 EUR", "Pots are 25 cm deep")
    assert pinning.removed(pins, 1) == ("Pots are 25 cm deep",)
    with pytest.raises(ChatloopError, match="no pinned fact 3"):
        pinning.removed(pins, 3)
    with pytest.raises(ChatloopError, match="no pinned fact 0"):
        pinning.removed(pins, 0)


def test_a_pin_that_is_empty_too_long_one_too_many_or_without_room_is_refused() -> None:
    with pytest.raises(ChatloopError, match="Give the fact"):
        pinning.added((), "   ", 100, words)
    with pytest.raises(ChatloopError, match=f"{MAX_PIN_CHARS} characters at most"):
        pinning.added((), "x" * (MAX_PIN_CHARS + 1), 10_000, words)
    full = tuple(f"fact {n}" for n in range(MAX_PINS))
    with pytest.raises(ChatloopError, match="pinned already"):
        pinning.added(full, "one more", 10_000, words)
    with pytest.raises(ChatloopError, match="No room to pin this") as refused:
        pinning.added(("a b c",), "one two three four five six", 8, words)
    assert "are left" in refused.value.message


def test_a_continuation_inherits_its_parents_pins_first_each_once() -> None:
    assert pinning.inherited(["a", "b"], ("b", "c")) == ("a", "b", "c")
    assert pinning.inherited([], ()) == ()


def test_the_ledger_left_out_is_what_the_restoration_has_no_line_for() -> None:
    entries = [ledger.Entry("fact", f"FACT-{n} is kept in shard {n}.") for n in range(1, 5)]
    summary = ledger.join("We planned the data layout.", entries)
    carried = "\n".join(e.carried() for e in entries[:2])
    opening = prompts.RESTORE_PROMPT[: prompts.RESTORE_PROMPT.index(":")]
    prompt = Message.create("user", T0, text=f"{opening}: so far.\n{carried}", restore=True)
    said = [prompt, *ASKED]
    assert pinning.left_out(summary, said, ()) == [e.text for e in entries[2:]]
    # pinned already: carried as a pin, not offered again
    assert pinning.left_out(summary, said, (entries[3].text,)) == [entries[2].text]
    assert pinning.left_out(summary, ASKED, ()) == []  # no restoration prompt: nothing
    assert pinning.left_out(None, said, ()) == []


def test_a_title_is_kept_in_the_file_being_written_or_held_for_the_close(store: Store) -> None:
    naming = Naming()
    made = titles.Title("Basil on the balcony", True)
    naming.kept(made, None)  # no file yet: nothing done
    assert naming.title == "" and naming.phase == "untried"
    with store.create(new_meta()) as writer:
        naming.kept(made, writer)
        assert writer.meta.title == "Basil on the balcony"
    assert naming.title == "Basil on the balcony" and naming.phase != "unsaved"
    naming.kept(titles.Title("", True), None)  # an empty title is no title
    assert naming.title == "Basil on the balcony"


def test_a_title_made_after_a_turn_or_taken_as_it_comes_is_written_in_the_file(
    store: Store,
) -> None:
    naming = Naming()
    naming.after_turn(None, "r", "first", FakeBackend())  # no file: nothing done
    assert naming.phase == "untried"
    with store.create(new_meta()) as writer:
        for message in ASKED:
            writer.append(message)
        naming.after_turn(writer, "Every other day.", "first", FakeBackend())
        assert writer.meta.title == "How often should I water basil?" == naming.title
    asking = Naming()
    with store.create(new_meta()) as writer:
        for message in ASKED:
            writer.append(message)
        asking.after_turn(writer, "r", "model", FakeBackend("Basil watering schedule"))
        assert writer.meta.title == "" and asking.phase == "asking"
        asking.taken(True, writer)
        assert writer.meta.title == "Basil watering schedule" == asking.title


def test_pins_are_saved_where_the_session_writes_or_in_the_file_it_continues(
    store: Store,
) -> None:
    from chatloop.chat import builders, chain
    from chatloop.chat.state import Fresh, Open, Waiting

    pinning.saved(("ignored",), Fresh(), store)  # nothing written yet: nothing to write
    with store.create(new_meta()) as writer:
        pinning.saved(("the shed is blue",), Open(writer), store)
        assert writer.meta.pins == ("the shed is blue",)
        parent = chain.Parent(writer.path, writer.meta, "the summary")
    waiting = builders.with_history(parent, [], new_meta(), ())
    pinning.saved(("the shed is blue", "the gate squeaks"), Waiting(waiting), store)
    assert store.read(parent.path).session.meta.pins == ("the shed is blue", "the gate squeaks")


def test_a_new_session_begins_its_naming_anew() -> None:
    naming = Naming()
    naming.after_exchange(new_meta(), ASKED, "r", "model", FakeBackend("The model's"))
    naming.written("Basil", saved=False)
    naming.forget()
    assert (naming.title, naming.phase) == ("", "untried")
    assert naming.take(wait=True) is None  # the request under way was let go


def test_the_pins_a_session_holds_change_only_once_saved(store: Store) -> None:
    from pathlib import Path

    from chatloop.chat import builders, chain
    from chatloop.chat.state import Open, Waiting

    pinned = pinning.Pinned()
    with store.create(new_meta()) as writer:
        assert pinned.set(("mine",), Open(writer), store) == ("mine",) == pinned.pins
    gone = chain.Parent(Path(store.root / "gone.md"), new_meta(id="gone"), "the summary")
    waiting = Waiting(builders.with_history(gone, [], new_meta(), ()))
    with pytest.raises(ChatloopError):
        pinned.set(("mine", "refused"), waiting, store)
    assert pinned.pins == ("mine",)  # a refusal changes nothing
    pinned.inherit(("the parent's", "mine"))
    assert pinned.pins == ("the parent's", "mine")
    pinned.forget()
    assert pinned.pins == ()
