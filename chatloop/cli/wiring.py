"""What every command starts from: the settings of this run, the store under the
configured home, the synced index, and the terminal's facts (width, a progress
bar on stderr). Imports are deferred to the call, so a quick command loads only
what it uses.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatloop.chat.arming import Arming
    from chatloop.chat.trust import Ask
    from chatloop.config import Settings
    from chatloop.store.index import Index
    from chatloop.store.store import Store


def settings(args: argparse.Namespace, said: list[str] | None = None) -> Settings:
    """The settings of this run; their warnings (a config file's unknown keys) on
    stderr, or into ``said`` when given (doctor says them in its own lines)."""
    from chatloop.config import load_settings

    flags = {k: getattr(args, k, None) for k in ("agent", "model", "backend", "base_url")}
    flags["sessions_dir"] = args.sessions_dir
    loaded, warnings = load_settings(flags, config_file=args.config, read_yaml=_read_yaml)
    if said is not None:
        said.extend(warnings)
    else:
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return loaded


def _read_yaml(text: str) -> Any:
    """The config file's YAML, read strictly (loaded only when there is a file)."""
    from chatloop.format.yaml_strict import load

    return load(text)


def store(args: argparse.Namespace, loaded: Settings | None = None) -> Store:
    """The store under the configured home; pass ``loaded`` settings when there are
    some, so the config file is read (and its warnings printed) once."""
    import os

    from chatloop.config import chatloop_home
    from chatloop.store.store import Store

    loaded = loaded or settings(args)
    root = (
        Path(os.path.abspath(Path(loaded.sessions_dir).expanduser()))
        if loaded.sessions_dir
        else chatloop_home()
    )
    return Store(root)


def home() -> Path:
    """The person's chatloop home (``CHATLOOP_HOME``): their agent folder, their yeses to
    agent files and servers. ``--sessions-dir`` moves the sessions only."""
    from chatloop.config import chatloop_home

    return chatloop_home()


def arming(
    args: argparse.Namespace, loaded: Settings, ask: Ask | None, later: bool = False
) -> Arming:
    """What arms this run's agents (``chat.arming``): the person's home, the config's MCP
    servers and where they were declared; lines go to stderr until a chat takes over."""
    from chatloop.chat.approval import Approvals
    from chatloop.chat.arming import Arming
    from chatloop.config import servers_declared

    def line(text: str) -> None:
        say([text])

    declared = servers_declared(args.config)
    return Arming(home(), loaded, declared, Approvals(say=line), line, ask=ask, later=later)


def index(args: argparse.Namespace, words: bool = False) -> Index:
    """The index of the configured home, synced (a bar on a terminal for a big build).
    Use it as a context manager: it holds a connection. A listing never waits for the
    sessions' words (a line on stderr says when they are still being indexed);
    ``words`` (a search) waits for them, saying how many are left."""
    from chatloop.store.index import Index

    home = store(args)
    opened = Index(home, memory=_not_made(home.root))  # reading never makes a home
    try:
        opened.sync(all_projects=True, progress=progress_bar(at_least=200))
        if words:
            opened.complete_text(*words_progress(opened))
        elif pending := opened.text_pending():
            print(
                f"note: the words of {pending:,} sessions are still being indexed in the "
                "background; search waits for them",
                file=sys.stderr,
            )
    except BaseException:
        opened.close()
        raise
    return opened


def _not_made(root: Path) -> bool:
    """True when ``root`` does not exist and could be made (the nearest folder above it
    that exists is a folder: a home under a file is an error, said as one)."""
    if root.exists() or root.is_symlink():
        return False
    above = root.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    return above.is_dir()


def words_progress(index: Index) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """What a search says on stderr while the sessions' words are indexed, on a
    terminal or not: files read here (``progress``), or, while another process reads
    them, how many are left (``waiting``); a line a second at most."""
    import time

    last = [0.0]

    def say(text: str, done: bool = False) -> None:
        now = time.monotonic()
        if not done and now - last[0] < 1.0:
            return
        last[0] = now
        if sys.stderr.isatty():
            print(f"\r{text}", end="\n" if done else "", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def progress(done: int, total: int) -> None:
        say(f"indexing the words of sessions: {done:,} of {total:,} files", done == total)

    def waiting() -> None:
        say(f"waiting for the words of {index.text_pending():,} sessions to be indexed")

    return progress, waiting


QUIET_BELOW = 200  # files a rebuild reads with no line on a stderr that is no terminal


def progress_bar(at_least: int) -> Callable[[int, int], None]:
    """A one-line bar on stderr for work of ``at_least`` files, redrawn 40 times at
    most, not once per file; on a stderr that is no terminal (a log, a pipe), for
    ``QUIET_BELOW`` files or more, a line with the count a second at most, and one at
    the end: a command that waits for the index says so wherever its stderr goes."""
    import time

    shown = [-1]
    said = [0.0]

    def progress(done: int, total: int) -> None:
        if total < at_least:
            return
        if not sys.stderr.isatty():  # (a few files take no time: no lines for them)
            now = time.monotonic()
            if total >= QUIET_BELOW and done != shown[0] and (done == total or now - said[0] >= 1):
                said[0], shown[0] = now, done
                print(f"indexing sessions: {done:,} of {total:,} files", file=sys.stderr)
            return
        step = done * 40 // total
        if step == shown[0] and done < total:
            return
        shown[0] = step
        bar = "#" * step + "." * (40 - step)
        end = "\n" if done == total else ""
        print(f"\rindexing [{bar}] {done:,}/{total:,}", end=end, file=sys.stderr, flush=True)

    return progress


def columns() -> int | None:
    """The terminal's width when stdout is one (a listing fits it), else None (a pipe
    or a file gets whole lines)."""
    if not sys.stdout.isatty():
        return None
    import shutil

    return shutil.get_terminal_size().columns


def say(lines: list[str] | tuple[str, ...], prefix: str = "note") -> None:
    """Notes from the library (untrusted text: made visible) on stderr, one a line."""
    if not lines:
        return
    from chatloop.ui.terminal_text import visible

    for line in lines:
        print(visible(f"{prefix}: {line}"), file=sys.stderr)
