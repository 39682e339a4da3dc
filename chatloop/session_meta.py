"""The front matter of a session file: the ``SessionMeta`` value and its YAML.

The YAML is written and read only through ``chatloop.frontmatter_yaml`` (safe,
strict, size-capped). Known keys come first in a fixed order; keys a person
adds are kept in ``SessionMeta.extra`` and written back after them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chatloop import frontmatter_yaml

FORMAT_VERSION = 1

__all__ = [
    "FORMAT_VERSION",
    "SessionMeta",
    "front_matter_end",
    "parse_front_matter",
    "render_front_matter",
]


@dataclass(frozen=True)
class SessionMeta:
    """The front matter. Unknown keys a person adds are kept in ``extra``."""

    id: str
    created: datetime
    updated: datetime
    title: str = ""
    agent: str = ""
    agent_path: str = ""
    model: str = ""
    backend_url: str = ""
    cwd: str = ""
    git_branch: str | None = None
    parent_id: str | None = None
    parent_file: str | None = None
    status: str = "open"
    queries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    restoration_tokens: int = 0
    summary: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def render_front_matter(meta: SessionMeta) -> bytes:
    """The front matter block alone, ``---`` lines included."""
    return f"---\n{frontmatter_yaml.dump(_meta_to_dict(meta))}---\n".encode()


def front_matter_end(data: bytes) -> int:
    """Offset just past the closing ``---`` line of the front matter, or -1."""
    if not data.startswith(b"---\n"):
        return -1
    close = data.find(b"\n---\n", 3)
    return -1 if close < 0 else close + len(b"\n---\n")


KNOWN_KEYS = [
    "format",
    "id",
    "title",
    "agent",
    "agent_path",
    "model",
    "backend_url",
    "created",
    "updated",
    "cwd",
    "git_branch",
    "parent_id",
    "parent_file",
    "status",
    "queries",
    "tokens",
    "summary",
]


def _meta_to_dict(meta: SessionMeta) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "id": meta.id,
        "title": meta.title,
        "agent": meta.agent,
        "agent_path": meta.agent_path,
        "model": meta.model,
        "backend_url": meta.backend_url,
        "created": meta.created.isoformat(),
        "updated": meta.updated.isoformat(),
        "cwd": meta.cwd,
        "git_branch": meta.git_branch,
        "parent_id": meta.parent_id,
        "parent_file": meta.parent_file,
        "status": meta.status,
        "queries": meta.queries,
        "tokens": {
            "in": meta.tokens_in,
            "out": meta.tokens_out,
            "restoration": meta.restoration_tokens,
        },
        "summary": meta.summary,
    }
    for key, value in meta.extra.items():
        if key not in data:
            data[key] = value
    return data


def parse_front_matter(data: bytes, problems: list[tuple[str, str]]) -> tuple[SessionMeta, int]:
    """Split and load the front matter; return the meta and where the body starts.

    Anything wrong is appended to ``problems`` as ``(kind, detail)``; a
    placeholder meta (empty id, epoch times) stands in for unreadable YAML.
    """
    epoch = datetime.fromisoformat("1970-01-01T00:00:00+00:00")
    fallback = SessionMeta(id="", created=epoch, updated=epoch)
    if not data.startswith(b"---\n"):
        problems.append(("front_matter", "no front matter; file is not a session"))
        return fallback, 0
    body_start = front_matter_end(data)
    if body_start < 0:
        problems.append(("front_matter", "front matter is not closed by ---"))
        return fallback, len(data)
    try:
        raw = frontmatter_yaml.load(data[4 : body_start - 4].decode("utf-8"))
        return _meta_from_dict(raw, problems), body_start
    except (frontmatter_yaml.FrontMatterError, UnicodeDecodeError, ValueError, TypeError) as exc:
        problems.append(("front_matter", str(exc)))
        return fallback, body_start


def _meta_from_dict(raw: dict[str, Any], problems: list[tuple[str, str]]) -> SessionMeta:
    tokens = raw.get("tokens") if isinstance(raw.get("tokens"), dict) else {}
    extra = {k: v for k, v in raw.items() if k not in KNOWN_KEYS}
    for key in extra:
        problems.append(("unknown_key", f"front matter key {key!r} kept as is"))

    def text(key: str) -> str:
        value = raw.get(key)
        return "" if value is None else str(value)

    def optional(key: str) -> str | None:
        value = raw.get(key)
        return None if value is None else str(value)

    def number(value: object) -> int:
        return (
            int(value) if isinstance(value, int | str) and str(value).lstrip("-").isdigit() else 0
        )

    return SessionMeta(
        id=text("id"),
        created=datetime.fromisoformat(text("created")),
        updated=datetime.fromisoformat(text("updated")),
        title=text("title"),
        agent=text("agent"),
        agent_path=text("agent_path"),
        model=text("model"),
        backend_url=text("backend_url"),
        cwd=text("cwd"),
        git_branch=optional("git_branch"),
        parent_id=optional("parent_id"),
        parent_file=optional("parent_file"),
        status=text("status") or "open",
        queries=number(raw.get("queries")),
        tokens_in=number(tokens.get("in")),
        tokens_out=number(tokens.get("out")),
        restoration_tokens=number(tokens.get("restoration")),
        summary=optional("summary"),
        extra=extra,
    )
