"""Durable file primitives for session files. Only the store layer calls these.

Each function states the guarantee it gives; docs/durability.md explains why.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from chatloop.errors import NotFound, SessionLocked, StoreError

FILE_MODE = 0o600
DIR_MODE = 0o700


def local_now() -> datetime:
    """The current time with the local UTC offset, to the second (the default clock:
    messages are ordered by their place in the file, and whole seconds keep the
    format's open lines short)."""
    return datetime.now().astimezone().replace(microsecond=0)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def io_error(action: str, path: Path, exc: OSError) -> StoreError:
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    hint = "Check the disk and the permissions of the sessions directory."
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        hint = "Free some disk space; nothing was lost, and the next message will be saved."
    return StoreError(f"Could not {action} {path.name}: {reason}", hint)


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (and parents) with mode 0700 whatever the umask."""
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, DIR_MODE)
        os.chmod(directory, DIR_MODE)
    return path


def write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` exclusively (never through a symlink), 0600, durably."""
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE
        )
    except OSError as exc:
        raise io_error("create", path, exc) from exc
    try:
        os.fchmod(fd, FILE_MODE)
        if os.write(fd, data) != len(data):
            raise OSError(errno.ENOSPC, "short write")
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        raise io_error("write", path, exc) from exc
    os.close(fd)
    fsync_dir(path.parent)


def _temp_name(path: Path) -> Path:
    """A temp file next to ``path``, named with our pid (``dead_temps`` reads it back)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{os.urandom(3).hex()}")


def pid_alive(pid: int) -> bool:
    """True while a process ``pid`` exists (one of another user counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, someone else's
        return True
    return True


# the name _temp_name gives: the file it stands in for, then our pid and six hex digits
_TEMP_NAME = re.compile(r"\.(?P<target>.+)\.tmp-(?P<pid>[0-9]+)-[0-9a-f]{6}")


def left_temps(folder: Path) -> list[tuple[Path, Path]]:
    """The temp files of rewrites (``atomic_rewrite``, ``create_atomically``) that a
    killed process left in ``folder``, each with the file it was to replace: only
    regular files named exactly as ``_temp_name`` names them whose pid is not a live
    process (ours counts as dead: this process is not in a rewrite while it looks),
    so a neighbour's rewrite under way is never taken for one. Nothing is changed."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    found = []
    for entry in entries:
        named = _TEMP_NAME.fullmatch(entry.name)
        if named is None or not entry.is_file(follow_symlinks=False):
            continue
        pid = int(named["pid"])
        if pid != os.getpid() and pid_alive(pid):
            continue
        found.append((folder / named["target"], Path(entry.path)))
    return found


def temp_files(path: Path) -> list[Path]:
    """The temp files a killed rewrite of ``path`` left beside it (``left_temps``)."""
    return [temp for target, temp in left_temps(path.parent) if target.name == path.name]


def remove_dead_temps(folder: Path) -> None:
    """Remove the temp files (``.NAME.tmp-PID-xxxxxx``) that a killed process left in
    ``folder``: only those whose PID is not a live process, so a neighbour's rewrite
    under way is never touched; never a directory or anything not named so."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if not name.startswith(".") or ".tmp-" not in name:
            continue
        pid = name.rpartition(".tmp-")[2].split("-")[0]
        if not pid.isdigit() or pid_alive(int(pid)) or entry.is_dir(follow_symlinks=False):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry.path)


def create_atomically(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data`` whole or not at all: written to a temp file next
    to it, fsynced, then linked into place (never over a file that is there: that
    raises StoreError) and the folder fsynced. A kill leaves at most the temp file,
    which ``remove_dead_temps`` clears."""
    tmp = _temp_name(path)
    write_new_file(tmp, data)
    try:
        try:
            os.link(tmp, path, follow_symlinks=False)
        except FileExistsError:
            raise
        except OSError:  # a filesystem without hard links: rename when nothing is there
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, "exists", str(path)) from None
            os.rename(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        raise io_error("create", path, exc) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def atomic_rewrite(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: the file is the old or the new version, never torn."""
    tmp = _temp_name(path)
    try:
        write_new_file(tmp, data)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise io_error("rewrite", path, exc) from exc
    except StoreError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def open_read(path: Path | str) -> BinaryIO:
    """Open a session file for reading: never through a symlink, never anything but a
    regular file (a FIFO planted in its place would block forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise NotFound(
            f"Session file {path} does not exist", "`chatloop sessions` lists what there is."
        ) from exc
    except OSError as exc:
        raise io_error("read", Path(path), exc) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StoreError(f"{path} is not a regular file", "Move it out of the sessions directory.")
    return os.fdopen(fd, "rb")


def read_bytes(path: Path) -> bytes:
    """Read a whole session file (see ``open_read``)."""
    with open_read(path) as handle:
        try:
            return handle.read()
        except OSError as exc:
            raise io_error("read", path, exc) from exc


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


SUMMARY_HOLDER = "summary"  # the lock file's word for a worker writing a summary


def is_locked(path: Path) -> bool:
    """True while a live process holds the session's writer lock."""
    return lock_holder(path) is not None


def lock_holder(path: Path) -> str | None:
    """Who holds the session's writer lock: ``"chat"`` (a chatloop writing it),
    ``SUMMARY_HOLDER`` (a worker writing its summary after the chat ended: see
    ``mark_summary``), or None (nobody alive)."""
    try:
        fd = os.open(lock_path(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None  # a FIFO or device planted as a lock is no lock (and never blocks)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        said = os.pread(fd, 64, 0).split()
        return SUMMARY_HOLDER if said[1:2] == [SUMMARY_HOLDER.encode()] else "chat"
    finally:
        os.close(fd)
    return None


def mark_summary(lock_fd: int, pid: int) -> None:
    """Say in the lock file (held through ``lock_fd``) that process ``pid`` now holds
    it to write the session's summary (``lock_holder``); on a full disk, nothing."""
    with contextlib.suppress(OSError):
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, f"{pid} {SUMMARY_HOLDER}\n".encode(), 0)


LOCK_POLL_S = 0.05  # how often a bounded wait for a lock looks again


def wait_for_lock(path: Path, timeout: float | None = None) -> bool:
    """Return once nobody holds the session's writer lock: True. Without ``timeout``
    it is a blocking shared lock, let go at once (an event, not a poll); with one, the
    lock is tried every LOCK_POLL_S until ``timeout`` seconds have passed, and False
    says it is still held (a worker's summary that takes long: the caller goes on
    without it). Ctrl-C ends the wait (KeyboardInterrupt)."""
    try:
        fd = os.open(lock_path(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return True
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True  # a FIFO or device planted as a lock is no lock
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_SH)
            return True
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                time.sleep(min(LOCK_POLL_S, left))
    finally:
        os.close(fd)


def take_lock(path: Path) -> int:
    lock = lock_path(path)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(lock, flags, FILE_MODE)
    except OSError as exc:
        raise io_error("lock", path, exc) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StoreError(
            f"{lock.name} is not a regular file, so the session cannot be locked",
            f"Remove {lock} and try again.",
        )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        said = os.pread(fd, 64, 0).decode("ascii", "replace").split()
        os.close(fd)
        pid = said[0] if said else "another process"
        if said[1:2] == [SUMMARY_HOLDER]:
            raise SessionLocked(
                f"Session {path.stem} is having its summary written (pid {pid})",
                "It takes as long as the model does; `chatloop sessions` shows it done.",
            ) from None
        raise SessionLocked(
            f"Session {path.stem} is open in another chatloop (pid {pid})",
            "Leave that chatloop first, or start a new session with --new.",
        ) from None
    try:  # who holds it, for the message another chatloop shows; on a full disk, nobody
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass
    return fd


def write_all(fd: int, data: bytes) -> int:
    """One ``os.write`` of ``data``; a short write (the disk or a size limit full) is
    the OSError ``ENOSPC``, and the caller undoes what was written."""
    written = os.write(fd, data)
    if written != len(data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return written
