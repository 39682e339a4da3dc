"""``chatloop doctor``'s checks, as values: what works and what does not.

``checks`` looks at the model server (or the ones chatloop would find), where
the context window comes from, the config file, a seed project's sessions
beside the current directory, the sessions directory and the index. Each
``Check`` says its verdict and one line of text, with a hint when there is
something to do. It creates nothing: a home that does not exist yet is said
as such. The CLI prints them; the exit code is 1 when one failed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from chatloop.backends.base import Backend
from chatloop.chat import server
from chatloop.config import Settings
from chatloop.errors import ChatloopError
from chatloop.store.rows import SessionRow
from chatloop.store.store import Store

Verdict = Literal["ok", "warn", "FAIL", "note"]


@dataclass(frozen=True)
class Check:
    """One line of the report: its verdict, what was found, and what to do."""

    verdict: Verdict
    text: str
    hint: str = ""


def checks(
    settings: Settings, store: Store, config: Path, config_warnings: list[str], looked: str
) -> Iterator[Check]:
    """Every check, in the order a person reads them. ``config``: the config file that
    was (or would be) read; ``config_warnings``: what loading it said; ``looked``: where
    chatloop looked for one, said when there is none."""
    yield from _server(settings)
    yield _config(config, config_warnings, looked)
    yield from _mcp(settings, store, config)
    yield from _seed(store)
    yield from _home(store)


def _server(settings: Settings) -> Iterator[Check]:
    if settings.base_url:
        try:
            backend = server.make(settings)
            try:
                models = backend.models()
                yield Check(
                    "ok",
                    f"server {settings.base_url}: {len(models)} model(s): {', '.join(models[:5])}",
                )
                yield window_check(backend, settings)
            finally:
                backend.close()
        except ChatloopError as exc:
            yield Check("FAIL", f"server {settings.base_url}: {exc.message}", exc.hint)
        return
    from chatloop.backends.detect import CANDIDATES, detect
    from chatloop.backends.embedded import embedded_available

    found = detect()
    if found is not None:
        yield Check("ok", f"model server: {found.label} at {found.base_url}")
        return
    tried = ", ".join(f"{c.label} ({c.base_url})" for c in CANDIDATES)
    embedded = embedded_available()
    yield Check(
        "ok" if embedded else "FAIL",
        f"no model server answered (tried {tried}); embedded model "
        f"{'installed' if embedded else 'not installed'}",
    )


def window_check(backend: Backend, settings: Settings) -> Check:
    """Where the context window comes from ("ok"), or what to do when nobody says
    ("warn": chatloop works, but plans with a guess)."""
    from chatloop.config import DEFAULT_WINDOW

    if settings.context_window:
        return Check(
            "ok", f"context window {settings.context_window:,} tokens (your context_window)"
        )
    told = backend.context_window()
    if told:
        return Check("ok", f"context window {told:,} tokens (from the server)")
    return Check(
        "warn",
        f"the server does not say its context window, so chatloop assumes "
        f"{DEFAULT_WINDOW:,}: set context_window to what the server was "
        "started with (for llama-cpp-python, its --n_ctx; e.g. "
        "CHATLOOP_CONTEXT_WINDOW=2048)",
    )


def _config(config: Path, warnings: list[str], looked: str) -> Check:
    if config.is_file() and warnings:  # it works: what it says is partly ignored
        said = "; ".join(w.removeprefix(f"{config}: ") for w in warnings)
        return Check("warn", f"config file {config}: {said}")
    if config.is_file():
        return Check("ok", f"config file {config}")
    return Check("ok", f"config file: none (looked for {looked}); defaults apply")


def _mcp(settings: Settings, store: Store, config: Path) -> Iterator[Check]:
    """Every MCP server this run would offer and where it is declared: the config's (the
    person's own file, or a declaration they allowed or not: ``chat.arming``) and the
    configured agent's when it is a markdown file (a Python one is not run to be asked)."""
    import json

    from chatloop.chat import trust
    from chatloop.chat.agent import agent_dirs, find_agent_file
    from chatloop.chat.agent_markdown import read_markdown_agent
    from chatloop.config import chatloop_home, servers_declared

    home = chatloop_home()
    if settings.mcp_servers:
        declared = servers_declared(str(config))
        names = ", ".join(json.loads(settings.mcp_servers))
        if declared.own:
            yield Check("ok", f"MCP servers {names}: your config file {declared.where}")
        else:
            try:
                allowed = trust.approved_servers(declared.where, settings.mcp_servers, home, None)
            except ChatloopError:
                allowed = False
            if allowed:
                yield Check("ok", f"MCP servers {names}: {declared.where} (you allowed them)")
            else:
                yield Check(
                    "warn",
                    f"MCP servers {names}: {declared.where}, not yet allowed",
                    "A chat in a terminal asks before starting them; a one-shot leaves them out.",
                )
    try:
        path = find_agent_file(settings.agent, agent_dirs(store.cwd, home))
        if path.suffix != ".md":
            return
        agent = read_markdown_agent(path, path.read_bytes())
    except (ChatloopError, OSError):
        return
    if agent.mcp:
        names = ", ".join(spec.name for spec in agent.mcp)
        yield Check("ok", f"MCP servers {names}: the agent file {path}")


def _seed(store: Store) -> Iterator[Check]:
    """The seed project's sessions beside the current directory: imported or not."""
    from chatloop.store.importer import SEED_FOLDER, import_sessions

    seed = Path.cwd() / SEED_FOLDER
    if not (seed.is_dir() and any(seed.glob("*.md"))):
        return
    outcomes = import_sessions(store, [seed], write=False)  # what an import would do now
    left = sum(1 for outcome in outcomes if outcome.status in ("imported", "repaired"))
    here = sum(1 for outcome in outcomes if outcome.status == "present")
    if left:
        yield Check(
            "note",
            f"the seed project's sessions are here: {seed} ({left} not "
            f"imported{f', {here} already' if here else ''}); `chatloop "
            f"import {SEED_FOLDER}` copies them in",
        )
    elif here:
        yield Check("ok", f"the seed project's sessions ({seed}): {here} imported, none left")


def _home(store: Store) -> Iterator[Check]:
    """The sessions directory (private?) and the index (readable? how many?)."""
    root = store.root
    if not root.exists():  # a check makes nothing: the first chat creates it, and the index
        yield Check(
            "ok", f"sessions directory {root} (not created yet: your first chat creates it)"
        )
        return
    if not root.is_dir():
        yield Check(
            "FAIL",
            f"sessions directory {root} is not a directory",
            "point CHATLOOP_HOME (or --sessions-dir) at a directory, or move that file away",
        )
        return
    mode = stat.S_IMODE(root.stat().st_mode)
    private = mode & 0o077 == 0
    yield Check(
        "ok" if private else "FAIL",
        f"sessions directory {root} (mode {oct(mode)})",
        "" if private else f"others can read your conversations there: chmod 700 {root}",
    )
    from chatloop.store.index import Index

    try:
        with Index(store) as index:
            index.sync()
            rows = index.list_sessions(all_projects=True)
        count = len(rows)
        yield Check("ok", f"index {index.path}: {count:,} session{'' if count == 1 else 's'}")
    except ChatloopError as exc:
        yield Check("FAIL", f"index: {exc}")
        return
    except OSError as exc:  # (said as words, not as Python's [Errno N])
        yield Check("FAIL", f"index: {exc.strerror or exc}: {exc.filename or store.root}")
        return
    yield from _unsummarized(rows)
    yield from _half_closed(store)


def _unsummarized(rows: list[SessionRow]) -> Iterator[Check]:
    """Sessions whose summary is being written in the background, and those whose
    chat (or summary worker) died before it was: a resume of each writes it."""
    busy = [row for row in rows if row.status == "summarizing"]
    if busy:
        yield Check("note", f"{len(busy)} session(s) having their summary written now")
    left = [row for row in rows if row.status == "interrupted" and row.has_summary is False]
    unread = [row for row in rows if row.status == "interrupted" and row.has_summary is None]
    if unread:  # (listed from their heads: whether a summary ends them is not read yet)
        yield Check("note", f"{len(unread)} interrupted session(s) not read yet (being indexed)")
    if left:
        named = ", ".join(row.handle or row.id for row in left[:5])
        more = f" and {len(left) - 5} more" if len(left) > 5 else ""
        yield Check(
            "note",
            f"{len(left)} session(s) ended without a summary: {named}{more}",
            "Resuming one (`chatloop -r HANDLE`) writes its summary first.",
        )


def _half_closed(store: Store) -> Iterator[Check]:
    """Sessions beside which a killed process left the temp file of a rewrite (a
    summary worker killed in the middle of its close leaves the session ``open``
    with a whole copy beside it): listed, not touched (doctor changes nothing); the
    next command that opens one completes its close or removes the copy."""
    left = store.left_rewrites()
    if not left:
        return
    named = ", ".join(f"{path.stem} ({temp.name})" for path, temp in left[:5])
    more = f" and {len(left) - 5} more" if len(left) > 5 else ""
    yield Check(
        "note",
        f"{len(left)} session(s) with a rewrite left half-done by a killed process: {named}{more}",
        f"Resuming one (`chatloop -r {left[0][0].stem}`) finishes it and removes the copy.",
    )


def config_looked(named: str | None) -> tuple[Path, str]:
    """The config file doctor reports on (``named``: ``--config``), and where chatloop
    looked for one, in words (both places, when neither was named)."""
    from chatloop.config import CONFIG_NAME, chatloop_home, config_path

    config = config_path(named, os.environ)
    looked = str(config)
    if not named and not os.environ.get("CHATLOOP_CONFIG"):
        looked = f"{chatloop_home(os.environ) / CONFIG_NAME} and {config}"
    return config, looked
