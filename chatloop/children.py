"""How chatloop starts a process of its own: THE rule, stated once.

Every process chatloop starts (the summary worker, the words process, an MCP
server) must never import code from where the person stands or from the
chatloop home: a cloned repository can carry a ``sqlite3.py``, an ``httpx.py``
or a ``chatloop/`` package at its top, and Python puts the working directory
first on ``sys.path`` for ``python -m``. So each child:

- runs with ``-P`` (and ``PYTHONSAFEPATH=1`` in its environment, which says the
  same to a Python program that is not ours, such as an MCP server): no
  working directory and no script folder on its path;
- gets a working directory that is not the person's (``workdir``: the home);
- sees only absolute ``PYTHONPATH`` entries (a relative one would be read from
  the child's working directory), with the folder this chatloop was imported
  from first, so a chatloop child runs the very code of its parent.

RELIABILITY.md promise 25; docs/security.md. The fork pool of the index build
starts no interpreter (a forked child has its parent's path and modules), so it
needs nothing of this.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["environment", "python_command", "workdir"]


def python_command(module: str, *args: str) -> list[str]:
    """The command line of chatloop's module ``module`` run as a child: this interpreter,
    ``-P`` (no working directory on its path), ``-m module``, then ``args``."""
    return [sys.executable, "-P", "-m", module, *args]


def environment(
    base: Mapping[str, str] | None = None,
    *,
    ours: bool = True,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a child: ``base`` (default: ours) with ``extra`` over it,
    ``PYTHONSAFEPATH=1``, and ``PYTHONPATH`` holding only absolute entries; with
    ``ours`` (a chatloop child), the folder this chatloop was imported from first.
    A relative entry is dropped, never resolved: it would name a folder of the
    person's working directory or of the child's."""
    env = {**(os.environ if base is None else base), **(extra or {})}
    given = env.get("PYTHONPATH", "")
    entries = [entry for entry in given.split(os.pathsep) if entry and os.path.isabs(entry)]
    if ours:
        import chatloop

        root = str(Path(chatloop.__file__).resolve().parent.parent)
        entries = [root, *(entry for entry in entries if entry != root)]
    if entries:
        env["PYTHONPATH"] = os.pathsep.join(entries)
    else:
        env.pop("PYTHONPATH", None)
    env["PYTHONSAFEPATH"] = "1"
    return env


def workdir(home: Path) -> str:
    """The working directory of a child: the chatloop home when it is a folder (the
    child finds its files there by absolute paths anyway), else the file system's root.
    Never the person's: a tool run there could read or write their project."""
    return str(home) if home.is_absolute() and home.is_dir() else os.path.abspath(os.sep)
