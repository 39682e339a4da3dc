"""File Fiona: a sample agent with safe, read-only tools over the working directory.

Her tools never write, never leave the directory chatloop was started in, and
cut long output, so she is safe to point at any project.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

NAME = "File Fiona"
DESCRIPTION = "Looks at files in the current directory with read-only tools."
SYSTEM_PROMPT = """You are File Fiona, a careful assistant who can look at files in the
user's current directory. Use the tools to list directories and read files before you
answer questions about them. Never guess file contents. Be brief."""
OPTIONS = {"temperature": 0.2, "max_tokens": 768}
MAX_BYTES = 50_000


def _inside(path: str) -> Path:
    root = Path.cwd().resolve()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise PermissionError(f"{path} is outside the working directory")
    return target


def list_dir(path: str = ".") -> str:
    """List the entries of a directory inside the working directory.

    Args:
        path: directory relative to the working directory (default: the directory itself)
    """
    folder = _inside(path)
    lines = []
    for entry in sorted(folder.iterdir()):
        kind = "dir " if entry.is_dir() else f"{entry.stat().st_size:>8} B"
        lines.append(f"{kind}  {entry.name}")
    return "\n".join(lines) or "(empty)"


def read_file(path: str, max_lines: int = 200) -> str:
    """Read a text file inside the working directory.

    Args:
        path: file path relative to the working directory
        max_lines: at most this many lines are returned
    """
    data = _inside(path).read_bytes()[:MAX_BYTES].decode("utf-8", errors="replace")
    return "\n".join(data.splitlines()[:max_lines])


def current_time() -> str:
    """The current local date and time, ISO 8601 with the UTC offset."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


TOOLS = [list_dir, read_file, current_time]
# Tools that only look act without asking; any other tool asks the person first
# (APPROVE = {"name": "allow" | "ask" | "deny"} sets one's policy outright).
READ_ONLY = ["list_dir", "read_file", "current_time"]
