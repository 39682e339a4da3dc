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

Dumping uses the safe dumper, which quotes any string that would otherwise
resolve to another type, so what we write reads back as what we meant.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from frontmatter.default_handlers import YAMLHandler

MAX_FRONT_MATTER_BYTES = 64 * 1024


class FrontMatterError(ValueError):
    """The front matter is not safe, strict YAML mapping."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with YAML-1.2-core-like scalars and no aliases."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
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


class _ExactDumper(yaml.SafeDumper):
    """SafeDumper that double-quotes (and so escapes) any string with unprintable
    characters: YAML folds NEL, LS, PS and CR in other styles, which would lose them."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = None if value.isprintable() else '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ExactDumper.add_representer(str, _represent_str)
_HANDLER = YAMLHandler()


def load(text: str) -> dict[str, Any]:
    """Parse front matter text into a mapping, or raise FrontMatterError."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_FRONT_MATTER_BYTES:
        raise FrontMatterError(f"front matter is larger than {MAX_FRONT_MATTER_BYTES} bytes")
    try:
        data = _HANDLER.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise FrontMatterError(f"front matter is not valid YAML: {_first_line(exc)}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FrontMatterError("front matter is not a mapping of keys to values")
    return {str(k): v for k, v in data.items()}


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
