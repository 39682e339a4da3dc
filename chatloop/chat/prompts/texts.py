"""The prompts chatloop sends on its own behalf, and the summary's shape. No I/O.

Every prompt chatloop sends on its own behalf is here, in one place, and is
quoted in docs/chains.md. A summary always has this shape (under 500 words)::

    **Background Context:** ...

    **Current Session Summary:**

    **Topics Discussed:**
    - ...

    **Decisions Made:**
    - ...

    **Pending:**
    - ...

``shape`` checks a model's output for it, ``sections`` reads it, ``assemble``
writes it and ``condense`` makes a whole summary a child's background. A summary
chatloop writes ends with the ledger (``chat.ledger``), which these functions never
see.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from chatloop.format import Message

MAX_WORDS = 500
HEADINGS = (
    "**Background Context:**",
    "**Current Session Summary:**",
    "**Topics Discussed:**",
    "**Decisions Made:**",
    "**Pending:**",
)
HEADING_WORDS = sum(len(h.split()) for h in HEADINGS)  # a summary of its headings alone
INITIAL = "Initial session."
NONE = "- None recorded."

# The sections are asked for in the order that survives a reply cut at its cap best
# (what was settled first, the background last); ``arrange`` and ``repair`` put them
# back in the summary's own order (``HEADINGS``).
SUMMARY_STRUCTURE = """\
Use exactly this markdown structure, in this order, and stay under {words} words:

**Decisions Made:**
- one bullet per decision or answer that was settled

**Pending:**
- one bullet per open question or next step

**Topics Discussed:**
- one bullet per topic

**Background Context:** {background_rule}

Rules: keep exact identifiers, file names, paths, commands, numbers and the \
user's stated constraints and preferences word for word. Write only what the \
{source} says; do not invent anything. Write "- None." for an empty list. \
Reply with the summary only.
{instructions}"""

SUMMARY_PROMPT = (
    """\
Write the progressive summary of the chat session below, so that a later session \
can continue it without the transcript. """
    + SUMMARY_STRUCTURE
    + """{previous}
{source_title}:

{text}
"""
)

# The same request as the next message of the conversation itself (the chat as the
# model saw it, then this): a server's prompt cache keeps the conversation's prefix.
SUMMARY_IN_CHAT = (
    """\
Pause our conversation here: instead of a reply, write the progressive summary of \
this chat session so far (every message above), so that a later session can \
continue it without them. """
    + SUMMARY_STRUCTURE
)

BACKGROUND_RULE_FIRST = 'write "Initial session."'
BACKGROUND_RULE_CHAINED = "condense the previous summary (below) into one or two sentences."
BACKGROUND_RULE_IN_CHAT = (
    "condense the summary this conversation began from (in its first message) into "
    "one or two sentences."
)

NOTES_PROMPT = """\
This is part {part} of {parts} of a chat transcript. Write short notes on it as \
bullets: the topics, what was decided or answered, exact identifiers, file \
names and numbers, and open questions. Write only what the part says; do not \
invent anything. Reply with the notes only.
{instructions}
Part {part} of {parts}:

{text}
"""

RESTORE_PROMPT = """\
We are continuing an earlier conversation: session {id} of {date}, \
{queries}, {tokens:,} tokens{grandparent}.

Summary of that session:

{summary}
{ledger}{pins}{carried}{unanswered}
Acknowledge briefly ({length}): the main topics, the key decisions, and that \
you are ready to continue.\
"""

LEDGER_LINES = """
What the user stated in the conversation so far, word for word:

{lines}
{missing}"""

NOT_CARRIED = "({count} more of their statements are in that session's ledger.)\n"

PINS = """
Facts the user pinned (keep them word for word):

{facts}
"""

CARRIED = """
Its last {count} messages follow word for word after your acknowledgment.
"""

UNANSWERED = """
Its last message was not answered because the context window was full. \
Answer it after your acknowledgment:

{text}
"""

TITLE_PROMPT = """\
Write a title of at most {words} words for the conversation that begins below. \
Reply with the title only, on one line, without quotes.

First request:

{request}

Start of the reply:

{reply}
"""
TITLE_WORDS = 6  # what the title prompt asks for
TITLE_SOURCE_CHARS = 500  # of the first request and of the reply, at most, in the prompt

_MARKER_LINE = re.compile(r"^.*SESSION_SUMMARY.*$\n?", re.MULTILINE)  # whole or damaged markers


def summary_prompt(
    text: str,
    previous: str | None,
    notes: bool = False,
    instructions: str = "",
    words: int = MAX_WORDS,
) -> str:
    """The request for a summary of ``text`` (a transcript, or notes on its parts) in
    at most ``words`` words; ``instructions`` are the person's own words on what to
    keep."""
    return SUMMARY_PROMPT.format(
        instructions=_asked(instructions),
        background_rule=BACKGROUND_RULE_CHAINED if previous else BACKGROUND_RULE_FIRST,
        previous=f"\nPrevious summary:\n\n{previous.strip()}\n" if previous else "",
        source="notes" if notes else "transcript",
        source_title="Notes on the session, part by part" if notes else "Transcript",
        text=text.strip(),
        words=words,
    )


def summary_in_chat(continued: bool, instructions: str = "", words: int = MAX_WORDS) -> str:
    """The request for a summary asked as the conversation's next message (the chat
    as the model saw it comes before it). ``continued``: the conversation began from a
    restoration prompt, whose summary the new one condenses."""
    return SUMMARY_IN_CHAT.format(
        instructions=_asked(instructions),
        background_rule=BACKGROUND_RULE_IN_CHAT if continued else BACKGROUND_RULE_FIRST,
        source="conversation",
        words=words,
    )


def _asked(instructions: str) -> str:
    asked = instructions.strip()
    return f"\nThe user asks this summary to: {asked}\n" if asked else ""


def notes_prompt(text: str, part: int, parts: int, instructions: str = "") -> str:
    """The request for notes on one part of a transcript too long for one request;
    ``instructions`` (the person's ``/compact TEXT``) go in every part's request."""
    return NOTES_PROMPT.format(
        part=part, parts=parts, text=text.strip(), instructions=_asked(instructions)
    )


def restoration_prompt(
    *,
    session_id: str,
    date: str,
    queries: int,
    tokens: int,
    summary: str,
    grandparent: str | None = None,
    unanswered: str | None = None,
    pins: Sequence[str] = (),
    branched: bool = False,
    carried: int = 0,
    ledger: Sequence[str] = (),
    not_carried: int = 0,
    ack_words: int = 0,
) -> str:
    """The first message of a continued session: who the parent was and its summary
    (``branched``: the parent is a fork of ``grandparent``, not a continuation;
    ``carried``: how many of its last messages the child carries word for word;
    ``ledger``: the ledger lines it carries, ``not_carried`` of them left out;
    ``ack_words``: the words the acknowledgment's cap allows, 0 for no bound)."""
    return RESTORE_PROMPT.format(
        id=session_id,
        date=date,
        queries=f"{queries:,} {'query' if queries == 1 else 'queries'}",
        tokens=tokens,
        grandparent=(
            f"; it {'branched from' if branched else 'continued'} session {grandparent}"
            if grandparent
            else ""
        ),
        summary=summary.strip(),
        length=f"at most {ack_words} words" if ack_words else "2-6 sentences or bullets",
        ledger=ledger_block(ledger, not_carried),
        unanswered=UNANSWERED.format(text=unanswered.strip()) if unanswered else "",
        pins=pins_block(pins),
        carried=CARRIED.format(count=carried) if carried else "",
    )


def restoration_frame() -> str:
    """A restoration prompt's own words, as long as they get (the longest ids, the
    carried exchanges' line, an acknowledgment's length), without what it carries (a
    summary, the ledger, pins, an unanswered message): what its budget pays first."""
    longest = "x" * 40
    return restoration_prompt(
        session_id=longest,
        date="2026-12-31 23:59",
        queries=10_000,
        tokens=10_000_000,
        summary="",
        grandparent=longest,
        carried=8,
        ack_words=99,
    )


def ledger_block(lines: Sequence[str], not_carried: int) -> str:
    """The part of a restoration prompt that carries ledger ``lines`` (and says how many
    more the parent's ledger holds); "" for none."""
    if not lines and not not_carried:
        return ""
    missing = NOT_CARRIED.format(count=not_carried) if not_carried else ""
    return LEDGER_LINES.format(lines="\n".join(lines), missing=missing)


def pins_block(pins: Sequence[str]) -> str:
    """The part of a restoration prompt that carries the pins; "" for none."""
    return PINS.format(facts="\n".join(f"- {p}" for p in pins)) if pins else ""


def title_prompt(request: str, reply: str, limit: int = TITLE_SOURCE_CHARS) -> str:
    """The request for a title of the conversation that began with ``request`` and
    ``reply``, each cut to ``limit`` characters (the opening says what it is about)."""
    return TITLE_PROMPT.format(
        words=TITLE_WORDS,
        request=clip(request.strip(), limit),
        reply=clip(reply.strip(), limit) or "(no text)",
    )


def is_restoration(message: Message) -> bool:
    """Whether ``message`` is a restoration prompt as chatloop writes it (a continued
    session's first message: its parent's summary), not a copy of something said.
    A copy (``copy``: a fork's, a retry's) never is, whatever its text; the text is
    looked at only in files written before copies were marked so."""
    return (
        message.role == "user"
        and message.restore
        and not message.copy
        and message.text.startswith(RESTORE_PROMPT[: RESTORE_PROMPT.index(":")])
    )


def as_said(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with the copies a fork carries counted as said in this session.

    A fork writes its parent's messages into its own file marked ``restore`` (so
    they are never numbered as its queries), and a summary leaves out what is
    marked so: the restoration prompt, whose summary is given apart, and the
    acknowledgment that answers it. The other copies are the branch's own past,
    and its summary must cover them, or resuming the branch loses them. What recall
    brought back (``recalled``) stays brought in: it was said where it came from."""
    out: list[Message] = []
    after_prompt = False  # the message before was a restoration prompt
    for m in messages:
        prompt = is_restoration(m)
        copy = m.copy or (
            m.restore
            and not m.recalled  # (brought back for a query, never said here)
            and not prompt
            and not (after_prompt and m.role == "assistant")
        )  # (a file written before copies were marked: neither a prompt nor its answer)
        out.append(m._replace(restore=False, copy=False) if copy else m)
        after_prompt = prompt
    return out


def transcript_lines(messages: Sequence[Message], limit: int = 2000) -> list[str]:
    """The conversation as plain lines for a summary request, one per message.

    Restoration messages, summaries and messages never sent are left out (the
    previous summary is given separately); tool results are cut to a short preview
    and every message to ``limit`` characters.
    """
    lines: list[str] = []
    for m in messages:
        if m.restore or m.role == "summary" or m.unsent:
            continue
        if m.role == "user":
            lines.append(f"User: {clip(m.text, limit)}")
        elif m.role == "assistant":
            if m.text.strip():
                lines.append(f"Assistant: {clip(m.text, limit)}")
            lines.extend(
                f"Assistant called {c.name}({clip(c.arguments, 200)})" for c in m.tool_calls
            )
        elif m.role == "tool":
            lines.extend(f"Tool {r.name} returned: {clip(r.content, 300)}" for r in m.tool_results)
    return lines


def clean(text: str) -> str:
    """Model output made safe to store: markers and surrounding fences removed."""
    text = _MARKER_LINE.sub("", text).strip()
    fence = re.fullmatch(r"```[a-z]*\n(.*)\n```", text, re.DOTALL)
    return (fence.group(1) if fence else text).strip()


def shape(text: str) -> bool:
    """True when all five headings are there, in order."""
    at = -1
    for heading in HEADINGS:
        at = text.find(heading, at + 1)
        if at < 0:
            return False
    return True


def cap_words(text: str, limit: int = MAX_WORDS) -> str:
    """``text`` cut to ``limit`` words, line breaks kept."""
    count = 0
    out: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if count + len(words) > limit:
            out.append(" ".join(words[: limit - count]) + " …")
            break
        count += len(words)
        out.append(line)
    return "\n".join(out).strip()


def condense(summary: str | None, words: int = 90) -> str:
    """The Background Context of a child: its parent's whole summary in a few sentences,
    what was settled first, then the topics, what was open, and the parent's own
    background last (so the oldest is what a tight cap cuts)."""
    if not summary or not summary.strip():
        return INITIAL
    topics = section(summary, HEADINGS[2])
    decisions = section(summary, HEADINGS[3])
    pending = section(summary, HEADINGS[4])
    line = next((row for row in summary.splitlines() if row.startswith(HEADINGS[0])), "")
    background = line.removeprefix(HEADINGS[0]).strip()
    parts = []
    if decisions:
        parts.append("Settled: " + "; ".join(decisions[:6]) + ".")
    if topics:
        parts.append("Earlier: " + "; ".join(topics[:4]) + ".")
    if pending:
        parts.append("Open then: " + "; ".join(pending[:2]) + ".")
    if background and background != INITIAL:
        parts.append(background)
    text = " ".join(parts) or "Earlier: " + " ".join(clean(summary).split())
    return cap_words(text, words)


def assemble(
    background: str,
    *,
    topics: Sequence[str],
    decisions: Sequence[str],
    pending: Sequence[str],
    narrative: str = "",
) -> str:
    def bullets(items: Sequence[str]) -> str:
        return "\n".join(f"- {item}" for item in items) if items else NONE

    head = f"{HEADINGS[0]} {background}\n\n{HEADINGS[1]}\n\n"
    if narrative:
        head += narrative + "\n\n"
    return cap_words(
        f"{head}{HEADINGS[2]}\n{bullets(topics)}\n\n{HEADINGS[3]}\n{bullets(decisions)}\n\n"
        f"{HEADINGS[4]}\n{bullets(pending)}"
    )


def heading_of(line: str) -> tuple[int, str] | None:
    """The section ``line`` opens (its index in HEADINGS) and what follows the heading
    on it, when it begins with one of the five headings as models write them
    (``**Pending:**``, ``**Pending**:``, ``Pending:``, ``## Pending``, ``**Pending**``);
    a bare name only as the whole line (so "Pending approval" is no heading)."""
    bare = line.strip().lstrip("#").strip()
    lowered = bare.lower()
    for i, heading in enumerate(HEADINGS):
        name = heading.strip("*").rstrip(":")
        for form in (heading, f"**{name}**:", f"{name}:", f"__{name}:__"):
            if lowered.startswith(form.lower()):
                return i, bare[len(form) :].strip()
        if lowered.rstrip(":").strip("*_").rstrip(":").strip() == name.lower():
            return i, ""
    return None


def sections(lines: Sequence[str]) -> tuple[list[str], dict[int, list[str]]]:
    """The lines before the first heading, and each section's lines (a heading written
    twice: its lines together), blank lines left out."""
    before: list[str] = []
    found: dict[int, list[str]] = {}
    current: list[str] = before
    for line in lines:
        opened = heading_of(line)
        if opened is not None:
            index, rest = opened
            current = found.setdefault(index, [])
            line = rest
        if line.strip():
            current.append(line.strip())
    return before, found


def bullet_items(lines: Sequence[str]) -> list[str]:
    """A section's lines as bullet items (their dashes off: ``assemble`` puts them back)."""
    return [line.removeprefix("- ") for line in lines]


def section(summary: str, heading: str) -> list[str]:
    """The bullets under ``heading`` in a summary, without their dashes."""
    at = summary.find(heading)
    if at < 0:
        return []
    items: list[str] = []
    for line in summary[at + len(heading) :].splitlines()[1:]:
        if line.startswith("**"):
            break
        item = line.strip().removeprefix("- ").removeprefix("* ").strip()
        if item and item.rstrip(".").lower() not in ("none", "none recorded"):
            items.append(item.rstrip("."))
    return items


def one_line(text: str) -> str:
    return " ".join(text.split())


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# the end of a sentence: a full stop, ! or ? after a word of two letters or more (not
# a list's "2." nor an "e.g."), closing quotes or brackets kept, then a space or the end
_SENTENCE_END = re.compile(r"(?:(?<=[^\W\d_]{2})|(?<=[)\]\"']))[.!?][\"')\]]*(?=\s|$)")


def whole_sentences(text: str) -> str:
    """``text`` (a reply its cap cut off) up to the end of its last whole sentence or
    line, whichever comes later; as it is when it has neither."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    line = text.rstrip().rfind("\n")
    cut = max(ends[-1] if ends else -1, line)
    return text[:cut].rstrip() if cut > 0 else text
