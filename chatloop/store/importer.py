"""Bringing sessions in from elsewhere: the seed project's ``.chat-sessions/`` folders
(its legacy bold-key markdown) and chatloop files from another home or machine.

Files are *copied* into a project folder byte for byte, never moved or
modified (chatloop reads the legacy format as it is, and its ``Resumed From``
line is the parent link, so a chain stays a chain when its files come
together). A session keeps its id, which names its file; so a second import of
the same files finds them there and imports nothing, and a different file with
an id already present is reported as a duplicate, never written over.

Each copy is written to a temp file in the target folder, fsynced, then linked
into place, so a killed import leaves a whole copy or none (and its temp file,
removed by the next import). A copy whose bytes are a strict prefix of the
source (what an import before this rule left when it was killed) is
"repaired": replaced atomically by the whole file, not called a duplicate.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from chatloop.errors import StoreError
from chatloop.format import parse_markdown
from chatloop.ids import is_file_stem
from chatloop.store.fsio import (
    atomic_rewrite,
    create_atomically,
    ensure_dir,
    is_locked,
    read_bytes,
    remove_dead_temps,
)
from chatloop.store.store import PROJECTS, Store

MAX_IMPORT_BYTES = 256 << 20  # a larger file is not read into memory to be checked
NO_SUCH_PATH = "no such file or folder"
SEED_FOLDER = ".chat-sessions"  # where the seed project keeps a directory's sessions

Status = Literal["imported", "repaired", "present", "skipped"]


@dataclass(frozen=True)
class Outcome:
    """What became of one file: imported, repaired (a truncated copy under its name
    made whole), already present (identical), or skipped (``reason``: not a session,
    damaged, a duplicate id, unreadable)."""

    source: Path
    status: Status
    reason: str = ""
    session_id: str = ""
    project: str = ""  # the project folder it went (or would go) into


def candidates(paths: Sequence[Path]) -> Iterator[Path | tuple[Path, str]]:
    """The files to look at: each named file, and the ``*.md`` files under each named
    folder (symbolic links are not followed); a path that is neither, with why."""
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            for folder, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    if name.endswith(".md"):
                        yield Path(folder) / name
        elif path.is_file():
            yield path
        elif path.is_symlink() and path.exists():
            yield path, "a symbolic link to a folder (not followed: name the folder itself)"
        else:
            yield path, NO_SUCH_PATH


def import_sessions(
    store: Store, paths: Sequence[Path], write: bool = True, keep_projects: bool = False
) -> list[Outcome]:
    """Copy the sessions found under ``paths`` into ``store``'s project folder; one
    ``Outcome`` per file looked at, in order. Raises StoreError only when a project
    folder itself cannot be written. ``write=False`` copies nothing: the outcomes say
    what an import would do now (``chatloop doctor`` asks). ``keep_projects``: when
    a path named is another chatloop home, each file of one of its projects
    (``HOME/projects/NAME-1a2b3c4d/ID.md``) goes into the project of the same name
    here (``Outcome.project``), so the home's projects stay apart."""
    outcomes: list[Outcome] = []
    taken: dict[tuple[Path, str], Path] = {}
    cleaned: set[Path] = set()
    for named, found in ((p, f) for p in paths for f in candidates([p])):
        if isinstance(found, tuple):
            outcomes.append(Outcome(found[0], "skipped", found[1]))
            continue
        project = (home_project(named, found) if keep_projects else None) or store.project
        target_dir = store.root / PROJECTS / project
        if write and target_dir not in cleaned:
            remove_dead_temps(target_dir)  # what a killed import left, whatever comes now
            cleaned.add(target_dir)
        outcome, data = _one(target_dir, found, taken)
        outcome = replace(outcome, project=project)
        if outcome.status in ("imported", "repaired") and write:
            target = target_dir / f"{outcome.session_id}.md"
            if not target_dir.exists():
                ensure_dir(target_dir)
            if outcome.status == "imported":
                outcome = _create(target_dir, found, data, taken, outcome)
            else:
                atomic_rewrite(target, data)
        if outcome.session_id and outcome.status != "skipped":
            taken[(target_dir, outcome.session_id)] = found
        outcomes.append(outcome)
    return outcomes


_PROJECT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,39}-[0-9a-f]{8}\Z")  # ids.project_name


def home_project(named: Path, path: Path) -> str | None:
    """The project ``path`` belongs to when ``named`` (a path given to import) is a
    chatloop home and ``path`` is one of its projects' files: NAME in
    ``named/projects/NAME/ID.md``, a name as chatloop makes them (base name, then
    eight hex digits); None otherwise (a folder that is only called "projects")."""
    folder = path.parent
    if folder.parent != named / PROJECTS or not _PROJECT_NAME.match(folder.name):
        return None
    return folder.name


def _one(
    target_dir: Path, path: Path, taken: dict[tuple[Path, str], Path]
) -> tuple[Outcome, bytes]:
    """What to do with one file, and its bytes (nothing is written here)."""
    try:
        if path.stat().st_size > MAX_IMPORT_BYTES:
            return Outcome(path, "skipped", f"larger than {MAX_IMPORT_BYTES >> 20} MB"), b""
        data = read_bytes(path)
    except (OSError, StoreError) as exc:
        return Outcome(path, "skipped", f"cannot be read: {getattr(exc, 'message', exc)}"), b""
    return _decide(target_dir, path, data, taken), data


def _decide(
    target_dir: Path, path: Path, data: bytes, taken: dict[tuple[Path, str], Path]
) -> Outcome:
    """What to do with one file's bytes, going into ``target_dir``."""
    result = parse_markdown(data, path.stem)
    session = result.session
    session_id = session.meta.id
    if not session_id:  # neither chatloop's front matter nor the seed project's header
        return Outcome(path, "skipped", "not a session file")
    if not session.messages:
        kinds = ", ".join(sorted({p.kind for p in result.problems})) or "no messages"
        return Outcome(path, "skipped", f"damaged: no message could be read ({kinds})", session_id)
    if not is_file_stem(session_id):
        return Outcome(path, "skipped", f"its id {session_id!r} cannot name a file")
    if (target_dir, session_id) in taken:
        return Outcome(
            path,
            "skipped",
            f"duplicate: {taken[(target_dir, session_id)]} has the same id",
            session_id,
        )
    target = target_dir / f"{session_id}.md"
    if target.exists() or target.is_symlink():
        try:
            there: bytes | None = read_bytes(target)
        except StoreError:
            there = None  # a symlink or no regular file: never written over
        if there == data:
            return Outcome(path, "present", "", session_id)
        if there is not None and _truncated_copy(there, data) and not is_locked(target):
            return Outcome(path, "repaired", "", session_id)
        return Outcome(
            path,
            "skipped",
            f"duplicate: a different session {session_id} is already in this project",
            session_id,
        )
    return Outcome(path, "imported", "", session_id)


def _create(
    target_dir: Path,
    path: Path,
    data: bytes,
    taken: dict[tuple[Path, str], Path],
    outcome: Outcome,
) -> Outcome:
    """Write the copy ``outcome`` decided on (``imported``) and say what became of it.
    An import running beside this one may have put the session there since it was
    decided (both were started on the same files): the file then decides again,
    so the same copy is ``present``, another session a duplicate, never an error."""
    target = target_dir / f"{outcome.session_id}.md"
    try:
        create_atomically(target, data)
    except StoreError as exc:
        if not isinstance(exc.__cause__, FileExistsError):
            raise
        again = _decide(target_dir, path, data, taken)
        if again.status == "imported":  # (gone again meanwhile: say what failed)
            raise
        return replace(again, project=outcome.project)
    return outcome


def _truncated_copy(there: bytes, data: bytes) -> bool:
    """True when ``there`` (the file under the session's name) is a strict prefix of
    ``data``: a copy an earlier import was killed writing, never a session of its own
    (a session written since would have bytes the source lacks)."""
    return len(there) < len(data) and data.startswith(there)
