"""The ledger: what the person stated, carried through a chain without the model.

A small model's summary drops or garbles facts, and every later session inherits
the loss. The ledger cannot lose them: it is built from the person's own messages
(``of_messages``: the queries typed in a file, never a reply, a tool's output, a
restoration or a copy; ``chain.ledger_of`` hands it the copies the format marks
``copy`` as said, a branch's own past) by these rules, and kept word for word:

- a **decision** is a sentence that settles something: "we decided", "we agreed",
  "we chose", "settled on", "let's go with / use / keep", "we'll go with / use /
  keep", "I'll go with / use", or one that begins with "Decision:";
- a **fact** is any other sentence that holds an identifier, a path, a file name,
  a name or a number worth keeping: a word that mixes letters with digits, or holds
  a slash or an underscore, or a capital after its first letter (``FACT-007``,
  ``db-stage-02``, ``src/app.py``, ``EUR``, ``McIntosh``), a file name
  (``notes.txt``), or a number of three digits or more, or written with a separator
  (``8080``, ``12,500``, ``0.25``, ``02:30``); a bare one- or two-digit number
  ("note 5", "40 minutes") alone does not make a fact;
- a question (a sentence ending in "?") states nothing; nor does anything pasted
  as structure: HTML comments (the frame and summary markers among them), what
  stands between summary markers, fenced code, ledger lines, and a summary's, the
  ledger's or a restoration prompt's headings in any markdown form with what stands
  under them (``_pasted``);
- a sentence is cut at ``ENTRY_CHARS`` at a word boundary, and the identifiers cut
  off are listed after it, so no value is ever lost with its line;
- a sentence stated again is kept once, where it was stated last;
- the **goal** is the chain's first request: the first message the person typed in
  its first session (never a restoration prompt or an imported restore block),
  without what stands as structure in it (as above), cut at ``GOAL_CHARS``;
  one per ledger, its first line, carried from parent to child as it is
  (``with_goal``).

Each summary chatloop writes ends with its file's ledger, the parent's first (read
back from the parent's summary, ``split``) and then its own, under the ``LEDGER``
heading: readable in any editor, never shown to the model as something to
rewrite. Only that block is a ledger: ``join`` leaves out of the summary's text
whatever imitates one (a model's), and ``split`` reads nothing but the block at its
end. A restoration prompt carries it within a budget, decisions first, then
facts, most recent first, then the goal (``carry``), and says how many it could not
carry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from chatloop.chat import prompts
from chatloop.chat.prompts import GOAL, HEADINGS
from chatloop.format import Message

LEDGER = "**Ledger (what the user stated, word for word):**"
ENTRY_CHARS = 240  # the longest sentence kept whole; longer ones keep their identifiers
MAX_ENTRIES = 200  # a file's ledger keeps its last this many (its ancestors keep the rest)
GOAL_CHARS = 160  # of the chain's first request, kept as its goal

Kind = Literal["goal", "decision", "fact"]

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])|\n+")
_WORD = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|[^\s,;:!?()\[\]{}<>\"'`*]+")  # 12,500: one
_FILE = re.compile(r"[\w-]+\.[A-Za-z][A-Za-z0-9]{0,5}$")
_DECISION = re.compile(
    r"\b(?:we(?:'ve| have)? (?:decided|agreed|chose|settled on)"
    r"|(?:let's|let us) (?:go with|use|keep|stick with)"
    r"|(?:we|i)(?:'ll| will) (?:go with|use|keep|stick with)"
    r"|settled on)\b|^decision:",
    re.IGNORECASE,
)
_PASTED_SUMMARY = re.compile(
    r"SESSION_SUMMARY_START.*?(?:SESSION_SUMMARY_END|\Z)", re.DOTALL | re.IGNORECASE
)
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_FENCE = re.compile(r"^\s*(```|~~~).*?(?:^\s*\1|\Z)", re.DOTALL | re.MULTILINE)
_KINDS: dict[Kind, str] = {"goal": "[goal]", "decision": "[decision]", "fact": "[fact]"}


def _name(heading: str) -> str:
    """A heading's words without its markdown (``**Decisions Made:**``: Decisions Made)."""
    return heading.strip().splitlines()[0].strip("*_# ").removesuffix(":").strip("*_ ")


def _pattern(name: str) -> str:
    return r"\s+".join(re.escape(word) for word in name.split())


# The headings a pasted summary, ledger or restoration prompt brings: the summary's
# shape, the ledger's own, and the parts of a restoration prompt that carry the
# person's statements and pins (``prompts``: their one source).
_HEADING = re.compile(
    r"(?P<hashes>#{1,6})?\s*(?P<open>[*_]{1,3})?\s*(?P<name>"
    + "|".join(_pattern(_name(h)) for h in (*HEADINGS, LEDGER, prompts.LEDGER_LINES, prompts.PINS))
    + r")(?!\w)\s*(?P<close>[*_]{1,3})?\s*(?P<colon>:)?\s*(?:[*_]{1,3})?",
    re.IGNORECASE,
)
_LEDGER_HEADING = re.compile(r"[#*_>\s]*" + _pattern(_name(LEDGER)) + r"(?!\w)", re.IGNORECASE)
# a line that goes on a section: a list item, an indented or a quoted line
_LISTED = re.compile(r"\s+\S|\s*>|\s*(?:[-*+\u2022]|\d{1,3}[.)])\s")

__all__ = ["LEDGER", "Entry", "carry", "goal", "join", "merge", "of_messages", "split", "with_goal"]


@dataclass(frozen=True)
class Entry:
    """One sentence the person stated: a decision or a fact, word for word."""

    kind: Kind
    text: str

    def line(self) -> str:
        """The entry as its ledger line (``- [fact] …``)."""
        return f"- {_KINDS[self.kind]} {self.text}"

    def carried(self) -> str:
        """The entry as a restoration prompt carries it: its words alone (a decision
        says what it settles), the goal named as such; a few tokens less a line than
        ``line``, which on 2,048 tokens is a fact more."""
        return f"- {GOAL}{self.text}" if self.kind == "goal" else f"- {self.text}"


def of_messages(messages: Sequence[Message]) -> list[Entry]:
    """The decisions and facts of the person's own messages, in the order stated (the
    ones they stated again: once, where last)."""
    found: list[Entry] = []
    for message in messages:
        if not message.is_query or message.copy:
            continue
        for line in _statements(message.text):
            for sentence in _SENTENCE.split(line):
                entry = _entry(" ".join(sentence.split()))
                if entry is not None:
                    found.append(entry)
    return _once(found)


def _statements(text: str) -> list[str]:
    """The lines of ``text`` that may state something: without HTML comments, pasted
    summaries (between the summary markers, or a summary's, the ledger's or a
    restoration prompt's headings in any markdown form and what stands under them:
    ``_pasted``), fenced code and ledger lines."""
    text = _PASTED_SUMMARY.sub("\n", text)
    text = _COMMENT.sub("\n", text)
    text = _FENCE.sub("\n", text)
    kept = []
    for line, pasted in zip(text.splitlines(), _pasted(text.splitlines()), strict=True):
        bare = line.strip()
        if pasted or not bare or _read_line(bare) is not None:
            continue
        kept.append(bare)
    return kept


def _pasted(lines: Sequence[str]) -> list[bool]:
    """For each of ``lines``, whether it quotes a summary's structure: a heading of a
    summary, of the ledger or of a restoration prompt's parts (``_is_heading``), and
    what stands under it. A section runs on through its bullets, indented or quoted
    lines and the paragraph that follows the heading; it ends at the first line of
    plain prose after a blank line once it holds something (what the person wrote
    after the pasted part is theirs again)."""
    marks: list[bool] = []
    inside = False  # in a pasted section
    held = False  # the section holds something below its heading (or on its line)
    blank = False  # a blank line came since its last line
    for line in lines:
        bare = line.strip().lstrip(">").strip()
        heading = _is_heading(bare)
        if heading:
            inside, blank = True, False
            held = bool(_HEADING.sub("", bare, count=1).strip(" *_:"))
        elif inside and not bare:
            blank = True
        elif inside and bare.strip("-*_= ") == "":
            pass  # a rule between the sections of a paste
        elif inside and blank and held and not _LISTED.match(line):
            inside = False  # the person's own prose after the paste
        elif inside:
            held, blank = True, False
        marks.append(inside)
    return marks


def _is_heading(line: str) -> bool:
    """Whether ``line`` (without quote marks) is a heading of a summary, the ledger or
    a restoration prompt's parts, in any markdown form: ``**Decisions Made:**``,
    ``**Decisions Made**``, ``## Decisions Made``, ``Decisions made:`` (a name that is
    neither a markdown heading, nor bold, nor followed by a colon is prose)."""
    found = _HEADING.match(line)
    if found is None:
        return False
    return bool(found["hashes"] or found["colon"] or (found["open"] and found["close"]))


def merge(earlier: Sequence[Entry], later: Sequence[Entry]) -> list[Entry]:
    """``earlier`` (a parent's ledger) then ``later``, each once (where last), at most
    MAX_ENTRIES (the oldest give way: they stay in the files that held them); the
    first goal of the two stays first."""
    both = [*earlier, *later]
    first = [e for e in both if e.kind == "goal"][:1]
    return [*first, *_once([e for e in both if e.kind != "goal"])[-MAX_ENTRIES:]]


def goal(entries: Sequence[Entry]) -> str | None:
    """The chain's goal that ``entries`` hold, if any."""
    return next((e.text for e in entries if e.kind == "goal"), None)


def with_goal(
    entries: Sequence[Entry], messages: Sequence[Message], known: str | None
) -> list[Entry]:
    """``entries`` with the chain's goal first: the one they hold; else ``known`` (a
    goal known otherwise; ``chain.ledger_of`` gives none: a summary's goal line may
    be the model's); else the first message the person typed in ``messages`` (none:
    no goal)."""
    if goal(entries) is not None:
        return list(entries)
    said = (" ".join(_statements(m.text)) for m in messages if m.is_query and not m.copy)
    text = " ".join((known or next((t for t in said if t.strip()), "")).split())
    if not text:
        return list(entries)
    return [Entry("goal", _cut(text, GOAL_CHARS)), *entries]


def join(summary: str, entries: Sequence[Entry]) -> str:
    """A summary frame's text: ``summary``, then the ledger when there is one. What
    ``summary`` holds of a ledger (its heading in any form, a line in a ledger's form:
    what a model wrote, imitating one) is left out: the block at the end is the only
    ledger, and only chatloop writes it."""
    prose = _prose(summary)
    if not entries:
        return prose
    return prose + "\n\n" + LEDGER + "\n" + "\n".join(e.line() for e in entries)


def split(text: str | None) -> tuple[str, list[Entry]]:
    """A summary frame's text as its summary and its ledger (``join`` undone). Only the
    block ``join`` writes is a ledger: the heading on a line of its own, then lines in
    the ledger's form to the end of the text. A heading anywhere else, or followed by
    anything but entries, is prose (a model's, a person's), and no entry is read from
    it; what the summary holds of a ledger's form is left out of it (``join``)."""
    if not text:
        return "", []
    at = text.rfind(LEDGER)
    if at < 0 or (at > 0 and text[at - 1] != "\n"):
        return _prose(text), []
    rest, _, block = text[at + len(LEDGER) :].partition("\n")
    entries: list[Entry] = []
    for line in block.split("\n"):  # (as join writes it: an entry holds no other break)
        entry = _read_line(line)
        if entry is None and line.strip():
            return _prose(text), []
        if entry is not None:
            entries.append(entry)
    if rest.strip() or not entries:
        return _prose(text), []
    return _prose(text[:at]), entries


def _prose(text: str) -> str:
    """``text`` without what imitates a ledger: a line that opens with the ledger's
    heading (in any markdown form), and a line in a ledger entry's form (lines as
    ``split`` reads them; the rest of the text as it was)."""
    kept = [
        line
        for line in text.strip().split("\n")
        if _read_line(line) is None and not _LEDGER_HEADING.match(line)
    ]
    return "\n".join(kept).strip()


def carry(
    entries: Sequence[Entry], budget: int, cost: Callable[[str], int]
) -> tuple[list[Entry], int]:
    """The entries a restoration prompt carries within ``budget`` tokens (``cost`` of
    each ``Entry.carried`` line), decisions first, then facts, each most recent first,
    then the goal (a summary's Topics name it too); and how many did not fit. The
    carried ones come back in the ledger's own order."""
    newest = list(reversed(range(len(entries))))
    order = [i for kind in ("decision", "fact", "goal") for i in newest if entries[i].kind == kind]
    kept: set[int] = set()
    left = budget
    for i in order:
        spent = cost(entries[i].carried())
        if spent <= left:
            kept.add(i)
            left -= spent
    return [e for i, e in enumerate(entries) if i in kept], len(entries) - len(kept)


def _entry(sentence: str) -> Entry | None:
    if len(sentence) < 3 or sentence.endswith("?"):
        return None
    if _DECISION.search(sentence):
        return Entry("decision", _clip(sentence))
    if any(_named(word) for word in _words(sentence)):
        return Entry("fact", _clip(sentence))
    return None


def _words(sentence: str) -> list[str]:
    return [w.strip(".-") for w in _WORD.findall(sentence)]


def _named(word: str) -> bool:
    """An identifier, a path, a file name, a name or a number worth keeping (the
    module's rules)."""
    if not word:
        return False
    if "/" in word or "_" in word or any(c.isupper() for c in word[1:]):
        return True
    digits = sum(c.isdigit() for c in word)
    if digits and any(c.isalpha() for c in word):
        return True  # letters with digits: FACT-007, v2, p3, 5pm
    if digits >= 3 or (digits and any(c in ",.:" for c in word.strip(",.:"))):
        return True  # 8080, 12,500, 0.25, 02:30
    return bool(_FILE.fullmatch(word))


def _cut(text: str, limit: int) -> str:
    """``text`` cut at ``limit`` characters at a word boundary, marked with "…"."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit] + " …"


def _clip(sentence: str) -> str:
    """``sentence`` cut at ENTRY_CHARS at a word boundary; the identifiers cut off are
    listed after it."""
    if len(sentence) <= ENTRY_CHARS:
        return sentence
    cut = sentence.rfind(" ", 0, ENTRY_CHARS)
    head = sentence[: cut if cut > 0 else ENTRY_CHARS]
    lost = [w for w in _words(sentence[len(head) :]) if _named(w)]
    tail = f" (also: {', '.join(dict.fromkeys(lost))})" if lost else ""
    return f"{head} …{tail}"


def _once(entries: Sequence[Entry]) -> list[Entry]:
    """Each entry once, where it came last (a sentence stated again is recent again)."""
    last = {(e.kind, e.text.lower()): i for i, e in enumerate(entries)}
    return [e for i, e in enumerate(entries) if last[(e.kind, e.text.lower())] == i]


def _read_line(line: str) -> Entry | None:
    stripped = line.strip()
    for kind, mark in _KINDS.items():
        prefix = f"- {mark} "
        if stripped.startswith(prefix) and stripped[len(prefix) :].strip():
            return Entry(kind, stripped[len(prefix) :].strip())
    return None
