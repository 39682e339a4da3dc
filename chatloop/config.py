"""Settings and where things live.

All of chatloop's data sits under one root, ``CHATLOOP_HOME`` (default:
``$XDG_DATA_HOME/chatloop``, else ``~/.local/share/chatloop``). Tests point it
at a temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_HOME_NAME = "chatloop"
DEFAULT_PREVIEW_CHARS = 100
HOME_ENV = "CHATLOOP_HOME"


def chatloop_home(environ: dict[str, str] | None = None) -> Path:
    """The root directory for sessions and the index, from the environment."""
    env = os.environ if environ is None else environ
    explicit = env.get(HOME_ENV)
    if explicit:
        return Path(explicit).expanduser()
    data_home = env.get("XDG_DATA_HOME")
    base = Path(data_home).expanduser() if data_home else Path.home() / ".local" / "share"
    return base / DEFAULT_HOME_NAME
