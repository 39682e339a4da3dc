"""The exception tree. Every error a person can see is a ChatloopError.

    ChatloopError(message, hint)
    ├── UsageError          bad input from the person (exit code 2)
    ├── StoreError          a session file could not be created or written
    │   └── SessionLocked   another chatloop holds the session
    ├── NotFound            no session matches a number or id
    ├── Unapproved          an agent file the person has not allowed to run (chat.trust)
    ├── BackendError        the model server failed
    │   ├── Unreachable         nothing listens where the server should be
    │   ├── ContextOverflow     the prompt does not fit the window (chatloop.backends)
    │   └── StreamInterrupted   the stream broke off (chatloop.backends)
    └── Cancelled           a generation stopped on purpose, not a failure
                            (chatloop.backends: Ctrl-C, a time bound, a reader gone)

A session file that cannot be read is never an error: the format reads what it
can and reports each flaw as a ``Problem`` value.

Foreign exceptions are translated at the boundary with ``raise X(...) from exc``;
the CLI and the REPL show ``message`` and ``hint`` in one place.
"""

from __future__ import annotations


class ChatloopError(Exception):
    """An error meant for a person: a one-line message and a hint on what to do."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(ChatloopError):
    """The command line or a command was used wrongly."""

    exit_code = 2


class StoreError(ChatloopError):
    """A session file could not be created, locked or written."""


class SessionLocked(StoreError):
    """Another live chatloop process is writing this session."""


class NotFound(ChatloopError):
    """No session matches the number or id that was asked for."""


class Unapproved(ChatloopError):
    """An agent file the person has not said may run: refused, or no one to ask
    (``chatloop.chat.trust``). Here, not there, so that a new chat's first prompt can
    catch it without loading the chat package. ``typed``: what the person had typed at
    that prompt meanwhile, ``sent`` when they had pressed Enter on it (the chat that
    starts after the question takes it up: ``chatloop.ui.start.start_new_chat``)."""

    typed: str = ""
    sent: bool = False


class BackendError(ChatloopError):
    """The model server could not be reached or answered with an error."""


class Unreachable(BackendError):
    """No connection to the model server could be made (nothing listens there)."""
