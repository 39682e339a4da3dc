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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from chatloop.chat.prompts import is_restoration
from chatloop.format import Message

__all__ = ["Awaited", "acknowledgment", "revised", "revision_count"]


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
