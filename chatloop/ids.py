"""Session ids and project names: generated, validated, never taken from titles.

A new id is ``YYYYMMDD-HHMMSS-xxxxxxxx`` (local time, then 8 random hex
digits), so ids sort by creation time and a file name is ``{id}.md``. Ids of
legacy files (``agent_YYYYMMDD_HHMMSS``) are accepted for reading only (their
handles are made of a digest of the id: ``tail_of``); a
lookup never turns user input into a path, it matches against files listed
from the sessions directory.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from chatloop.errors import UsageError

try:  # the builtin module: loading hashlib (OpenSSL) costs more than every other import here
    from _sha256 import sha256  # type: ignore[import-not-found]
except ImportError:  # an interpreter without it
    from hashlib import sha256

ID_RE = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{8}$")
LEGACY_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
HANDLE_RE = re.compile(r"^[0-9a-f]{4,8}$")
MIN_HANDLE = 4


def new_session_id(now: datetime) -> str:
    """A fresh, sortable session id for the moment ``now``."""
    return f"{now:%Y%m%d-%H%M%S}-{os.urandom(4).hex()}"


def is_session_id(text: str) -> bool:
    return bool(ID_RE.match(text))


def is_file_stem(text: str) -> bool:
    """True for a name that may be a session file stem (new or legacy id)."""
    return bool(ID_RE.match(text) or (LEGACY_ID_RE.match(text) and ".." not in text))


def validate_session_id(text: str, *, new: bool = False) -> str:
    """Return ``text`` if it is a valid id (``new``: of the generated form only);
    otherwise raise a UsageError."""
    if not (is_session_id(text) if new else is_file_stem(text)):
        raise UsageError(
            f"{text!r} is not a session id",
            "Session ids look like 20261121-143045-1a2b3c4d; `chatloop sessions` lists them.",
        )
    return text


def project_name(cwd: Path) -> str:
    """Directory name for a project: readable base name plus a hash of the full path."""
    resolved = str(cwd.resolve())
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(resolved).name).strip(".-")[:40] or "root"
    digest = sha256(resolved.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{base}-{digest}"


def handles(session_ids: Iterable[str], wanted: Iterable[str] | None = None) -> dict[str, str]:
    """A short, stable handle for each id (of ``wanted`` only, when given, each still
    unique among all of ``session_ids``), as git abbreviates commits (see
    ``handle_between``), made of its ``tail_of``."""
    tail = {i: t for i in session_ids if (t := tail_of(i)) is not None}
    tails = sorted(set(tail.values()))
    targets = list(tail) if wanted is None else [i for i in wanted if i in tail]
    out: dict[str, str] = {}
    for session in targets:
        tail_ = tail[session]
        n = bisect.bisect_left(tails, tail_)
        after = n + 1 if n < len(tails) and tails[n] == tail_ else n  # its neighbours
        before = tails[n - 1] if n else ""
        out[session] = handle_between(tail_, before, tails[after] if after < len(tails) else "")
    return out


def handle_between(tail: str, before: str, after: str) -> str:
    """The handle of the random part ``tail``, given its neighbours in sorted order
    among every other generated id's random part ("" for none): its shortest prefix
    (at least MIN_HANDLE characters) that neither neighbour starts with (so no other
    does), lengthened until it holds a letter, so it cannot be read as a session
    number (unless all eight are digits)."""
    shared = 0
    for other in (before, after):
        common = 0
        while common < len(other) and other[common] == tail[common]:
            common += 1
        shared = max(shared, common)
    size = max(MIN_HANDLE, shared + 1)
    while size < len(tail) and tail[:size].isdigit():
        size += 1
    return tail[:size]


def tail_of(session_id: str) -> str | None:
    """What a session's handle is made of: the random part of a generated id; for an
    id of another form (the seed project's ``Simple_Sally_20250614_101500``, which has
    no random part), eight hex digits of its SHA-256, as stable as the id; None for
    text that is no id."""
    if ID_RE.match(session_id):
        return session_id[-8:]
    if is_file_stem(session_id):
        digest: str = sha256(session_id.encode("utf-8", "surrogateescape")).hexdigest()
        return digest[:8]
    return None


SEED_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*_\d{8}_\d{6}$")


def is_seed_id(text: str) -> bool:
    """True for an id of the seed project's form (``AGENT_YYYYMMDD_HHMMSS``)."""
    return bool(SEED_ID_RE.match(text)) and ".." not in text


def is_handle(text: str) -> bool:
    """True for text shaped like a handle (4 to 8 lowercase hex digits)."""
    return bool(HANDLE_RE.match(text))
