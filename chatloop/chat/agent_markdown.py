"""Agents written as markdown, in Claude Code's agent format: no Python needed.

``agents/NAME.md``::

    ---
    name: Terse Tom
    description: Answers in two sentences at most.
    model: qwen2.5:7b          # optional: used when no --model is given
    options: {temperature: 0.3, max_tokens: 256}
    ---
    You are Terse Tom. ...     (the body is the system prompt)

A markdown agent runs no code of its own, so it needs no yes before it loads
(``chat.trust``). Files written for Claude Code (``.claude/agents/*.md``) load as
they are: what chatloop cannot use (Claude Code's model aliases, its tool names,
``color`` and other keys) is named in a note, never fatal. ``mcp`` declares the
MCP servers whose tools it offers (``chat.mcp_servers``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from chatloop.chat.mcp_servers import ServerSpec, specs_of
from chatloop.errors import UsageError

__all__ = ["KEYS", "MarkdownAgent", "read_markdown_agent"]

KEYS = ("name", "description", "model", "options", "tools", "mcp")
CLAUDE_MODELS = ("inherit", "sonnet", "opus", "haiku")  # aliases that name no local model


class MarkdownAgent(NamedTuple):
    """What a markdown agent file says, as ``chat.agent.Agent`` takes it."""

    name: str
    system_prompt: str
    description: str
    options: dict[str, Any]
    model: str
    notes: tuple[str, ...]
    mcp: tuple[ServerSpec, ...]


def read_markdown_agent(path: Path, source: bytes) -> MarkdownAgent:
    """What the markdown agent file at ``path`` (whose bytes are ``source``) says: its
    front matter read strictly (YAML), its body the system prompt. Raises UsageError,
    naming the file (and the line of a YAML error), for a file that cannot be one."""
    from chatloop.format.yaml_strict import FrontMatterError, load

    text = source.decode("utf-8", "replace").replace("\r\n", "\n")
    meta: dict[str, Any] = {}
    body = text
    if text.startswith("---\n"):
        end = text.find("\n---\n", 3)
        if end < 0 and text.rstrip().endswith("\n---"):
            end = len(text.rstrip()) - 4
        if end < 0:
            raise UsageError(
                f"{path.name}: its front matter has no closing --- line",
                "An agent file starts with ---, its keys, ---, then the system prompt.",
            )
        try:
            meta = dict(load(text[4 : end + 1]))
        except FrontMatterError as exc:
            said = str(exc).replace("front matter", "its front matter", 1)
            raise UsageError(f"{path.name}: {said}", f"The keys: {', '.join(KEYS)}.") from exc
        body = text[end + 5 :]
    prompt = body.strip()
    if not prompt:
        raise UsageError(
            f"{path.name} has no system prompt",
            "Write it after the front matter: the body of the file is the system prompt.",
        )
    notes = [f"{path.name}: unknown key {key!r} ignored" for key in meta if key not in KEYS]
    model = _text(meta.get("model"), "model", path)
    if model in CLAUDE_MODELS:
        notes.append(f"{path.name}: model {model!r} is Claude Code's; the server's is used")
        model = ""
    tools = meta.get("tools")
    if tools:
        names = tools if isinstance(tools, list) else str(tools).split(",")
        listed = ", ".join(str(name).strip() for name in names if str(name).strip())
        notes.append(
            f"{path.name}: tools ({listed}) are not offered: a markdown agent has no tools "
            "of its own (its mcp servers' tools are offered)"
        )
    servers, declared = specs_of(meta.get("mcp"), path.name)
    notes.extend(declared)
    options = meta.get("options") or {}
    if not isinstance(options, dict):
        raise UsageError(
            f"{path.name}: options is not a mapping",
            "For example: options: {temperature: 0.3, max_tokens: 256}",
        )
    return MarkdownAgent(
        name=_text(meta.get("name"), "name", path) or path.stem.replace("_", " ").title(),
        system_prompt=prompt,
        description=_text(meta.get("description"), "description", path),
        options={str(key): _number(value) for key, value in options.items()},
        model=model,
        notes=tuple(notes),
        mcp=tuple(servers),
    )


def _number(value: object) -> object:
    """An option's value as the server takes it: the strict YAML reader keeps every
    scalar as written (``0.3`` is text), so numbers are read back as numbers."""
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
    return value


def _text(value: object, key: str, path: Path) -> str:
    """A key's text value ("" when absent); a list or a mapping is an error."""
    if value is None:
        return ""
    if isinstance(value, list | dict):
        raise UsageError(f"{path.name}: {key} is not a text", f"Write {key}: followed by words.")
    return str(value).strip()
