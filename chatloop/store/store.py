"""Where sessions live and how they are found, created, opened and recovered.

Sessions sit under ``root/projects/<project>/{id}.md``, one directory per
working directory (``chatloop.ids.project_name``). The durability rules are
in ``chatloop.store.fsio`` (primitives) and ``chatloop.store.writer`` (the open
writer); docs/durability.md explains them. Nothing here deletes a session.
"""

from __future__ import annotations

import marshal
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from chatloop import ids
from chatloop.errors import ChatloopError, NotFound, SessionLocked, StoreError
from chatloop.store.fsio import (
    atomic_rewrite,
    create_atomically,
    ensure_dir,
    is_locked,
    left_temps,
    local_now,
    lock_path,
    open_read,
    read_bytes,
    take_lock,
    temp_files,
    write_new_file,
)

if TYPE_CHECKING:  # the format (and YAML) load when a file is read or written, so a
    # listing from a fresh index never imports a parser
    from chatloop.format import Message, ParseResult, Problem, SessionMeta, SummaryLookup
    from chatloop.store.writer import SessionWriter

Clock = Callable[[], datetime]
LAST_EXCHANGE_BYTES = 8 << 20  # the last exchange is shown on resume for files up to 8 MiB
PROJECTS = "projects"

__all__ = ["PROJECTS", "FolderLook", "Store"]


class FolderLook(NamedTuple):
    """A project folder as one look saw it: ``name`` (the project), every ``*.md``
    entry with its stat, and ``mark``: the folder's path and the entries' names,
    types, sizes, modification and change times in one value. Two looks at a
    folder have the same mark unless an entry was added, removed, renamed, written
    or had its mode changed between them (as far as the file system's clock
    tells), so a reader that has seen the mark before knows, without comparing
    file by file, that nothing changed."""

    name: str
    entries: list[tuple[str, str, os.stat_result]]  # (path, name, stat)
    mark: bytes


class Store:
    """Sessions under ``root/projects/<project>/``, one directory per working directory."""

    def __init__(self, root: Path, *, cwd: Path | None = None, clock: Clock = local_now) -> None:
        self.root = root
        self.clock = clock
        self.cwd = (cwd or Path.cwd()).resolve()
        self.project = ids.project_name(self.cwd)

    @property
    def project_dir(self) -> Path:
        return self.root / PROJECTS / self.project

    def project_dirs(self, all_projects: bool = False) -> list[Path]:
        """The current project's directory, or every project's. A project directory that
        is a symbolic link is never one (``create`` refuses to write through it, so
        nothing is ever written where it would not be listed)."""
        if not all_projects:
            return [] if self.project_dir.is_symlink() else [self.project_dir]
        base = self.root / PROJECTS
        if not base.is_dir():
            return []
        return sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink())

    def session_files(self, all_projects: bool = False) -> Iterator[os.DirEntry[str]]:
        """Every ``{id}.md`` file (never lock, temp or corrupt files), with its stat."""
        for entry in self._markdown_entries(all_projects):
            if ids.is_file_stem(entry.name[:-3]) and entry.is_file(follow_symlinks=False):
                yield entry

    def look(self, all_projects: bool = False) -> list[FolderLook]:
        """The project folders as they are now: each ``*.md`` entry with its stat (one
        ``fstatat`` a file, by name in the open folder, as ``ls -l`` does: a stat by
        full path resolves every folder above it again), and the folder's ``mark``."""
        looks: list[FolderLook] = []
        stat_at = os.stat
        for directory in self.project_dirs(all_projects):
            try:
                fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except FileNotFoundError:  # removed meanwhile: it is gone
                continue
            entries: list[tuple[str, str, os.stat_result]] = []
            seen: list[tuple[str, int, int, int, int]] = []
            prefix = f"{directory}{os.sep}"
            try:
                for name in os.listdir(fd):
                    if name.endswith(".md"):
                        try:
                            st = stat_at(name, dir_fd=fd, follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        entries.append((prefix + name, name, st))
                        seen.append((name, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
            finally:
                os.close(fd)
            mark = marshal.dumps((str(directory), seen), 2)  # (the rows hold full paths)
            looks.append(FolderLook(directory.name, entries, mark))
        return looks

    @staticmethod
    def session_stats(
        looks: list[FolderLook],
        known: Mapping[str, tuple[int, int]] | None = None,
    ) -> dict[str, os.stat_result]:
        """The stat of every file ``session_files`` lists in ``looks``, by path (a
        regular file listed in ``known`` with that same size and mtime is taken as
        the session file it was when it was listed, without checking its name again)."""
        known = known or {}
        out: dict[str, os.stat_result] = {}
        for look in looks:
            for path, name, st in look.entries:
                if stat.S_ISREG(st.st_mode) and (
                    known.get(path) == (st.st_size, st.st_mtime_ns) or ids.is_file_stem(name[:-3])
                ):
                    out[path] = st
        return out

    def _markdown_entries(self, all_projects: bool) -> Iterator[os.DirEntry[str]]:
        """The ``*.md`` entries of the project folders (a folder gone meanwhile: none)."""
        for directory in self.project_dirs(all_projects):
            try:
                entries = list(os.scandir(directory))
            except FileNotFoundError:
                continue
            yield from (entry for entry in entries if entry.name.endswith(".md"))

    def path_for(self, session_id: str, folder: Path | None = None) -> Path:
        """Where a new session with this id lives, in ``folder`` (by default this
        directory's project); the id is validated first."""
        return (folder or self.project_dir) / f"{ids.validate_session_id(session_id)}.md"

    def find_file(self, session_id: str, all_projects: bool = True) -> Path:
        """The file of an existing session, matched against listed files only."""
        ids.validate_session_id(session_id)
        for entry in self.session_files(all_projects):
            if entry.name == f"{session_id}.md":
                return Path(entry.path)
        raise NotFound(f"No session with id {session_id}", "`chatloop sessions --all` lists them.")

    def read(self, path: Path) -> ParseResult:
        """Parse a whole session file in memory, without changing it."""
        from chatloop.format import parse_markdown

        return parse_markdown(read_bytes(path), path.stem)

    def reseal(self, path: Path) -> tuple[int, Path | None, tuple[Problem, ...]]:
        """Accept a person's hand edits to a session nobody is writing: the frames they
        changed get new checksums (``chatloop.format.reseal``). The original is kept
        beside it as ``{id}.md.orig`` (0600) first, then the file is replaced
        atomically. Returns how many frames were resealed, where the original is
        (None when nothing needed it), and the damage left as it is: frames that
        could not be read, and what is wrong with the front matter."""
        from chatloop.store.recovery import remove_strays

        lock_fd = take_lock(path)
        try:
            remove_strays(path)  # what a killed reseal left
            data = read_bytes(path)
            try:
                from chatloop.format import reseal

                new, changed, left = reseal(data, path.stem)
            except ValueError as exc:
                raise StoreError(f"Cannot reseal {path.name}: {exc}", "") from exc
            if new == data:
                return 0, None, left
            keep = path.with_name(path.name + ".orig")
            if keep.exists() or keep.is_symlink():
                stamp = self.clock().strftime("%Y%m%dT%H%M%S")
                keep = path.with_name(f"{path.name}.orig-{stamp}")
            write_new_file(keep, data)
            atomic_rewrite(path, new)
            return changed, keep, left
        finally:
            os.close(lock_fd)

    def add_legacy_summary(self, path: Path, text: str) -> None:
        """Write ``text`` as the summary of the legacy-format copy at ``path`` (one this
        home holds: ``chatloop import`` made it; the original is never touched), in the
        seed's own markers (``chatloop.format.legacy.with_summary``), atomically and
        under the session's lock. Raises StoreError when it cannot: locked, gone,
        already summarized, not a legacy file."""
        from chatloop.format.legacy import with_summary

        lock_fd = take_lock(path)
        try:
            try:
                new = with_summary(read_bytes(path), text)
            except ValueError as exc:
                raise StoreError(f"Cannot add a summary to {path.name}: {exc}", "") from exc
            atomic_rewrite(path, new)
        finally:
            os.close(lock_fd)

    def summary_of(self, path: Path) -> SummaryLookup:
        """The summary of a session that may be trusted (see
        ``chatloop.format.find_summary``); reads the head and the summary frame of a
        format 2 file, streams the frames of any other."""
        from chatloop.format import find_summary

        with open_read(path) as handle:
            return find_summary(handle, path.stem)

    def discard(self, writer: SessionWriter, unsent: bool = False) -> None:
        """Close ``writer``; if its session holds no message (it was just created and
        its first write failed), remove the file and its lock, so a session that never
        began leaves nothing behind. A session with messages is only closed, unless
        ``unsent``: a child whose first message was refused, holding only what was
        written with it (its restoration, the copies it carries), is removed too."""
        empty = writer.last_message is None or unsent
        path = writer.path
        if empty:  # removed while its lock is held: no other writer can have it meanwhile
            with suppress(OSError):
                path.unlink()
        writer.close()
        if empty:  # a process that takes this lock now finds no session to write
            with suppress(OSError):
                lock_path(path).unlink()

    def recent_exchanges(
        self, path: Path, count: int, limit: int = LAST_EXCHANGE_BYTES
    ) -> list[list[Message]]:
        """The last ``count`` exchanges (``format.exchanges``) of the session at ``path``,
        oldest first (streamed; [] for a file larger than ``limit`` bytes, which would
        take too long to walk for them)."""
        from collections import deque

        from chatloop.format import exchanges, open_document

        with open_read(path) as handle:
            if os.fstat(handle.fileno()).st_size > limit:
                return []
            return list(deque(exchanges(open_document(handle, path.stem).messages()), count))

    def parent_of(self, path: Path, meta: SessionMeta) -> Path | None:
        """The file a session continues: its ``parent_file`` (relative to its own
        folder in format 2, absolute in format 1), else its ``parent_id`` looked
        up beside it, so a sessions folder moved to another machine keeps its
        chains."""
        link = meta.parent_path(path)
        if link is not None and Path(link).is_file():
            return Path(link)
        if meta.parent_id and ids.is_file_stem(meta.parent_id):
            beside = path.parent / f"{meta.parent_id}.md"
            if beside.is_file():
                return beside
            try:
                return self.find_file(meta.parent_id)
            except ChatloopError:
                return None
        return None

    def project_of(self, path: Path) -> Path:
        """The project folder a continuation of the session at ``path`` is written in:
        the session's own, when it is a project folder of this home (a chain stays in
        one project, whichever directory it is resumed from), else this directory's."""
        folder = path.parent
        if folder.parent == self.root / PROJECTS and not folder.is_symlink():
            return folder
        return self.project_dir

    def create(
        self, meta: SessionMeta, carried: Sequence[Message] = (), folder: Path | None = None
    ) -> SessionWriter:
        """Create a new session file for ``meta`` (id, times and cwd filled in if empty)
        in ``folder`` (a project folder of this home; by default this directory's), with
        the messages ``carried`` (a fork's copies) written in the same single write as
        its front matter: a kill leaves no branch that holds only some of them."""
        from dataclasses import replace  # (not at the top: a listing never loads it)

        from chatloop.format import (
            Session,
            Totals,
            render_frame,
            render_front_matter,
            render_header,
        )
        from chatloop.format.front_matter import bounded
        from chatloop.store.writer import SessionWriter, refuse_unreadable

        now = self.clock()
        if meta.id:
            ids.validate_session_id(meta.id, new=True)
        meta = bounded(
            replace(
                meta,
                id=meta.id or ids.new_session_id(now),
                cwd=meta.cwd or str(self.cwd),
                status="open",
            )
        )
        target = folder or self.project_dir
        path = self.path_for(meta.id, target)
        refuse_unreadable(path, render_front_matter(meta))
        if target.is_symlink():
            raise StoreError(
                f"{target} is a symbolic link; chatloop does not write through links",
                "Replace it with a real directory (move its files into one).",
            )
        ensure_dir(target)
        lock_fd = take_lock(path)
        records, totals = [render_header(meta)], Totals.of(())
        for message in carried:
            totals = totals.plus(message)
            records.append(render_frame(message, meta, totals.queries))
        try:  # whole or not at all (a temp file linked into place): a kill leaves no part
            create_atomically(path, b"".join(records))
        except BaseException:
            with suppress(OSError):  # a session that was never made leaves no lock either
                lock_path(path).unlink()
            os.close(lock_fd)
            raise
        sizes = [len(record) for record in records[1:]]
        return SessionWriter(path, Session(meta, tuple(carried)), lock_fd, self.clock, sizes)

    def open(self, path: Path) -> SessionWriter:
        """Open an existing session for appending, after recovering it."""
        from chatloop.store.recovery import recover_locked
        from chatloop.store.writer import SessionWriter

        lock_fd = take_lock(path)
        try:
            result = recover_locked(path, self.clock)
        except BaseException:
            os.close(lock_fd)
            raise
        return SessionWriter(path, result.session, lock_fd, self.clock)

    def adopt(self, path: Path, lock_fd: int) -> SessionWriter:
        """The writer of the session at ``path`` whose lock this process was handed
        (``lock_fd``, inherited: ``chatloop.chat.background``), recovered first only
        if it needs it (a torn tail: its status stays as it is otherwise)."""
        from chatloop.format import parse_markdown
        from chatloop.store.recovery import recover_locked
        from chatloop.store.writer import SessionWriter

        result = parse_markdown(read_bytes(path), path.stem)
        if result.torn:
            result = recover_locked(path, self.clock)
        return SessionWriter(path, result.session, lock_fd, self.clock)

    def recover(self, path: Path) -> ParseResult:
        """Repair a session nobody is writing: torn tail out, ``open`` becomes
        ``interrupted``, and what a killed rewrite left settled (a close completed)."""
        from chatloop.store.recovery import recover_locked

        lock_fd = take_lock(path)
        try:
            return recover_locked(path, self.clock)
        finally:
            os.close(lock_fd)

    def settle(self, path: Path) -> bool:
        """Recover the session at ``path`` when a killed rewrite left its temp file
        beside it (a worker killed in the middle of its close: ``recovery.remove_strays``
        completes that close), unless someone holds it. True when it was recovered."""
        if not temp_files(path):
            return False
        try:
            self.recover(path)
        except SessionLocked:
            return False
        return True

    def left_rewrites(self, all_projects: bool = True) -> list[tuple[Path, Path]]:
        """The sessions beside which a killed rewrite left its temp file
        (``fsio.left_temps``), each with that file, when nobody holds the session: the
        next command that opens it settles it (``settle``). Nothing is changed here."""
        found = []
        for directory in self.project_dirs(all_projects):
            for target, temp in left_temps(directory):
                stem = target.name.removesuffix(".md")
                if stem == target.name or not ids.is_file_stem(stem) or target.is_symlink():
                    continue
                if target.is_file() and not is_locked(target):
                    found.append((target, temp))
        return sorted(found)
