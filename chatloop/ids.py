"""Session ids and project names: generated, validated, never taken from titles.

A new id is ``YYYYMMDD-HHMMSS-xxxxxxxx`` (local time, then 8 random hex
digits), so ids sort by creation time and a file name is ``{id}.md``. Ids of
legacy files (``agent_YYYYMMDD_HHMMSS``) are accepted for reading only; a
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
    """A short, stable handle for each generated id (of ``wanted`` only, when given,
    each still unique among all of ``session_ids``), as git abbreviates commits (see
    ``handle_between``). Legacy ids get none."""
    generated = [i for i in session_ids if ID_RE.match(i)]
    tails = sorted({i[-8:] for i in generated})
    targets = generated if wanted is None else [i for i in wanted if ID_RE.match(i)]
    out: dict[str, str] = {}
    for session in targets:
        tail = session[-8:]
        n = bisect.bisect_left(tails, tail)
        after = n + 1 if n < len(tails) and tails[n] == tail else n  # its neighbours
        before = tails[n - 1] if n else ""
        out[session] = handle_between(tail, before, tails[after] if after < len(tails) else "")
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
    """The random part of a generated id (what handles are made of); None for a legacy id."""
    return session_id[-8:] if ID_RE.match(session_id) else None


def is_handle(text: str) -> bool:
    """True for text shaped like a handle (4 to 8 lowercase hex digits)."""
    return bool(HANDLE_RE.match(text))
