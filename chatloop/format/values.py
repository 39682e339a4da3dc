"""The values a session file holds: frozen, comparable, no I/O.

``Session`` is the front matter (``SessionMeta``) plus the messages in file
order. ``Problem`` is something a reader noticed about a file; readers
report damage as problems and never raise for it.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import PurePath
from typing import Any, Literal, NamedTuple

Role = Literal["user", "assistant", "tool", "summary"]
ROLES: tuple[str, ...] = ("user", "assistant", "tool", "summary")
STATUSES: tuple[str, ...] = ("open", "closed", "interrupted")
FORMAT_VERSION = 2  # what chatloop writes; format 1 is read forever
_SEED_AGENT_STEMS = ("agent", "__init__", "main")  # the seed project's NAME/agent.py
FORMATS: tuple[int, ...] = (1, 2)

__all__ = [
    "FORMATS",
    "FORMAT_VERSION",
    "ROLES",
    "STATUSES",
    "Message",
    "ParseResult",
    "Problem",
    "Role",
    "Session",
    "SessionMeta",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "Totals",
    "Usage",
    "content_of",
    "empty_reply",
    "is_key",
    "new_key",
    "no_text",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for. ``arguments`` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str = "{}"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returned for the call with ``call_id``."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    # who let the call act, for a tool that asks first (MCP): "allow" (its policy),
    # "once" or "always" (the person's yes), "no" (refused); None for one that never asks
    approved: str | None = None


@dataclass(frozen=True, slots=True)
class Thinking:
    """Reasoning text the model streamed separately, with an optional signature."""

    text: str
    signature: str | None = None


class Usage(NamedTuple):
    """Token counts of one call; ``estimated`` when the server did not report them.
    (A named tuple, as ``Message``: one per reply read.)"""

    input: int = 0
    output: int = 0
    estimated: bool = False

    @property
    def total(self) -> int:
        return self.input + self.output


@dataclass(frozen=True, slots=True)
class Totals:
    """A session's counters, the one notion of "tokens" everywhere: the front matter's
    ``queries``/``tokens_in``/``tokens_out``/``restoration_tokens``, /info and the
    toolbar. Conversation tokens are the usage of the assistant's replies; the
    restoration prompt's acknowledgment is overhead, counted apart. ``last_call``
    is the latest reply's prompt plus output: how full the window was."""

    queries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    restoration: int = 0
    estimated: bool = False
    last_call: int = 0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def plus(self, m: Message) -> Totals:
        """These totals with ``m`` counted. A copy (``Message.copy``: what a fork or a
        child carries of earlier messages) counts nothing: its file of origin has."""
        usage = m.usage
        queries = self.queries + m.is_query
        if usage is None or m.copy:
            return replace(self, queries=queries) if m.is_query else self
        if m.restore:
            return replace(
                self,
                queries=queries,
                restoration=self.restoration + usage.total,
                last_call=usage.total,
            )
        if m.role != "assistant":
            return replace(self, queries=queries)
        return Totals(
            queries,
            self.tokens_in + usage.input,
            self.tokens_out + usage.output,
            self.restoration,
            self.estimated or usage.estimated,
            usage.total,
        )

    @classmethod
    def of(cls, messages: Iterable[Message]) -> Totals:
        totals = cls()
        for m in messages:
            totals = totals.plus(m)
        return totals

    def fields(self) -> dict[str, int]:
        """The front-matter keys these totals are written as."""
        return {
            "queries": self.queries,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "restoration_tokens": self.restoration,
        }


class Message(NamedTuple):
    """One framed record of a session.

    ``role`` is ``user``, ``assistant``, ``tool`` (results of tool calls) or
    ``summary`` (a progressive summary block). ``restore`` marks what a session
    brought in rather than said: the restoration prompt (user) and its
    acknowledgment (assistant), which are overhead, not queries, and the copies
    a fork carries. ``copy`` says such a message is a copy of one said earlier
    (a fork's, a retry's), never a restoration, whatever its text.
    ``interrupted`` marks a reply cut short (or a message whose exchange failed).
    ``unsent`` marks a message the person typed that could not be sent (too long for
    the context window, or the window full with compaction off): kept in the file,
    it is never a query, never counted and never part of the conversation sent.
    ``recalled`` marks what chatloop brought back from the chain's earlier files for
    the query just before it (``chatloop.chat.recall``): also ``restore`` (brought in,
    never said), sent only in front of that query (``context.with_recalled``), never
    summarized, never a source of the ledger.
    ``key`` is the frame key: use ``Message.create`` or ``new_key`` so that it does
    not occur in the content. ``message._replace(text=...)`` makes a changed copy.

    A named tuple, not a dataclass (as ``Frame`` and ``Plain``): a reader builds one
    per record, a tuple is built fastest, and the collector stops tracking a tuple
    whose items hold no containers (most messages: text, a time, flags), so a long
    session read into memory costs later collections nothing (parse of format 2:
    about 35 MB/s against 29-30 as a frozen dataclass, bench/RESULTS.md).
    """

    role: Role
    at: datetime
    key: str
    text: str = ""
    thinking: tuple[Thinking, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    model: str | None = None
    stop_reason: str | None = None
    usage: Usage | None = None
    duration: float | None = None
    interrupted: bool = False
    restore: bool = False
    fallback: bool = False
    copy: bool = False
    unsent: bool = False
    recalled: bool = False

    @classmethod
    def create(cls, role: Role, at: datetime, **fields: Any) -> Message:
        """Build a message with a fresh key that its content cannot contain."""
        draft = cls(role, at, "aaaaaaaa", **fields)
        return draft._replace(key=new_key(content_of(draft)))

    @property
    def is_query(self) -> bool:
        """True for a message the person typed and sent (not a restoration prompt)."""
        return self.role == "user" and not self.restore and not self.unsent


@dataclass(frozen=True, slots=True)
class SessionMeta:
    """The front matter. Keys a person adds are kept in ``extra``.

    ``format`` is the file's format version (new sessions are written in
    ``FORMAT_VERSION``). ``agent_name`` is the name the agent is found by
    (format 2); format 1 recorded ``agent_path`` instead. ``parent_file`` is
    as written: absolute in format 1, relative to the session's own folder in
    format 2 (``parent_path`` turns it into a path). ``summary_key`` and
    ``summary_at`` locate the summary frame that finalize wrote (its key, and
    its byte offset from the start of the body): content can never reach the
    front matter, so this is how a summary is known to be structure.
    """

    id: str
    created: datetime
    updated: datetime
    title: str = ""
    agent: str = ""
    agent_path: str = ""
    model: str = ""
    backend_url: str = ""
    cwd: str = ""
    git_branch: str | None = None
    parent_id: str | None = None
    parent_file: str | None = None
    status: str = "open"
    queries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    restoration_tokens: int = 0
    summary: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    format: int = FORMAT_VERSION
    agent_name: str = ""
    summary_key: str | None = None
    summary_at: int | None = None
    # the last messages the summary leaves out: the child that continued this session
    # carries them word for word (docs/chains.md); 0 when it covers every message
    summary_leaves: int = 0
    pins: tuple[str, ...] = ()  # facts the person pinned: carried into every later session
    system: str | None = None  # a system prompt given for this session (-s), not the agent's

    @property
    def agent_ref(self) -> str:
        """The name to look the agent up by: ``agent_name``, else the name of a format 1
        ``agent_path``: its stem, or its folder's name for the seed project's
        ``NAME/agent.py`` layout. Never a path: a session file names an agent, it never
        runs one."""
        if self.agent_name or not self.agent_path:
            return self.agent_name
        path = PurePath(self.agent_path)
        return (
            path.parent.name if path.stem in _SEED_AGENT_STEMS and path.parent.name else path.stem
        )

    def parent_path(self, own_path: PurePath) -> PurePath | None:
        """Where ``parent_file`` points, for a session stored at ``own_path``."""
        if not self.parent_file:
            return None
        link = PurePath(self.parent_file)
        return link if link.is_absolute() else own_path.parent / link


@dataclass(frozen=True, slots=True)
class Session:
    """A whole session: front matter plus its messages in file order."""

    meta: SessionMeta
    messages: tuple[Message, ...] = ()

    @property
    def summary(self) -> Message | None:
        """The last summary message in the file (whether anything follows it is the
        reader's question: see ``chatloop.format.summary.find_summary``)."""
        for message in reversed(self.messages):
            if message.role == "summary":
                return message
        return None

    @property
    def query_count(self) -> int:
        return sum(1 for m in self.messages if m.is_query)


@dataclass(frozen=True, slots=True)
class Problem:
    """Something a reader noticed. ``offset`` is a byte offset into the file.

    Kinds (docs/format.md explains each): ``torn_tail``, ``damaged``,
    ``checksum``, ``decoration``, ``front_matter``, ``unknown_key``,
    ``legacy``, ``crlf``, ``bom``, ``range``, ``naive_time``, ``repaired``.
    """

    kind: str
    offset: int
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} at byte {self.offset}: {self.detail}"


@dataclass(frozen=True, slots=True)
class ParseResult:
    """The session read from a file, what was wrong, and where the valid part ends.

    ``end`` is the file's length, or, when the last record is incomplete, the
    offset where that record's frame starts: everything before it is kept,
    everything from it on is the torn tail (see the ``torn_tail`` problem).
    ``exact`` is False when offsets do not map to the file's bytes one to one
    (a CRLF-converted file was read as LF): such a file is never cut.
    """

    session: Session
    problems: tuple[Problem, ...]
    end: int
    legacy: bool = False
    exact: bool = True

    @property
    def torn(self) -> bool:
        return any(p.kind == "torn_tail" for p in self.problems)


_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz234567")


def exchanges(messages: Iterable[Message]) -> Iterator[list[Message]]:
    """The exchanges of ``messages``, in order: each a message the person typed
    (``is_query``) and what followed it up to the next one. What comes before the first
    (a restoration prompt and its acknowledgment, the copies a fork or a child carries)
    belongs to none, nor does a summary, a message never sent (``unsent``) or what
    recall brought back (``recalled``: said in another exchange)."""
    current: list[Message] = []
    for message in messages:
        if message.is_query:
            if current:
                yield current
            current = [message]
        elif current and message.role != "summary" and not (message.unsent or message.recalled):
            current.append(message)
    if current:
        yield current


def is_key(text: str) -> bool:
    """True for a frame key: eight characters of lower-case base32."""
    return len(text) == 8 and _KEY_CHARS.issuperset(text)


def new_key(avoid: str = "") -> str:
    """A random frame key (8 base32 characters) that does not occur in ``avoid``."""
    while True:
        key = base64.b32encode(os.urandom(5)).decode("ascii").lower()
        if key not in avoid:
            return key


def content_of(message: Message) -> str:
    """Every string a frame carries, for choosing a key that avoids them all."""
    bits: list[str] = [message.text, message.model or "", message.stop_reason or ""]
    for t in message.thinking:
        bits += [t.text, t.signature or ""]
    for c in message.tool_calls:
        bits += [c.id, c.name, c.arguments]
    for r in message.tool_results:
        bits += [r.call_id, r.name, r.content]
    return "\x00".join(bits)


# What a reply with no text is said as, wherever it is shown (the chat, show, where a
# resumed session ended, a one-shot answer): the file holds only what happened.
_NO_REPLY = {
    "error": "(no reply: the request failed)",
    "cancelled": "(no reply: interrupted before any text arrived)",
}


def empty_reply(acknowledgment: bool, reason: str | None, thought: bool) -> str:
    """What to say of a reply that ended with no text and no tool call: ``reason`` is
    how its stream ended (``length``: the token limit), ``thought``: thinking came."""
    what = "acknowledgment" if acknowledgment else "reply"
    if reason == "length":
        return f"(no {what}: the model reached its token limit{' while thinking' * thought})"
    if thought:
        return f"(the model thought, then sent no {what})"
    return f"(the model sent an empty {what})"


def no_text(message: Message, copy: bool = False) -> str:
    """What to say of a reply with no text: why it was cut short (its tool calls, if
    any, never ran), else ``empty_reply``. ``copy``: a ``restore`` reply is a copy of
    an earlier reply (a fork carries them), not an acknowledgment."""
    if message.interrupted:
        return _NO_REPLY.get(message.stop_reason or "", "(no reply: interrupted)")
    return empty_reply(message.restore and not copy, message.stop_reason, bool(message.thinking))
