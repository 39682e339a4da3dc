"""Pinned facts and what the ledger could not carry, as pure functions.

A session's pins are a value, ``Pins`` (a tuple of facts, in the order pinned):
``added`` and ``removed`` check a change and return the new pins, or raise
``ChatloopError`` with what to do instead; ``inherited`` is what a continuation
carries (its parent's and this session's, each once); ``left_out`` is the part of
the ledger a restoration prompt had no room for (``/pins`` shows it). None of them
writes anything. ``saved`` is the one write of a change: into the front matter of
the file being written, or of the parent a waiting continuation continues.
``Pinned`` is THE owner of the pins a session holds: it holds a change only once it
is saved, so a refusal of the disk changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from chatloop.chat import builders, chain, ledger, prompts
from chatloop.chat.state import Closing, Open, State, Waiting
from chatloop.errors import ChatloopError
from chatloop.format import Message
from chatloop.format.front_matter import MAX_PIN_CHARS, MAX_PINS
from chatloop.store.store import Store

Pins = tuple[str, ...]  # pinned facts, in order, each once

__all__ = ["Pinned", "Pins", "added", "inherited", "left_out", "removed", "saved"]


def added(pins: Pins, fact: str, room: int, count: Callable[[str], int]) -> Pins:
    """``pins`` with ``fact`` (its whitespace folded) at the end. The pins live in the
    ledger's room of the restoration prompt (``room`` tokens, ``Sizes.ledger_room``;
    ``count``: a text's tokens): a fact that is empty, longer than ``MAX_PIN_CHARS``,
    one more than ``MAX_PINS``, or that would not fit the room is refused
    (``ChatloopError``, saying how much room is left)."""
    fact = " ".join(fact.split())
    if not fact:
        raise ChatloopError("Give the fact to pin", "For example: /pin The budget is 3,000 EUR")
    if len(fact) > MAX_PIN_CHARS:
        raise ChatloopError(
            f"A pinned fact may have {MAX_PIN_CHARS} characters at most (this one has {len(fact)})",
            "Pin the essential part.",
        )
    if len(pins) >= MAX_PINS:
        raise ChatloopError(f"{MAX_PINS} facts are pinned already", "/unpin N frees one.")
    if chain.pins_cost((*pins, fact), count) > room:
        left = max(0, room - chain.pins_cost(pins, count))
        raise ChatloopError(
            f"No room to pin this: pinned facts may take about {room} tokens of the next "
            f"restoration prompt, {left} are left and this one takes about "
            f"{count(f'- {fact}')}",
            "Pin a shorter fact, or /unpin N to free room (/pins lists them).",
        )
    return (*pins, fact)


def removed(pins: Pins, number: int) -> Pins:
    """``pins`` without fact ``number`` (1 = the first, as ``/pins`` lists them); a
    number with no fact is refused (``ChatloopError``)."""
    if not 1 <= number <= len(pins):
        raise ChatloopError(
            f"There is no pinned fact {number}", "/pins lists them with their numbers."
        )
    return pins[: number - 1] + pins[number:]


def inherited(parent: Sequence[str], own: Pins) -> Pins:
    """What a continuation of a session pinned with ``parent`` holds when this session
    holds ``own``: the parent's first, then this session's, each once."""
    return builders.merged(parent, own)


def left_out(previous: str | None, messages: Sequence[Message], pins: Pins) -> list[str]:
    """The ledger entries of the summary ``previous`` (the one a session continues
    from, ``chat.ledger``) that its restoration prompt (the first of ``messages``
    that is one) has no line for, and that are not pinned already: what the prompt
    had no room for. Empty without a restoration prompt."""
    _, entries = ledger.split(previous)
    prompt = next((m.text for m in messages if prompts.is_restoration(m)), None)
    if prompt is None:
        return []
    lines = set(prompt.splitlines())
    return [e.text for e in entries if e.carried() not in lines and e.text not in pins]


def saved(pins: Pins, state: State, store: Store) -> None:
    """Write ``pins`` into the front matter of the file a session in ``state`` writes;
    while a continuation waits, into the file it continues, the end of the chain, so
    leaving before the next message keeps them too; nothing for a fresh session.
    Raises StoreError (the file as it was)."""
    match state:
        case Open(writer=writer) | Closing(writer=writer):
            writer.update_meta(pins=pins)
        case Waiting(continuation=waiting):
            with store.open(waiting.parent.path) as parent:
                parent.update_meta(pins=pins)


class Pinned:
    """THE owner of the pins a session holds (``pins``): set by the person (saved
    first), joined by a parent's as a continuation of it begins, and none once the
    session is let go. Nothing else assigns them."""

    def __init__(self) -> None:
        self._pins: Pins = ()

    @property
    def pins(self) -> Pins:
        return self._pins

    def set(self, pins: Pins, state: State, store: Store) -> Pins:
        """Hold ``pins`` once ``saved`` for a session in ``state`` (a refusal raises
        StoreError and changes nothing); returns them."""
        saved(pins, state, store)
        self._pins = pins
        return pins

    def inherit(self, parent: Sequence[str]) -> None:
        """Hold the pins of a parent being continued with these (``inherited``): its
        continuation carries them, and its file is written with them."""
        self._pins = inherited(parent, self._pins)

    def forget(self) -> None:
        """None held: the session was let go."""
        self._pins = ()
