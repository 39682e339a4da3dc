"""The session file format: pure values, one frame scanner, no file I/O, no global state.

``chatloop.store.store`` opens files and passes bytes or file objects in; every
reader of a session (parse, the index's skim, the summary resume trusts,
search snippets, show, export) is built on ``chatloop.format.frames``.
docs/format.md describes the format. One module per job:

- ``values``: the frozen values (Session, Message, Problem, ...);
- ``frames``: THE frame scanner;
- ``body``, ``front_matter``, ``yaml_strict``, ``legacy``: a frame's body, the
  front matter, its YAML, the legacy bold-key format;
- ``render``: a session written as text;
- ``read``: a file read back (``open_document``, ``parse_markdown``, views);
- ``skimming``: what the index needs (``skim``);
- ``summary``: the summary resume may trust (``find_summary``);
- ``resealing``: hand edits accepted (``reseal``).
"""

from __future__ import annotations

from chatloop.format.body import SUMMARY_END, SUMMARY_START, display_name
from chatloop.format.frames import Flaw, Frame, iter_frames
from chatloop.format.front_matter import KNOWN_KEYS, front_matter_end, render_front_matter
from chatloop.format.read import (
    UNREADABLE,
    Document,
    Facts,
    Plain,
    message_from,
    open_document,
    parse_markdown,
    plain_facts,
)
from chatloop.format.render import (
    UNFINISHED,
    close_unfinished,
    render_frame,
    render_header,
    render_markdown,
    render_unfinished,
)
from chatloop.format.resealing import HEAD_DAMAGE, reseal
from chatloop.format.skimming import (
    GLANCE_BYTES,
    Skim,
    glance,
    glance_wants_tail,
    skim,
    skim_of,
    words_of,
)
from chatloop.format.summary import SummaryLookup, find_summary
from chatloop.format.values import (
    FORMAT_VERSION,
    ROLES,
    STATUSES,
    Message,
    ParseResult,
    Problem,
    Role,
    Session,
    SessionMeta,
    Thinking,
    ToolCall,
    ToolResult,
    Totals,
    Usage,
    empty_reply,
    exchanges,
    new_key,
    no_text,
)

__all__ = [
    "FORMAT_VERSION",
    "GLANCE_BYTES",
    "HEAD_DAMAGE",
    "KNOWN_KEYS",
    "ROLES",
    "STATUSES",
    "SUMMARY_END",
    "SUMMARY_START",
    "UNFINISHED",
    "UNREADABLE",
    "Document",
    "Facts",
    "Flaw",
    "Frame",
    "Message",
    "ParseResult",
    "Plain",
    "Problem",
    "Role",
    "Session",
    "SessionMeta",
    "Skim",
    "SummaryLookup",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "Totals",
    "Usage",
    "close_unfinished",
    "display_name",
    "empty_reply",
    "exchanges",
    "find_summary",
    "front_matter_end",
    "glance",
    "glance_wants_tail",
    "iter_frames",
    "message_from",
    "new_key",
    "no_text",
    "open_document",
    "parse_markdown",
    "plain_facts",
    "render_frame",
    "render_front_matter",
    "render_header",
    "render_markdown",
    "render_unfinished",
    "reseal",
    "skim",
    "skim_of",
    "words_of",
]
