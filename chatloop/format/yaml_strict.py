"""Strict, safe YAML for session front matter.

The front matter is loaded through python-frontmatter's ``YAMLHandler``, pinned
(no format auto-detection: a session file is YAML or it is broken), with a
loader that is stricter than ``SafeLoader``:

- only ``null``/``~``/empty, ``true``/``false`` and plain decimal integers are
  resolved; everything else stays a string (``title: no`` is ``"no"``, an ISO
  date is a string, ``0x1F`` is a string);
- aliases are refused (no "billion laughs");
- unknown tags such as ``!!python/object`` are refused by the safe constructor;
- the text is capped at ``MAX_FRONT_MATTER_BYTES``.

Text without a ``*`` cannot hold an alias, so it is parsed by libyaml (about
seven times faster; the index reads every file's front matter) with the same
scalar rules; anything else goes through the pure-Python strict loader.

Dumping uses the safe dumper, which quotes any string that would otherwise
resolve to another type, so what we write reads back as what we meant.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from frontmatter.default_handlers import YAMLHandler

MAX_FRONT_MATTER_BYTES = 64 * 1024


__all__ = [
    "MAX_FRONT_MATTER_BYTES",
    "UNSURE",
    "FrontMatterError",
    "dump",
    "load",
    "read_scalar",
    "simple_load",
]


class FrontMatterError(ValueError):
    """The front matter is not safe, strict YAML mapping."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with YAML-1.2-core-like scalars and no aliases."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise FrontMatterError(
                f"YAML aliases are not allowed (line {event.start_mark.line + 1})"
            )
        return super().compose_node(parent, index)


_StrictLoader.yaml_implicit_resolvers = {}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789")
)

if getattr(yaml, "__with_libyaml__", False):

    class _FastStrictLoader(yaml.CSafeLoader):
        """libyaml's parser with the same strict scalars; used only for text without
        a ``*``, which therefore holds no alias (aliases are ``*name``)."""

    _FastStrictLoader.yaml_implicit_resolvers = _StrictLoader.yaml_implicit_resolvers
    _FAST: type | None = _FastStrictLoader
else:  # pragma: no cover - PyYAML built without libyaml
    _FAST = None


class _ExactDumper(yaml.SafeDumper):
    """SafeDumper that double-quotes (and so escapes) any string with unprintable
    characters: YAML folds NEL, LS, PS and CR in other styles, which would lose them."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = None if value.isprintable() else '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _represent_list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.Node:
    """Lists on one line (``pins: [a, 'b: c']``), so a changed list rewrites one line
    of the front matter and the comments around it stay."""
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=True)


_ExactDumper.add_representer(str, _represent_str)
_ExactDumper.add_representer(list, _represent_list)
_HANDLER = YAMLHandler()


def load(text: str) -> dict[str, Any]:
    """Parse front matter text into a mapping, or raise FrontMatterError."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FRONT_MATTER_BYTES:
        raise FrontMatterError(f"front matter is larger than {MAX_FRONT_MATTER_BYTES} bytes")
    simple = simple_load(text)
    if simple is not None:
        return simple
    loader = _FAST if _FAST is not None and "*" not in text else _StrictLoader
    try:
        data = _HANDLER.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise FrontMatterError(f"front matter is not valid YAML: {_first_line(exc)}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FrontMatterError("front matter is not a mapping of keys to values")
    return {str(k): v for k, v in data.items()}


# The shape ``dump`` writes for session front matter: ``key: scalar`` lines and
# one level of two-space-indented ``key: scalar`` lines under ``key:``.
_LINE_RE = re.compile(r"( {2})?([a-z_][a-z0-9_]*):(?: (.*))?")
_PLAIN_RE = re.compile(r"[A-Za-z0-9_/.(][^\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff#'\"]*")
_DIGITS_RE = re.compile(r"[-+]?[0-9]+")  # what the strict loader reads as an integer
_INT_RE = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")  # no leading zeros: YAML reads those as octal
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}


def simple_load(text: str) -> dict[str, Any] | None:
    """Read front matter in the plain shape ``dump`` writes, or None to leave it to
    YAML. Only values whose meaning is certain are taken: plain words without YAML
    punctuation, single-quoted strings, integers, null and booleans."""
    data: dict[str, Any] = {}
    parent: dict[str, Any] | None = None
    for line in text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"):
        match = _LINE_RE.fullmatch(line)
        if match is None:
            return None
        indent, key, raw = match.groups()
        if indent and parent is None:
            return None
        target = parent if indent else data
        if target is None or key in target:
            return None
        if raw is None:  # "key:" opens a nested mapping (or is null when nothing follows)
            if indent:
                return None
            parent = data[key] = {}
            continue
        if not indent:
            parent = None
        value = read_scalar(raw)
        if value is UNSURE:
            return None
        target[key] = value
    return {k: (None if v == {} else v) for k, v in data.items()}


UNSURE = object()


def read_scalar(raw: str) -> Any:
    """A plain YAML scalar as the strict loader would read it, or ``UNSURE``."""
    if raw in _NULLS:
        return None
    if raw in _BOOLS:
        return _BOOLS[raw]
    if _DIGITS_RE.fullmatch(raw):
        return int(raw) if _INT_RE.fullmatch(raw) else UNSURE
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        inner = raw[1:-1]
        if "'" in inner.replace("''", "") or not inner.isprintable():
            return UNSURE
        return inner.replace("''", "'")
    if _PLAIN_RE.fullmatch(raw) and ": " not in raw and not raw.endswith((":", " ")):
        return raw
    return UNSURE


def dump(data: dict[str, Any]) -> str:
    """Render a mapping as block-style YAML, keys in the given order, ending in a newline."""
    text = yaml.dump(
        data,
        Dumper=_ExactDumper,
        default_flow_style=False,
        allow_unicode=True,
        sort_keys=False,
        width=1_000_000,
    )
    return text


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
