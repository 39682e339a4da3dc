"""Which agent files may run: THE decision, and the record of the person's yes.

An agent file is Python that runs with the person's permissions as soon as it is
loaded, so chatloop runs one only when the person has said so:

- the agents that ship with chatloop (``agent.bundled_agents``) and the person's own
  folder, ``$CHATLOOP_HOME/agents``, are theirs: they run without a question;
- a markdown agent (``NAME.md``) runs no code: it loads without a question, unless
  it declares MCP servers (commands chatloop would start): then it is asked about
  as a Python file is;
- any other file (a project's ``./agents/``, a path named by a config file or on the
  command line) runs only after a yes, asked once and remembered per (absolute path,
  sha256 of the content) in ``trusted_agents.json`` under the home (0600, replaced
  atomically). A changed file is a new question.

What is run is the content that was checked, never a second read of the file. The
question goes through ``ask`` (``Host.ask``'s shape); without one (a one-shot
question, a pipe) an unapproved file is refused with ``Unapproved``. docs/security.md.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from chatloop.errors import ChatloopError, StoreError, Unapproved

if TYPE_CHECKING:
    from chatloop.chat.agent import Agent

TRUST_NAME = "trusted_agents.json"
MAX_AGENT_BYTES = 10_000_000  # an agent file is a page of Python; more is not one
MAX_TRUST_BYTES = 1_000_000  # the record of the person's yeses, read whole
SECTIONS = ("agents", "mcp_servers")  # the record's parts: agent files, server declarations
Ask = Callable[[str, bool], bool]  # a yes/no question and its default (Host.ask)
__all__ = [
    "TRUST_NAME",
    "Ask",
    "Unapproved",
    "approved_servers",
    "approved_source",
    "load",
    "trusted_folders",
]


def trusted_folders(home: Path) -> list[Path]:
    """The folders whose agent files run without a question: the person's own and
    chatloop's bundled one."""
    from chatloop.chat.agent import bundled_agents

    return [home / "agents", bundled_agents()]


def approved_source(path: Path, home: Path, ask: Ask | None, read: bytes | None = None) -> bytes:
    """The content of the agent file ``path`` once it may run: it lies in a trusted
    folder, or the person said yes to this path with this content (now, through
    ``ask``, which is then remembered; or before). Raises ``Unapproved`` when the
    answer is no or there is no one to ask."""
    real = Path(os.path.abspath(path)).resolve()
    source = _read(real) if read is None else read
    if any(real.is_relative_to(folder.resolve()) for folder in trusted_folders(home)):
        return source
    digest = hashlib.sha256(source).hexdigest()
    record = _load_record(home)
    if record.get(str(real)) == digest:
        return source
    said = _shown(real)
    seen_before = str(real) in record
    why = "It changed since you allowed it" if seen_before else "It is not in your agent folders"
    hint = (
        f"Start chatloop once in a terminal to be asked (chatloop --agent {said}), or move "
        f"it into {_shown(home / 'agents')} if it is yours."
    )
    if ask is None:
        raise Unapproved(f"Not run: the agent file {said} has not been allowed to run", hint)
    kind = "starts MCP servers" if real.suffix == ".md" else "Python"
    question = (
        f"{why}: run the agent file {said} ({kind}, with your permissions; sha256 {digest[:12]})?"
    )
    if not ask(question, False):
        raise Unapproved(
            f"Not run: the agent file {said}",
            f"Answer y to run it, or move it into {_shown(home / 'agents')} if it is yours.",
        )
    record[str(real)] = digest
    _save_record(home, record)
    return source


def load(path: Path, home: Path, ask: Ask | None) -> Agent:
    """The agent of ``path``, imported only once ``approved_source`` allows it (from the
    very bytes that were checked)."""
    from chatloop.chat.agent import load_agent

    if path.suffix == ".md":  # a markdown agent runs no code of its own...
        source = _read(Path(os.path.abspath(path)).resolve())
        agent = load_agent(path, source)
        if not agent.mcp:
            return agent
        # ...but the MCP servers it declares are commands chatloop would run
        return load_agent(path, approved_source(path, home, ask, source))
    return load_agent(path, approved_source(path, home, ask))


def approved_servers(where: str, declared: str, home: Path, ask: Ask | None) -> bool:
    """Whether the MCP servers ``declared`` (their declaration as JSON text) by ``where``
    (a config file's absolute path, or the variable that held them) may start: the
    person said yes to this declaration from this source (now, through ``ask``, then
    remembered; or before). False when the answer is no; raises ``Unapproved`` when
    there is no one to ask (the caller decides what a refusal costs). Like an agent
    file, a changed declaration is a new question; what else the file says is not."""
    digest = hashlib.sha256(declared.encode("utf-8")).hexdigest()
    record = _load_record(home, "mcp_servers")
    if record.get(where) == digest:
        return True
    said = _shown(Path(where)) if where.startswith(os.sep) else where
    names = ", ".join(_server_names(declared))
    if ask is None:
        raise Unapproved(
            f"Not started: the MCP servers {names} declared in {said} have not been allowed",
            "Start chatloop once in a terminal to be asked, or declare them in your own "
            "config file (chatloop doctor names it).",
        )
    why = (
        "They changed since you allowed them"
        if where in record
        else "They are not in your own config"
    )
    question = (
        f"{why}: start the MCP servers {names} declared in {said} (commands, with your "
        f"permissions; sha256 {digest[:12]})?"
    )
    if not ask(question, False):
        return False
    record[where] = digest
    _save_record(home, record, "mcp_servers")
    return True


def _server_names(declared: str) -> list[str]:
    try:
        data = json.loads(declared)
    except ValueError:
        return ["(unreadable)"]
    return [_shown(Path(str(name))) for name in data] if isinstance(data, dict) else ["(none)"]


def _shown(path: Path) -> str:
    """A path as a person reads it in one line: control characters escaped."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(path))


def _read(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            source = handle.read(MAX_AGENT_BYTES + 1)
    except OSError as exc:
        raise ChatloopError(
            f"Cannot read the agent file {_shown(path)}: {exc.strerror or exc}",
            "Check the path and its permissions.",
        ) from exc
    if len(source) > MAX_AGENT_BYTES:
        raise ChatloopError(
            f"The agent file {_shown(path)} is over {MAX_AGENT_BYTES:,} bytes",
            "An agent file is a Python module of a few pages.",
        )
    return source


def _load_record(home: Path, section: str = "agents") -> dict[str, str]:
    """The remembered yeses of ``section``: {absolute path or source: sha256}. A missing,
    unreadable or damaged record is an empty one (everything outside the trusted
    folders is asked again)."""
    return _load_all(home).get(section, {})


def _load_all(home: Path) -> dict[str, dict[str, str]]:
    from chatloop.store import fsio

    try:
        with fsio.open_read(home / TRUST_NAME) as handle:
            data = json.loads(handle.read(MAX_TRUST_BYTES + 1))
    except (ChatloopError, OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, dict[str, str]] = {}
    for section in SECTIONS:
        kept = data.get(section)
        if isinstance(kept, dict):
            out[section] = {
                k: v for k, v in kept.items() if isinstance(k, str) and isinstance(v, str)
            }
    return out


def _save_record(home: Path, record: dict[str, str], section: str = "agents") -> None:
    from chatloop.store import fsio

    whole: dict[str, object] = {"version": 1, **_load_all(home), section: record}
    data = json.dumps(whole, indent=1, sort_keys=True) + "\n"
    try:
        fsio.ensure_dir(home)
    except OSError as exc:
        raise fsio.io_error("create", home, exc) from exc
    try:
        fsio.atomic_rewrite(home / TRUST_NAME, data.encode("utf-8"))
    except StoreError as exc:
        raise StoreError(
            f"Your yes could not be remembered: {exc.message}", "Nothing was run; " + exc.hint
        ) from exc
