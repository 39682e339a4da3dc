"""Whether a tool may act: THE decision, for an agent's own tools and MCP servers'.

Each tool has a policy: ``allow`` (it acts), ``deny`` (it never does) or ``ask``
(the person says once, always for this session file, or no). The default is
``ask`` for a tool from an MCP server and for an agent's tool not marked
read-only (an agent file's ``READ_ONLY`` names); an agent file's ``APPROVE`` dict
and a server's ``approve`` key set it otherwise. Where no one can be asked (a
one-shot, a pipe) an ``ask`` tool is refused and a line says so.

The decision goes with the call's result (``ToolResult.approved``: allow, once,
always or no) into the transcript; a refusal is the result itself. "Always" is
forgotten when the chat leaves its session file (``forget_always``).
docs/security.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["POLICIES", "Answer", "Approvals", "Approve", "Decided", "refused"]

POLICIES = ("allow", "ask", "deny")
Answer = Literal["once", "always", "no"]
Approve = Callable[[str, str], Answer]  # (tool name, its arguments as JSON) -> the answer


class Decided(str):
    """A tool's text with who let it act (``ToolResult.approved``, in the transcript)."""

    approved: str

    def __new__(cls, text: str, approved: str) -> Decided:
        made = super().__new__(cls, text)
        made.approved = approved
        return made


def refused(exc: Exception, decided: str) -> Exception:
    """``exc`` with who let the call act (or "no"), for ``ToolResult.approved``."""
    exc.approved = decided  # type: ignore[attr-defined]
    return exc


class Approvals:
    """The decisions of one chat: who is asked (``approve``; None: no one), where the
    lines go (``say``), and the tools the person said "always" to."""

    def __init__(self, say: Callable[[str], None], approve: Approve | None = None) -> None:
        self.say = say
        self.approve = approve
        self._always: set[str] = set()

    def decide(self, name: str, policy: str, arguments: dict[str, Any]) -> str:
        """Who lets the tool ``name`` act now ("allow": its policy; "once" or "always":
        the person); raises PermissionError (its decision "no") when nobody does."""
        if policy == "allow":
            return "allow"
        if name in self._always:
            return "always"
        if policy == "deny":
            raise refused(PermissionError(f"not run: {name} is denied (approve: deny)"), "no")
        if self.approve is None:
            self.say(f"{name}: not run (nobody to ask here; approve: allow lets it run)")
            said = "not run: it needs the person's yes, and no one could be asked"
            raise refused(PermissionError(said), "no")
        answer = self.approve(name, json.dumps(arguments, ensure_ascii=False))
        if answer == "always":
            self._always.add(name)
        elif answer != "once":
            raise refused(PermissionError("not run: the person said no"), "no")
        return answer

    def forget_always(self) -> None:
        """Ask again about every tool (a new session file began)."""
        self._always.clear()

    def gate(self, name: str, policy: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` (a tool's) acting only as ``policy`` and the person decide; its
        text carries the decision (``Decided``), and so does any error it raises."""

        def gated(**arguments: Any) -> Decided:
            decided = self.decide(name, policy, arguments)
            try:
                value = function(**arguments)
            except Exception as exc:
                refused(exc, decided)
                raise
            text = value if isinstance(value, str) else json.dumps(value, default=str, indent=2)
            return Decided(text, decided)

        return gated
