"""Recall: what a restoration left out, brought back from the chain's own files.

A continued session holds its parent's summary, the ledger, the pins and the last
exchanges; every other word of its chain is on disk. Before a query is sent in a
session that continues another, ``Recall.before`` looks up the chain's earlier
exchanges that match the query and brings back the best of those the session does not
hold already, within a budget. They are written into the file just after the query
(which is on disk first, as every query), as a message of their own marked
``recalled`` (``Message.recalled``, also ``restore``: brought in, never said), and sent
in front of the query's text in the same request (``context.with_recalled``).
docs/chains.md, "Recall", says it for people.

The rule, stated once here:

- **What can be recalled**: every exchange (a query and the replies that followed it;
  restorations, copies and summaries are none) of every ancestor of the session: the
  file it continues, that one's parent, and so on; of the file a fork branched from,
  only the queries up to where it branched (``forked_at``: the rest is another branch).
- **The lookup**: the exchanges are read once per chain, in a thread started when the
  session knows its chain (``Recall.follow``), into an in-memory SQLite FTS5 table with
  the search index's tokenizer, one row per exchange. A query's *distinctive* words are
  its words that are no common English word, of three characters or more (or holding a
  digit), held by at least one exchange and by at most a DISTINCT_SHARE of them (never
  fewer than DISTINCT_MIN): a query without one recalls nothing (a word every exchange
  holds finds nothing). With one, the exchanges holding any of the query's words that
  at most COMMON_SHARE of them hold are ranked by bm25, best first; of those not
  already held (below), one whose score is under RELEVANT_SHARE of the best one's is
  left (a word in passing is no match).
- **Statements only**: an exchange is found and brought back by what it states; a
  question (a sentence ending in "?") states nothing, as in the ledger, so a question
  asked before does not outrank the answer it asked about; and what the person stated
  weighs ASKED_WEIGHT times what the model replied (a small model's replies repeat
  the words they were asked with, right or wrong).
- **Not already held**: an exchange whose query the session holds (a carried copy keeps
  its key) is skipped; of the others, only the statements that hold a ranked word and
  that the session's messages do not already quote (a summary, the ledger or a pin
  may) are brought back, each cut at SENTENCE_CHARS; an exchange left with none is
  skipped. What was recalled for an earlier query is not held: it is not sent again.
- **The budget**: best first, each exchange with its provenance (the session's handle,
  the query's number and date), while the block fits ``budget`` tokens. The caller
  gives it: window // RECALL_SHARE, never more than the window has free beside the
  query and the reply's room (the restoration's share is not touched).

No model call, no file read at lookup (the files are read in the thread): a few
milliseconds at Enter (bench/figures/recall.py). What the files hold is data: it is
sent as text, one line per sentence run, and shown through the same views as any
message; it is never a path, markup or structure.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import threading
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from chatloop.chat.agent import Agent, tool_from_function
from chatloop.errors import ChatloopError
from chatloop.format import Message, exchanges
from chatloop.ids import tail_of
from chatloop.store.store import Store

__all__ = [
    "HEAD",
    "Exchange",
    "Memory",
    "Recall",
    "Recalled",
    "chain_exchanges",
    "exchanges_of",
    "recalled_message",
    "with_tool",
]

HEAD = (
    "Recalled by chatloop from earlier sessions of this conversation "
    "(quoted for reference, not said now):"
)
DISTINCT_SHARE = 0.1  # a word held by more of the chain's exchanges is not distinctive
DISTINCT_MIN = 3  # ...but a word held by this many is, however short the chain
COMMON_SHARE = 0.5  # a word held by more is not even ranked by
SENTENCE_CHARS = 300  # a recalled sentence is cut here
MAX_FOUND = 12  # exchanges ranked per lookup (the budget takes the best of them)
MAX_SHOWN = 10  # exchanges /recall lists from the chain, and from other sessions
ASKED_WEIGHT = 2.0  # what the person stated ranks this much above what the model replied
READ_WAIT = 2.0  # seconds a message waits for its chain to be read, then goes without
RELEVANT_SHARE = 0.5  # an exchange ranked below this share of the best one's is left
MAX_CHAIN = 10_000  # parent links followed at most (a loop guard)

# Words too common to find anything: the function words of English questions.
_COMMON_WORDS = """
a about above after again all also am an and any are as at be because been before
being below between both but by can could did do does doing done down during each
else ever few for from further get got had has have having he her here hers him his
how i if in into is it its itself just know let like me more most my no nor not now
of off on once one only or other our ours out over own please remember said same
say she should so some such tell than that the their theirs them then there these
they thing think this those through to too under until up us very was we were what
when where which while who whom why will with would yes yet you your yours
"""
COMMON = frozenset(_COMMON_WORDS.split())

_WORD = re.compile(r"[^\W_]+")  # as the index's unicode61 tokenizer splits words
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")


def fold(word: str) -> str:
    """A word as the index's tokenizer keeps it: lower case, Latin diacritics removed."""
    decomposed = unicodedata.normalize("NFKD", word.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def words(text: str) -> set[str]:
    """The folded words of ``text``."""
    return {fold(w) for w in _WORD.findall(text)}


def _candidates(text: str) -> set[str]:
    """The words of a query that may be distinctive: no common word, three characters
    or more, or holding a digit."""
    return {
        w for w in words(text) if w not in COMMON and (len(w) >= 3 or any(c.isdigit() for c in w))
    }


def _sentences(text: str) -> list[str]:
    """``text`` as sentences, each on one line (whitespace runs made one space)."""
    out: list[str] = []
    for line in text.splitlines():
        out += [" ".join(s.split()) for s in _SENTENCE.split(line) if s.strip()]
    return out


def statements(text: str) -> list[str]:
    """The sentences of ``text`` that may state something: a question (a sentence
    ending in "?") states nothing, as the ledger has it (``chat.ledger``)."""
    return [s for s in _sentences(text) if not s.rstrip("\"')]").endswith("?")]


def _cut(sentence: str) -> str:
    if len(sentence) <= SENTENCE_CHARS:
        return sentence
    return sentence[: SENTENCE_CHARS - 1].rsplit(" ", 1)[0] + "…"


def _held_form(text: str) -> str:
    """``text`` as compared for "already held": folded words, one space between."""
    return " ".join(fold(w) for w in _WORD.findall(text))


@dataclass(frozen=True, slots=True)
class Exchange:
    """One exchange that can be recalled: where it was said and its text."""

    session: str  # the id of the file it was said in
    number: int  # its query's number in that file (its "## Query N")
    at: datetime  # when the query was sent
    key: str  # the query's frame key (a carried copy keeps it)
    query: str
    replies: str  # the text of the replies that followed it, one after another

    @property
    def handle(self) -> str:
        """The session's handle as any command takes it (the random part of its id)."""
        return tail_of(self.session) or self.session


class Ranked(NamedTuple):
    """An exchange a lookup found, and its bm25 rank (negative: lower is better)."""

    exchange: Exchange
    rank: float


@dataclass(frozen=True, slots=True)
class Recalled:
    """What one lookup brought back: the excerpts, each with its exchange, and the text
    they are written and sent as (``text``: HEAD, then one line per exchange)."""

    items: tuple[tuple[Exchange, str], ...]

    @property
    def text(self) -> str:
        return "\n".join([HEAD, *(line for _, line in self.items)])

    def without_last(self) -> Recalled | None:
        """These excerpts but the last (the least relevant); None when none is left."""
        return Recalled(self.items[:-1]) if len(self.items) > 1 else None

    def notice(self, tokens: int) -> str:
        """The one line that tells the person what was recalled and from where."""
        places = ", ".join(f"{e.handle} #{e.number}" for e, _ in self.items[:4])
        more = f" and {len(self.items) - 4} more" if len(self.items) > 4 else ""
        count = len(self.items)
        return (
            f"Recalled {count} earlier exchange{'s' if count != 1 else ''} "
            f"(about {tokens:,} tokens) from session {places}{more}; /norecall skips it."
        )


def exchanges_of(session_id: str, messages: Iterable[Message]) -> list[Exchange]:
    """The exchanges of one file's ``messages`` (``format.exchanges``: each a query and
    what followed it), numbered as the file numbers its queries."""
    found = []
    for number, exchange in enumerate(exchanges(messages), 1):
        query = exchange[0]
        replies = " ".join(
            m.text for m in exchange[1:] if m.role == "assistant" and not m.restore and m.text
        )
        found.append(Exchange(session_id, number, query.at, query.key, query.text, replies))
    return found


def chain_exchanges(
    store: Store,
    first: Path,
    upto: int | None = None,
    known: dict[str, list[Exchange]] | None = None,
) -> list[Exchange]:
    """Every exchange of the file ``first`` (a session's parent) and of its ancestors,
    oldest first. ``upto``: the session branched from ``first`` after that query (a
    fork's ``forked_at``): later ones are another branch's. ``known``: the exchanges of
    files read before, by id (a chain's closed files do not change what was said; the
    dict is filled in). A file that cannot be read ends the walk."""
    known = {} if known is None else known
    found: list[list[Exchange]] = []
    seen: set[str] = set()
    link: Path | None = first
    while link is not None and len(seen) < MAX_CHAIN:
        try:
            session = store.read(link).session
        except (OSError, ChatloopError):
            break
        meta = session.meta
        if meta.id in seen:
            break
        seen.add(meta.id)
        if meta.id not in known:
            known[meta.id] = exchanges_of(meta.id, session.messages)
        own = known[meta.id]
        found.append(own if upto is None else own[:upto])
        forked = meta.extra.get("forked_at")
        upto = forked if isinstance(forked, int) and not isinstance(forked, bool) else None
        link = store.parent_of(link, meta)
    return [exchange for group in reversed(found) for exchange in group]


class Memory:
    """A chain's exchanges, looked up by the words of a query (bm25 over an in-memory
    FTS5 table, one row per exchange). Thread-safe: one lookup at a time."""

    def __init__(self, chain: Sequence[Exchange]) -> None:
        self.exchanges = tuple(chain)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE ex USING fts5(asked, answered, tokenize='unicode61')"
        )
        self._db.execute("CREATE VIRTUAL TABLE vocab USING fts5vocab(ex, 'row')")
        self._db.executemany(  # (what it states: a question asked again finds no question)
            "INSERT INTO ex(rowid, asked, answered) VALUES (?, ?, ?)",
            (
                (i, "\n".join(statements(e.query)), "\n".join(statements(e.replies)))
                for i, e in enumerate(self.exchanges)
            ),
        )

    def distinctive(self, text: str) -> set[str]:
        """The words of ``text`` a lookup ranks by: those no more than COMMON_SHARE of
        the chain's exchanges hold; none unless one of them is *distinctive* (held by at
        most DISTINCT_SHARE of them, or DISTINCT_MIN)."""
        wanted = sorted(_candidates(text))
        if not wanted or not self.exchanges:
            return set()
        count = len(self.exchanges)
        marks = ",".join("?" * len(wanted))
        with self._lock:
            rows = self._db.execute(
                f"SELECT term, doc FROM vocab WHERE term IN ({marks})", wanted
            ).fetchall()
        if not any(doc <= max(DISTINCT_MIN, int(count * DISTINCT_SHARE)) for _, doc in rows):
            return set()
        return {term for term, doc in rows if doc <= max(DISTINCT_MIN, count * COMMON_SHARE)}

    def searched(self, text: str) -> set[str]:
        """The words of ``text`` that are no common word and that some exchange holds."""
        wanted = sorted(_candidates(text))
        if not wanted:
            return set()
        marks = ",".join("?" * len(wanted))
        with self._lock:
            rows = self._db.execute(f"SELECT term FROM vocab WHERE term IN ({marks})", wanted)
            return {term for (term,) in rows.fetchall()}

    def find(
        self, text: str, limit: int = MAX_FOUND, asked: bool = False
    ) -> tuple[list[Ranked], set[str]]:
        """The exchanges that hold a distinctive word of ``text``, best first (bm25:
        lower is better), at most ``limit``, and those words. ``asked``: the person looks
        them up (``/recall WORDS``): every word of ``text`` that is no common word is
        looked up, distinctive or not."""
        terms = self.searched(text) if asked else self.distinctive(text)
        if not terms:
            return [], terms
        match = " OR ".join(f'"{term}"' for term in sorted(terms))
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid, bm25(ex, ?, 1.0) AS score FROM ex WHERE ex MATCH ? "
                "ORDER BY score LIMIT ?",
                (ASKED_WEIGHT, match, limit),
            ).fetchall()
        return [Ranked(self.exchanges[row], rank) for row, rank in rows], terms


def excerpt(exchange: Exchange, terms: set[str], held: str, elsewhere: bool = False) -> str | None:
    """The line ``exchange`` is recalled as: its provenance, then the statements of its
    query and replies that hold one of ``terms`` and that ``held`` (the session's
    messages, in ``_held_form``) does not quote (a query that states none is given by its
    first sentence); None when no such statement is left. ``elsewhere``: the exchange is
    not of this chain (``/recall`` found it in another session), and says so."""

    def kept(text: str) -> list[str]:
        return [_cut(s) for s in statements(text) if words(s) & terms and _held_form(s) not in held]

    asked, answered = kept(exchange.query), kept(exchange.replies)
    if not asked and not answered:
        return None
    when = exchange.at.date().isoformat()
    session = "another session" if elsewhere else "session"
    line = f"- ({session} {exchange.handle}, query {exchange.number}, {when}) User:"
    first = _sentences(exchange.query)[:1] or [""]
    line += f" {' '.join(asked)}" if asked else f" {_cut(first[0])}"
    if answered:
        line += f" | Assistant: {' '.join(answered)}"
    return line


def choose(
    found: Sequence[Ranked],
    terms: set[str],
    held: Sequence[Message],
    budget: int,
    cost: Callable[[str], int],
    picked: Sequence[tuple[Exchange, str]] = (),
) -> Recalled | None:
    """The excerpts of ``found`` (best first) that fit ``budget`` tokens with HEAD, as
    ``cost`` counts them, leaving out what ``held`` (the session's messages) holds; what
    was recalled for an earlier query is not held (it is not sent again). Of what is
    left, one ranked under RELEVANT_SHARE of the best one's is no match. ``picked``
    (what the person chose with ``/recall``, as lines) go first, as they are."""
    held = [m for m in held if not m.recalled]
    keys = {m.key for m in held}
    said = " ".join(_held_form(m.text) for m in held if m.text)
    spent = cost(HEAD)
    items: list[tuple[Exchange, str]] = []
    for exchange, chosen in picked:
        if spent + cost(chosen) <= budget:
            items.append((exchange, chosen))
            spent += cost(chosen)
            keys.add(exchange.key)
    best: float | None = None
    for exchange, rank in found:
        if exchange.key in keys or (best is not None and rank > best * RELEVANT_SHARE):
            continue
        line = excerpt(exchange, terms, said)
        if line is None:
            continue
        best = rank if best is None else best
        price = cost(line)
        if spent + price > budget:
            continue  # a shorter one further down may fit
        items.append((exchange, line))
        spent += price
    return Recalled(tuple(items)) if items else None


def recalled_message(recalled: Recalled, at: datetime) -> Message:
    """The message ``recalled`` is written as, just after the query it serves."""
    return Message.create("user", at, text=recalled.text, restore=True, recalled=True)


class Recall:
    """One chat's recall: the memory of the chain it continues, built in a thread.

    ``follow`` is told the chain whenever the session's parent changes (a compaction,
    a resume, a fork); ``before`` looks up a query in it. The exchanges of files read
    once are kept (a chain grows by one file at a compaction, and only that one is
    read then)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._known: dict[str, list[Exchange]] = {}
        self._first: tuple[Path, int | None] | None = None
        self._memory: Memory | None = None
        self._ready = threading.Event()
        self._ready.set()
        self._guard = threading.Lock()
        self._shown: tuple[tuple[Exchange, str], ...] = ()  # what /recall listed last
        self._picked: tuple[tuple[Exchange, str], ...] = ()  # to go with the next message
        self._failure: str | None = None  # why the chain could not be read (told once)

    def follow(self, first: Path | None, upto: int | None = None) -> None:
        """Recall from the chain whose latest earlier file is ``first`` (None: the
        session continues none), of which the session carries queries up to ``upto``
        when it is a fork. The chain is read in a thread of its own."""
        wanted = None if first is None else (first, upto)
        with self._guard:
            if wanted == self._first:
                return
            self._first, self._memory = wanted, None
            if wanted is None:
                return
            ready = self._ready = threading.Event()
        threading.Thread(
            target=self._read, args=(wanted, ready), name="chatloop-recall", daemon=True
        ).start()

    def _read(self, wanted: tuple[Path, int | None], ready: threading.Event) -> None:
        memory, failure = Memory(()), None
        try:
            memory = Memory(chain_exchanges(self._store, wanted[0], wanted[1], self._known))
        except Exception as exc:  # (an aid: a chain it cannot read recalls nothing, and says so)
            failure = f"{type(exc).__name__}: {exc}"
        finally:
            with self._guard:
                if self._first == wanted:
                    self._memory, self._failure = memory, failure
            ready.set()  # (whatever happened: a lookup never waits for a thread that died)

    def failure(self) -> str | None:
        """Why the chain could not be read, once (then None): the person is told."""
        with self._guard:
            said, self._failure = self._failure, None
        return said

    def memory(self, wait: float | None = None) -> Memory | None:
        """The chain's memory once read (waiting up to ``wait`` seconds; None: until
        it is); None when the session continues no chain, or it is not read yet."""
        with self._guard:
            ready = self._ready
        ready.wait(wait)
        with self._guard:
            return self._memory

    def before(
        self,
        text: str,
        held: Sequence[Message],
        budget: int,
        cost: Callable[[str], int],
        automatic: bool = True,
    ) -> Recalled | None:
        """What to bring back in front of the query ``text``: what the person picked
        (``pick``: taken, whatever fits), then (``automatic``) the chain's exchanges that
        match it and that ``held`` (the session's messages, as sent) does not hold, within
        ``budget`` tokens as ``cost`` counts them. None when nothing is."""
        picked, self._picked = self._picked, ()
        if budget <= cost(HEAD):
            return None
        memory = self.memory(READ_WAIT) if automatic else None
        found, terms = memory.find(text) if memory is not None else ([], set())
        return choose(found, terms, held, budget, cost, picked)

    def lookup(self, text: str) -> list[str]:
        """The lines of this chain's exchanges that hold a word of ``text`` (no common
        word), best first: the ``recall`` tool's answer (``with_tool``)."""
        memory = self.memory()
        if memory is None:
            return []
        found, terms = memory.find(text, MAX_SHOWN, asked=True)
        return [line for e, _ in found if (line := excerpt(e, terms, "")) is not None]

    def search(self, text: str, elsewhere: Sequence[Path]) -> list[tuple[Exchange, str]]:
        """``/recall WORDS``: the exchanges that hold a word of ``text`` (no common
        word), this chain's first, best first, then those of the sessions at
        ``elsewhere`` (found by the index; this chain's files are left out), each as the
        line it would be recalled as. They are kept, numbered from 1, for ``pick``."""
        memory = self.memory()
        shown: list[tuple[Exchange, str]] = []
        mine: set[str] = set()
        if memory is not None:
            mine = {e.session for e in memory.exchanges}
            found, terms = memory.find(text, MAX_SHOWN, asked=True)
            shown += [(e, line) for e, _ in found if (line := excerpt(e, terms, "")) is not None]
        others: list[Exchange] = []
        for path in elsewhere:
            try:
                session = self._store.read(path).session
            except (OSError, ChatloopError):
                continue
            if session.meta.id not in mine:
                others += exchanges_of(session.meta.id, session.messages)
        if others:
            found, terms = Memory(others).find(text, MAX_SHOWN, asked=True)
            shown += [
                (e, line) for e, _ in found if (line := excerpt(e, terms, "", True)) is not None
            ]
        with self._guard:
            self._shown = tuple(shown)
        return shown

    def pick(self, numbers: Sequence[int]) -> list[tuple[Exchange, str]]:
        """Bring in the exchanges of the last ``search`` numbered ``numbers`` with the
        next message (``before`` takes them). Raises ChatloopError for a number it did
        not show."""
        with self._guard:
            shown = self._shown
        wrong = [n for n in numbers if not 1 <= n <= len(shown)]
        if not shown or wrong:
            raise ChatloopError(
                f"There is no recalled exchange number {wrong[0] if wrong else numbers[0]}",
                f"/recall WORDS lists them first ({len(shown)} shown by the last one).",
            )
        picked = [shown[n - 1] for n in dict.fromkeys(numbers)]
        self._picked = (*self._picked, *picked)
        return picked

    @property
    def following(self) -> bool:
        """Whether a chain is followed (the session continues another)."""
        with self._guard:
            return self._first is not None

    @property
    def picked(self) -> int:
        """How many exchanges wait to go with the next message."""
        return len(self._picked)


TOOL_NAME = "recall"
NOTHING = "No earlier exchange of this conversation holds those words."


def with_tool(agent: Agent, recalls: Recall) -> Agent:
    """``agent`` with the read-only ``recall`` tool (``Recall.lookup``, this chain's
    exchanges) when it calls tools (it has some) and none of its own has that name; as
    it is otherwise. The tool acts without asking: it reads the chain's own files."""
    if not agent.tools or any(tool.name == TOOL_NAME for tool in agent.tools):
        return agent

    def recall(query: str) -> str:
        """Look up what was said earlier in this conversation, in its sessions before it
        was compacted or resumed, that the context no longer holds; returns the matching
        exchanges quoted with where they were said.

        Args:
            query: the words to look for: an id, a name, a path, a number, a topic
        """
        lines = recalls.lookup(query)
        return "\n".join([HEAD, *lines]) if lines else NOTHING

    return dataclasses.replace(agent, tools=(*agent.tools, tool_from_function(recall)))
