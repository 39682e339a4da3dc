"""What a server was measured to be, kept in the home so that each process need not ask.

Every chatloop process (a chat, a one-shot, a summary worker) used to measure the
server it talks to: which tokenizer endpoint answers, what the chat template adds
to a prompt (two one-token completions) and the context window. On a one-slot
server each such request waits behind a generation and evicts the slot's cached
prompt. The answers depend on the server and its model only, so they are kept.

The contract:

- **Where**: ``<home>/probes.json`` (``config.chatloop_home``: the person's home, not
  the sessions folder), 0600, replaced atomically (``fsio.atomic_rewrite``): a
  reader sees the old file or the new one, never a torn one.
- **Key**: the backend's kind, its base URL, the model asked for, and the models the
  server lists (``GET /v1/models``: a llama.cpp server lists its model file, so a
  restart with another file on the same URL is another key). Keys of other servers
  and models stay (switching back measures nothing); the ``MAX_ENTRIES`` most
  recently written are kept.
- **What**: the window the server says (0: it says none), the tokenizer endpoint
  that answers (a path of the two chatloop knows, never a URL: the file cannot send
  a text elsewhere; "": the server has none) with the tokens it adds to every text,
  and the template's overhead (per message, per prompt; empty: it cannot be
  measured). A field is written only once the server answered it for certain: a
  probe that timed out (a busy server) is asked again by the next process.
- **When re-measured**: for a key not in the file (a new server, another model, a
  model file changed), and for a field the entry lacks. A measurement is never
  refreshed otherwise: a server restarted with another context size but the same
  model keeps the window it had (``context_window`` in the config overrides it;
  removing the file measures everything again).
- **A damaged file** (not JSON, not an object, a field of the wrong type, too large)
  is read as empty, field by field, and rewritten whole at the next measurement. A
  file that cannot be written loses nothing but the saving: the values measured
  serve this process, and the next one measures again.

Two processes measuring at once both write; each write reads the file again and
replaces only its own key, so the last one wins for that key and no other is lost
except by a race of a few milliseconds (which costs a measurement, nothing more).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chatloop.errors import ChatloopError

PROBES_NAME = "probes.json"
MAX_BYTES = 1_000_000  # the file is read whole; a larger one is damaged
MAX_ENTRIES = 64  # servers and models remembered
TOKENIZERS = ("/tokenize", "/extras/tokenize/count")  # the paths a tokenizer may have

__all__ = ["MAX_ENTRIES", "PROBES_NAME", "TOKENIZERS", "Measured", "Probes", "probe_key"]


@dataclass(frozen=True)
class Measured:
    """One server and model's measurements; ``None`` for what was not measured yet."""

    window: int | None = None  # 0: the server does not say
    tokenizer: str | None = None  # a path of TOKENIZERS; "": the server has none
    count_base: int = 0  # tokens the tokenizer adds to every text (a BOS)
    overhead: tuple[int, ...] | None = None  # (per message, per prompt); (): cannot be


def probe_key(kind: str, base_url: str, model: str, served: Sequence[str]) -> str:
    """The key of a server and model (see the module doc)."""
    return json.dumps([kind, base_url.rstrip("/"), model, sorted(served)])


class Probes:
    """The measurements kept in ``home`` (see the module doc). Reads and writes the
    file at each call: nothing is held between them, so every process sees what the
    others wrote."""

    def __init__(self, home: Path) -> None:
        self.path = home / PROBES_NAME

    def get(self, key: str) -> Measured:
        """What is kept for ``key``: ``Measured()`` when nothing is (or the file is
        damaged); a field of the wrong shape is left out (measured again)."""
        found = self._entries().get(key)
        return _measured(found) if isinstance(found, dict) else Measured()

    def put(self, key: str, measured: Measured) -> None:
        """Keep ``measured`` for ``key``, replacing what was kept for it; the oldest
        keys past ``MAX_ENTRIES`` go. Never raises: a file that cannot be written
        only costs the next process a measurement."""
        from chatloop.store import fsio

        entries = self._entries()
        entries.pop(key, None)
        entries[key] = {**_plain(measured), "at": time.time()}
        kept = sorted(entries.items(), key=lambda item: _when(item[1]))[-MAX_ENTRIES:]
        data = json.dumps({"version": 1, "servers": dict(kept)}, indent=1) + "\n"
        try:
            fsio.ensure_dir(self.path.parent)
            fsio.atomic_rewrite(self.path, data.encode("utf-8"))
        except (ChatloopError, OSError):
            return

    def _entries(self) -> dict[str, Any]:
        from chatloop.store import fsio

        try:
            with fsio.open_read(self.path) as handle:
                data = json.loads(handle.read(MAX_BYTES + 1))
        except (ChatloopError, OSError, ValueError, RecursionError):
            return {}
        servers = data.get("servers") if isinstance(data, dict) else None
        return dict(servers) if isinstance(servers, dict) else {}


def _when(entry: Any) -> float:
    at = entry.get("at") if isinstance(entry, dict) else None
    return float(at) if isinstance(at, int | float) else 0.0


def _count(value: Any) -> int | None:
    """A non-negative int from the file, else None (``bool`` is no count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _measured(entry: dict[str, Any]) -> Measured:
    tokenizer = entry.get("tokenizer")
    overhead = entry.get("overhead")
    parts = [_count(v) for v in overhead] if isinstance(overhead, list) else [None]
    return Measured(
        window=_count(entry.get("window")),
        tokenizer=tokenizer if tokenizer in ("", *TOKENIZERS) else None,
        count_base=_count(entry.get("count_base")) or 0,
        overhead=(
            tuple(p for p in parts if p is not None)
            if len(parts) in (0, 2) and None not in parts
            else None
        ),
    )


def _plain(measured: Measured) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if measured.window is not None:
        out["window"] = measured.window
    if measured.tokenizer is not None:
        out["tokenizer"] = measured.tokenizer
        out["count_base"] = measured.count_base
    if measured.overhead is not None:
        out["overhead"] = list(measured.overhead)
    return out
