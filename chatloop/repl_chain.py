"""The REPL's chain operations: the exit summary, /compact, /resume, auto-compaction.

Every path saves the conversation first: messages are already on disk when a
summary is asked for, and a summary that fails, times out or is cut short by
Ctrl-C or a signal gives way to the deterministic fallback, so the file is
always finalized and resumable. ``Repl`` (chatloop.repl) mixes this in; what it
relies on is declared in ``chatloop.repl_base``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from chatloop import chain, prompts, render
from chatloop.errors import BackendError, ChatloopError
from chatloop.format import Message, SessionMeta
from chatloop.repl_base import ReplBase


class ChainMixin(ReplBase):
    # -- summaries
    def summarize(self, messages: list[Message], previous: str | None) -> chain.SummaryOutcome:
        """The summary of ``messages`` with a spinner; never raises, never hangs forever.
        After SIGTERM or SIGHUP the one built from the transcript is used at once."""
        if self.signalled:
            return chain.SummaryOutcome(prompts.fallback_summary(messages, previous), True, 0)
        try:
            with render.spinner(self.console, "Generating session summary...") as progress:
                outcome = chain.summarize(
                    self.backend, messages, previous=previous, window=self.window(),
                    max_tokens=self.settings.summary_max_tokens,
                    timeout=self.settings.summary_timeout, progress=progress,
                )  # fmt: skip
        except (KeyboardInterrupt, SystemExit):
            render.note(self.console, "Summary cut short: using one built from the transcript.",
                        "yellow")  # fmt: skip
            return chain.SummaryOutcome(prompts.fallback_summary(messages, previous), True, 0)
        if outcome.fallback and outcome.error:
            render.note(self.console, f"The model could not summarize ({outcome.error}); "
                        "wrote a summary built from the transcript.", "yellow")  # fmt: skip
        return outcome

    def close_session(self) -> chain.Parent | None:
        """Summarize and finalize the current session (if any); it becomes a parent."""
        writer = self.writer
        if writer is None:
            return None
        try:
            self._flush()
            outcome = self.summarize(writer.messages, self.previous)
            meta = writer.finalize(outcome.message(self.clock()))
            kind = "fallback summary" if outcome.fallback else "summary"
            render.note(
                self.console,
                f"Saved session {meta.id} with its {kind}: {meta.queries} queries, "
                f"{meta.tokens_in + meta.tokens_out:,} tokens → {writer.path}",
                "green",
            )
            return chain.closed_parent(writer)
        except ChatloopError as exc:
            render.error(self.console, exc)
            return None
        finally:
            writer.close()
            self.writer = None
            self.prefix = []

    # -- compact
    def cmd_compact(self, arg: str) -> None:
        if self.writer is None or not self.writer.query_count:
            raise ChatloopError("Nothing to compact yet", "Send a message first.")
        self.compact()

    def compact(self, unanswered: str | None = None) -> bool:
        """Close this session with its summary and continue in a linked child."""
        template = self._meta()
        parent = self.close_session()
        if parent is None or parent.summary is None:
            render.note(self.console, "Could not compact; starting a fresh session.", "yellow")
            return False
        self.begin_child(parent, parent.summary, template, unanswered)
        return True

    def begin_child(
        self, parent: chain.Parent, summary: str, template: SessionMeta | None = None,
        unanswered: str | None = None,
    ) -> None:  # fmt: skip
        """Create the child session, send the restoration prompt, record the acknowledgment."""
        base = template or self._meta()
        writer = chain.start_child(self.store, base, parent, summary, self.clock, unanswered)
        self._adopt(writer)
        self.previous = summary
        self.chain_base = chain.chain_tokens(self.store, writer.path, writer.meta)
        render.note(self.console, f"Session Restored: {writer.meta.id} continues {parent.meta.id} "
                    f"({parent.meta.queries} queries).", "cyan")  # fmt: skip
        self.acknowledge()

    def acknowledge(self) -> None:
        from chatloop.turn import respond

        writer = self.writer
        assert writer is not None
        view = render.StreamView(self.console, self.agent.name)
        try:
            reply = respond(self.backend, self.plan().wire, clock=self.clock,
                            on_event=view.on_event, options=self._reply_options())  # fmt: skip
        except KeyboardInterrupt:
            view.close(False)
            render.note(self.console, "Acknowledgment skipped; the summary is in place.")
            return
        except BackendError as exc:
            view.close(False)
            render.error(self.console, exc)
            return
        view.close(False)
        message = replace(reply, restore=True)
        writer.append(message)
        self._used = message.usage.total if message.usage else self._used
        self._tokens += message.usage.total if message.usage else 0

    # -- resume
    def cmd_resume(self, arg: str) -> None:
        self.resume(arg)

    def resume(self, ref: str, full: bool = False) -> bool:
        """Continue session ``ref`` (number or id; empty: pick one). False if nothing
        was resumed."""
        from chatloop.index import Index

        with Index(self.store) as index:
            index.sync(all_projects=True)
            if not ref:
                row = self.pick(index.list_sessions(limit=50))
                if row is None:
                    render.note(self.console, "Nothing resumed.")
                    return False
            else:
                row = index.find(ref)
        if self.writer is not None and Path(row.path) == self.writer.path:
            raise ChatloopError("That is the session you are in", "/compact continues it anew.")
        return self.resume_from(Path(row.path), full)

    def resume_from(self, path: Path, full: bool = False) -> bool:
        try:
            parent = chain.read_parent(self.store, path)
        except (ChatloopError, OSError):
            render.note(self.console, f"The session file {path} is gone; starting a fresh "
                        "session.", "yellow")  # fmt: skip
            self.close_session()
            return False
        if not self._agent_matches(parent.meta):
            render.note(self.console, "Not resumed.")
            return False
        if parent.note:
            render.note(self.console, f"Session {parent.meta.id}: {parent.note}.", "yellow")
        history = self._full_history(parent) if full else None
        if parent.summary is None and history is None:
            parent = self._summarize_parent(parent)
        template = self._meta()
        self.close_session()
        if history is not None:
            self._start_full(parent, history, template)
        else:
            assert parent.summary is not None
            self.begin_child(parent, parent.summary, template)
        return True

    def _agent_matches(self, meta: SessionMeta) -> bool:
        """True when the session was held with this agent (by name), or the person
        agrees to go on with this one."""
        from chatloop.agent import normalise

        recorded = meta.agent_ref
        mine = normalise(Path(self.agent.path).stem)
        if not recorded or normalise(recorded) == mine or meta.agent == self.agent.name:
            return True
        if self.assume_yes:
            return True
        return self._ask(
            f"Session {meta.id} was with {meta.agent or recorded}; continue it with "
            f"{self.agent.name}? [y/N] ",
            False,
        )

    def _summarize_parent(self, parent: chain.Parent) -> chain.Parent:
        """A parent without a usable summary gets one now, written into its file when it can."""
        found = self.store.read(parent.path)
        writer = None
        if not found.legacy:  # legacy files are read, never written
            try:
                writer = self.store.open(parent.path)
            except ChatloopError:  # open in another chatloop: summarize without writing
                writer = None
        messages = writer.messages if writer else list(found.session.messages)
        outcome = self.summarize(messages, chain.previous_summary(messages))
        if writer is None:
            return replace(parent, summary=outcome.text)
        try:
            writer.finalize(outcome.message(self.clock()))
            render.note(self.console, f"Wrote the missing summary into {parent.path.name}.")
            return chain.closed_parent(writer)
        finally:
            writer.close()

    def _full_history(self, parent: chain.Parent) -> list[Message] | None:
        session = self.store.read(parent.path).session
        history = [m for m in session.messages if m.role != "summary"]
        plan = self.plan(history)
        if plan.fits:
            return history
        render.note(
            self.console,
            f"The full history of {parent.meta.id} (about {plan.messages_tokens:,} tokens) does "
            f"not fit the budget ({plan.budget.available:,}); using its summary instead.",
            "yellow",
        )
        return None

    def _start_full(self, parent: chain.Parent, history: list[Message],
                    template: SessionMeta) -> None:  # fmt: skip
        meta = chain.child_meta(template, parent, self.clock(), self.store.project_dir)
        self._adopt(self.store.create(replace(meta, extra={**meta.extra, "restored": "full"})))
        self.prefix = history
        self.previous = parent.summary
        assert self.writer is not None
        self.chain_base = chain.chain_tokens(self.store, self.writer.path, self.writer.meta)
        render.note(self.console, f"Session Restored: {self.writer.meta.id} continues "
                    f"{parent.meta.id} with its full history ({len(history)} messages).",
                    "cyan")  # fmt: skip

    # -- automatic compaction
    def before_send(self, text: str) -> bool:
        """Make room for ``text`` if needed; False if it cannot be sent."""
        draft = Message.create("user", self.clock(), text=text)
        plan = self.plan([draft])
        if plan.fits:
            return True
        if self.writer is None or not self.writer.query_count:
            raise ChatloopError(
                f"This message alone (about {plan.messages_tokens:,} tokens) does not fit the "
                f"context window ({plan.budget.available:,} tokens for messages)",
                "Shorten it, or use a model with a larger window.",
            )
        if self.settings.auto_compact == "off":
            raise ChatloopError(
                "The conversation no longer fits the context window",
                "/compact continues it in a new session from its summary.",
            )
        render.note(self.console, "The context window is full: compacting before sending.",
                    "yellow")  # fmt: skip
        self.compact()
        return True

    def after_turn(self) -> None:
        """Past the threshold: warn, then compact (on), ask (ask) or only hint (off)."""
        window = self.window()
        if not window or self.writer is None:
            return
        share = max(self.plan().share, self._used / window)
        if share < self.settings.compact_threshold:
            return
        used = max(self.plan().tokens, self._used)
        render.note(self.console, f"Context {share:.0%} full ({used:,} of {window:,} tokens).",
                    "yellow")  # fmt: skip
        mode = self.settings.auto_compact
        if mode == "off":
            render.note(self.console, "/compact continues in a new session from a summary.")
        elif mode == "on" or self._ask("Compact now?", True):
            self.compact()
