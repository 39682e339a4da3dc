"""A session's beginning, as functions: a new session's front matter (``new_meta``,
``completed``); a child's file written with what was typed for it, made over in
place when its first message does not fit, removed again when nothing can give way,
its restoration acknowledged, and its beginning read ahead into the server.

``chat.builders`` builds what a continuation is written with (``builders.child_of``);
``ChatSession`` decides when a child begins (the next message, or at once when it
answers a message its parent could not take) and shows what happens. Between the two,
what a beginning does with the store, the lifecycle (the writes it makes and the
transitions they allow: ``Lifecycle.written``, ``open``, ``wait``, ``put_back``,
``hold_first``), the meter and the server is here, over parameters; what is to be
said comes back as notes (``host.Note``). Nothing here holds a session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from chatloop.backends.base import Backend, Cancel, Cancelled, ChatMessage
from chatloop.chat import builders, chain, compaction, forking, prompts, restoration
from chatloop.chat.agent import Agent
from chatloop.chat.host import Note, ReplyView
from chatloop.chat.lifecycle import Lifecycle
from chatloop.chat.meter import Meter
from chatloop.chat.pins import Pins, inherited, left_out
from chatloop.chat.state import Branch, Child, Continuation, FromSummary, WithHistory
from chatloop.chat.turn import prime, respond
from chatloop.chat.turning import wire_messages
from chatloop.errors import BackendError, ChatloopError, StoreError
from chatloop.format import Message, SessionMeta
from chatloop.store.store import Store
from chatloop.store.writer import SessionWriter

__all__ = [
    "KINDS_WARMED",
    "Terms",
    "acknowledged",
    "acknowledgment",
    "awaited",
    "child",
    "completed",
    "condensed",
    "from_summary",
    "git_branch",
    "kept",
    "made_over",
    "new_meta",
    "otherwise",
    "remade",
    "restated",
    "unbegun",
    "warming",
    "written",
]

Clock = Callable[[], datetime]
# the summary of some messages (``ChatSession.summarize``: never raises for the model)
Summarize = Callable[[list[Message], "str | None"], chain.SummaryOutcome]

KINDS_WARMED = ("openai", "ollama")  # servers a child's beginning is read into (``warming``)
# what a new chat's file, written before its agent and server loaded, is completed with
COMPLETED = (
    "agent",
    "agent_name",
    "model",
    "backend_url",
    "git_branch",
    "pins",
    "title",
    "system",
)


@dataclass(frozen=True)
class Terms:
    """What a child is written with as it is written: the session's ``pins``, ``model``
    and ``title`` now (pinned, switched or renamed while the continuation waited), and
    whether chatloop writes the acknowledgment with it (``acknowledgment: written``)."""

    pins: Pins
    model: str
    title: str
    acknowledged: bool


def new_meta(
    agent: Agent, backend: Backend, cwd: Path, title: str, pins: Pins, now: datetime
) -> SessionMeta:
    """A new session's front matter: the ``agent`` that answers (its system prompt when
    one was given), ``backend``'s server and model, the git branch of ``cwd``, and the
    ``title`` and ``pins`` the session holds; its id is the store's to give."""
    return SessionMeta(
        id="",
        created=now,
        updated=now,
        title=title,
        agent=agent.name,
        agent_name=Path(agent.path).stem,
        model=backend.model,
        backend_url=backend.base_url,
        git_branch=git_branch(cwd),
        pins=pins,
        system=agent.system_prompt if agent.system_given else None,
    )


def completed(writer: SessionWriter, meta: SessionMeta) -> tuple[Note, ...]:
    """``writer``'s front matter (a new chat's, whose first message was saved before
    its agent and server loaded) completed from ``meta`` (``new_meta``); a file that
    refuses it (a full disk) is said, and the session goes on."""
    try:
        writer.update_meta(**{name: getattr(meta, name) for name in COMPLETED})
    except StoreError as exc:
        return ((f"{exc.message}; the session file does not name its agent yet.", "warn"),)
    return ()


def git_branch(cwd: Path) -> str | None:
    """The current branch from .git/HEAD (no subprocess), or None."""
    for folder in (cwd, *cwd.parents):
        head = folder / ".git" / "HEAD"
        if head.is_file():
            text = head.read_text(encoding="utf-8", errors="replace").strip()
            return text.removeprefix("ref: refs/heads/") if text.startswith("ref:") else None
    return None


def from_summary(
    parent: chain.Parent,
    summary: str,
    template: SessionMeta,
    pins: Pins,
    meter: Meter,
    now: Clock,
    unanswered: str | None = None,
    carried: tuple[Message, ...] = (),
) -> FromSummary:
    """The continuation of ``parent`` from ``summary``, fitted to its budget with
    ``pins`` (the session's), then built with the chain's pins (``pins.inherited``:
    the parent's first; its template holds them, for the caller to hold too)."""
    summary = restoration.fit(summary, pins, meter.sizes())  # the restoration stays in budget
    merged = inherited(parent.meta.pins, pins)
    sizes = meter.sizes()
    return builders.from_summary(
        parent, summary, template, merged, sizes, now(), unanswered, carried
    )


def restated(waiting: FromSummary, pins: Pins, meter: Meter) -> FromSummary:
    """``waiting`` with its restoration prompt built again with ``pins`` within
    ``meter``'s sizes, when what it is built with changed while it waited (the pins,
    the model, the agent): the preview it is planned with is the prompt its file is
    written with (``child``)."""
    sizes = meter.sizes()
    carried = len(waiting.carried)
    text = restoration.build(
        waiting.parent, waiting.summary, pins, sizes, waiting.unanswered, carried
    )
    return replace(waiting, preview=waiting.preview._replace(text=text))


def child(continuation: Continuation, terms: Terms, store: Store, now: datetime) -> Child:
    """``builders.child_of`` in the parent's project folder, with ``terms``."""
    folder = store.project_of(continuation.parent.path)
    model, title, pins = terms.model, terms.title, terms.pins
    return builders.child_of(continuation, pins, model, title, now, folder, terms.acknowledged)


def written(
    continuation: Continuation, terms: Terms, store: Store, lifecycle: Lifecycle, now: Clock
) -> tuple[SessionWriter, tuple[Note, ...]]:
    """The waiting child of ``continuation`` written with every message in hand, in one
    write (``child``): a kill leaves the child whole with the messages typed for it, or
    no child; the lifecycle then has it open. If the file cannot be made (StoreError),
    the continuation stays waiting and the messages queued, for the next try. The
    notes: it began, and the ledger entries its restoration had no room for."""
    made = child(continuation, terms, store, now())
    typed = list(lifecycle.queued)
    folder = store.project_of(continuation.parent.path)
    writer = store.create(made.meta, carried=[*made.opening, *typed], folder=folder)
    lifecycle.written(len(typed))
    base = chain.tokens_through(store, continuation.parent)
    lifecycle.open(writer, made.previous, made.prefix, base)
    notes: list[Note] = [(builders.begun(continuation, writer.meta.id), "restored")]
    if isinstance(continuation, FromSummary):  # (a fork carries its history, whose
        # restorations said it)
        said = [m for m in writer.messages if not m.unsent]
        now_said = [*restoration.revised(said), *lifecycle.queued]
        left = left_out(made.previous, now_said, terms.pins)
        if left:
            notes.append(
                (
                    f"{len(left)} earlier statement{'s' if len(left) != 1 else ''} of the "
                    f"ledger did not fit its restoration (they stay in "
                    f"{continuation.parent.meta.id}'s summary; /pins lists them).",
                    "warn",
                )
            )
    return writer, tuple(notes)


def otherwise(
    begins: Continuation,
    typed: Sequence[Message],
    pins: Pins,
    meter: Meter,
    summarize: Summarize,
    now: Clock,
) -> tuple[Continuation, tuple[Note, ...]]:
    """The continuation that takes the messages ``typed`` for the child of ``begins``,
    which do not fit in it: fewer copies carried (the oldest go first), a fork's
    history as a summary, ``--full`` from the summary (its pins, the chain's, in its
    template: the caller holds them). Raises ChatloopError when nothing can give way."""
    match begins:
        case FromSummary(carried=carried) if carried:
            less, note = compaction.carry_less(begins, typed, pins, meter, now)
            return less, (note,)
        case FromSummary(parent=parent):
            raise no_room(parent)
        case Branch(parent=parent, copies=(only,)) if prompts.is_restoration(only):
            raise no_room(parent)  # its history is a summary already
        case Branch() as branch:
            return forking.summarized(branch, meter, summarize, now)
        case WithHistory() as full:
            said: Note = ("The full history no longer fits: continuing from the summary.", "warn")
            return _from_its_summary(full, pins, meter, now), (said,)


def condensed(
    waiting: Continuation, pins: Pins, meter: Meter, summarize: Summarize, now: Clock
) -> tuple[Continuation, tuple[Note, ...]]:
    """``waiting``, a continuation not written yet, condensed by ``/compact``: a fork's
    history as a summary of it, ``--full`` from the summary (the chain's pins in its
    template: the caller holds them). Raises ChatloopError for one that continues
    from a summary already."""
    if isinstance(waiting, FromSummary):
        raise ChatloopError(
            f"Session {waiting.parent.meta.id} already continues from its summary",
            "Send a message to begin the new session.",
        )
    if isinstance(waiting, WithHistory):
        said: Note = ("Continuing from the summary instead of the full history.", "ok")
        return _from_its_summary(waiting, pins, meter, now), (said,)
    return forking.summarized(waiting, meter, summarize, now)


def _from_its_summary(full: WithHistory, pins: Pins, meter: Meter, now: Clock) -> FromSummary:
    """``full`` continued from its parent's summary instead (``from_summary``)."""
    return from_summary(full.parent, full.summary or "", full.template, pins, meter, now)


def made_over(made: Child, writer: SessionWriter, typed: int) -> None:
    """The child ``writer`` writes, holding ``typed`` messages after its opening, written
    again as ``made`` with them. Raises StoreError when it cannot be (the messages stay
    saved in it; the error says so) or someone changed it before its first reply."""
    try:
        done = writer.rebuild(made.meta, [*made.opening, *writer.messages[-typed:]])
    except StoreError as exc:
        raise StoreError(
            exc.message,
            "Your message is saved in the new session but was not sent: free some "
            "disk space, then send it again (Up recalls it).",
        ) from exc
    if not done:
        raise StoreError(
            f"{writer.path.name} was changed by someone else before its first reply",
            "Your message is saved there but was not sent; send it again (Up recalls it).",
        )


def remade(
    made: Continuation,
    terms: Terms,
    writer: SessionWriter,
    typed: int,
    store: Store,
    lifecycle: Lifecycle,
    now: datetime,
) -> None:
    """The child ``writer`` writes, holding ``typed`` messages after its opening, made
    over in place as ``made`` (``otherwise``'s) with ``terms``: the lifecycle then has
    it open with what ``made`` continues from. Raises StoreError as ``made_over``."""
    again = child(made, terms, store, now)
    made_over(again, writer, typed)
    lifecycle.open(writer, again.previous, again.prefix, lifecycle.chain_base)


def unbegun(
    begins: Continuation, writer: SessionWriter, typed: int, store: Store, lifecycle: Lifecycle
) -> None:
    """The child's first message is refused: the child, which holds only what was
    written with it, is removed (a continuation left unused leaves no file) and
    waits again; messages typed before the refused one go back to the queue."""
    earlier = writer.messages[len(writer.messages) - typed : -1]
    store.discard(writer, unsent=True)
    lifecycle.put_back(earlier)
    lifecycle.wait(begins)


def acknowledged(
    backend: Backend,
    meter: Meter,
    view: ReplyView,
    *,
    wire: Callable[[], list[ChatMessage]],
    options: Callable[[], dict[str, Any]],
    now: Clock,
    answers: bool,
) -> tuple[Message | None, tuple[Note, ...]]:
    """The model's acknowledgment of a restoration prompt, asked with ``wire()`` and
    ``options()`` (made here: a server failure while they are counted skips it too),
    streamed into ``view``, learnt by ``meter`` and marked as restored; None and why
    when Ctrl-C or a server failure skipped it (the summary is in place). ``answers``:
    it also answers a message, so it may be as long as a reply; else one cut by its cap
    ends at its last whole sentence."""
    try:
        asked = options()
        reply = respond(backend, wire(), clock=now, on_event=view.on_event, options=asked)
        meter.learn(reply)
    except KeyboardInterrupt:
        view.close(False, False)
        return None, (("Acknowledgment skipped; the summary is in place.", "info"),)
    except (BackendError, Cancelled) as exc:  # (Cancelled: the output's reader left)
        view.close(False, False)
        return None, ((f"No acknowledgment ({exc.message}); the summary is in place.", "warn"),)
    view.close(False, False)
    ack = reply._replace(restore=True)
    if not answers and reply.stop_reason == "length":
        ack = ack._replace(text=prompts.whole_sentences(ack.text))
    return ack, ()


def acknowledgment(
    writer: SessionWriter,
    backend: Backend,
    meter: Meter,
    agent_options: dict[str, Any],
    prefix: Sequence[Message],
    view: ReplyView,
    now: Clock,
    *,
    answers: str | None = None,
    after: int = 0,
) -> tuple[Message | None, tuple[Note, ...]]:
    """The model's acknowledgment of ``writer``'s restoration prompt (``acknowledged``),
    to be written by ``kept``. ``answers``: the person's message it also answers (the
    restoration prompt carries it), so it may be as long as a reply (capped as one) and
    is asked as that message's request (``turning.wire_messages``); else it is capped
    by ``Meter.ack_cap`` and asked with the restoration alone. ``after``: messages
    already written after the restoration prompt (the exchanges it carries, then what
    the person typed): it is asked without them (``prefix``: a ``--full`` history sent
    first)."""
    before = writer.messages
    before = before[: len(before) - after]

    def options() -> dict[str, Any]:
        reply_limit = meter.reply_options()["max_tokens"]
        cap = reply_limit if answers is not None else meter.ack_cap()
        return {**agent_options, "max_tokens": cap}

    def request() -> list[ChatMessage]:
        if answers is None:  # the restoration alone: nothing the person typed
            return meter.wire(before, prefix)
        return wire_messages(answers, before, prefix, meter)

    return acknowledged(
        backend, meter, view, wire=request, options=options, now=now, answers=answers is not None
    )


def kept(writer: SessionWriter, ack: Message, after: int, lifecycle: Lifecycle) -> tuple[Note, ...]:
    """Write ``ack`` after the restoration prompt: before the ``after`` messages saved
    after it (left out, and said, when the file changed or cannot be written), else
    at the end (queued first when it cannot be written: StoreError)."""
    if after:  # what follows is saved: only the acknowledgment may be left out
        try:
            if not writer.insert(ack, before=after):
                return (("The acknowledgment was not saved: the file changed meanwhile.", "warn"),)
        except StoreError as exc:
            return ((f"The acknowledgment was not saved: {exc.message}", "warn"),)
        return ()
    try:
        writer.append(ack)
    except StoreError:
        lifecycle.hold_first(ack)  # written before anything else, as every message
        raise
    return ()


def awaited(parent: chain.Parent) -> Note:
    """What is said when a child of ``parent`` waits for the next message to begin."""
    return (
        f"Continuing session {parent.meta.id} ({builders.queries(parent.meta.queries)}) "
        "from its summary: the new session begins with your next message.",
        "restored",
    )


def warming(
    waiting: FromSummary, acknowledgment: str, backend: Backend, meter: Meter, now: Clock
) -> Callable[[Cancel], None] | None:
    """What reads the child's beginning into the server while the person reads and
    types: one token asked after its system prompt, restoration prompt, chatloop's
    acknowledgment and the copies it carries, as its first request will send them
    (``turn.prime``), so that a server that caches one prompt has read them when the
    first message comes, which then costs what a turn costs. None unless
    ``acknowledgment`` is ``written`` (the model's acknowledgment is that reading) and
    the server is one over HTTP (not the embedded model, whose one copy the chat uses).
    Best effort, nothing recorded; the person's message stops it (``Preparer.warm``)."""
    if acknowledgment != "written" or backend.kind not in KINDS_WARMED:
        return None
    ack = restoration.acknowledgment(waiting.parent.meta.id, now())
    wire = meter.plan([waiting.preview, ack, *waiting.carried]).wire

    def read(cancel: Cancel) -> None:
        prime(backend, wire, cancel)

    return read


def no_room(parent: chain.Parent) -> ChatloopError:
    """The refusal of a message that does not fit beside the restoration of ``parent``."""
    return ChatloopError(
        f"This message and the restoration of session {parent.meta.id} do not fit the "
        "context window together; nothing was sent",
        "Shorten it (Up recalls it), or use a model with a larger window.",
    )
