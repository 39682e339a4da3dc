"""The front matter of a session file: split, load, check, render.

The YAML is read and written only through ``chatloop.format.yaml_strict``
(safe, strict, size-capped). Known keys come first in a fixed order; keys a
person adds are kept in ``SessionMeta.extra`` and written back after them.

Reading never raises for damage. A byte order mark, CRLF line endings, YAML
that does not parse, front matter over the size cap or not a mapping, a
naive date, a count out of range: each becomes a problem on that file, and
as much as can be read is kept. When the YAML cannot be loaded, the known
keys are salvaged line by line and the id falls back to the file's name, so
a damaged session keeps its place in its chain.

Rewriting (``rewrite_front_matter``) edits the person's block in place: only
the lines of the keys whose values changed are replaced, and every other byte
(comments, blank lines, key order, unknown keys) is kept. When that cannot be
done with certainty it falls back to ``render_front_matter``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from chatloop.format import yaml_strict
from chatloop.format.values import FORMATS, SessionMeta, is_key

if TYPE_CHECKING:  # PyYAML loads only to edit front matter in place (``_patch``)
    import yaml

BOM = b"\xef\xbb\xbf"
MAX_COUNT = 2**53  # counts above this are damage, not usage (and overflow SQLite)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TITLE_CHARS = 200  # a title is cut to this many characters when written
# A model id is cut to this many characters when written: a server may answer with
# any text, and a child inherits it, so an unbounded one could make front matter the
# reader refuses (over yaml_strict.MAX_FRONT_MATTER_BYTES) and a session never finalized.
MAX_MODEL_CHARS = 1000

__all__ = [
    "BOM",
    "KNOWN_KEYS",
    "MAX_COUNT",
    "MAX_MODEL_CHARS",
    "MAX_TITLE_CHARS",
    "Head",
    "bounded",
    "check_count",
    "check_number",
    "check_time",
    "front_matter_end",
    "read_head",
    "render_front_matter",
    "rewrite_front_matter",
]

KNOWN_KEYS = [
    "format",
    "id",
    "title",
    "agent",
    "agent_name",
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
    "summary_key",
    "summary_at",
    "summary_leaves",
    "pins",
    "system",
]
MAX_PINS, MAX_PIN_CHARS = 50, 500  # pinned facts: how many, and how long each
_ID_RE = re.compile(r"\d{8}-\d{6}-[0-9a-f]{8}")


class Head:
    """What comes before the first frame: the meta, where the body starts, problems.

    ``body_start`` is an offset into the bytes given to ``read_head`` (after a
    BOM if there is one). ``has_front_matter`` is False for a file that is not a
    session at all (its body is not scanned for frames).
    """

    __slots__ = ("body_start", "has_front_matter", "meta", "problems")

    def __init__(
        self,
        meta: SessionMeta,
        body_start: int,
        problems: list[tuple[str, str]],
        has_front_matter: bool,
    ) -> None:
        self.meta = meta
        self.body_start = body_start
        self.problems = problems
        self.has_front_matter = has_front_matter


def front_matter_end(data: bytes, start: int = 0) -> int:
    """Offset just past the closing ``---`` line of front matter at ``start``, or -1."""
    if not data.startswith(b"---\n", start):
        return -1
    close = data.find(b"\n---\n", start + 3)
    return -1 if close < 0 else close + len(b"\n---\n")


def read_head(data: bytes, name: str = "") -> Head:
    """Split and load the front matter at the start of ``data`` (LF line endings;
    callers convert a CRLF file first, see ``is_crlf``). ``name`` is the file's
    stem: the id when the front matter does not give a valid one."""
    problems: list[tuple[str, str]] = []
    start = 0
    if data.startswith(BOM):
        start = len(BOM)
        problems.append(("bom", "the file starts with a byte order mark; ignored"))
    if not data.startswith(b"---\n", start):
        problems.append(("front_matter", "no front matter; file is not a session"))
        return Head(_fallback(name), start, problems, False)
    end = front_matter_end(data, start)
    if end < 0:
        problems.append(("front_matter", "front matter is not closed by ---"))
        return Head(_fallback(name), len(data), problems, True)
    raw_bytes = data[start + 4 : end - 4]
    try:
        raw = yaml_strict.load(raw_bytes.decode("utf-8"))
    except (yaml_strict.FrontMatterError, UnicodeDecodeError) as exc:
        problems.append(("front_matter", f"{exc}; known keys salvaged line by line"))
        raw = _salvage(raw_bytes.decode("utf-8", "replace"))
    return Head(meta_from_dict(raw, name, problems), end, problems, True)


def is_crlf(data: bytes) -> bool:
    """True for a session file converted to CRLF line endings (its first line says so)."""
    return data.startswith(b"---\r\n") or data.startswith(BOM + b"---\r\n")


def _salvage(text: str) -> dict[str, Any]:
    """Top-level ``key: value`` lines of front matter YAML could not load; plain
    scalars are read as YAML reads them, anything else as text (quotes removed)."""
    found: dict[str, Any] = {}
    for line in text.split("\n")[:200]:
        match = re.fullmatch(r"([a-z_]+): ?(.*)", line.rstrip("\r"))
        if match is None or match.group(1) in found or match.group(1) == "tokens":
            continue
        raw = match.group(2).strip()
        value = yaml_strict.read_scalar(raw) if len(raw) < 4096 else yaml_strict.UNSURE
        if value is yaml_strict.UNSURE:
            value = raw.strip("'\"")
        found[match.group(1)] = value
    return found


def _fallback(name: str) -> SessionMeta:
    return SessionMeta(
        id=name if _ID_RE.fullmatch(name) else "", created=EPOCH, updated=EPOCH, format=1
    )


def check_count(value: object, what: str, notes: list[tuple[str, str]]) -> int:
    """A non-negative whole count, or 0 with a ``range`` problem."""
    if value is None:
        return 0
    found = check_number(value, what, "read as 0", notes)
    return 0 if found is None else found


def check_number(
    value: object, what: str, instead: str, notes: list[tuple[str, str]]
) -> int | None:
    """A whole number from 0 to ``MAX_COUNT`` (an int, a whole float or digits), or
    None with a ``range`` problem saying what is done ``instead``: every number read
    from a file passes here, so a huge, negative, fractional or boolean one is a
    problem on that file, never an overflow further on (a seek, SQLite)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        notes.append(("range", f"{what} is not a number; {instead}"))
        return None
    if isinstance(value, str):
        if not value.strip().isdigit():
            notes.append(("range", f"{what} is not a number; {instead}"))
            return None
        value = int(value.strip()) if len(value) < 40 else MAX_COUNT + 1
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        notes.append(("range", f"{what} is not a whole number; {instead}"))
        return None
    if not 0 <= value <= MAX_COUNT:
        notes.append(("range", f"{what} is out of range; {instead}"))
        return None
    return int(value)


def check_time(value: object, what: str, notes: list[tuple[str, str]]) -> datetime | None:
    """An aware datetime from ISO 8601 text; a naive one is taken as UTC (with a
    ``naive_time`` problem); None (with a problem) when it cannot be read."""
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        notes.append(
            (
                "front_matter" if what in ("created", "updated") else "damaged",
                f"{what} is not an ISO 8601 time",
            )
        )
        return None
    if parsed.tzinfo is None:  # fromisoformat gives a fixed offset or none at all
        notes.append(("naive_time", f"{what} has no UTC offset; taken as UTC"))
        return parsed.replace(tzinfo=UTC)
    return parsed


def meta_from_dict(raw: dict[str, Any], name: str, problems: list[tuple[str, str]]) -> SessionMeta:
    """The meta from loaded front matter, every value checked (see module doc)."""
    tokens = raw.get("tokens") if isinstance(raw.get("tokens"), dict) else {}
    assert isinstance(tokens, dict)
    extra = {k: v for k, v in raw.items() if k not in KNOWN_KEYS}
    for key in extra:
        problems.append(("unknown_key", f"front matter key {key!r} kept as is"))

    def text(key: str) -> str:
        value = raw.get(key)
        return "" if value is None else str(value)

    def optional(key: str) -> str | None:
        value = raw.get(key)
        return None if value is None else str(value)

    version = raw.get("format", 0)
    if version not in FORMATS:  # 0: the reader tells the format from the frames
        if "format" in raw:
            problems.append(("front_matter", f"format {version!r} is not known"))
        version = 0
    session_id = text("id") or (name if _ID_RE.fullmatch(name) else "")
    created = check_time(text("created"), "created", problems) if "created" in raw else None
    updated = check_time(text("updated"), "updated", problems) if "updated" in raw else None
    created = created or updated or EPOCH
    summary_key = optional("summary_key")
    summary_at = raw.get("summary_at")
    if summary_key is not None and not is_key(summary_key):
        summary_key = None
    if summary_at is not None:  # an offset into the file: a huge one would overflow a seek
        summary_at = check_number(
            summary_at, "summary_at", "the summary is looked for in the file", problems
        )
    pins = raw.get("pins")
    if pins is not None and not (isinstance(pins, list) and all(isinstance(p, str) for p in pins)):
        problems.append(("front_matter", "pins is not a list of texts; ignored"))
        pins = None
    return SessionMeta(
        id=session_id,
        created=created,
        updated=updated or created,
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
        queries=check_count(raw.get("queries"), "queries", problems),
        tokens_in=check_count(tokens.get("in"), "tokens.in", problems),
        tokens_out=check_count(tokens.get("out"), "tokens.out", problems),
        restoration_tokens=check_count(tokens.get("restoration"), "tokens.restoration", problems),
        summary=optional("summary"),
        extra=extra,
        format=int(version),
        agent_name=text("agent_name"),
        summary_key=summary_key if summary_at is not None else None,
        summary_at=summary_at if summary_key is not None else None,
        summary_leaves=check_count(raw.get("summary_leaves"), "summary_leaves", problems),
        pins=tuple(p[:MAX_PIN_CHARS] for p in (pins or [])[:MAX_PINS]),
        system=optional("system"),
    )


def bounded(meta: SessionMeta) -> SessionMeta:
    """``meta`` with its title and model id cut to ``MAX_TITLE_CHARS`` and
    ``MAX_MODEL_CHARS``: what is written, so that front matter a session passes on to
    its children stays one the reader accepts. Reading never cuts (a hand-edited file
    reads back as it is)."""
    if len(meta.title) <= MAX_TITLE_CHARS and len(meta.model) <= MAX_MODEL_CHARS:
        return meta
    return dataclasses.replace(
        meta, title=meta.title[:MAX_TITLE_CHARS], model=meta.model[:MAX_MODEL_CHARS]
    )


def render_front_matter(meta: SessionMeta) -> bytes:
    """The front matter block alone, ``---`` lines included, in the meta's format
    (title and model id cut: ``bounded``)."""
    return f"---\n{yaml_strict.dump(_meta_to_dict(bounded(meta)))}---\n".encode()


def _meta_to_dict(meta: SessionMeta) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": meta.format,
        "id": meta.id,
        "title": meta.title,
        "agent": meta.agent,
    }
    if meta.format >= 2:
        data["agent_name"] = meta.agent_name
    else:
        data["agent_path"] = meta.agent_path
    data.update(
        {
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
    )
    if meta.format >= 2 and meta.summary_key is not None:
        data["summary_key"] = meta.summary_key
        data["summary_at"] = meta.summary_at
    if meta.summary_leaves:
        data["summary_leaves"] = meta.summary_leaves
    if meta.pins:
        data["pins"] = list(meta.pins)
    if meta.system is not None:
        data["system"] = meta.system
    for key, value in meta.extra.items():
        if key not in data and key not in KNOWN_KEYS:
            data[key] = value
    return data


# ---------------------------------------------------------------- rewriting in place

# Characters YAML also counts as line breaks (or that a reader strips): with any of
# them in the text, node positions and our lines could disagree, so no patching.
_ODD_BREAKS = ("\r", "\x85", "\u2028", "\u2029", "\ufeff")
# What may follow a single-line value on its line: spaces, then perhaps a comment.
_TRAILING_RE = re.compile(r"(?:[ \t]+#[^\n]*)?[ \t]*")

_Edit = tuple[int, int, str]  # replace text[start:end] with the string


def rewrite_front_matter(original: bytes, new: SessionMeta) -> bytes:
    """The front matter block (``---`` lines included) for ``new``, made by editing
    ``original`` (a block as ``render_front_matter`` gives, or a whole file: bytes
    after its closing ``---`` line are ignored) in place.

    Only keys whose value in the file differs from ``new`` (as ``_meta_to_dict``
    writes them, the ``tokens`` counters one by one) are rewritten, each dumped
    as ``yaml_strict.dump`` would; a comment after a rewritten single-line value
    stays on its line. Keys ``new`` has and the file lacks are added before the
    closing ``---``, in the usual order. Everything else is kept byte for byte:
    comments, blank lines, key order, unknown keys, and the lines of unchanged
    keys even where chatloop would write them differently.

    The baseline is what the file says, not what the caller last knew, so the
    result is right even when the file was edited since. When the block cannot be
    edited with certainty (it does not load, was salvaged, a changed value spans
    lines, a flow mapping for ``tokens``, ...) or the edited block would not load
    back to exactly ``new``, the result is ``render_front_matter(new)``. The title
    and model id written are cut (``bounded``).
    """
    new = bounded(new)
    rendered = render_front_matter(new)
    try:
        patched = _patch(original, new)
    except (
        yaml_strict.yaml_error(),
        yaml_strict.FrontMatterError,
        ValueError,
        TypeError,
        RecursionError,
    ):
        patched = None
    if patched is None or patched == rendered or not _loads_as(patched, new):
        return rendered
    return patched


def _patch(original: bytes, new: SessionMeta) -> bytes | None:
    end = front_matter_end(original)
    if end < 0:
        return None
    head = read_head(original[:end])
    if any(kind == "front_matter" for kind, _ in head.problems):
        return None  # not loaded (salvaged, over the cap, unknown format...): re-render
    text = original[4 : end - 4].decode("utf-8")
    if any(ch in text for ch in _ODD_BREAKS) or (text and not text.endswith("\n")):
        return None
    import yaml

    root = yaml.compose(text, Loader=yaml.SafeLoader)  # positions only; loading was strict
    entries: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    if root is not None:
        if not isinstance(root, yaml.MappingNode) or root.flow_style:
            return None
        for key_node, value_node in root.value:
            if (
                not isinstance(key_node, yaml.ScalarNode)
                or key_node.value in entries
                or not _starts_line(text, key_node.start_mark.index)
            ):
                return None
            entries[key_node.value] = (key_node, value_node)
    current = _meta_to_dict(head.meta)
    edits: list[_Edit] = []
    missing: dict[str, Any] = {}
    for key, value in _meta_to_dict(new).items():
        if key not in entries:
            missing[key] = value
        elif key == "tokens" and isinstance(node := entries[key][1], yaml.MappingNode):
            if not _patch_tokens(text, node, value, current.get(key), edits):
                return None
        elif key not in current or not _same(current[key], value):
            edit = _replace_value(text, entries[key], key, value)
            if edit is None:
                return None
            edits.append(edit)
    if missing:
        edits.append((len(text), len(text), yaml_strict.dump(missing)))
    return f"---\n{_apply(text, edits)}---\n".encode()


def _patch_tokens(
    text: str, node: yaml.MappingNode, target: dict[str, int], now: object, edits: list[_Edit]
) -> bool:
    """Edit the counters of a block ``tokens:`` mapping one by one; False if unsure."""
    import yaml

    if node.flow_style or not node.value or not isinstance(now, dict):
        return False
    subs: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    columns = set()
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.value in subs:
            return False
        start = key_node.start_mark.index
        if text[text.rfind("\n", 0, start) + 1 : start].strip(" "):
            return False  # something other than indentation before the key
        columns.add(key_node.start_mark.column)
        subs[key_node.value] = (key_node, value_node)
    if len(columns) != 1:
        return False
    missing: dict[str, int] = {}
    for sub, value in target.items():
        if sub not in subs:
            missing[sub] = value
        elif sub not in now or not _same(now[sub], value):
            edit = _replace_value(text, subs[sub], sub, value)
            if edit is None or "\n" in edit[2]:
                return False
            edits.append(edit)
    if missing:
        last_key, last_value = node.value[-1]
        if "\n" in text[last_key.start_mark.index : last_value.end_mark.index]:
            return False  # the last counter spans lines: no safe place to add after it
        at = text.find("\n", last_value.end_mark.index)
        indent = " " * columns.pop()
        lines = yaml_strict.dump(missing).splitlines()
        edits.append((at, at, "".join(f"\n{indent}{line}" for line in lines)))
    return True


def _replace_value(
    text: str, entry: tuple[yaml.Node, yaml.Node], key: str, value: Any
) -> _Edit | None:
    """The edit that writes ``key: value`` over a key and its value written on one line,
    keeping what follows on that line (a comment); None when the value spans lines."""
    key_node, value_node = entry
    start, stop = key_node.start_mark.index, value_node.end_mark.index
    if "\n" in text[start:stop]:
        return None
    line_end = text.find("\n", stop)
    line_end = len(text) if line_end < 0 else line_end
    rest = text[stop:line_end]
    if not _TRAILING_RE.fullmatch(rest):
        return None
    dumped = yaml_strict.dump({key: value}).rstrip("\n")
    if "\n" not in dumped:
        return (start, stop, dumped)
    if key_node.start_mark.column != 0:
        return None
    comment = rest.strip()  # a value now on several lines: its comment goes above it
    return (start, line_end, f"{comment}\n{dumped}" if comment else dumped)


def _apply(text: str, edits: list[_Edit]) -> str:
    edits.sort(key=lambda e: (e[0], e[1]))
    for (_, end_a, _), (start_b, _, _) in itertools.pairwise(edits):
        if start_b < end_a:
            raise ValueError("overlapping front matter edits")
    for start, end, replacement in reversed(edits):
        text = text[:start] + replacement + text[end:]
    return text


def _starts_line(text: str, index: int) -> bool:
    return index == 0 or text[index - 1] == "\n"


def _loads_as(block: bytes, meta: SessionMeta) -> bool:
    """True when ``block`` reads back as exactly ``meta`` (types and time offsets too)."""
    head = read_head(block)
    if any(kind == "front_matter" for kind, _ in head.problems):
        return False
    return all(
        _same(getattr(head.meta, f.name), getattr(meta, f.name))
        for f in dataclasses.fields(SessionMeta)
    )


def _same(a: object, b: object) -> bool:
    """Equal and of the same types all the way down (``True`` is not ``1``); times
    equal only with the same offset; mapping order does not matter."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, datetime) and isinstance(b, datetime):
        return a.isoformat() == b.isoformat()
    return bool(a == b)
