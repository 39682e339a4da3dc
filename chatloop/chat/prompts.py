"""The summary, restoration and title prompts, and the text work around them. No I/O.

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

``shape`` checks a model's output for it; ``repair`` gives output that is cut
or lacks part of it the structure, keeping what the model wrote under its own
headings; ``fit`` brings a summary within a budget, the least valuable text
first; ``fallback_summary`` builds one from the transcript alone when the model
cannot. A summary chatloop writes ends with the ledger (``chat.ledger``),
which these functions never see.
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
        request=_clip(request.strip(), limit),
        reply=_clip(reply.strip(), limit) or "(no text)",
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
    and its summary must cover them, or resuming the branch loses them."""
    out: list[Message] = []
    after_prompt = False  # the message before was a restoration prompt
    for m in messages:
        prompt = is_restoration(m)
        copy = m.copy or (
            m.restore and not prompt and not (after_prompt and m.role == "assistant")
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
            lines.append(f"User: {_clip(m.text, limit)}")
        elif m.role == "assistant":
            if m.text.strip():
                lines.append(f"Assistant: {_clip(m.text, limit)}")
            lines.extend(
                f"Assistant called {c.name}({_clip(c.arguments, 200)})" for c in m.tool_calls
            )
        elif m.role == "tool":
            lines.extend(f"Tool {r.name} returned: {_clip(r.content, 300)}" for r in m.tool_results)
    return lines


def clean(text: str) -> str:
    """Model output made safe to store: markers and surrounding fences removed."""
    text = _MARKER_LINE.sub("", text).strip()
    fence = re.fullmatch(r"```[a-z]*\n(.*)\n```", text, re.DOTALL)
    return (fence.group(1) if fence else text).strip()


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


def condense(summary: str | None, words: int = 90) -> str:
    """The Background Context of a child: its parent's whole summary in a few sentences,
    what was settled first, then the topics, what was open, and the parent's own
    background last (so the oldest is what a tight cap cuts)."""
    if not summary or not summary.strip():
        return INITIAL
    topics = _section(summary, HEADINGS[2])
    decisions = _section(summary, HEADINGS[3])
    pending = _section(summary, HEADINGS[4])
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


def arrange(text: str) -> str | None:
    """A reply that holds every section (``HEADINGS`` but the Current Session
    Summary, which heads no text of its own), in whatever order and heading form, in
    the summary's own order, each section's lines as the model wrote them (text
    before its first heading is the Current Session Summary's); None when a section
    is missing (``repair`` then)."""
    before, found = _sections(clean(text).splitlines())
    if any(i not in found for i in (0, 2, 3, 4)):
        return None
    return assemble(
        " ".join(found[0]),
        topics=_items(found[2]),
        decisions=_items(found[3]),
        pending=_items(found[4]),
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
    before, found = _sections(lines)
    source = "\n".join(
        [
            previous or "",
            *(m.text for m in messages),
            *(r.content for m in messages for r in m.tool_results),
        ]
    )
    own = {i: _grounded_lines(rows, source) for i, rows in found.items()}
    narrative = _grounded_lines(before, source)
    parts = _fallback_parts(messages, previous, goal)
    background = " ".join(own.get(0, [])) or condense(previous)
    return assemble(
        background,
        topics=_items(own[2]) if own.get(2) else parts["topics"],
        decisions=_items(own[3]) if own.get(3) else (_carried(previous) or [NONE[2:]]),
        pending=_items(own[4]) if own.get(4) else parts["pending"],
        narrative="\n".join([*own.get(1, []), *narrative]),
    )


def _heading_of(line: str) -> tuple[int, str] | None:
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


def _sections(lines: Sequence[str]) -> tuple[list[str], dict[int, list[str]]]:
    """The lines before the first heading, and each section's lines (a heading written
    twice: its lines together), blank lines left out."""
    before: list[str] = []
    found: dict[int, list[str]] = {}
    current: list[str] = before
    for line in lines:
        opened = _heading_of(line)
        if opened is not None:
            index, rest = opened
            current = found.setdefault(index, [])
            line = rest
        if line.strip():
            current.append(line.strip())
    return before, found


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


def _items(lines: Sequence[str]) -> list[str]:
    """A section's lines as bullet items (their dashes off: ``assemble`` puts them back)."""
    return [line.removeprefix("- ") for line in lines]


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


def fallback_summary(
    messages: Sequence[Message], previous: str | None, goal: str | None = None
) -> str:
    """A summary built from the transcript alone: the chain's goal (``goal``, else as
    ``_fallback_parts`` finds it), the last exchanges, tools used and files mentioned."""
    parts = _fallback_parts(messages, previous, goal)
    return assemble(
        condense(previous),
        topics=parts["topics"],
        decisions=[*_carried(previous), *parts["decisions"]] or [NONE[2:]],
        pending=parts["pending"],
        narrative="(Built from the transcript without the model.)",
    )


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


GOAL = "Goal (first request): "
LAST_ANSWER = "Last answer: "


def stated_goal(summary: str | None) -> str | None:
    """The chain's goal as a summary's Topics state it (``GOAL``), if they do."""
    topics = _section(summary or "", HEADINGS[2])
    return next((t[len(GOAL) :] for t in topics if t.startswith(GOAL)), None)


def _fallback_parts(
    messages: Sequence[Message], previous: str | None = None, goal: str | None = None
) -> dict[str, list[str]]:
    """The sections chatloop fills itself: the chain's goal (``goal``: the ledger's;
    else as ``previous`` states it; else the first request here), the last requests
    (the goal's own left out), tools and files; the last answer; what is
    unanswered. The last answer is a topic: the sections chatloop fills never hold a
    decision (only the parent summary's, carried)."""
    queries = [m for m in messages if m.is_query and not m.copy and m.text.strip()]
    replies = [m for m in messages if m.role == "assistant" and not m.restore and m.text.strip()]
    topics: list[str] = []
    goal = goal or stated_goal(previous) or (_line(queries[0].text) if queries else None)
    if goal is not None:
        topics.append(f"{GOAL}{_clip(_line(goal), 160)}")
        start = _line(goal)[:60].rstrip(" …")
        queries = [q for q in queries if not _line(q.text).startswith(start)]
    if queries:
        topics += [_clip(_line(q.text), 100) for q in queries[-6:]]
    tools = sorted({c.name for m in messages for c in m.tool_calls})
    if tools:
        topics.append("Tools used: " + ", ".join(tools))
    files = _files(messages)
    if files:
        topics.append("Files mentioned: " + ", ".join(files[:12]))
    if replies:  # what was said, not decided: a decision is one the person states as one
        topics.append(f"{LAST_ANSWER}{_clip(_line(replies[-1].text), 200)}")
    decisions: list[str] = []
    pending: list[str] = []
    last_user = max((i for i, m in enumerate(messages) if m.is_query), default=-1)
    answered = any(
        m.role == "assistant" and m.text.strip() and not m.interrupted
        for m in messages[last_user + 1 :]
    )
    if last_user >= 0 and not answered:
        pending.append(f"Unanswered: {_clip(_line(messages[last_user].text), 160)}")
    elif queries:
        pending.append("Continue from the last exchange.")
    # what the person typed after the last query that could not be sent (a chat that
    # never started, a message too long): still to be asked, so still pending
    unsent = [m for m in messages[last_user + 1 :] if m.role == "user" and m.unsent]
    pending += [f"Not sent: {_clip(_line(m.text), 160)}" for m in unsent[-3:] if m.text.strip()]
    return {"topics": topics, "decisions": decisions, "pending": pending}


_FILE_RE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.[A-Za-z][A-Za-z0-9]{0,5})(?![\w/])")


def _files(messages: Sequence[Message]) -> list[str]:
    seen: dict[str, None] = {}
    for m in messages:
        if m.restore or m.role == "summary":
            continue
        bits = [m.text, *(c.arguments for c in m.tool_calls)]
        for bit in bits:
            for name in _FILE_RE.findall(bit):
                if not re.fullmatch(r"[\d.]+", name) and not name.startswith("e.g"):
                    seen.setdefault(name, None)
    return list(seen)


def _carried(previous: str | None) -> list[str]:
    """What the parent's summary settled: carried into a summary chatloop builds itself,
    word for word (it appears in the parent's summary, so nothing is invented)."""
    settled = _section(previous, HEADINGS[3]) if previous else []
    # (a summary built by an older chatloop filed its last answer here: not a decision)
    return [item for item in settled if not item.startswith(LAST_ANSWER)][:6]


def _section(summary: str, heading: str) -> list[str]:
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


def _line(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str, limit: int) -> str:
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
