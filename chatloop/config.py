"""Settings and where things live.

All of chatloop's data sits under one root, ``CHATLOOP_HOME`` (default:
``$XDG_DATA_HOME/chatloop``, else ``~/.local/share/chatloop``). Tests point it
at a temporary directory.

Settings come from, lowest to highest precedence: the defaults below, the
YAML config file (``--config``, ``CHATLOOP_CONFIG``, else
``~/.config/chatloop/config.yaml``), environment variables
(``CHATLOOP_<KEY>``, e.g. ``CHATLOOP_MODEL``), and command-line flags.
Unknown keys in the file are reported, not fatal.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from chatloop.errors import UsageError

DEFAULT_HOME_NAME = "chatloop"
DEFAULT_PREVIEW_CHARS = 100
HOME_ENV = "CHATLOOP_HOME"
CONFIG_ENV = "CHATLOOP_CONFIG"


@dataclass(frozen=True)
class Settings:
    """Every knob, with its default. The config file uses these names as keys."""

    agent: str = "simple_sally"
    backend: str = "auto"  # auto | openai | ollama | embedded
    base_url: str = ""
    model: str = ""
    api_key: str = ""
    context_window: int = 0  # 0: ask the server
    max_tokens: int = 0  # 0: the agent's own setting
    connect_timeout: float = 5.0
    read_timeout: float = 120.0
    retries: int = 2
    max_tool_rounds: int = 8
    auto_compact: str = "ask"  # ask | on | off
    compact_threshold: float = 0.8
    summary_max_tokens: int = 700  # longest summary reply (about 500 words)
    summary_timeout: float = 120.0  # seconds per summary request (then one retry)
    sessions_dir: str = ""


KEYS = {f.name: f for f in fields(Settings)}


def chatloop_home(environ: Mapping[str, str] | None = None) -> Path:
    """The root directory for sessions and the index, from the environment."""
    env = os.environ if environ is None else environ
    explicit = env.get(HOME_ENV)
    if explicit:
        return Path(explicit).expanduser()
    data_home = env.get("XDG_DATA_HOME")
    base = Path(data_home).expanduser() if data_home else Path.home() / ".local" / "share"
    return base / DEFAULT_HOME_NAME


def config_path(explicit: str | None, environ: Mapping[str, str]) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV]).expanduser()
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "chatloop" / "config.yaml"


def _coerce(key: str, value: Any, source: str) -> Any:
    kind = KEYS[key].type
    try:
        if kind in ("int", int):
            return int(value)
        if kind in ("float", float):
            return float(value)
        return "" if value is None else str(value)
    except (TypeError, ValueError):
        raise UsageError(
            f"{source}: {key} must be a {kind}, not {value!r}", "Fix the value and try again."
        ) from None


def load_settings(
    flags: Mapping[str, Any] | None = None,
    *,
    config_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    read_yaml: Callable[[str], Mapping[str, Any]],
) -> tuple[Settings, list[str]]:
    """Merge defaults, the config file, the environment and flags; return settings and
    warnings (unknown keys). A missing default config file is fine; a missing
    explicit one is a UsageError. ``read_yaml`` loads the file's text (the CLI
    passes the strict loader of ``chatloop.format.yaml_strict``, so that
    ``auto_compact: on`` stays the word ``on``); it raises ValueError."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    warnings: list[str] = []
    path = config_path(config_file, env)
    if path.is_file():
        try:
            data = read_yaml(path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as exc:
            raise UsageError(
                f"Cannot read the config file {path}: {exc}",
                "Fix or remove it (`chatloop --help` lists the keys).",
            ) from exc
        for key, value in data.items():
            if key in KEYS:
                values[key] = _coerce(key, value, str(path))
            else:
                warnings.append(f"{path}: unknown key {key!r} ignored (known: {', '.join(KEYS)})")
    elif config_file or env.get(CONFIG_ENV):
        raise UsageError(f"No config file at {path}", "Check --config / CHATLOOP_CONFIG.")
    for key in KEYS:
        name = f"CHATLOOP_{key.upper()}"
        if name in env and env[name] != "":
            values[key] = _coerce(key, env[name], name)
    for key, value in (flags or {}).items():
        if key in KEYS and value is not None:
            values[key] = _coerce(key, value, f"--{key.replace('_', '-')}")
    settings = dataclasses.replace(Settings(), **values)
    if settings.auto_compact not in ("ask", "on", "off"):
        raise UsageError(f"auto_compact must be ask, on or off, not {settings.auto_compact!r}", "")
    return settings, warnings
