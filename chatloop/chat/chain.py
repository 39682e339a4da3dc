"""Summary chains: progressive summaries, and continuing a session in a new linked file.

A chain is a list of session files, each linked to its parent by
``parent_id``/``parent_file`` in its front matter. A session ends with a
summary frame; its child begins with a restoration prompt carrying that
summary (and only that one: it already condenses its own parent), then the
model's acknowledgment. Nothing is copied or deleted: every word stays in the
file it was said in. docs/chains.md explains the design and quotes the prompts
(``chatloop.chat.prompts``).

``summarize`` never raises for a model failure: after one retry it returns
the deterministic fallback, so every session stays resumable. A summary the
server cut (its stream ended without a finish reason) is never the model's:
it is not asked again at once (the server cut it for another request, which
a new one would cut in turn) and the fallback is returned.
``read_parent`` asks the store for the summary that may be trusted: in a
format 2 file finalize's pointer leads straight to it, so preparing a resume
costs the same for a 1 KB and a 100 MB transcript (docs/format.md, "The
summary").
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from chatloop.backends.base import (
    Backend,
    Cancel,
    Cancelled,
    ChatMessage,
    StreamCut,
    estimate_tokens,
)
from chatloop.chat import ledger, prompts
from chatloop.config import (
    DEFAULT_SUMMARY_MAX_TOKENS,
    DEFAULT_SUMMARY_TIMEOUT,
    DEFAULT_WINDOW,
    MAX_CARRIED,
)
from chatloop.errors import BackendError, ChatloopError
from chatloop.format import Message, SessionMeta
from chatloop.store.fsio import SUMMARY_HOLDER, lock_holder
from chatloop.store.store import Store
from chatloop.store.writer import SessionWriter

SUMMARY_MIN_WORDS = 60  # the smallest summary chatloop fits a summary into
MAX_CHAIN = 10_000  # parent links followed at most (a loop guard)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class SummaryOutcome:
    """A summary and how it was made. ``fallback`` when the model failed twice, or
    once when the server cut its reply."""

    text: str
    fallback: bool
    calls: int
    error: str | None = None

    def message(self, at: datetime) -> Message:
        return Message.create("summary", at, text=self.text, fallback=self.fallback)


@dataclass(frozen=True)
class Parent:
    """What a resume needs to know about the session it continues."""

    path: Path
    meta: SessionMeta
    summary: str | None  # None: no usable summary block
    note: str | None = None  # what was wrong with the summary, for the person

    @property
    def tokens(self) -> int:
        return self.meta.tokens_in + self.meta.tokens_out


# ------------------------------------------------------------------ summarizing


def summarize(
    backend: Backend,
    messages: Sequence[Message],
    *,
    previous: str | None,
    window: int | None,
    max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS,
    timeout: float = DEFAULT_SUMMARY_TIMEOUT,
    progress: Progress | None = None,
    instructions: str = "",
    count: Callable[[str], int] = estimate_tokens,
    cancel: Cancel | None = None,
    chat: Sequence[ChatMessage] | None = None,
    read_ahead: int = 0,
) -> SummaryOutcome:
    """The progressive summary of ``messages`` (``previous``: the parent's summary),
    given as their file marks them: what a fork carried counts as said in the
    transcript (``prompts.as_said``), and the ledger reads the marks (``ledger_of``).

    Each request is a completion without tools, outside the live history,
    with a timeout and one retry. A transcript too long for the window is
    summarized in parts first (notes per part, then the summary of the
    notes). Output without the structure is wrapped; a model that fails twice
    gives way to ``prompts.fallback_summary``. KeyboardInterrupt propagates
    (the caller writes the fallback and saves). ``instructions``: what the person
    asked the summary to keep (``/compact TEXT``), passed to the model as theirs.
    ``count``: a text's tokens (``TokenCount.text``; default: the estimate).
    ``cancel``: set by the caller to give the summary up (``Cancelled`` is raised, with
    no retry and no fallback: a summary prepared ahead that the person overtook).
    ``chat``: ``messages`` as the conversation sends them (its system prompt first),
    when they and ``prompts.summary_in_chat`` fit the window with the summary: the
    summary is then asked as the conversation's next message, so that a server's
    prompt cache keeps the conversation (the next turn is not read again whole).
    ``read_ahead``: each request's prompt is first read into the server in pieces of
    about that many tokens (``_read_in_pieces``), ``cancel`` looked at before each; 0: sent
    whole at once.
    """
    stated = messages  # as marked: the ledger reads what they are (``ledger_of``)
    messages = prompts.as_said(messages)  # the summary takes a fork's copies as said
    if not any(m.is_query for m in messages):  # nothing new: the parent's summary stands
        if previous:
            return SummaryOutcome(previous, False, 0)
        return SummaryOutcome(prompts.fallback_summary(messages, None), True, 0)
    earlier, inherited = ledger.split(previous)
    known = ledger_of(inherited, stated)
    goal = ledger.goal(known)
    previous = earlier or None  # (the model is given the summary only)
    size = window or DEFAULT_WINDOW
    reserve = min(max_tokens, max(64, size // 3))
    words = summary_words(reserve)  # every summary made here fits its budget
    asked = asked_words(words)
    if previous and count(previous) > reserve:  # never let it crowd out the text
        previous = prompts.fit(previous, words)
    template = count(prompts.summary_prompt("", previous))
    room = max(200, int((size - reserve - template) * 0.85))
    lines = prompts.transcript_lines(messages)
    calls = 0
    options = {"max_tokens": reserve, "temperature": 0.2}
    ask = functools.partial(
        _ask,
        backend,
        options=options,
        timeout=timeout,
        cancel=cancel,
        piece=read_ahead,
        count=count,
    )
    try:
        text, notes = "\n".join(lines), False
        depth = 0
        while chat is None and (size := count(text)) > room and depth < 3:
            per_token = max(1.0, len(text) / max(1, size))  # characters a token, here
            pieces = _split(text.splitlines(), int(room * per_token))
            made: list[str] = []
            for i, piece in enumerate(pieces, 1):
                if progress:
                    progress(f"part {i} of {len(pieces)}")
                prompt = prompts.notes_prompt(piece, i, len(pieces), instructions)
                answer, used, _ = ask(prompt)
                calls += used
                made.append(f"Part {i}:\n{prompts.cap_words(prompts.clean(answer), 150)}")
            text, notes, depth = "\n\n".join(made), True, depth + 1
        if progress:
            progress("summary")
        if chat is not None:
            request = prompts.summary_in_chat(previous is not None, instructions, asked)
            answer, used, cut = ask(request, history=chat)
        else:
            request = prompts.summary_prompt(text, previous, notes, instructions, asked)
            answer, used, cut = ask(request)
        calls += used
    except BackendError as exc:
        text = prompts.fallback_summary(messages, previous, goal)
        return SummaryOutcome(
            ledger.join(prompts.fit(text, words), known), True, calls, exc.message
        )
    answer = ledger.split(prompts.clean(answer))[0]  # (a ledger is chatloop's to write)
    arranged = None if cut else prompts.arrange(answer)
    answer = arranged or prompts.repair(answer, previous, messages, cut, goal)
    return SummaryOutcome(ledger.join(prompts.fit(answer, words), known), False, calls)


def fallback(messages: Sequence[Message], previous: str | None, words: int) -> SummaryOutcome:
    """The summary built from the transcript without the model (``prompts.fallback_summary``
    within ``words``), with the ledger of ``previous`` and of ``messages`` (as
    ``summarize`` takes them: as marked)."""
    earlier, inherited = ledger.split(previous)
    known = ledger_of(inherited, messages)
    said = prompts.as_said(messages)
    text = prompts.fallback_summary(said, earlier or None, ledger.goal(known))
    return SummaryOutcome(ledger.join(prompts.fit(text, words), known), True, 0)


def ledger_of(inherited: Sequence[ledger.Entry], messages: Sequence[Message]) -> list[ledger.Entry]:
    """The ledger a summary of ``messages`` ends with: the parent's (``inherited``)
    and what the person stated in them, with the chain's goal first (the parent's;
    else the first request of ``messages``). The parent's summary text gives none: a
    goal line in its Topics may be the model's words (a chain whose summaries were
    written before ledgers takes the first request of ``messages`` as its goal).

    ``messages`` as their file marks them: the person's words are the queries typed
    in it and the copies it marks ``copy`` (a fork's history, the exchanges a child
    carries: copies of queries typed earlier, the branch's own past, read by the
    same rules). A message brought in without that mark is never read: a restoration
    prompt, its acknowledgment, a seed file's restore block, the copies of a fork
    written before copies were marked (``prompts.as_said`` takes those as said for
    a summary's transcript; the ledger never infers)."""
    typed = [m._replace(restore=False, copy=False) if m.copy else m for m in messages]
    known = ledger.merge(inherited, ledger.of_messages(typed))
    return ledger.with_goal(known, typed, None)


def summary_words(tokens: int) -> int:
    """How many words a summary of ``tokens`` tokens holds (about 3 words in 4 tokens),
    never more than the prompt's 500 and never under SUMMARY_MIN_WORDS (the headings
    alone take a dozen; below that a summary keeps nothing worth resuming from)."""
    return min(prompts.MAX_WORDS, max(SUMMARY_MIN_WORDS, tokens * 3 // 4))


def asked_words(words: int) -> int:
    """The words a summary request asks for when the summary may hold ``words``: a
    quarter less (identifiers, paths and numbers cost several tokens a word, and a
    reply cut at its cap loses its last sections)."""
    return max(SUMMARY_MIN_WORDS, words * 3 // 4)


def _ask(
    backend: Backend,
    prompt: str,
    *,
    options: dict[str, Any],
    timeout: float,
    cancel: Cancel | None = None,
    history: Sequence[ChatMessage] = (),
    piece: int = 0,
    count: Callable[[str], int] = estimate_tokens,
) -> tuple[str, int, bool]:
    """One summary request (after ``history``, when given), retried once: its text, the
    requests made, and whether its cap cut it. Empty output, or output that echoes the
    prompt's template, counts as a failure. ``cancel`` set: Cancelled, no retry. A
    stream the server cut (``StreamCut``) raises at once, no retry: what came is not
    the summary, and the request that took the server's place goes first. ``piece``
    (tokens, by ``count``): the prompt read into the server in pieces first."""
    from chatloop.chat.turn import complete

    if piece > 0 and cancel is not None:
        size = max(1, len(prompt) * piece // max(1, count(prompt)))  # characters a piece
        _read_in_pieces(backend, history, prompt, size, cancel)
    last: BackendError | None = None
    for attempt in (1, 2):
        if cancel is not None and cancel.is_set:
            raise Cancelled("The summary was given up")
        this = _Attempt(cancel)  # its timeout cancels this attempt only
        try:
            reply = complete(
                backend, prompt, options=options, timeout=timeout, cancel=this, history=history
            )
            text = reply.text
            if prompts.echoes_template(text):
                last = BackendError("The model repeated the summary template", "")
            elif text.strip():
                return text, attempt, reply.stop_reason == "length"
            else:
                last = BackendError("The model returned an empty summary", "")
        except Cancelled:
            if cancel is not None and cancel.is_set:
                raise
            last = BackendError(f"The summary request took longer than {timeout:.0f} s", "")
        except StreamCut:
            raise
        except BackendError as exc:
            last = exc
    assert last is not None
    raise last


def _read_in_pieces(
    backend: Backend, history: Sequence[ChatMessage], prompt: str, size: int, cancel: Cancel
) -> None:
    """Have the server read ``history`` then ``prompt`` a piece of about ``size``
    characters at a time (cut before a space or a line's end): one one-token request
    for each longer beginning of ``prompt`` (``turn.prime``), each read on top of
    the last by a server that caches the prompt it read. A server that reads a
    prompt without looking up (llama-cpp-python: a request that arrives, even its
    model list, waits for the whole prompt) then keeps a request that comes
    meanwhile waiting for one piece, not for the whole prompt. ``cancel`` is looked
    at before each piece (none is sent once it is set); best effort: a piece that
    fails only means the request reads the rest itself."""
    from chatloop.chat.turn import prime

    start = 0
    while len(prompt) - start > size + size // 2:  # (the last piece is the request's own)
        end = start + size
        cut = max(prompt.rfind(" ", start + 1, end), prompt.rfind("\n", start + 1, end))
        start = cut if cut > 0 else end  # (before the space: its last word ends as it will)
        if cancel.is_set:
            return
        prime(backend, [*history, {"role": "user", "content": prompt[:start]}], cancel)


class _Attempt(Cancel):
    """One request's cancel: set by its own timeout, or by the caller's ``given`` (which
    sets it, so what the request registered to close its connection runs then too)."""

    def __init__(self, given: Cancel | None) -> None:
        super().__init__()
        self.given = given
        if given is not None:
            given.on_set(self.set)

    @property
    def is_set(self) -> bool:
        return super().is_set or (self.given is not None and self.given.is_set)


def _split(lines: list[str], limit: int) -> list[str]:
    """Lines grouped into pieces of at most ``limit`` characters (long lines cut)."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        for start in range(0, max(len(line), 1), limit):
            chunk = line[start : start + limit]
            if current and size + len(chunk) > limit:
                pieces.append("\n".join(current))
                current, size = [], 0
            current.append(chunk)
            size += len(chunk) + 1
    if current:
        pieces.append("\n".join(current))
    return pieces


# ------------------------------------------------------------------ reading a parent


def read_parent(store: Store, path: Path) -> Parent:
    """The front matter and the trusted summary of a session file.

    A summary followed by more messages, damaged, unreadable, only quoted in a
    message, or absent is reported as missing (``summary`` None, ``note`` says
    why); a hand-edited one is used as found, with a note.
    """
    found = store.summary_of(path)
    meta = found.meta
    if found.message is None:
        return Parent(path, meta, None, found.note or "it has no summary")
    text = prompts.clean(found.message.text)
    if not text:
        return Parent(path, meta, None, "its summary block is empty")
    note = found.note
    if found.edited:
        note = "its summary block was edited or damaged; using it as found"
    if found.legacy:
        text = _with_own_ledger(store, path, text)
    return Parent(path, meta, text, note)


def _with_own_ledger(store: Store, path: Path, summary: str) -> str:
    """The summary of the legacy file at ``path`` with the ledger of what the person
    typed in it. A seed file's summary was written by another tool (or by chatloop,
    into an imported copy: the text cannot tell which), so a block in it that looks
    like a ledger is never read as one; chatloop's rules are run again over the
    file's own queries (a seed file is small)."""
    prose = ledger.split(summary)[0]
    try:
        messages = store.read(path).session.messages
    except (OSError, ChatloopError):
        messages = ()
    return ledger.join(prose, ledger_of([], messages))


def tokens_through(store: Store, parent: Parent) -> int:
    """Tokens of ``parent`` and every ancestor of it: what a child of it carries as its
    chain's base (``parent``'s front matter is in hand: only its ancestors are read)."""
    meta = parent.meta
    own = meta.tokens_in + meta.tokens_out + meta.restoration_tokens
    return own + chain_tokens(store, parent.path, meta)


def began_from(store: Store, parent: Parent, limit: int = MAX_CHAIN) -> str | None:
    """The summary the session ``parent`` began from: the trusted summary of the file it
    continues (a fork: of what its carried history began from), read as structure
    through the store; None when it continues none, or that one has none. Never
    taken from a message's text: a restoration prompt, or anything pasted, is prose."""
    seen = {parent.meta.id}
    meta, path = parent.meta, parent.path
    while len(seen) < limit:
        link = store.parent_of(path, meta)
        if link is None:
            return None
        try:
            above = read_parent(store, link)
        except (OSError, ChatloopError):
            return None
        if above.meta.id in seen:
            return None
        if meta.extra.get("forked_at") is None:
            return above.summary if above.summary is not None else _being_written(store, above)
        seen.add(above.meta.id)  # a fork carries its parent's history: what that began from
        meta, path = above.meta, above.path
    return None


def _being_written(store: Store, parent: Parent) -> str | None:
    """The summary built from the transcript of ``parent``, whose own a background
    worker is still writing (a compaction that did not wait for it, a chat just left):
    what began from it must not begin from nothing meanwhile. None otherwise."""
    if lock_holder(parent.path) != SUMMARY_HOLDER:
        return None
    try:
        messages = list(store.read(parent.path).session.messages)
    except (OSError, ChatloopError):
        return None
    previous = began_from(store, parent)
    return fallback(messages, previous, summary_words(DEFAULT_SUMMARY_MAX_TOKENS)).text


def chain_tokens(store: Store, path: Path, meta: SessionMeta, limit: int = MAX_CHAIN) -> int:
    """Tokens of every ancestor of the session at ``path`` (conversation and
    restoration), from their front matter only. Missing ancestors end the walk."""
    from chatloop.format import open_document
    from chatloop.store.fsio import open_read

    total, seen = 0, {meta.id}
    link = store.parent_of(path, meta)
    while link is not None and len(seen) < limit:
        try:
            with open_read(link) as handle:
                parent = open_document(handle, link.stem).meta
        except (OSError, ChatloopError):
            break
        if parent.id in seen:
            break
        seen.add(parent.id)
        total += parent.tokens_in + parent.tokens_out + parent.restoration_tokens
        link = store.parent_of(link, parent)
    return total


# ------------------------------------------------------------------ starting a child


def without_oldest(carried: Sequence[Message]) -> tuple[Message, ...]:
    """``carried`` (copies of whole exchanges, oldest first) without its oldest exchange:
    up to the next message the person typed."""
    rest = list(carried[1:])
    while rest and rest[0].role != "user":
        rest.pop(0)
    return tuple(rest)


def carry(
    exchanges: Sequence[Sequence[Message]],
    budget: int,
    cost: Callable[[Sequence[Message]], int],
    keep_first: bool = True,
) -> tuple[Message, ...]:
    """What a child carries of its parent word for word: the longest run of the last
    whole ``exchanges`` whose tokens (``cost`` of each) fit ``budget``, MAX_CARRIED
    messages at most, oldest first, as copies (``restore`` and ``copy``: overhead that
    counts nothing, never a restoration). ``keep_first``: the first exchange is never
    carried (it is left for the summary, so a compaction always summarizes something)."""
    kept: list[Message] = []
    used = 0
    candidates = exchanges[1:] if keep_first else exchanges
    for exchange in reversed(candidates):
        if len(kept) + len(exchange) > MAX_CARRIED:
            break
        used += cost(exchange)
        if used > budget:
            break
        kept[0:0] = exchange
    return tuple(m._replace(restore=True, copy=True) for m in kept)


def restoration(
    parent: Parent,
    summary: str,
    unanswered: str | None = None,
    pins: Sequence[str] = (),
    carried: int = 0,
    room: int | None = None,
    ack_words: int = 0,
    cost: Callable[[str], int] = estimate_tokens,
) -> str:
    """The restoration prompt that opens a child of ``parent`` (with the facts the
    person pinned in the chain, word for word; ``carried``: how many of the parent's
    last messages follow it, word for word). ``summary``'s ledger is carried within
    what ``room`` tokens leave beside the pins (``ledger.carry``; None: all of it; an
    entry that is a pin goes as the pin), and the prompt says how many of its
    entries it left out (``cost``: a line's tokens, as the model counts them).
    ``ack_words``: the acknowledgment's length, asked for."""
    text, entries = ledger.split(summary)
    if room is None:
        kept, left = [e for e in entries if e.text not in pins], 0
    else:
        kept, left = carried_ledger(entries, pins, room, cost)
    return prompts.restoration_prompt(
        session_id=parent.meta.id,
        date=parent.meta.created.strftime("%Y-%m-%d %H:%M"),
        queries=parent.meta.queries,
        tokens=parent.tokens,
        summary=text,
        ledger=[e.carried() for e in kept],
        not_carried=left,
        ack_words=ack_words,
        grandparent=parent.meta.parent_id,
        unanswered=unanswered,
        pins=pins,
        branched="forked_at" in parent.meta.extra,
        carried=carried,
    )


def carried_ledger(
    entries: Sequence[ledger.Entry],
    pins: Sequence[str],
    room: int,
    cost: Callable[[str], int] = estimate_tokens,
) -> tuple[list[ledger.Entry], int]:
    """The ledger entries a restoration prompt carries, and how many it leaves out: the
    pins go first within ``room`` tokens (an entry that is a pin goes as the pin),
    then ``ledger.carry`` of the rest in what they leave (``cost``: a text's tokens).

    The entries are chosen by estimate, then what was chosen is counted by ``cost`` as
    one text, and chosen again in less room while that is over: a server's count per
    entry would be one request each (77 of them, 10 s on a busy one-slot server, when a
    chain's first turn was measured), on the person's path."""
    entries = [e for e in entries if e.text not in pins]
    # the ledger's heading and its "N more" line are paid from the room too
    frame = cost(prompts.ledger_block([], 1)) if entries else 0
    budget = max(0, room - pins_cost(pins, cost) - frame)
    rough = budget
    while True:
        kept, left = ledger.carry(entries, rough, estimate_tokens)
        counted = cost("\n".join(e.carried() for e in kept)) if kept else 0
        if counted <= budget or rough == 0:
            return kept, left
        rough = min(rough - 1, rough * budget // counted)  # (smaller each time: it ends)


def pins_cost(pins: Sequence[str], cost: Callable[[str], int] = estimate_tokens) -> int:
    """The tokens ``pins`` take in a restoration prompt, their heading included
    (``cost``: a text's tokens)."""
    return cost(prompts.pins_block(pins)) if pins else 0


def child_meta(template: SessionMeta, parent: Parent, now: datetime, folder: Path) -> SessionMeta:
    """A new session's front matter: who it is (from ``template``) and whose child.
    The link to the parent is relative to ``folder`` (where the child is created),
    so a sessions folder moved or synced elsewhere keeps its chains."""
    return SessionMeta(
        id="",
        created=now,
        updated=now,
        title=template.title or parent.meta.title,
        agent=template.agent,
        agent_name=template.agent_name,
        model=template.model,
        backend_url=template.backend_url,
        git_branch=template.git_branch,
        parent_id=parent.meta.id,
        parent_file=os.path.relpath(parent.path, folder),
        extra=dict(template.extra),
        pins=template.pins,
        system=template.system,
    )


def closed_parent(writer: SessionWriter) -> Parent:
    """A just-finalized session as the parent of the next one."""
    summary = writer.session.summary
    return Parent(writer.path, writer.meta, summary.text if summary else None)
