"""What a session picker asks while the person chooses: the index's search, and
a preview of each session (its summary, in a few lines).

``IndexLookup`` is the one ``chatloop.chat.host.Lookup``: the chat's picker
(``ChatSession.choose``) and ``chatloop search WORDS --resume`` both use it.
"""

from __future__ import annotations

from pathlib import Path

from chatloop.chat import ledger
from chatloop.errors import ChatloopError
from chatloop.store.index import Index
from chatloop.store.rows import SessionRow
from chatloop.store.store import Store


class IndexLookup:
    """The index and the files, as a picker asks them (see ``host.Lookup``)."""

    def __init__(
        self, index: Index, store: Store, limit: int = 500, all_projects: bool = False
    ) -> None:
        self.index, self.store, self.limit = index, store, limit
        self.all_projects = all_projects  # search every project, not only this one

    def search(self, text: str, prefix: bool = False) -> list[SessionRow]:
        """Sessions whose words hold ``text``, from the words indexed so far: a person
        typing never waits for a background indexing (the picker says it is partial,
        ``words_pending``)."""
        return self.index.search_sessions(
            text, prefix=prefix, all_projects=self.all_projects, limit=self.limit, complete=False
        )

    def words_pending(self) -> int:
        """How many sessions' words are still being indexed (their hits are missing)."""
        return self.index.text_pending()

    def preview(self, row: SessionRow) -> str:
        if row.has_summary is False:  # (None: not yet known, so looked for)
            return ""
        try:
            found = self.store.summary_of(Path(row.path)).message
        except (ChatloopError, OSError):
            return ""
        return "" if found is None else summary_digest(found.text)


def summary_digest(text: str) -> str:
    """A summary in a few lines, one per section that holds something
    ("Topics Discussed: a; b"), sections read from ``**Name:**`` or ``## Name``.
    Linear in the summary's length (it is model output: no pattern that can
    backtrack runs over it). The ledger it ends with (``chat.ledger``) is not its
    text: left out."""
    sections: dict[str, list[str]] = {}
    name = ""
    for raw in ledger.split(text)[0].splitlines():
        line = raw.strip()
        heading = _heading(line)
        if heading is not None:
            name, line = heading
        line = line.lstrip("-*• ").strip()
        if line and line.lower().rstrip(".") not in ("none", "none recorded", "initial session"):
            sections.setdefault(name, []).append(line)
    return "\n".join(
        f"{name}: " * bool(name) + "; ".join(items) for name, items in sections.items()
    )


def _heading(line: str) -> tuple[str, str] | None:
    """(section name, the rest of the line) for ``## Name`` or ``**Name:** rest``."""
    if line.startswith("#"):
        return line.lstrip("#").strip().rstrip(":").strip(), ""
    if line.startswith("**"):
        end = line.find("**", 2)
        if end > 2:
            return line[2:end].strip().rstrip(":").strip(), line[end + 2 :].lstrip(":").strip()
    return None
