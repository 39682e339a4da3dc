"""How many tokens a prompt costs the model in use.

``TokenCount`` counts with the server's own tokenizer when it has one
(``Backend.count_tokens``: llama.cpp, vLLM, llama-cpp-python, the embedded
model) and the chat template's overhead the server measured
(``Backend.chat_overhead``); such counts are ``exact``. Otherwise it
estimates (about four characters a token, ``estimate_tokens``), and the
estimate is corrected by each reply's reported usage: the ratio of what the
server counted to what was estimated scales later estimates. An estimate is
shown marked ``~``.

Every distinct text is counted once and remembered (a bounded cache), so a
conversation asks the server only about the messages that are new; a reply's
length the server reported is taken as its count (``known``), so a turn asks
about the person's new message alone. A server
that stops answering turns counting into estimating; nothing here raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from chatloop.backends.base import ChatMessage, estimate_tokens

PER_MESSAGE = 6  # template tokens around one message, until the server says (role, markers)
PER_PROMPT = 8  # template tokens once per prompt (BOS, the reply's opening marker)
CACHE_SIZE = 4096  # distinct texts remembered
SCALE_RANGE = (0.5, 3.0)  # how far reported usage may move the estimate
SCALE_STEP = 0.02  # a learned scale is taken only when it moves the estimate this much

Counter = Callable[[str], "int | None"]
Overhead = Callable[[], "tuple[int, int] | None"]

__all__ = ["TokenCount"]


class TokenCount:
    """Token counts for one backend. ``exact`` while the server's tokenizer answers."""

    def __init__(self, count: Counter | None = None, overhead: Overhead | None = None) -> None:
        self._count = count
        self._overhead_source = overhead
        self._overhead: tuple[int, int] | None = None
        self._cache: dict[str, int] = {}
        self.exact = count is not None  # until the server fails to answer
        self.scale = 1.0  # reported / estimated, learned from replies (estimates only)

    @property
    def mark(self) -> str:
        """``~`` in front of a figure that is an estimate, else nothing."""
        return "" if self.exact else "~"

    def text(self, text: str) -> int:
        """``text``'s tokens (no template)."""
        if not text:
            return 0
        if self.exact and self._count is not None:
            known = self._cache.get(text)
            if known is not None:
                return known
            counted = self._count(text)
            if counted is not None:
                if len(self._cache) >= CACHE_SIZE:
                    self._cache.clear()
                self._cache[text] = counted
                return counted
            self.exact = False  # the tokenizer went away: estimate from now on
        return max(1, round(estimate_tokens(text) * self.scale))

    def known(self, text: str, count: int) -> None:
        """``text`` is ``count`` tokens by the server's word (a reply's reported length):
        remembered as if counted, so nobody asks the tokenizer about it. Only while
        counts are exact (an estimate is not corrected so)."""
        if self.exact and text and count > 0:
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
            self._cache[text] = count

    def overhead(self) -> tuple[int, int]:
        """The template's tokens (per message, per prompt): measured, else a safe guess."""
        if self._overhead is None:
            measured = self._overhead_source() if self.exact and self._overhead_source else None
            self._overhead = measured or (PER_MESSAGE, PER_PROMPT)
        return self._overhead

    @property
    def basis(self) -> tuple[bool, float]:
        """What ``content`` counts depend on: a count remembered under another basis is
        stale. (The template's overhead is not part of it: ``content`` leaves it out.)"""
        return self.exact, self.scale

    def content(self, message: ChatMessage) -> int:
        """One chat message's own tokens: its text and tool calls, no template."""
        total = self.text(str(message.get("content") or ""))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += self.text(str(function.get("name", ""))) + self.text(
                str(function.get("arguments", ""))
            )
        return total

    def message(self, message: ChatMessage) -> int:
        """One chat message's tokens, with its share of the template."""
        return self.overhead()[0] + self.content(message)

    def messages(self, messages: Sequence[ChatMessage]) -> int:
        """``messages``' tokens, without the once-per-prompt overhead."""
        return sum(self.message(m) for m in messages)

    def prompt(self, messages: Sequence[ChatMessage]) -> int:
        """A whole prompt's tokens, as the server will count them."""
        return self.messages(messages) + self.overhead()[1] if messages else 0

    def learn(
        self,
        messages: Sequence[ChatMessage],
        reported: int,
        tools: int = 0,
        content: int | None = None,
    ) -> None:
        """The server counted ``reported`` tokens for ``messages`` and tool definitions
        of ``tools`` tokens (as planned): correct what follows. Exact counts learn the
        template's overhead per message; estimates their scale. ``content``: the
        messages' own tokens as planned (``Plan.content``), so they are not counted
        again (a long conversation's learning costs what a short one's does)."""
        reported -= tools
        if not messages or reported <= 0:
            return
        per, fixed = self.overhead()
        if self.exact:
            if content is None:
                content = sum(self.content(m) for m in messages)
            learned = (reported - fixed - content) / len(messages)
            if 0 <= learned <= 64:
                self._overhead = (round(learned), fixed)
            return
        raw = (
            content / self.scale
            if content is not None
            else sum(estimate_tokens(str(m.get("content") or "")) for m in messages)
        )
        if raw > 0:
            low, high = SCALE_RANGE
            measured = (reported - fixed - per * len(messages)) / raw
            scale = min(high, max(low, (self.scale + measured) / 2))
            if abs(scale - self.scale) > SCALE_STEP * self.scale:  # else counts stay valid
                self.scale = scale
