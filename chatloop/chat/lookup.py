"""What a session picker asks while the person chooses: the index's search, and
a preview of each session (its summary, in a few lines).

``IndexLookup`` is the one ``chatloop.chat.host.Lookup``: the chat's picker
(``ChatSession.choose``) and ``chatloop search WORDS --resume`` both use it.
"""

from __future__ import annotations

import re
from pathlib import Path

from chatloop.errors import ChatloopError
from chatloop.store.index import Index, SessionRow
from chatloop.store.store import Store


class IndexLookup:
    """The index and the files, as a picker asks them (see ``host.Lookup``)."""

    def __init__(self, index: Index, store: Store, limit: int = 500) -> None:
        self.index, self.store, self.limit = index, store, limit

    def search(self, text: str, prefix: bool = False) -> list[SessionRow]:
        return self.index.search_sessions(text, prefix=prefix, limit=self.limit)

    def preview(self, row: SessionRow) -> str:
        if not row.has_summary:
            return ""
        try:
            found = self.store.summary_of(Path(row.path)).message
        except (ChatloopError, OSError):
            return ""
        return "" if found is None else summary_digest(found.text)


_SECTION_RE = re.compile(r"^(?:#+\s*([^:]+?):?\s*$|\*\*([^*:]+):?\*\*:?\s*(.*)$)")


def summary_digest(text: str) -> str:
    """A summary in a few lines, one per section that holds something
    ("Topics Discussed: a; b"), sections read from ``**Name:**`` or ``## Name``."""
    sections: dict[str, list[str]] = {}
    name = ""
    for raw in text.splitlines():
        line = raw.strip()
        heading = _SECTION_RE.match(line) if line.startswith(("#", "**")) else None
        if heading:
            name = (heading.group(1) or heading.group(2)).strip()
            line = (heading.group(3) or "").strip()
        line = line.lstrip("-*• ").strip()
        if line and line.lower().rstrip(".") not in ("none", "none recorded", "initial session"):
            sections.setdefault(name, []).append(line)
    return "\n".join(f"{name}: " * bool(name) + "; ".join(items)
                     for name, items in sections.items())  # fmt: skip
