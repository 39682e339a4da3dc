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

import functools
import re
from types import SimpleNamespace
from typing import Any

MAX_FRONT_MATTER_BYTES = 64 * 1024


__all__ = [
    "MAX_FRONT_MATTER_BYTES",
    "UNSURE",
    "FrontMatterError",
    "dump",
    "load",
    "read_scalar",
    "simple_load",
    "yaml_error",
]


class FrontMatterError(ValueError):
    """The front matter is not safe, strict YAML mapping."""


@functools.cache
def _yaml() -> SimpleNamespace:
    """PyYAML and what is built on it, made on first use: the front matter chatloop
    writes reads without it (``simple_load``), so listing and search never load it.
    ``strict``: SafeLoader with YAML-1.2-core-like scalars and no aliases; ``fast``:
    libyaml's parser with the same scalars, for text without a ``*`` (which holds no
    alias); ``dumper``: SafeDumper that double-quotes strings with unprintable
    characters (YAML folds NEL, LS, PS and CR in other styles) and writes lists on
    one line (``pins: [a, 'b: c']``, so a changed list rewrites one line)."""
    import yaml
    from frontmatter.default_handlers import YAMLHandler

    class StrictLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise FrontMatterError(
                    f"YAML aliases are not allowed (line {event.start_mark.line + 1})"
                )
            return super().compose_node(parent, index)

    StrictLoader.yaml_implicit_resolvers = {}
    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
    )
    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:bool",
        re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        list("tTfF"),
    )
    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789")
    )
    fast: type | None = None
    if getattr(yaml, "__with_libyaml__", False):

        class FastStrictLoader(yaml.CSafeLoader):
            pass

        FastStrictLoader.yaml_implicit_resolvers = StrictLoader.yaml_implicit_resolvers
        fast = FastStrictLoader

    class ExactDumper(yaml.SafeDumper):
        pass

    def represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = None if value.isprintable() else '"'
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    def represent_list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.Node:
        return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=True)

    ExactDumper.add_representer(str, represent_str)
    ExactDumper.add_representer(list, represent_list)
    return SimpleNamespace(
        yaml=yaml, handler=YAMLHandler(), strict=StrictLoader, fast=fast, dumper=ExactDumper
    )


def load(text: str, plain: bool = True) -> dict[str, Any]:
    """Parse front matter text into a mapping, or raise FrontMatterError. ``plain``:
    text in the shape ``dump`` writes is read without YAML (``simple_load``, which
    reads exactly what the strict loader reads); False always asks YAML."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FRONT_MATTER_BYTES:
        raise FrontMatterError(f"front matter is larger than {MAX_FRONT_MATTER_BYTES} bytes")
    simple = simple_load(text) if plain else None
    if simple is not None:
        return simple
    if text.count("[") + text.count("{") > MAX_NESTING and _nesting(text) > MAX_NESTING:
        # libyaml would build it (or, deep enough, overflow its C stack: a crash no
        # except catches), and every later use of the value recurses that deep
        raise FrontMatterError(f"front matter nests values more than {MAX_NESTING} deep")
    made = _yaml()
    loader = made.fast if made.fast is not None and "*" not in text else made.strict
    try:
        data = made.handler.load(text, Loader=loader)
    except (made.yaml.YAMLError, ValueError, RecursionError) as exc:
        # (PyYAML raises ValueError for an escape past U+10FFFF, "\U10010000", and a
        # deep enough nesting of brackets exhausts its recursive composer)
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise FrontMatterError(
            f"front matter is not valid YAML{where}: {_first_line(exc)}"
        ) from exc
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
        if (indent and parent is None) or key in _NULLS or key in _BOOLS:
            return None  # (YAML reads the key "true" as True, "null" as None)
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
    made = _yaml()
    text: str = made.yaml.dump(
        data,
        Dumper=made.dumper,
        default_flow_style=False,
        allow_unicode=True,
        sort_keys=False,
        width=1_000_000,
    )
    return text


def yaml_error() -> type[Exception]:
    """PyYAML's base error class (loading PyYAML)."""
    error: type[Exception] = _yaml().yaml.YAMLError
    return error


MAX_NESTING = 32  # brackets in brackets: session front matter never nests past 2


def _nesting(text: str) -> int:
    """How deep ``[``/``{`` nest in ``text`` at most, quotes not considered (so it may
    only say deeper than YAML would: enough to refuse a hostile block)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}" and depth:
            depth -= 1
    return deepest


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
