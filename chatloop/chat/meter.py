"""``Meter``: the window, the model's token counts and the plans of one conversation's
calls, for one model on one backend with one agent.

It owns what is learnt about the model while chatting: its window (the settings',
else the server's, else unknown; corrected when the server says it overflowed), how
its tokens are counted (``chat.tokens``: learnt from each reply's reported usage), the
last call's plan and the conversions earlier plans made (``context.Sent``, reused so
that a turn's cost does not grow with the conversation). What it knows belongs to the
model: a switch of model or backend makes a new meter (``Meter.of``); a switch of agent
keeps the model's window and counts and plans anew (``for_agent``).

Everything sized here is a pure function of ``chat.context`` or ``chat.restoration``
fed with what the meter knows; the meter holds no reference to a session.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from chatloop.backends.base import Backend
from chatloop.chat import chain, restoration
from chatloop.chat.agent import Agent
from chatloop.chat.context import Plan, Sent, ack_cap, carry_budget, plan, reply_cap, summary_cap
from chatloop.chat.tokens import TokenCount
from chatloop.config import Settings
from chatloop.errors import ChatloopError
from chatloop.format import Message

__all__ = ["Meter"]


class Meter:
    """What one model's calls cost and what they may send. Not thread-safe: the
    caller's thread alone uses it (a summary prepared ahead counts with estimates)."""

    def __init__(
        self,
        backend: Backend,
        agent: Agent,
        settings: Settings,
        *,
        window: int | None = None,
        tokens: TokenCount | None = None,
        made: Sent | None = None,
    ) -> None:
        self._backend = backend
        self._agent = agent
        self._settings = settings
        self._window = window  # None: not asked yet; 0: asked, unknown
        self._tokens = tokens  # made when first asked for (``tokens``)
        self._made = made or Sent()  # this conversation's plans so far, reused
        self._sent: Plan | None = None  # the last call's plan (its messages and tools)

    @classmethod
    def of(cls, backend: Backend, agent: Agent, settings: Settings) -> Meter:
        """A meter that knows nothing yet of ``backend``'s model."""
        return cls(backend, agent, settings)

    def for_agent(self, agent: Agent) -> Meter:
        """This model's meter for ``agent``: the window and the counts are the model's
        and kept (so are the conversions, which have no system prompt); the last call's
        plan was another agent's and is not."""
        return Meter(
            self._backend,
            agent,
            self._settings,
            window=self._window,
            tokens=self._tokens,
            made=self._made,
        )

    # ------------------------------------------------------------------ the model
    def window(self) -> int | None:
        """The context window: the settings', else the server's (asked once), else
        unknown (None)."""
        if self._window is None:
            try:
                self._window = self._settings.context_window or self._backend.context_window() or 0
            except ChatloopError:
                self._window = 0
        return self._window or None

    def told(self, window: int) -> None:
        """The server said its real window (a context overflow): it is the window now."""
        self._window = window

    @property
    def tokens(self) -> TokenCount:
        """How this model's tokens are counted (``chatloop.chat.tokens``)."""
        if self._tokens is None:
            self._tokens = TokenCount(self._backend.count_tokens, self._backend.chat_overhead)
        return self._tokens

    def learn(self, message: Message) -> None:
        """A reply's reported prompt size corrects the counts of what follows; its
        reported length is its count (a reply of text alone: the tokenizer is not
        asked about it; the end-of-turn token it may include errs on the safe side)."""
        sent, usage = self._sent, message.usage
        if usage is not None and not usage.estimated and sent is not None:
            self.tokens.learn(sent.wire, usage.input, sent.budget.tools, sent.content)
        text_alone = not (message.thinking or message.tool_calls or message.interrupted)
        if usage is not None and not usage.estimated and message.role == "assistant" and text_alone:
            self.tokens.known(message.text, usage.output)

    # ------------------------------------------------------------------ caps
    def reply_options(self) -> dict[str, Any]:
        """Options for a reply: its ``max_tokens`` (``context.reply_cap``: the setting,
        else the agent's, scaled down to the window)."""
        agent = int(self._agent.options.get("max_tokens") or 0)
        return {"max_tokens": reply_cap(self.window(), self._settings.max_tokens, agent)}

    def ack_cap(self) -> int:
        """The most tokens a restoration's acknowledgment takes (``context.ack_cap``)."""
        return ack_cap(self.window(), self.reply_options().get("max_tokens") or 0)

    def summary_cap(self) -> int:
        """The most tokens a summary may take here (``context.summary_cap``)."""
        return summary_cap(self.window(), self._settings.summary_max_tokens)

    def summary_words(self) -> int:
        """The words a summary may have here (``summary_cap``, in words)."""
        return chain.summary_words(self.summary_cap())

    def sizes(self) -> restoration.Sizes:
        """What a restoration prompt is built within now (``restoration.Sizes``)."""
        reply = self.reply_options().get("max_tokens") or 0
        return restoration.Sizes.of(
            self.window(), self.tokens, self._settings.summary_max_tokens, reply
        )

    # ------------------------------------------------------------------ plans
    def plan(
        self,
        messages: Sequence[Message],
        prefix: Sequence[Message] = (),
        reuse: bool = False,
        reserve: int | None = None,
    ) -> Plan:
        """The call for ``prefix`` (a --full history) then ``messages``, with the agent's
        system prompt and tools, a reply of ``reserve`` tokens kept free (default: the
        reply's cap). ``reuse``: they are this conversation's (what earlier such plans
        made is reused: a turn's cost does not grow with the conversation)."""
        return plan(
            self._agent.system_prompt,
            [*prefix, *messages],
            window=self.window(),
            tools=self._agent.tool_specs() if self._agent.tools else None,
            reserve=reserve if reserve is not None else self.reply_options().get("max_tokens"),
            count=self.tokens,
            sent=self._made if reuse else None,
        )

    def wire(self, messages: Sequence[Message], prefix: Sequence[Message] = ()) -> list[Any]:
        """The call about to be made for this conversation's ``messages``, remembered as
        the last one (what its reply's usage is learnt against: ``learn``)."""
        self._sent = self.plan(messages, prefix, reuse=True)
        return self._sent.wire

    # ------------------------------------------------------------------ a child's size
    def opening(self, text: str, now: datetime, summary: int = 0) -> int:
        """The tokens a child begins with before what it carries: its restoration prompt
        (``text``, and ``summary`` tokens more for a summary not made yet) and its
        acknowledgment at its cap, each counted as it is sent, with the prompt's own
        template."""
        prompt = Message.create("user", now, text=text, restore=True)
        ack = Message.create("assistant", now, restore=True)
        sent = self.plan([prompt, ack]).messages_tokens
        return sent + self.tokens.overhead()[1] + summary + self.ack_cap()

    def carry(
        self, recent: list[list[Message]], opening: int, keep_first: bool = True
    ) -> tuple[Message, ...]:
        """``chain.carry`` of ``recent`` within ``context.carry_budget`` after an opening
        of ``opening`` tokens (an upper bound already: the summary at its most), each
        exchange counted as its messages would be sent, with the margin a plan gives
        its counts (``Plan.margin``)."""

        def cost(exchange: Sequence[Message]) -> int:
            planned = self.plan(list(exchange))
            return math.ceil(planned.messages_tokens * planned.margin)

        return chain.carry(recent, carry_budget(self.window(), opening), cost, keep_first)
