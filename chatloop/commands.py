"""Parse what the person typed: a command (``/compact``, ``resume 3``) or a message.

Commands start with ``/``. A few bare words also work when they are the
whole line, because people type them that way: ``exit``, ``quit``, ``bye``,
``sessions``, ``compact``, ``resume N``. An unknown ``/x`` is never sent to
the model: it becomes ``Unknown`` with the closest command as a suggestion.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Spec:
    """A command as ``/help`` shows it."""

    name: str
    usage: str
    help: str
    aliases: tuple[str, ...] = ()


SPECS: tuple[Spec, ...] = (
    Spec("help", "/help", "show the commands and keys"),
    Spec("exit", "/exit", "save, summarize and leave (also /quit, exit, quit, bye, Ctrl-D)",
         ("quit",)),
    Spec("compact", "/compact", "summarize, then continue in a new linked session"),
    Spec("resume", "/resume [N|ID]", "continue a past session from its summary"),
    Spec("sessions", "/sessions", "list this project's sessions (1 = most recent)"),
    Spec("info", "/info", "this session: id, file, agent, model, tokens"),
    Spec("context", "/context", "exactly what the next call would send, with token counts"),
    Spec("rename", "/rename TITLE", "give this session a title"),
    Spec("export", "/export [FILE]", "write this session as markdown (default: ./<id>.md)"),
    Spec("copy", "/copy", "copy the last reply to the clipboard (terminal OSC 52)"),
    Spec("clear", "/clear", "clear the screen (the session is kept)"),
)  # fmt: skip
_BY_NAME = {name: spec for spec in SPECS for name in (spec.name, *spec.aliases)}
_BARE = {"exit": "exit", "quit": "exit", "bye": "exit", "sessions": "sessions",
         "compact": "compact"}  # fmt: skip
_BARE_RESUME = re.compile(r"^resume(?:\s+(\S+))?$", re.IGNORECASE)


@dataclass(frozen=True)
class Command:
    name: str
    arg: str = ""


@dataclass(frozen=True)
class Unknown:
    typed: str
    suggestion: str | None


@dataclass(frozen=True)
class Text:
    """A message for the model."""

    text: str


Parsed = Command | Unknown | Text


def parse(line: str) -> Parsed:
    """Classify one submitted line (which may span several lines)."""
    stripped = line.strip()
    if stripped.startswith("/") and not stripped.startswith("//"):
        word, _, arg = stripped[1:].partition(" ")
        spec = _BY_NAME.get(word.lower())
        if spec is None:
            close = difflib.get_close_matches(word.lower(), list(_BY_NAME), n=1, cutoff=0.5)
            return Unknown(word, f"/{close[0]}" if close else None)
        return Command(spec.name, arg.strip())
    lowered = stripped.lower()
    if lowered in _BARE:
        return Command(_BARE[lowered])
    match = _BARE_RESUME.match(stripped)
    if match and (match.group(1) is None or re.fullmatch(r"\d+|\d{8}-\d{6}-[0-9a-f]{8}",
                                                          match.group(1))):  # fmt: skip
        return Command("resume", match.group(1) or "")
    return Text(line[1:] if stripped.startswith("//") else line)


def completions() -> list[str]:
    """Words the prompt offers to complete."""
    return [f"/{name}" for name in _BY_NAME]
