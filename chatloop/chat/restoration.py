"""A continued session's restoration as the model sees it: revised, and acknowledged.

Two rules, stated once here (docs/chains.md, "A compaction that never waits"):

- **A later restoration prompt revises the first.** A compaction that does not wait
  for the model begins its child from the summary built from the transcript; when the
  model's summary of the parent is written (in the background), the child records a
  new restoration prompt built from it, at the time it came. From then on every
  request sends that text in the first restoration prompt's place, once: the revision
  is not sent again at its own position (``revised``). Both stay in the file.
- **An acknowledgment written without the model** (``acknowledgment``): the child's
  first reply never waits for a separate call that only acknowledges the summary.
  It is marked ``fallback`` (made by chatloop, not by the model), ``restore`` as
  every acknowledgment is.

And one builder (``build``): the text of a child's restoration prompt is made by it
alone, within ``Sizes`` taken from the meter at one moment; the preview a waiting child
is planned with is the text its file is written with, and what sizes the copies a child
carries (``opening``) counts a text made by the same function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from chatloop.chat import chain, ledger, prompts
from chatloop.chat.context import ack_cap, ledger_room, restoration_budget, summary_cap
from chatloop.chat.prompts import is_restoration
from chatloop.chat.tokens import TokenCount
from chatloop.config import PROSE_FLOOR
from chatloop.format import Message

__all__ = [
    "Awaited",
    "Sizes",
    "acknowledgment",
    "build",
    "fit",
    "revised",
    "revision_count",
    "summary_room",
]


@dataclass(frozen=True)
class Sizes:
    """What a restoration prompt is built within, as the meter sees it at one moment:
    ``count`` (a text's tokens, as the model counts them), the chat template's
    ``overhead`` (per message, per prompt), the ``window`` (None: unknown), the
    acknowledgment's cap, the pins' and the ledger's room (``context.ledger_room``) and
    the summary's cap (``context.summary_cap``). Taken anew for each build: a switch
    of model, backend or agent changes them."""

    count: Callable[[str], int]
    overhead: tuple[int, int]
    window: int | None
    ack_cap: int
    ledger_room: int
    summary_cap: int

    @classmethod
    def of(cls, window: int | None, tokens: TokenCount, summary_setting: int, reply: int) -> Sizes:
        """The sizes for a model of ``window`` counted by ``tokens``, with the
        ``summary_max_tokens`` setting and replies capped at ``reply`` tokens: the
        ledger's room leaves the prompt's own words (as long as they get, with the
        template of a prompt of two messages) and the acknowledgment's cap."""
        ack = ack_cap(window, reply)
        per_message, per_prompt = tokens.overhead()
        frame = tokens.text(prompts.restoration_frame()) + 2 * per_message + per_prompt
        return cls(
            count=tokens.text,
            overhead=(per_message, per_prompt),
            window=window,
            ack_cap=ack,
            ledger_room=ledger_room(window, summary_setting, frame, ack),
            summary_cap=summary_cap(window, summary_setting),
        )


def build(
    parent: chain.Parent,
    summary: str,
    pins: Sequence[str],
    sizes: Sizes,
    unanswered: str | None = None,
    carried: int = 0,
) -> str:
    """THE text of the restoration prompt that opens a child of ``parent`` (the preview
    it is planned with, the prompt it is written with, the one that revises it, the
    one a carry is counted against): ``chain.restoration`` with ``pins``, the ledger
    within ``sizes.ledger_room``, and the acknowledgment asked for in the words its cap
    allows (about 9 words in 16 tokens: a reply cut at its cap ends mid-sentence); one
    that answers ``unanswered`` is a reply, with no such bound. ``carried``: how many
    copies follow it. Counted whole, as the model counts it: what the estimates missed
    (the prose at its floor, the template) is taken from the model's prose first, down
    to its headings, then from the ledger, entry by entry; never from the window."""
    room = sizes.ledger_room
    ack_words = 0 if unanswered is not None else sizes.ack_cap * 9 // 16
    count = sizes.count
    per_message, per_prompt = sizes.overhead  # (its template, as sent alone)
    budget = restoration_budget(sizes.window, sizes.ack_cap) - per_message - per_prompt
    budget += count(prompts.UNANSWERED.format(text=unanswered)) if unanswered else 0
    whole, entries = ledger.split(summary)
    prose, words = whole, len(whole.split())
    while True:
        text = chain.restoration(
            parent,
            ledger.join(prose, entries),
            unanswered,
            pins,
            carried,
            room,
            ack_words,
            count,
        )
        over = count(text) - budget
        if over <= 0:
            return text
        if words > prompts.HEADING_WORDS:
            words = max(prompts.HEADING_WORDS, words * 4 // 5)
            prose = prompts.fit(whole, words)
        elif room > 0:
            room = max(0, room - over)
        else:
            return text


def fit(summary: str, pins: Sequence[str], sizes: Sizes) -> str:
    """The summary a restoration prompt carries: its text fitted to what the summary
    cap leaves beside the ledger lines the prompt carries (``summary_room``: the
    model's prose gives way before what the person stated), in words, then, counted
    as the model counts, shortened until it fits in tokens (identifiers and numbers
    cost several tokens a word); its whole ledger kept after it. Beside a ledger (or
    pins), which holds what was stated, the prose may shrink to its headings to fit
    in tokens: a child's opening, counted before the summary is made, is then never
    passed."""
    summary, entries = ledger.split(summary)  # (the ledger is carried by its own rule)
    cap = summary_room(entries, pins, sizes)
    stated = bool(entries or pins)
    floor = PROSE_FLOOR * 2 // 3 if stated else chain.SUMMARY_MIN_WORDS
    least = prompts.HEADING_WORDS if stated else floor
    words = min(chain.summary_words(sizes.summary_cap), max(floor, cap * 3 // 4))
    fitted = prompts.fit(summary, words)
    while sizes.count(fitted) > cap and words > least:
        words = max(least, words * 4 // 5)
        fitted = prompts.fit(summary, words)
    return ledger.join(fitted, entries)


def summary_room(entries: Sequence[ledger.Entry], pins: Sequence[str], sizes: Sizes) -> int:
    """The tokens a restoration prompt gives the summary's text: the summary cap, less
    ``pins`` and the ledger lines it carries of ``entries`` (``chain.carried_ledger``
    within the ledger's room), counted as the model counts, never under PROSE_FLOOR."""
    count = sizes.count
    kept, left = chain.carried_ledger(entries, pins, sizes.ledger_room, count)
    lines = [e.carried() for e in kept]
    used = count(prompts.ledger_block(lines, left)) + chain.pins_cost(pins, count)
    return max(PROSE_FLOOR, sizes.summary_cap - used)


@dataclass(frozen=True)
class Awaited:
    """A parent whose model summary a background worker is writing after a compaction
    that did not wait for it: the child revises its restoration when it lands
    (``unanswered``: the message the child's restoration prompt carries, if any)."""

    path: Path
    unanswered: str | None = None


def revised(messages: Sequence[Message]) -> list[Message]:
    """``messages`` as requests send them: when a restoration prompt follows the first
    one, the first carries the last one's text and the later ones are left out (each
    restoration is sent once, in the conversation's first place). Unchanged otherwise."""
    prompts = [i for i, m in enumerate(messages) if is_restoration(m)]
    if len(prompts) < 2:
        return list(messages)
    first, last = prompts[0], prompts[-1]
    later = set(prompts[1:])
    out = [m for i, m in enumerate(messages) if i not in later]
    out[first] = messages[first]._replace(text=messages[last].text)
    return out


def revision_count(messages: Sequence[Message]) -> int:
    """How many times the first restoration prompt of ``messages`` was revised."""
    return max(0, sum(1 for m in messages if is_restoration(m)) - 1)


def acknowledgment(parent_id: str, at: datetime) -> Message:
    """The acknowledgment of a restoration prompt written by chatloop, not asked of the
    model: short, true, in the assistant's place, marked ``fallback``."""
    text = (
        f"Understood: I have the summary of session {parent_id} and the messages it "
        "carries, and I am ready to continue."
    )
    return Message.create("assistant", at, text=text, restore=True, fallback=True)
