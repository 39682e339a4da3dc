"""Summary repairs: a model's reply made a summary of the required shape, and a
summary brought within a budget. No I/O.

``echoes_template`` tells a reply that repeats the prompt's placeholders; ``arrange``
puts the sections of a whole reply in order; ``repair`` gives a reply that is cut, or
lacks part of it, the structure, keeping what the model wrote under its own
headings and only what is ``grounded`` in the transcript; ``fit`` brings a summary
within a budget, the least valuable text first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from chatloop.chat.prompts.fallback import fallback_parts, settled
from chatloop.chat.prompts.texts import (
    BACKGROUND_RULE_CHAINED,
    BACKGROUND_RULE_FIRST,
    BACKGROUND_RULE_IN_CHAT,
    HEADINGS,
    NONE,
    assemble,
    bullet_items,
    cap_words,
    clean,
    condense,
    sections,
)
from chatloop.format import Message

_TEMPLATE_PHRASES = (
    "one bullet per topic",
    "one bullet per decision or answer that was settled",
    "one bullet per open question or next step",
    BACKGROUND_RULE_FIRST.lower(),
    BACKGROUND_RULE_CHAINED.lower(),
    BACKGROUND_RULE_IN_CHAT.lower(),
    "of a chat transcript. write short notes",  # (a notes request repeated)
    "pause our conversation here: instead of a reply",
)


def echoes_template(text: str) -> bool:
    """True when ``text`` repeats the summary prompt's placeholders instead of
    filling them in (small models often do): such output is not a summary."""
    flat = " ".join(text.lower().split())
    return any(phrase in flat for phrase in _TEMPLATE_PHRASES)


# What a fit lets go of first, by section (HEADINGS' indexes): the model's prose,
# then the topics, then what is pending, then the background; decisions last.
_FIT_ORDER = (1, 2, 4, 0, 3)


def fit(summary: str, words: int) -> str:
    """``summary`` within ``words`` words, every heading kept while they fit alone:
    first the least valuable lines go (``_FIT_ORDER``: the Current Session Summary's
    prose, which may go whole, then the last bullets of Topics Discussed, Pending,
    the background, and Decisions Made last, each section keeping its first line);
    then lines are shortened at word boundaries, the longest first, their
    identifiers, numbers and paths kept (``_is_name``) and marked with "…"; then
    the first lines go too, in the same order, down to the headings. Only a budget
    too small for the headings alone is cut plainly (``cap_words``)."""
    lines = summary.strip().splitlines()

    def count(rows: Sequence[str]) -> int:
        return sum(len(row.split()) for row in rows)

    def droppable(keep_first: bool) -> int | None:
        """The line to let go next, in _FIT_ORDER (a heading's own line never)."""
        sections: dict[int, list[int]] = {}
        current = -1
        for i, line in enumerate(lines):
            opened = next((h for h, head in enumerate(HEADINGS) if line.startswith(head)), None)
            if opened is not None:
                current = opened
            elif line.strip():
                sections.setdefault(current, []).append(i)
        for h in _FIT_ORDER:
            rows = sections.get(h, [])
            if len(rows) > (1 if keep_first and h != 1 else 0):  # (the prose may go whole)
                return rows[-1]
        return None

    while count(lines) > words:
        drop = droppable(keep_first=True)
        if drop is not None:
            del lines[drop]
            continue
        excess = count(lines) - words
        for at in sorted(range(len(lines)), key=lambda i: -len(lines[i].split())):
            shorter = _shortened(lines[at], len(lines[at].split()) - excess - 1)
            if shorter is not None:
                lines[at] = shorter
                break
        else:
            drop = droppable(keep_first=False)
            if drop is not None:
                del lines[drop]
                continue
            for h in _FIT_ORDER:  # what a heading's own line holds after it goes last
                at = next((i for i, row in enumerate(lines) if row.startswith(HEADINGS[h])), -1)
                if at >= 0 and lines[at].strip() != HEADINGS[h]:
                    lines[at] = HEADINGS[h]
                    break
            else:  # the headings alone do not fit: a tiny budget, cut the end
                return cap_words("\n".join(lines), words)
    return "\n".join(lines)


def _shortened(line: str, target: int) -> str | None:
    """``line`` toward ``target`` words (and its "…"), words left out from its end
    first and never its heading, its bullet, nor a name (``_is_name``): as short as
    that allows; None when it cannot be made any shorter that way."""
    words = line.split()
    if words and words[-1] == "…":  # shortened before: shortened again, one mark
        words.pop()
    heading = next((h for h in HEADINGS if line.startswith(h)), "")
    fixed = len(heading.split()) or (1 if words and words[0] in ("-", "*") else 0)
    kept = list(range(len(words)))
    for i in reversed(range(fixed, len(words))):
        if len(kept) <= max(target, 1):
            break
        if not _is_name(words[i].strip(".,;:()")):
            kept.remove(i)
    if len(kept) + 1 >= len(line.split()):  # (with its "…", no shorter)
        return None
    return " ".join(words[i] for i in kept) + " …"


def arrange(text: str) -> str | None:
    """A reply that holds every section (``HEADINGS`` but the Current Session
    Summary, which heads no text of its own), in whatever order and heading form, in
    the summary's own order, each section's lines as the model wrote them (text
    before its first heading is the Current Session Summary's); None when a section
    is missing (``repair`` then)."""
    before, found = sections(clean(text).splitlines())
    if any(i not in found for i in (0, 2, 3, 4)):
        return None
    return assemble(
        " ".join(found[0]),
        topics=bullet_items(found[2]),
        decisions=bullet_items(found[3]),
        pending=bullet_items(found[4]),
        narrative="\n".join([*found.get(1, []), *before]),
    )


def repair(
    text: str,
    previous: str | None,
    messages: Sequence[Message],
    cut: bool,
    goal: str | None = None,
) -> str:
    """A summary in the required structure from a model reply that is not quite one:
    every section the model wrote keeps its content, under its own heading once
    (whatever form of the heading it used: bold, ``##``, a colon or none); text before
    its first heading is the Current Session Summary's; a section it left out is
    filled as chatloop's own summary fills it (``fallback_summary``: the parent's
    decisions, the chain's ``goal`` and the last requests, what is unanswered). ``cut``: its
    cap cut the reply, whose last line is then left out (every complete line is kept).
    What the model wrote keeps only sentences ``grounded`` in the transcript or
    ``previous``; a heading inside a line is written as plain words, so no section
    ever holds another."""
    lines = clean(text).splitlines()
    if cut and lines and not text.endswith("\n"):
        lines.pop()  # it may end mid-word, mid-number, mid-path
    before, found = sections(lines)
    source = "\n".join(
        [
            previous or "",
            *(m.text for m in messages),
            *(r.content for m in messages for r in m.tool_results),
        ]
    )
    own = {i: _grounded_lines(rows, source) for i, rows in found.items()}
    narrative = _grounded_lines(before, source)
    parts = fallback_parts(messages, previous, goal)
    background = " ".join(own.get(0, [])) or condense(previous)
    return assemble(
        background,
        topics=bullet_items(own[2]) if own.get(2) else parts["topics"],
        decisions=bullet_items(own[3]) if own.get(3) else (settled(previous) or [NONE[2:]]),
        pending=bullet_items(own[4]) if own.get(4) else parts["pending"],
        narrative="\n".join([*own.get(1, []), *narrative]),
    )


def _grounded_lines(lines: Sequence[str], source: str) -> list[str]:
    """``lines`` with their ungrounded sentences left out (a line left empty goes), the
    bullet of a bullet kept, and any heading in them written as plain words."""
    out: list[str] = []
    for line in lines:
        bullet = re.match(r"^(?:[-*•]|\d+[.)])\s+", line)
        body = line[bullet.end() :] if bullet else line
        for heading in HEADINGS:
            body = body.replace(heading, heading.strip("*"))
        kept = grounded(body, source)
        if kept:
            out.append(f"- {kept}" if bullet else kept)
    return out


_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")
_IDENTIFIER_RE = re.compile(r"[^\s,;:!?()\[\]{}<>\"'`*]+")


def grounded(text: str, source: str) -> str:
    """``text`` without the sentences that name something ``source`` never mentions.

    A name is a word with a digit, a slash or an underscore in it, or a capital
    after its first letter (``FACT-007``, ``12,500``, ``src/app.py``, ``EUR``,
    ``McIntosh``); it must occur in ``source`` (ignoring case). A small model
    invents such things in a summary; prose around them is harmless, a wrong
    number or path carried into every later session is not."""
    known = source.lower()
    kept: list[str] = []
    for sentence in _SENTENCE_RE.split(text):
        names = [w.strip(".-") for w in _IDENTIFIER_RE.findall(sentence)]
        if all(w.lower() in known for w in names if w and _is_name(w)):
            kept.append(sentence)
    return " ".join(s for s in kept if s.strip())


def _is_name(word: str) -> bool:
    return any(c.isdigit() or c in "/_" for c in word) or any(c.isupper() for c in word[1:])
