"""``ChatSession``: one conversation from its first message to its last summary.

It coordinates every decision the REPL used to make: when a session file is
created, what is saved before a request goes out, when a session is compacted,
resumed, forked or closed, and who answers. The REPL and the CLI only drive it
and show what it tells them through its ``Host`` (``chatloop.chat.host``); tests
drive it directly with a scripted host.

Promises (docs/durability.md, docs/chains.md):

- The person's message is written (write + fsync) before the request goes
  out. A message that cannot be written yet (a full disk) is *queued*: kept
  in order, counted in ``unsaved``, written before anything else, and never
  sent before it is on disk. ``close`` returns what could still not be saved.
- Every reply and tool result is recorded as it happens; a reply cut short or
  an exchange that failed leaves an assistant frame marked ``interrupted``
  (with ``stop_reason`` ``cancelled`` or ``error`` when nothing arrived).
- Compaction and resume close the current file with its summary and continue
  in a new file linked to it, written with the next message (``Waiting``): a
  continuation left unused leaves no file. Which session, agent and server a
  resume continues with is decided in ``chat.continuation`` and ``chat.server``,
  for every entry point alike. Messages queued at compaction
  belong to the new file, or stay queued when it cannot be written.
- Errors that end an operation are raised as ``ChatloopError`` (the UI's one
  boundary shows them); the session stays usable after any of them.

What it decides is not here: each path is a set of functions over parameters that
return values and notes (``host.Note``), and this module moves the state they
decide, in order, and shows the notes. The turn (``chat.turning``, ``chat.turn``),
recall's room and chain (``chat.recalling``), a session's and a child's beginning
(``chat.beginning``), a compaction (``chat.compaction``), a resume
(``chat.resumption``, over ``chat.continuation`` and ``chat.server``), a fork
(``chat.forking``), an ending (``chat.ending``), a switch of model, server or agent
(``chat.switching``), the pins (``chat.pins``), the title (``chat.naming``), the
revision a deferred compaction's child awaits (``chat.revision``), the window and
counts (``chat.meter``) and what a state says of itself (``chat.state``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from chatloop.backends.base import (
    Backend,
)
from chatloop.chat import (
    beginning,
    builders,
    chain,
    compaction,
    continuation,
    ending,
    forking,
    recall,
    recalling,
    resumption,
    switching,
    turning,
)
from chatloop.chat.agent import Agent
from chatloop.chat.arming import Arming
from chatloop.chat.context import (
    Plan,
)
from chatloop.chat.host import Host, Note
from chatloop.chat.lifecycle import Lifecycle
from chatloop.chat.meter import Meter
from chatloop.chat.naming import Naming, given
from chatloop.chat.pins import Pinned, Pins, added, left_out, removed
from chatloop.chat.preparation import Preparer
from chatloop.chat.revision import Reviser, applied
from chatloop.chat.state import (
    Closing,
    Continuation,
    Fresh,
    FromSummary,
    Open,
    State,
    Status,
    Waiting,
    WithHistory,
    status,
)
from chatloop.chat.tokens import TokenCount
from chatloop.chat.turn import TurnResult
from chatloop.config import MAX_CARRIED, PREPARE_IDLE_S, Settings
from chatloop.errors import ChatloopError, StoreError
from chatloop.format import Message, SessionMeta, Totals
from chatloop.store.store import Store
from chatloop.store.writer import SessionWriter

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class Closed:
    """How ``close`` ended: the finalized file (if any) and what could not be saved."""

    parent: chain.Parent | None
    unsaved: tuple[Message, ...] = ()


@dataclass
class ChatSession:
    """One chat with one agent. Not thread-safe; one per REPL.

    Each piece of its state has one writer: the ``lifecycle`` (``chat.lifecycle``: the
    state and the unsaved queue), the ``preparer`` (the next compaction's summary), the
    ``reviser`` (the parent a deferred compaction's child awaits) and the ``naming``
    (the title; begun anew for a new session: ``Naming.forget``) assign their own; the
    agent, the backend and the meter are assigned together by ``_answered_by`` alone
    (made by ``chat.switching``), the pins by their ``pinned`` owner (``chat.pins``),
    ``agent_named`` by ``use_agent``. Every field is read and written
    by the caller's thread only: the one thread it starts (a preparation) works on
    values handed to it and answers through the ``Preparer``."""

    agent: Agent
    backend: Backend
    store: Store
    settings: Settings
    host: Host
    clock: Clock = None  # type: ignore[assignment]  # None: the store's (__post_init__)
    agent_named: bool = False  # the person chose the agent (--agent, /agent): it goes on
    leaving: bool = False  # set when a signal asked chatloop to leave: no model calls now
    # the state and the unsaved queue: assigned by the lifecycle alone (``chat.lifecycle``)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    # facts pinned in this chain, in every restoration prompt (``chat.pins``: the owner)
    pinned: Pinned = field(default_factory=Pinned)
    # the title, its naming and the title request under way (``chat.naming``): begun
    # anew for a new session
    naming: Naming = field(default_factory=Naming)
    prepare_after: float = PREPARE_IDLE_S  # a preparation waits this long before asking
    # the next compaction's summary: being made, and the last one made
    preparer: Preparer = field(default_factory=Preparer)
    # the parent whose model summary a deferred compaction's child awaits (``chat.revision``)
    reviser: Reviser = field(default_factory=Reviser)
    # what arms another agent (/resume to a session of another): the command line's
    arming: Arming = None  # type: ignore[assignment]  # None: the environment's (__post_init__)
    # the window, the counts and the plans of this model with this agent: made anew on a
    # switch of model, backend or agent (``chat.meter``; with them by ``_answered_by``)
    meter: Meter = field(init=False)
    # the memory of the chain this session continues, read in a thread (``chat.recall``)
    recalls: recall.Recall = field(init=False)

    # ------------------------------------------------------------------ state
    def __post_init__(self) -> None:
        if self.clock is None:  # the store's: whole seconds, so a frame's time is HH:MM:SS
            self.clock = self.store.clock
        if self.arming is None:
            self.arming = Arming.of(self.settings, say=lambda line: self.host.notice(line, "warn"))
            self.arming.ask = self.host.ask
        self.recalls = recall.Recall(self.store)
        self.agent = recall.with_tool(self.agent, self.recalls)
        self.meter = Meter.of(self.backend, self.agent, self.settings)

    @property
    def state(self) -> State:
        """Where this session is (``Lifecycle.state``)."""
        return self.lifecycle.state

    @property
    def pins(self) -> Pins:
        """The facts pinned in this chain (``Pinned.pins``)."""
        return self.pinned.pins

    @property
    def title(self) -> str:
        """This session's title ("" for none yet: ``Naming.title``)."""
        return self.naming.title

    @property
    def unsaved(self) -> int:
        """Messages in hand that are not on disk yet."""
        return len(self.lifecycle.queued)

    @property
    def totals(self) -> Totals:
        """This session's counters (``Totals`` of the file, plus what is queued)."""
        base = self.writer.totals if self.writer else Totals()
        for m in self.lifecycle.queued:
            base = base.plus(m)
        return base

    @property
    def writer(self) -> SessionWriter | None:
        """The writer of the file being written (open or closing), else None."""
        return self.lifecycle.writer

    @property
    def previous(self) -> str | None:
        """The summary this session continues from (``Lifecycle.previous``)."""
        return self.lifecycle.previous

    @property
    def prefix(self) -> tuple[Message, ...]:
        """A --full continuation's history, sent before this session's messages."""
        return self.lifecycle.prefix

    @property
    def chain_base(self) -> int:
        """Tokens of every ancestor of the file being written (0 for none)."""
        return self.lifecycle.chain_base

    @property
    def messages(self) -> list[Message]:
        """This session's messages: those on disk, what a pending continuation will
        write, then those queued (``Lifecycle.messages``)."""
        return self.lifecycle.messages()

    def describe(self) -> Status:
        """What this session is, for /info, the toolbar and tests (``state.status``)."""
        totals = self.totals
        spent = totals.tokens + totals.restoration
        return status(self.state, spent, lambda said: self.preparer.phase(said, MAX_CARRIED))

    def meta(self) -> SessionMeta:
        """The current front matter, or what a new session's would be."""
        writer = self.writer
        return writer.meta if writer is not None else self._new_meta()

    def _new_meta(self) -> SessionMeta:
        """A new session's front matter (``beginning.new_meta``), as this session holds
        its agent, backend, title and pins now."""
        agent, backend, cwd = self.agent, self.backend, self.store.cwd
        return beginning.new_meta(agent, backend, cwd, self.title, self.pins, self.clock())

    def window(self) -> int | None:
        """The context window (``Meter.window``)."""
        return self.meter.window()

    @property
    def tokens(self) -> TokenCount:
        """How this model's tokens are counted (``Meter.tokens``)."""
        return self.meter.tokens

    def reply_options(self) -> dict[str, Any]:
        """Options for a reply (``Meter.reply_options``)."""
        return self.meter.reply_options()

    def plan(self, extra: Sequence[Message] = ()) -> Plan:
        """What the next call would send: the --full prefix, this session, ``extra``."""
        return self.meter.plan([*self.messages, *extra], self.prefix, reuse=True)

    # ------------------------------------------------------------------ saving
    def _ensure_file(self) -> SessionWriter:
        """The session's file, made now if needed: a pending continuation's child
        (with its restoration prompt and acknowledgment), else a new session."""
        match self.state:
            case Waiting(continuation=continuation):
                return self._begin(continuation)
            case Fresh():
                writer = self.store.create(self.meta())
                self.lifecycle.open(writer)
                return writer
            case Open(writer=writer) | Closing(writer=writer):
                return writer

    def flush(self) -> None:
        """Write every queued message, in order. Raises StoreError (the rest stay queued).
        A message is taken off the queue once the writer has it, even if Ctrl-C or a
        signal lands between the two, so nothing is written twice."""
        if not self.lifecycle.queued:
            return
        self.lifecycle.write(self._ensure_file())

    def _queued_error(self, exc: StoreError) -> StoreError:
        """``exc`` with a hint that tells the truth about the queue."""
        return turning.queued_error(exc, self.unsaved)

    # ------------------------------------------------------------------ a turn
    def send(self, text: str, recalling: bool = True) -> TurnResult:
        """One exchange: save ``text``, make room if needed, stream the reply, run tools;
        then compact if the window is past the threshold.

        The message is on disk before anything else happens: its count against the
        window, the compaction it needs (the child answers it), the acknowledgment of a
        restoration, the request. A continuation not written yet (``Waiting``) is
        written with it, in one write, and made over when the count then says it must
        begin otherwise (``_first_of_child``). One that cannot be sent (it does not fit
        even alone, or the history does not fit and compaction is off) is then kept in
        the file marked as not sent, out of the conversation, and refused (ChatloopError
        saying where it is kept; Up recalls it). Raises
        StoreError when the message cannot be saved (it stays queued and is written and
        sent first next time), ChatloopError when the server failed (after the failure
        is recorded in the file). In a session that continues another, what the chain
        said earlier that matches ``text`` is written and sent in front of it
        (``_recall``), unless ``recalling`` is False (``/norecall``)."""
        self.preparer.overtake()  # the person goes first: a summary being prepared is given up
        self.take_title(wait=False)  # and a title not come yet
        self._revise()  # a parent's model summary written since: it takes its place now
        message = Message.create("user", self.clock(), text=text)
        begins = self.state.continuation if isinstance(self.state, Waiting) else None
        # in hand: from here on it is on disk or visibly queued (a child not written yet
        # is written with all of them)
        typed = self.lifecycle.hold(message)
        try:
            self.flush()
        except StoreError as exc:
            raise self._queued_error(exc) from exc
        if begins is not None:
            return self._first_of_child(begins, message, typed, recalling)
        return self._go_on(message, recalling)

    def _recall(self, text: str) -> None:
        """What recall brings back for the query ``text``, just saved, written after it
        (sent in front of it: ``context.with_recalled``) and told in one line: sized by
        ``recalling.brought``. Nothing when the session continues no chain, recall is
        off, nothing matches or fits, or it cannot be saved: recall never makes a query
        wait, compact or fail. What the person picked with ``/recall`` goes first,
        recall off or not."""
        automatic, picked = self.settings.recall == "auto", bool(self.recalls.picked)
        if not automatic and not picked:
            return
        self.follow_chain()
        if not picked and not self.recalls.following:  # (a chat that continues none)
            return
        held = [*self.prefix, *self.messages]
        brought, notes = recalling.brought(
            self.recalls,
            text,
            self.plan(),
            held,
            automatic=automatic,
            picked=picked,
            fits=lambda made: self.plan([made]).fits,  # (counted by the server)
            now=self.clock,
        )
        self._say(notes)
        # (one the file refuses is left out: the query, saved already, goes alone)
        if brought is not None and self.lifecycle.record(brought.message, self._ensure_file()):
            self._say((brought.notice(),))

    def follow_chain(self) -> None:
        """Have recall read the chain this session continues (``recalling.followed``; in
        a thread: a lookup then waits for it only if it is not read yet)."""
        self.recalls.follow(*recalling.followed(self.state, self.store))

    def send_saved(self, writer: SessionWriter) -> TurnResult:
        """``send`` for the first message of a new chat, saved before this session was
        made (``chatloop.ui.start`` writes it while the agent and the server load):
        ``writer``'s file, which holds only that message, becomes this session's and
        takes its front matter (agent, model, server, branch, pins); the message is then
        answered as ``send`` answers one it has saved. A front matter that cannot be
        completed (a full disk) is said, and the message goes on."""
        message = writer.last_message
        if not isinstance(self.state, Fresh) or message is None or message.role != "user":
            raise ValueError("send_saved takes a new session's file holding one message")
        self.lifecycle.open(writer)
        self._say(beginning.completed(writer, self._new_meta()))
        return self._go_on(message)

    def _go_on(self, message: Message, recalling: bool = True) -> TurnResult:
        """``message``, the open file's last, sent: compacting first when the history
        does not leave it room (the child answers it), refused and kept in the file
        marked as not sent (``turning.set_aside``) when it cannot be sent at all."""
        text = message.text
        if not self.plan().fits:
            refused = self._refusal(message)
            if refused is not None:
                if turning.set_aside(self.writer, message):
                    raise turning.kept_unsent(self.writer, refused) from None
                raise refused
            self._say((turning.COMPACTING,))
            try:
                self.compact(unanswered=text)
            except StoreError as exc:
                raise turning.not_sent(exc) from exc
            return TurnResult()
        return self._answer(message, recalling)

    def _refusal(self, message: Message) -> ChatloopError | None:
        """Why ``message`` cannot be sent (``turning.refusal``: it does not fit even
        alone, or the history does not fit and compaction is off), or None."""
        alone = self.meter.plan([message])
        return turning.refusal(alone, self.agent, self.tokens, self.settings.auto_compact)

    def _answer(self, message: Message, recalling: bool = True) -> TurnResult:
        """``message``, the open file's last, answered (``turning.answered``): what
        recall brings back for it written first (``_recall``, unless ``recalling`` is
        False), each request made by ``turning.wire_messages``; then a full window
        compacts (the child answers it), a failure is raised, and a turn that ended well
        is named and measured against the threshold (``_after_turn``)."""
        text = message.text
        if recalling:
            self._recall(text)
        result, failure = turning.answered(
            text,
            self.messages,
            self.prefix,
            agent=self.agent,
            backend=self.backend,
            meter=self.meter,
            lifecycle=self.lifecycle,
            flush=self.flush,
            view=self.host.reply_view(),
            settings=self.settings,
            home=self.arming.home,
            clock=self.clock,
        )
        if failure is not None:
            raise self._queued_error(failure)
        if self.leaving:
            return result
        full = turning.overflowed(result, self.meter, self.settings.auto_compact)
        if full is not None:
            self._say((full,))
            self.compact(unanswered=text)
        else:
            if not result.interrupted:  # after Ctrl-C the person wants the prompt, not a title
                self._name(result.reply)
            self._after_turn()
        return result

    def _after_turn(self) -> None:
        """Past the threshold: warn, then compact (on), ask (ask) or only hint (off)."""
        window = self.window()
        if not window or self.writer is None:
            return
        now = self.plan()
        used = max(now.tokens, self.totals.last_call)
        full = turning.threshold(used, window, self.settings.compact_threshold)
        if full is None:
            self._prepare(used, window)
            return
        self._say((full,))
        mode = self.settings.auto_compact
        if mode == "off":
            self.host.notice("/compact continues in a new session from a summary.")
        elif mode == "on" or self.host.ask("Compact now?", True):
            self.compact()

    # ------------------------------------------------------------------ the title
    def _name(self, reply: str) -> None:
        """After an exchange that ended well, give a new conversation without a title one,
        by ``settings.titles`` (``Naming.after_turn``): ``model`` asks the model off the
        person's path (``take_title`` writes it), ``first`` takes the first request's
        line, ``off`` makes none. A title the person gave, one a continuation took from
        its parent, and an earlier title are never replaced."""
        settings = self.settings
        timeout = settings.title_timeout
        self.naming.after_turn(self.writer, reply, settings.titles, self.backend, timeout)

    def take_title(self, wait: bool = True) -> None:
        """Write the title being asked (``_name``) once it has come (``Naming.taken``).
        Before the person's next request (``wait`` False) one not come yet is cancelled,
        so a one-slot server is free for that request, and asked again after the next
        exchange that ends well; at close (``wait``) it is waited for, within its
        bound."""
        self.naming.taken(wait, self.writer)  # (written into the file being written)

    # ------------------------------------------------------------------ summaries
    def summarize(
        self, messages: list[Message], previous: str | None, instructions: str = ""
    ) -> chain.SummaryOutcome:
        """The summary of ``messages``; never raises for the model, never hangs forever.
        Cut short (Ctrl-C), or while leaving on a signal, the one built from the
        transcript is used. What a fork carried over counts as said
        (``prompts.as_said``, in ``chain``: ``messages`` go as marked, for the ledger)."""
        self.preparer.overtake()  # one summary at a time: a preparation under way gives way
        outcome, notes = ending.summary(
            self.backend,
            messages,
            previous,
            meter=self.meter,
            settings=self.settings,
            working=self.host.working,
            leaving=self.leaving,
            instructions=instructions,
        )
        self._say(notes)
        return outcome

    def close(self) -> Closed:
        """Save what is queued, summarize and finalize the current session (if any),
        and let go of it.

        Never raises for the store: a file that cannot be finalized stays
        ``open`` and is recovered at the next start; what could not be saved
        is returned (and stays queued) so the UI can show it."""
        try:
            self.flush()
        except StoreError as exc:
            self.host.notice(f"Could not save: {exc.message}", "warn")
        writer = self.writer
        if writer is None:  # nothing written: a pending continuation leaves no file
            if isinstance(self.state, Waiting):
                self._say((ending.left_unused(self.store, self.state.continuation.parent),))
            self._release()
            return Closed(None, self.lifecycle.queued)
        try:
            return Closed(self._let_go(writer), self.lifecycle.queued)
        except StoreError as exc:
            self._say((ending.not_finalized(writer, exc),))
            return Closed(None, self.lifecycle.queued)
        finally:
            self._release()

    def _finalize(
        self,
        writer: SessionWriter,
        instructions: str = "",
        leave: int = 0,
        outcome: chain.SummaryOutcome | None = None,
    ) -> chain.Parent:
        """Summarize (unless ``outcome`` was prepared) and finalize ``writer``'s session
        (``ending.finalized``; ``Closing`` meanwhile); it stays ours. ``leave``: its
        last messages the summary does not cover (the child carries them word for
        word). Raises StoreError, and the session is then open as it was."""
        was = self.lifecycle.closing()
        assert was.writer is writer
        try:
            if outcome is None:
                said = writer.messages
                outcome = self.summarize(said[: len(said) - leave], self.previous, instructions)
            late = self._late_title(writer)
            parent, note = ending.finalized(writer, outcome, late, leave, self.clock())
            self._say((note,))
            return parent
        except BaseException:
            self.lifecycle.reopen(was)
            raise

    def _let_go(self, writer: SessionWriter) -> chain.Parent:
        """Finish ``writer``'s session as it is left (an exit, ``/new``, a switch, a
        fork): handed to the background worker (``ending.handed_off``) when the settings
        and the backend allow, so nobody waits for the model (the parent returned has
        no summary yet); else finalized here. Raises StoreError, and the session is
        then open as it was."""
        self.preparer.overtake()  # leaving: what was being prepared is of no use now
        if self.settings.summaries == "background":
            late = self._late_title(writer, wait=False)  # (leaving is never held by it)
            home = self.arming.home
            handed = ending.handed_off(writer, self.store, self.backend, self.settings, late, home)
            if handed is not None:
                parent, said = handed
                self._say((said,))
                return parent
        return self._finalize(writer)

    def _late_title(self, writer: SessionWriter, wait: bool = True) -> dict[str, str]:
        """The title to write at close (``Naming.late``), after one being asked is taken
        (``take_title``: waited for with ``wait``; not when the person leaves at once)."""
        self.take_title(wait=wait)
        return self.naming.late(writer.meta, writer.messages, self.settings.titles)

    def _release(self) -> None:
        """Let go of the file (if any): the session is fresh again, with no title or pins,
        and nothing prepared for it."""
        self.preparer.forget()
        self.reviser.forget()
        writer = self.writer
        if writer is not None:
            writer.close()
        self.lifecycle.fresh()
        self.pinned.forget()
        self.naming.forget()  # (its request taken by ``_late_title`` as it was let go)

    # ------------------------------------------------------------------ compact
    def compact(self, unanswered: str | None = None, instructions: str = "") -> None:
        """Close this session with its summary and continue in a linked child.

        Queued messages (never sent: nothing is sent while unsaved) belong to
        the child: they are written there, or stay queued. ``unanswered``: a
        message already in this session that the child must answer. Raises
        ChatloopError when there is nothing to compact, StoreError when the
        summary cannot be written (the session then simply goes on). The child
        is made with the next message; if that fails, the continuation waits
        for the next try. Nothing typed is lost either way. ``instructions``: what
        the person wants the summary to keep ("/compact keep the budget figures").
        The child is written with the next message (``Waiting``)."""
        try:
            self._compact(unanswered, instructions)
        finally:
            self.follow_chain()  # the child's chain is read while the person types

    def _compact(self, unanswered: str | None, instructions: str) -> None:
        if not any(m.is_query for m in [*self.prefix, *self.messages]):
            raise ChatloopError("Nothing to compact yet", "Send a message first.")
        self.preparer.overtake()  # a summary still being prepared is not waited for
        match self.state:
            case Waiting(continuation=waiting):  # not written yet: condensed in place
                condensed, notes = beginning.condensed(
                    waiting, self.pins, self.meter, self.summarize, self.clock
                )
                if isinstance(waiting, WithHistory):  # from the summary: the chain's pins held
                    self.pinned.inherit(waiting.parent.meta.pins)
                self._say(notes)
                self.lifecycle.wait(condensed)
                return
            case Fresh():
                self.flush()  # a new session whose file could not be made yet: they make it
        writer = self._ensure_file()
        held = self.lifecycle.take_all()  # never sent: they belong to the child
        try:
            template = self.meta()
            prepared = None if unanswered is not None or instructions else self.preparer.ready()
            covered = compaction.covered(
                writer,
                prepared,
                self.previous,
                self.pins,
                self.meter,
                self.clock,
                answers=unanswered is not None,
            )
            self._say(covered.notes)
            carried, leave = covered.carried, covered.leave
            deferred = None if covered.outcome or instructions else self._defer(writer, leave)
            if deferred is not None:  # the child begins now; the model's summary comes later
                self._release()
                self.reviser.expect(deferred.path, unanswered)
                self.begin_child(deferred, deferred.summary or "", template, unanswered, carried)
                return
            try:
                parent = self._finalize(writer, instructions, leave, covered.outcome)
            except StoreError as exc:
                raise StoreError(
                    f"Could not compact: {exc.message}", "The session goes on as it was."
                ) from exc
            self._release()
            if parent.summary is None:  # finalize always writes one; a guard, not a path
                raise StoreError("Could not compact: the summary is missing", "")
            self.begin_child(parent, parent.summary, template, unanswered, carried)
        finally:
            self.lifecycle.put_back(held)

    def _defer(self, writer: SessionWriter, leave: int) -> chain.Parent | None:
        """``writer``'s compaction left to the background worker (``compaction.deferred``:
        the child begins at once from a summary built from the transcript; ``_revise``
        later puts the model's in its place). None, with nothing done, when the summary
        must be made here (``compaction.defers``, or a worker that cannot start)."""
        if not compaction.defers(self.settings, self.backend):
            return None
        late = self._late_title(writer, wait=False)  # (as leaving: never held by a title)
        handed = compaction.deferred(
            writer,
            self.store,
            self.backend,
            self.settings,
            previous=self.previous,
            late=late,
            leave=leave,
            summary_words=self.meter.summary_words(),
            home=self.arming.home,
        )
        if handed is None:
            return None
        parent, said = handed
        self._say((said,))
        return parent

    def _revise(self) -> None:
        """A parent's model summary written since this child began without it
        (``_defer``): its restoration prompt recorded and sent from this request on in
        the first one's place (``revision.applied``)."""
        writer = self.writer
        if writer is None or not isinstance(self.state, Open):
            return
        due = self.reviser.due(self.store, writer, self.pins, self.meter, self.clock)
        self._say(applied(due, writer, self.lifecycle))

    # ------------------------------------------------------------------ prepared ahead
    def _prepare(self, used: int, window: int) -> None:
        """After an exchange that left ``used`` tokens of the ``window`` taken, below the
        threshold: start preparing the summary of every message of the file
        (``chat.preparation``) when the compaction is near (``compaction.prepare_due``),
        unless one covers them already or is being made (``compaction.ahead``)."""
        writer = self.writer
        if writer is None:
            return
        messages = tuple(writer.messages)
        settings, backend = self.settings, self.backend
        if not compaction.prepare_due(messages, used, window, settings, backend, self.meter):
            return
        if self.preparer.covers(messages):
            return
        plain = not (self.agent.tools or self.prefix)
        make = compaction.ahead(
            messages, window, settings, backend, self.meter, self.previous, self.clock, plain=plain
        )
        self.preparer.start(messages, make, self.prepare_after, self.host.refresh)

    def begin_child(
        self,
        parent: chain.Parent,
        summary: str,
        template: SessionMeta | None = None,
        unanswered: str | None = None,
        carried: tuple[Message, ...] = (),
    ) -> None:
        """Continue ``parent`` in a child from ``summary`` (``beginning.from_summary``,
        with this session's pins, which then hold the chain's), carrying ``carried``
        (copies of the parent's last exchanges) after it: ``Waiting`` for the next
        message, its beginning read into the server meanwhile (``beginning.warming``);
        written at once when the child must answer ``unanswered`` (a message the
        parent's window could not take)."""
        template = template or self.meta()
        continuation = beginning.from_summary(
            parent, summary, template, self.pins, self.meter, self.clock, unanswered, carried
        )
        self.pinned.inherit(parent.meta.pins)
        self.lifecycle.wait(continuation)
        if unanswered is not None:
            writer = self._begin(continuation)
            if not self.leaving:
                self._recall(unanswered)  # (sent within the restoration prompt it follows)
                self._acknowledge(writer, answers=unanswered)
            return
        self._say((beginning.awaited(parent),))
        settings, backend, meter = self.settings, self.backend, self.meter
        read = beginning.warming(continuation, settings.acknowledgment, backend, meter, self.clock)
        if read is not None:
            self.preparer.warm(read)

    def _begin(self, continuation: Continuation) -> SessionWriter:
        """Write the waiting child and what is queued, in one write (``beginning.written``):
        a kill leaves the child whole with the messages typed for it, or no child. If
        the file cannot be made, the continuation stays waiting (and the messages
        queued) for the next try."""
        writer, notes = beginning.written(
            continuation, self._terms(), self.store, self.lifecycle, self.clock
        )
        self._say(notes)
        return writer

    def _terms(self) -> beginning.Terms:
        """What a child is written with now: this session's pins, model and title
        (pinned, switched or renamed while the continuation waited)."""
        acknowledged = self.settings.acknowledgment == "written"
        return beginning.Terms(self.pins, self.backend.model, self.title, acknowledged)

    def _first_of_child(
        self, begins: Continuation, message: Message, typed: int, recalling: bool = True
    ) -> TurnResult:
        """``message``, just written (the last of ``typed`` messages) with the child of
        ``begins``, sent: when the count says the child cannot take it as it begins, the
        child is made over in place (``_begin_otherwise``), the message on disk
        throughout; when nothing can give way, the message is refused (ChatloopError; Up
        recalls it) and kept in the child marked as not sent (``turning.set_aside``), or
        the child is removed again and waits (``beginning.unbegun``). Then the
        restoration prompt is acknowledged (before the copies and the message) and the
        message answered."""
        writer = self.writer
        assert writer is not None
        while not self.plan().fits:
            try:
                refused = self._refusal(message)
                if refused is not None:
                    raise refused
                begins = self._begin_otherwise(begins, writer, typed)
            except StoreError:
                raise  # the message stays saved in the child (the error says so)
            except ChatloopError as exc:
                if turning.set_aside(writer, message):  # the child stays, the message unsent
                    raise turning.kept_unsent(writer, exc) from None
                beginning.unbegun(begins, writer, typed, self.store, self.lifecycle)
                raise
        if isinstance(begins, FromSummary) and not self.leaving:
            if self.settings.acknowledgment == "model":
                self._acknowledge(writer, after=len(begins.carried) + typed)
            else:  # written with the child (``beginning.child``): the reply waits for no other call
                self.host.notice(
                    "Acknowledged by chatloop (no model call before your reply).", "restored"
                )
        return self._answer(message, recalling)

    def _begin_otherwise(
        self, begins: Continuation, writer: SessionWriter, typed: int
    ) -> Continuation:
        """The child of ``begins``, written with ``typed`` messages that do not fit in it,
        made over in place as the continuation that takes them (``beginning.otherwise``,
        ``beginning.remade``). Raises ChatloopError when nothing can give way."""
        made, notes = beginning.otherwise(
            begins, writer.messages[-typed:], self.pins, self.meter, self.summarize, self.clock
        )
        if isinstance(begins, WithHistory):  # from the summary: the chain's pins held
            self.pinned.inherit(begins.parent.meta.pins)
        self._say(notes)
        terms, now = self._terms(), self.clock()
        beginning.remade(made, terms, writer, typed, self.store, self.lifecycle, now)
        return made

    def _acknowledge(
        self, writer: SessionWriter, answers: str | None = None, after: int = 0
    ) -> None:
        """Stream the model's acknowledgment of the restoration prompt
        (``beginning.acknowledgment``: ``answers``, the message it also answers;
        ``after``, the messages written after the prompt) and write it before them
        (``beginning.kept``). Ctrl-C or a server failure skip it: the summary is in
        place."""
        ack, notes = beginning.acknowledgment(
            writer,
            self.backend,
            self.meter,
            self.agent.options,
            self.prefix,
            self.host.reply_view(acknowledgment=answers is None),
            self.clock,
            answers=answers,
            after=after,
        )
        self._say(notes)
        if ack is not None:
            self._say(beginning.kept(writer, ack, after, self.lifecycle))

    # ------------------------------------------------------------------ resume
    def resume(self, ref: str, full: bool = False, fork: bool = False) -> bool:
        """``/resume``: continue (``fork``: branch) the session ``ref`` names, or the one
        the person picks for "" (``resumption.located``), by the same rules as
        ``chatloop -r`` (``chat.continuation``, ``chat.server``). False if nothing was
        resumed."""
        found = resumption.located(
            self.store, ref, continuation.Kind.of(full, fork), self.host.pick
        )
        if found is None:
            self.host.notice("Nothing resumed.")
            return False
        located, kind = found
        resumption.not_own(located, self.writer)
        self._adopt(located)
        self.continue_from(located, kind)
        return True

    def _adopt(self, located: continuation.Located) -> None:
        """Take the agent and the server the rules choose for continuing ``located``
        (``switching.agent_for``, ``switching.server_for``: the functions ``chatloop -r``
        calls before it makes a session)."""
        home = self.arming.home
        path, notes = switching.agent_for(
            located, self.agent, self.agent_named, self.store.cwd, home
        )
        self._say(notes)
        # armed as every entry point arms (asked first: a no leaves this chat as it was)
        agent = self.arming.arm(path) if path is not None else None
        backend, notes = switching.server_for(located, self.backend, self.settings, home)
        self._say(notes)
        if backend is not None:
            self.use_backend(backend)
        if agent is not None:
            self._take_agent(agent)

    def continue_from(self, located: continuation.Located, kind: continuation.Kind) -> None:
        """Close this session and continue ``located`` as ``kind`` says: from its summary
        (written first when missing), with its full history when that fits (else from
        its summary), or as a fork. The agent and server are the caller's: chosen by
        ``continuation.agent_for`` and ``server.connect``. The child is written with
        the next message (``Waiting``)."""
        try:
            self._continue_from(located, kind)
        finally:
            self.follow_chain()  # the chain is read while the person types

    def _continue_from(self, located: continuation.Located, kind: continuation.Kind) -> None:
        resumption.not_own(located, self.writer)
        if self.unsaved:  # they belong to this conversation: saved here first, or no resume
            try:
                self.flush()
            except StoreError as exc:
                raise resumption.not_saved(self.unsaved, exc) from exc
        if kind is continuation.Kind.FORK:
            self._fork_file(located)
            return
        full = kind is continuation.Kind.FULL
        readied = resumption.readied(self.store, located, self.meter, self.prefix, full=full)
        self._say(readied.notes)
        parent, history = readied.parent, readied.history
        if parent.summary is None:  # with --full too: a later compaction condenses it
            parent = self._summarize_parent(parent)
        template = replace(self.meta(), title="")  # the child takes the parent's title
        self.close()
        recent = resumption.recent_exchanges(self.store, parent)
        self._say(resumption.arrival(parent, recent, located))
        if history is not None:  # its whole history sent before this session's messages
            self.pinned.inherit(parent.meta.pins)
            self.lifecycle.wait(builders.with_history(parent, history, template, self.pins))
            self._say((resumption.with_full_history(parent, history),))
            return
        summary = parent.summary
        assert summary is not None
        now = self.clock()
        carried = resumption.carried(parent, summary, recent, self.pins, self.meter, now)
        if len(carried) < parent.meta.summary_leaves:  # what it left out does not fit here
            self.host.notice(resumption.leaves_too_many(parent), "warn")
            summary = resumption.summarized_whole(self.store, parent, self.summarize)
            carried = resumption.carried(parent, summary, recent, self.pins, self.meter, now)
        self.begin_child(parent, summary, template, carried=carried)

    def _say(self, notes: Sequence[Note]) -> None:
        """Show ``notes`` (an owner's, returned as values), in order."""
        for text, tone in notes:
            self.host.notice(text, tone)

    def _summarize_parent(self, parent: chain.Parent) -> chain.Parent:
        """``parent`` with a summary (``resumption.summarized``), its notes shown; the
        wait for a background worker writing it is this session's
        (``resumption.waiting``: shown, and Ctrl-C ends it)."""
        settings = self.settings
        wait = resumption.waiting(
            self.arming.home, self.backend, self.host.working, settings.summary_wait
        )
        readied = resumption.summarized(
            self.store,
            parent,
            summarize=self.summarize,
            wait=wait,
            summary_words=self.meter.summary_words(),
            summary_wait=settings.summary_wait,
            now=self.clock,
        )
        self._say(readied.notes)
        return readied.parent

    # ------------------------------------------------------------------ fork
    def fork(self, upto: int | None = None) -> None:
        """Branch this conversation after its query ``upto`` (None: after the last one):
        this session closes with its summary, as it is, and the next message begins a
        new session linked to it that carries its history up to that point (copied
        whole when it fits the budget, else as a summary of it) and nothing after."""
        writer = self.writer
        if writer is None:
            raise ChatloopError("Nothing to fork yet", "Send a message first.")
        self.flush()  # queued messages belong to this session (StoreError if not yet)
        history, at = forking.of_session(writer.messages, self.prefix, upto)
        previous = self.previous  # what the carried history itself began from
        template = replace(self.meta(), title="")
        try:
            parent = self._let_go(writer)  # the branch needs its link, not its summary
        except StoreError as exc:
            raise StoreError(
                f"Could not fork: {exc.message}", "The session goes on as it was."
            ) from exc
        self._release()
        self._fork_from(parent, history, at, template, previous)

    def again(self, text: str | None = None) -> TurnResult:
        """Ask this session's last query again (``text``: as changed to it), in a branch
        after the query before it (``fork``), so the model answers without having seen
        its first answer; this session stays as it was, its answer included."""
        writer = self.writer
        queries = [m.text for m in writer.messages if m.is_query] if writer else []
        if not queries:
            raise ChatloopError("Nothing to ask again here yet", "Send a message first.")
        self.fork(len(queries) - 1)
        return self.send(text if text is not None else queries[-1])

    def _fork_file(self, located: continuation.Located) -> None:
        """Branch the session ``located`` after its last query (``chatloop -r N --fork``):
        it stays as it is; the next message begins the branch."""
        parent = located.parent
        history, at = forking.of_file(self.store, parent)
        template = replace(self.meta(), title="")
        self.close()
        self._say(resumption.arrival(parent, resumption.recent_exchanges(self.store, parent)))
        self._fork_from(parent, history, at, template, chain.began_from(self.store, parent))

    def _fork_from(
        self,
        parent: chain.Parent,
        history: list[Message],
        at: int,
        template: SessionMeta,
        previous: str | None,
    ) -> None:
        """Make the fork wait for the next message, with the chain's pins: ``history``
        copied (written marked as restored) when it fits, else a restoration prompt
        built from a summary of it (``forking.carried``). ``previous``: the summary the
        carried history began from."""
        self.pinned.inherit(parent.meta.pins)
        branch = builders.branch(parent, history, at, template, self.pins, previous)
        self.lifecycle.wait(branch)
        carried, notes = forking.carried(branch, self.meter, self.summarize, self.clock)
        if carried is not branch:
            self.lifecycle.wait(carried)
        self._say(notes)

    # ------------------------------------------------------------------ switches
    def use_model(self, name: str) -> str | None:
        """Send the next requests to the server's model ``name`` (``switching.model``;
        the front matter keeps the model the session began with, each reply records the
        one that gave it, and a continuation names it). Returns None when the server's
        list had it, else why it could not be checked (the switch is made unchecked).
        Raises ChatloopError when the server lists models and ``name`` is not one."""
        meter, unchecked = switching.model(self.backend, self.agent, self.settings, name)
        self._answered_by(self.agent, self.backend, meter)
        self._restate()
        return unchecked

    def use_backend(self, backend: Backend) -> None:
        """Send the next requests to ``backend`` (a ``/resume`` whose session the server
        rule sends elsewhere); the caller closes the one it replaces."""
        self._answered_by(
            self.agent, backend, switching.backend(backend, self.agent, self.settings)
        )
        self._restate()

    def use_agent(self, agent: Agent) -> bool:
        """Go on with ``agent``. A session under way stays with the agent that answered
        in it: the conversation goes on in a branch of it (see ``fork``, with the whole
        history) whose front matter names ``agent``, so every file names the one agent
        it was held with. True when a branch was made."""
        branched = self.writer is not None
        if branched:
            self.fork()
        self.agent_named = True  # chosen: a later /resume goes on with it
        self._take_agent(agent)
        if isinstance(self.state, Waiting):
            self.lifecycle.wait(switching.relabelled(self.state.continuation, agent))
            self._restate()
        return branched

    def _take_agent(self, agent: Agent) -> None:
        """Go on with ``agent`` (``switching.agent``), and with the model it names when
        none was configured (``switching.named_model``)."""
        agent, meter = switching.agent(agent, self.meter, self.recalls)
        self._answered_by(agent, self.backend, meter)
        wanted = switching.named_model(agent, self.arming.settings, self.backend.model)
        if wanted is None:
            return
        try:
            self.use_model(wanted)
        except ChatloopError as exc:
            self.host.notice(f"{agent.name} names the model {wanted}: {exc.message}", "warn")

    def _answered_by(self, agent: Agent, backend: Backend, meter: Meter) -> None:
        """THE assignment of who answers: the agent, the backend and the meter of that
        model with that agent, together (made by ``chat.switching``; nothing else
        assigns them)."""
        self.agent, self.backend, self.meter = agent, backend, meter

    # ------------------------------------------------------------------ small edits
    def rename(self, title: str) -> str:
        """Give the session a title (cut to the longest a title may be: ``naming.given``);
        returns it. Written first: a refusal of the file changes nothing."""
        title = given(title)
        writer = self.writer
        if writer is not None:
            writer.update_meta(title=title)
        self.naming.named(title)  # (a title being asked is not taken: the person's wins)
        return title

    # ------------------------------------------------------------------ pins
    def pin(self, fact: str) -> tuple[str, ...]:
        """Pin ``fact``: it is stored in the session's front matter and carried, word
        for word, in the restoration prompt of every later session of the chain. The
        pins live in the ledger's room of that prompt (``context.ledger_room``): one
        that would not fit is refused, saying how much room is left (``pins.added``)."""
        room = self.meter.sizes().ledger_room  # pins go first in the ledger's room
        return self._set_pins(added(self.pins, fact, room, self.tokens.text))

    def unpin(self, number: int) -> tuple[str, ...]:
        """Remove pinned fact ``number`` (1 = the first, as /pins lists them)."""
        return self._set_pins(removed(self.pins, number))

    def _set_pins(self, pins: Pins) -> Pins:
        """Hold ``pins``, written first (``Pinned.set``: a refusal changes nothing), and
        build a waiting child's restoration prompt again with them."""
        self.pinned.set(pins, self.state, self.store)
        self._restate()
        return pins

    def _restate(self) -> None:
        """A waiting child's restoration prompt built again when what it is built with
        changed while it waited (the pins, the model, the agent: ``beginning.restated``)."""
        match self.state:
            case Waiting(continuation=FromSummary() as waiting):
                self.lifecycle.wait(beginning.restated(waiting, self.pins, self.meter))

    def ledger_left_out(self) -> list[str]:
        """The ledger entries of the summary this session continues from that its
        restoration prompt had no room for (``pins.left_out``; ``/pins`` offers them)."""
        return left_out(self.previous, self.messages, self.pins)

    def last_reply(self) -> str | None:
        """The text of the latest reply (for /copy)."""
        return next(
            (m.text for m in reversed(self.messages) if m.role == "assistant" and m.text), None
        )
