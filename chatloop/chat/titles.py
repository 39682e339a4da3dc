"""Session titles: the few words a person recognises a conversation by.

After the first exchange of a new conversation ``ChatSession`` names it
(``settings.titles``). ``ask`` sends ``prompts.TITLE_PROMPT`` as a one-off
completion without tools, outside the history, with a small reply cap and a
time bound; ``answer`` takes the model's words as data: one plain line (no
markup, no quotes, no ``Title:``, no control characters), cut at a word
boundary to ``MAX_CHARS``, and refused when it is no title (nothing, a
paragraph, the prompt repeated). ``fallback`` names the conversation by its
first request's first line, cleaned and cut the same way.

``ask`` never raises for the model: a refused answer, the time bound, or a
server failure give the fallback. KeyboardInterrupt propagates (the caller
takes the fallback). The bound holds even for a server that sends nothing:
the request waits in a worker thread, and is cancelled and left behind once
the bound has passed. ``Asking`` is the same request, not waited for: a chat
asks it after the reply, gives the person the prompt back at once, and takes
the title before their next request (cancelling it when it has not come).
"""

from __future__ import annotations

import re
import threading
import time
import unicodedata
from dataclasses import dataclass

from chatloop.backends.base import Backend, Cancel, Cancelled
from chatloop.chat import prompts
from chatloop.chat.turn import complete
from chatloop.config import DEFAULT_TITLE_MAX_TOKENS, DEFAULT_TITLE_TIMEOUT
from chatloop.errors import BackendError
from chatloop.format import Message

MAX_CHARS = 60  # a title as made here: what a listing line shows of it
LONGEST_ANSWER = 100  # a cleaned line longer than this is a reply, not a title
READ_CHARS = 4 * LONGEST_ANSWER  # of a line, what is read to make a title of it
TEMPERATURE = 0.2  # as for summaries: the likeliest words, not inventive ones


@dataclass(frozen=True)
class Title:
    """A title and how it was made: ``fallback`` when it is the first request's line
    (``error`` says why the model's was not used, when it was asked). ``text`` is
    empty only when the first request has no words to make one of."""

    text: str
    fallback: bool
    error: str | None = None


def ask(
    backend: Backend,
    request: str,
    reply: str,
    *,
    timeout: float = DEFAULT_TITLE_TIMEOUT,
    max_tokens: int = DEFAULT_TITLE_MAX_TOKENS,
) -> Title:
    """The model's title for the conversation that began with ``request`` and
    ``reply``, within ``timeout`` seconds; else the fallback (see the module).

    The request runs in a worker thread and is waited for ``timeout`` seconds at
    most, so a server slow to send its first byte holds nobody: past the bound
    the request is cancelled (it stops at its next piece) and left behind. Not
    for a backend that runs the model in this process (it is not thread-safe):
    the caller takes the fallback there."""
    made = Asking(backend, request, reply, timeout=timeout, max_tokens=max_tokens).take(True)
    assert made is not None  # (waited for: always a title)
    return made


class Asking:
    """A title being asked, off the person's path: the request starts in a thread at
    once and nobody waits for it until ``take``. A chat takes it before the person's
    next request, without waiting (a title not come yet is cancelled: on a one-slot
    server the person's request goes first), and at close, waiting within the bound."""

    def __init__(
        self,
        backend: Backend,
        request: str,
        reply: str,
        *,
        timeout: float = DEFAULT_TITLE_TIMEOUT,
        max_tokens: int = DEFAULT_TITLE_MAX_TOKENS,
    ) -> None:
        self.request, self.timeout = request, timeout
        self._cancel = Cancel()
        self._outcome: list[Message | BaseException] = []
        self._deadline = time.monotonic() + timeout
        options = {"max_tokens": max_tokens, "temperature": TEMPERATURE}
        prompt = prompts.title_prompt(request, reply)

        def work() -> None:
            try:
                self._outcome.append(
                    complete(backend, prompt, options=options, cancel=self._cancel)
                )
            except BaseException as exc:  # handed to the taking thread
                self._outcome.append(exc)

        self._worker = threading.Thread(target=work, name="chatloop-title", daemon=True)
        self._worker.start()

    def take(self, wait: bool) -> Title | None:
        """The title: the model's, else the fallback (see the module). ``wait``: until
        the bound has passed; else None when it has not come yet (the request is then
        cancelled and left behind). KeyboardInterrupt while waiting propagates (the
        request cancelled); one the request raised gives the fallback."""
        if wait:
            try:
                self._worker.join(max(0.0, self._deadline - time.monotonic()))
            except KeyboardInterrupt:
                self._cancel.set()
                raise
        if not self._outcome:
            self._cancel.set()
            if not wait:
                return None
            return Title(fallback(self.request), True, f"no title within {self.timeout:g} s")
        done = self._outcome[0]
        if isinstance(done, BackendError | Cancelled):
            return Title(fallback(self.request), True, done.message)
        if isinstance(done, KeyboardInterrupt):
            return Title(fallback(self.request), True, "interrupted")
        if isinstance(done, BaseException):
            raise done
        made = answer(done.text)
        if not made:
            return Title(fallback(self.request), True, "the model's answer was no title")
        return Title(made, False)


def answer(text: str) -> str:
    """The title in a model's answer, or "" when it holds none: its first line that
    has words once cleaned, refused when longer than ``LONGEST_ANSWER`` or when it
    repeats the prompt; cut to ``MAX_CHARS`` at a word boundary."""
    line = _first_line(_MODEL_MARKUP.sub(" ", text))
    if not line or len(line) > LONGEST_ANSWER or _echoes(line):
        return ""
    return _cut(line)


def fallback(request: str) -> str:
    """The title the first request gives: its first line with words, cleaned and cut
    as a model's answer is ("" when it has none)."""
    return _cut(_first_line(request))


# ------------------------------------------------------------------ cleaning

# Terminal sequences are removed whole (CSI, OSC up to BEL or ST, two-byte escapes):
# dropping only the ESC would leave "[31m" in the title.
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# What a model's answer may carry that is no part of a title: HTML tags and chat
# template tokens ([INST], <<SYS>>, <|im_end|>, <end_of_turn>). Only a model's answer
# is cleaned of them: a person's first line keeps its "<vector>" (``fallback``).
_HTML = (
    "a|b|big|blockquote|body|br|center|code|div|em|font|h[1-6]|head|hr|html|i|img|li|ol"
    "|p|pre|s|small|span|strong|sub|sup|table|td|th|title|tr|u|ul"
)
_ROLE = r"(?:\s*(?:assistant|model|user|system)\b)?"  # the role a template token opens
_MODEL_MARKUP = re.compile(
    rf"\A\s*(?-i:<think>).*?(?:</think>|\Z)|</?(?:{_HTML})(?:\s[^<>\n]*)?/?>|<</?SYS>>|\[/?INST\]"
    rf"|<\|start_header_id\|>[^<\n]*<\|end_header_id\|>|<\|im_start\|>{_ROLE}"
    rf"|<start_of_turn>{_ROLE}|<\|[^|<>\n]*\|>|<end_of_turn>",
    re.IGNORECASE | re.DOTALL,
)
_LEAD = re.compile(r"^(?:#{1,6}\s+|>\s*|[-*+•]\s+|\d{1,3}[.)]\s+)+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_WRAPPED = re.compile(r"(?<!\w)(_{1,2}|~~)(\S(?:.*?\S)?)\1(?!\w)")
_LABEL = re.compile(
    r"^(?:(?:session|conversation|chat|suggested|short)\s+)?title"
    r"(?:\s*[:=]\s*|\s+[-–—]\s+|\s+is\s*:?\s+)",
    re.IGNORECASE,
)
_QUOTES = "\"'“”‘’«»„‚` "
_TRAILING = ".,;:-–— "
_KEEP_FORMAT = {"\u200c", "\u200d"}  # joiners: parts of emoji and of some scripts' words
# The prompt's own lines, or the next heading of its pattern (a base model carries on
# "First request:" with "Second request:"): a model that answers with them did not answer.
_PROMPT_LINE = re.compile(
    r"(?:(?:first|second|third|next|last|another|start of the)\s+)?"
    r"(?:request|reply|response|answer|conversation|title)|no text",
    re.IGNORECASE,
)
_PROMPT_PHRASES = ("title of at most", "reply with the title only", "conversation that begins")


def _first_line(text: str) -> str:
    """The first line of ``text`` that still has a letter or digit once cleaned (each
    line cut to ``READ_CHARS`` first: a title never needs more, and the cleaning's
    patterns then cost the same whatever a pasted line's length)."""
    for raw in _ESCAPE.sub("", text).splitlines():
        if raw.strip().startswith("```"):  # a code fence names no conversation
            continue
        line = _clean(raw[:READ_CHARS])
        if any(ch.isalnum() for ch in line):
            return line
    return ""


def _clean(line: str) -> str:
    """One line as plain text: control and format characters dropped, whitespace
    collapsed, markdown, a ``Title:`` label and surrounding quotes removed."""
    kept = []
    for ch in line:
        if ch.isspace():
            kept.append(" ")
        elif unicodedata.category(ch) not in ("Cc", "Cf", "Cs") or ch in _KEEP_FORMAT:
            kept.append(ch)
    text = " ".join("".join(kept).split())
    text = _LINK.sub(r"\1", _LEAD.sub("", text))
    text = _WRAPPED.sub(r"\2", text.replace("*", "").replace("`", ""))
    text = _LABEL.sub("", text.strip(_QUOTES)).strip(_QUOTES)
    return " ".join(text.rstrip(_TRAILING).split())


def _echoes(line: str) -> bool:
    flat = line.lower()
    return bool(_PROMPT_LINE.fullmatch(flat)) or any(p in flat for p in _PROMPT_PHRASES)


def _cut(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` within ``limit`` characters, marked with an ellipsis when cut: a word
    the cut falls in is left out (unless that would leave less than half)."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if text[limit - 1] != " " and space >= limit // 2:
        head = head[:space]
    return head.rstrip(_TRAILING) + "…"
