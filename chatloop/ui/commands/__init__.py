"""The REPL's command table: each command's name, usage, help and handler in one row,
and the parsing of a submitted line against it.

``/help`` and the prompt's completion are built from ``TABLE``, so a command
cannot exist without its help line. Commands start with ``/``. A few bare
words also work when they are the whole line, because people type them that
way: ``exit``, ``quit``, ``bye``, ``sessions``, ``compact``, ``resume N``. An
unknown ``/x`` is never sent to the model: it becomes ``Unknown`` with the
closest command as a suggestion.

The handlers live by what they act on: ``this_session`` (``/info``, ``/context``,
``/rename``, the pins, ``/export``, ``/copy``, ``/file``), ``next_session`` (what the
chat goes on in: ``/compact``, ``/fork``, ``/retry``, ``/edit``, ``/new``, ``/model``,
``/agent``) and ``past_sessions`` (``/sessions``, ``/search``, ``/resume``); the
shell's own (``/help``, ``/exit``, ``/clear``) are here. Handlers only ask the
``ChatSession`` and show the answer; they raise ``ChatloopError`` for the REPL's one
error boundary to show.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from chatloop.ui.commands import next_session, past_sessions, this_session
from chatloop.ui.commands.shell import Handler, Shell

__all__ = [
    "TABLE",
    "USAGE_WIDTH",
    "Command",
    "Handler",
    "Parsed",
    "Shell",
    "Spec",
    "Text",
    "Unknown",
    "completions",
    "parse",
    "spec",
]


@dataclass(frozen=True)
class Spec:
    """One command: how it is typed, what ``/help`` says, and what runs."""

    name: str
    usage: str
    help: str
    run: Handler
    aliases: tuple[str, ...] = ()


# ------------------------------------------------------------------ the shell's own

USAGE_WIDTH = 18  # the command column of /help


def _help(shell: Shell, arg: str) -> None:
    from rich.table import Table
    from rich.text import Text

    # two columns: on a narrow terminal an explanation wraps in its own column, under
    # itself, never under the command names
    grid = Table.grid(padding=(0, 0, 0, 1))
    grid.add_column(no_wrap=True, min_width=USAGE_WIDTH + 2)
    grid.add_column()
    for spec in TABLE:
        grid.add_row(Text(f"  {spec.usage}"), Text(spec.help))
    shell.console.print(grid)
    keys = Table.grid(padding=(0, 0, 0, 2), pad_edge=True)
    keys.add_column()
    keys.add_row(
        Text("Enter sends · Esc+Enter or a trailing \\ adds a line · Up recalls earlier lines")
    )
    keys.add_row(
        Text("Ctrl-C stops a reply or clears the line · Ctrl-D leaves · // sends a literal /")
    )
    shell.console.print()
    shell.console.print(keys)


def _exit(shell: Shell, arg: str) -> None:
    shell.leave()


def _clear(shell: Shell, arg: str) -> None:
    shell.console.clear()


TABLE: tuple[Spec, ...] = (
    Spec("help", "/help", "show the commands and keys", _help),
    Spec(
        "exit",
        "/exit",
        "save, summarize and leave (also /quit, exit, quit, bye, Ctrl-D)",
        _exit,
        ("quit",),
    ),
    Spec(
        "compact",
        "/compact [TEXT]",
        "summarize (TEXT: what to keep), then continue in a new linked session",
        next_session.compact,
    ),
    Spec(
        "resume", "/resume [N|ID]", "continue a past session from its summary", past_sessions.resume
    ),
    Spec(
        "sessions",
        "/sessions",
        "list this project's sessions (1 = most recent; a chain is one line)",
        past_sessions.sessions,
    ),
    Spec(
        "search",
        "/search WORDS",
        "find this project's sessions holding every word "
        "(/resume takes the number or handle shown)",
        past_sessions.search,
    ),
    Spec("info", "/info", "this session: id, file, agent, model, tokens", this_session.info),
    Spec(
        "context",
        "/context",
        "exactly what the next call would send, with token counts",
        this_session.context,
    ),
    Spec("rename", "/rename TITLE", "give this session a title", this_session.rename),
    Spec("pin", "/pin TEXT", "keep a fact word for word in every later session", this_session.pin),
    Spec(
        "pins",
        "/pins",
        "list the pinned facts (and what the ledger could not carry)",
        this_session.pins,
    ),
    Spec("unpin", "/unpin N", "unpin fact N", this_session.unpin),
    Spec(
        "export",
        "/export [FILE]",
        "write this session as markdown (default: ./<id>.md), or as one HTML page: "
        "a FILE ending .html, or /export --format html [FILE]",
        this_session.export,
    ),
    Spec(
        "copy", "/copy", "copy the last reply to the clipboard (terminal OSC 52)", this_session.copy
    ),
    Spec(
        "fork",
        "/fork [N]",
        "branch after query N (default: the last): this session closes "
        "as it is; a linked new one carries the history up to there",
        next_session.fork,
    ),
    Spec(
        "retry",
        "/retry",
        "ask your last message again, in a branch (/fork) where the model "
        "has not seen its first answer; this session keeps it",
        next_session.retry,
    ),
    Spec(
        "edit",
        "/edit TEXT",
        "send TEXT instead of your last message, in a branch (/fork) after the message before it",
        next_session.edit,
    ),
    Spec(
        "file",
        "/file PATH [TEXT]",
        "send TEXT with the file's text attached (a path without spaces; as -f does)",
        this_session.file,
    ),
    Spec(
        "recall",
        "/recall WORDS",
        "list the earlier exchanges holding WORDS, this chain's first, then this project's "
        "(--all: every project's); /recall N [N...] brings those in with your next message",
        this_session.recall,
    ),
    Spec(
        "norecall",
        "/norecall TEXT",
        "send TEXT without what recall would bring back from the chain's earlier sessions",
        this_session.norecall,
    ),
    Spec(
        "model", "/model [NAME]", "list the server's models, or switch to NAME", next_session.model
    ),
    Spec(
        "agent",
        "/agent [NAME]",
        "list the agents, or go on with NAME (in a branch of this session, carrying its history)",
        next_session.agent,
    ),
    Spec(
        "new", "/new", "close this session with its summary and start a new one", next_session.new
    ),
    Spec(
        "clear",
        "/clear",
        "clear the screen only (the session goes on; /new starts another)",
        _clear,
    ),
)
_BY_NAME = {name: spec for spec in TABLE for name in (spec.name, *spec.aliases)}
_BARE = {
    "exit": "exit",
    "quit": "exit",
    "bye": "exit",
    "sessions": "sessions",
    "compact": "compact",
}
_BARE_RESUME = re.compile(r"^resume(?:\s+(\S+))?$", re.IGNORECASE)


# ------------------------------------------------------------------ parsing


@dataclass(frozen=True)
class Command:
    spec: Spec
    arg: str = ""

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class Unknown:
    typed: str
    suggestion: str | None


@dataclass(frozen=True)
class Text:
    """A message for the model."""

    text: str


Parsed = Command | Unknown | Text


def spec(name: str) -> Spec:
    """The row of command ``name`` (or one of its aliases)."""
    return _BY_NAME[name]


def parse(line: str) -> Parsed:
    """Classify one submitted line (which may span several lines)."""
    stripped = line.strip()
    if stripped.startswith("/") and not stripped.startswith("//"):
        word, _, arg = stripped[1:].partition(" ")
        found = _BY_NAME.get(word.lower())
        if found is None:
            close = difflib.get_close_matches(word.lower(), list(_BY_NAME), n=1, cutoff=0.5)
            return Unknown(word, f"/{close[0]}" if close else None)
        return Command(found, arg.strip())
    lowered = stripped.lower()
    if lowered in _BARE:
        return Command(_BY_NAME[_BARE[lowered]])
    match = _BARE_RESUME.match(stripped)
    if match and (
        match.group(1) is None or re.fullmatch(r"\d+|\d{8}-\d{6}-[0-9a-f]{8}", match.group(1))
    ):
        return Command(_BY_NAME["resume"], match.group(1) or "")
    return Text(line[1:] if stripped.startswith("//") else line)


def completions() -> list[str]:
    """Words the prompt offers to complete: every command and alias."""
    return [f"/{name}" for name in _BY_NAME]
