"""THE rule that chooses the model server (and model) of a chat, new or continued.

One function, ``connect``, is called by every entry point that starts or
continues a chat: a new chat, ``-c``/``-r``, the picker, ``search --resume``
and ``/resume`` in a chat. The rule, stated once (docs/chains.md):

1. A server the person configured (``--base-url``, ``--backend`` other than
   ``auto``, a config file or ``CHATLOOP_*`` variable) is used, always.
2. Otherwise a continued session's own server (``backend_url`` in its front
   matter) is tried first, but only when it is a plain URL of this machine's
   loopback (``detect.held_candidates``): a session file never sends a
   conversation elsewhere by itself. Then the usual local ports, then the
   embedded model. When the session's server no longer answers, a note says
   which one is used instead.
3. The model: the configured one; else, on the session's own server, the
   model it was held with when that server still lists it; else the server's
   first.

What the person should know (the notes above) is returned, never printed:
the caller shows it, as untrusted text (a URL comes from a file). A server
that does not answer raises ``Unreachable``
with a hint, before anything is saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chatloop.backends.base import Backend
from chatloop.backends.detect import Candidate
from chatloop.chat.bounded import within
from chatloop.config import STARTUP_CHECK_S, Settings
from chatloop.errors import BackendError, ChatloopError, Unreachable
from chatloop.format import SessionMeta


@dataclass(frozen=True)
class Held:
    """The server and model a session was held with (from its front matter); empty
    when it names none, or names the embedded model."""

    url: str = ""
    model: str = ""

    @classmethod
    def of(cls, meta: SessionMeta | None) -> Held:
        if meta is None or not meta.backend_url.startswith(("http://", "https://")):
            return cls()
        return cls(meta.backend_url, meta.model)


@dataclass(frozen=True)
class Connected:
    """The backend the rule chose, and what to tell the person about the choice.
    ``busy``: the server did not list its models within the check's bound (a one-slot
    server generating for someone else): the chat goes on without waiting for it."""

    backend: Backend
    notes: tuple[str, ...] = ()
    busy: bool = False


def configured(settings: Settings) -> bool:
    """True when the person named a server (rule 1): it wins over a session's own."""
    return settings.backend != "auto" or bool(settings.base_url)


def make(
    settings: Settings,
    candidates: tuple[Candidate, ...] | None = None,
    home: Path | None = None,
    *,
    keep_alive: bool = True,
) -> Backend:
    """The backend the settings ask for (``auto``: the first of ``candidates`` that
    answers, by default the usual local ports, else the embedded model). ``home``: the
    person's, where the server's measurements are kept (``backends.probes``: each
    process then asks them of the server once per server and model, not once per
    process); None measures them in memory. ``keep_alive`` False: a connection per
    request, each of which a ``Cancel`` can close before its answer begins (the
    summary worker's, which yields: ``chat.sharing``)."""
    from chatloop.backends.base import Timeouts
    from chatloop.backends.detect import CANDIDATES, BackendChoice, make_backend

    return make_backend(
        BackendChoice(
            kind=settings.backend,
            base_url=settings.base_url,
            model=settings.model,
            api_key=settings.api_key or None,
            window=settings.context_window or None,
            timeouts=Timeouts(settings.connect_timeout, settings.read_timeout),
            retries=settings.retries,
            keep_alive=keep_alive,
            home=home,
        ),
        candidates or CANDIDATES,
    )


def connect(settings: Settings, held: Held = Held(), home: Path | None = None) -> Connected:
    """The backend of a chat by the rule of this module, its model chosen, checked to
    answer (with the server's own words when it does not). ``held``: the continued
    session's server and model (``Held()`` for a new chat); ``home``: the person's, as
    for ``make``; the person is about to use the server, so it is marked there once
    chosen (``chat.sharing.use``: this home's background work yields to them).

    The check asks only what a busy server answers at once (the model list: Ollama's
    ``/api/tags``, ``GET /v1/models``), never a generation or a token count that would
    wait behind one: the banner follows it without waiting on the model."""
    notes: list[str] = []
    on_held = False
    if held.url and not configured(settings):
        from chatloop.backends.detect import CANDIDATES, held_candidates

        tried = held_candidates(held.url)
        if not tried:
            notes.append(
                f"this session was held with the server at {held.url}, which "
                "is not a plain URL of this machine: --base-url uses it again (a "
                "session file never sends a conversation elsewhere by itself)."
            )
            backend = make(settings, home=home)
        else:
            backend = make(settings, (*tried, *CANDIDATES), home)
            on_held = backend.base_url in {c.base_url for c in tried}
            if not on_held:
                now = (
                    "the embedded model"
                    if backend.base_url.startswith("embedded:")
                    else backend.base_url
                )
                notes.append(
                    f"this session was held with the server at {held.url}, "
                    f"which does not answer; continuing with {now} "
                    "(--base-url chooses another)."
                )
    else:
        backend = make(settings, home=home)
    if home is not None:
        from chatloop.chat import sharing

        sharing.use(home, backend)
    bound = min(settings.connect_timeout, STARTUP_CHECK_S)
    try:
        listed = _choose_model(backend, held.model if on_held else "", bound)
    except BaseException:
        backend.close()
        raise
    if listed is None:
        notes.append(
            f"the server at {backend.base_url} is busy (it did not list its models "
            f"within {bound:g} s); going on: your first message waits for it."
        )
        return Connected(backend, tuple(notes), busy=True)
    if listed and backend.model not in listed:
        import difflib

        close = difflib.get_close_matches(backend.model, listed, 1, 0.5)
        names = ", ".join(listed[:5]) + (", ..." if len(listed) > 5 else "")
        notes.append(
            f"the server does not list the model {backend.model!r} "
            + (f"(did you mean {close[0]}?)" if close else f"(it lists: {names})")
            + "; its replies may come from another model or fail."
        )
    return Connected(backend, tuple(notes))


def same_server(backend: Backend, settings: Settings, held: Held) -> bool:
    """True when the rule would keep ``backend`` for a session held at ``held``: the
    person configured the server, or the session names none, or it names this one.
    (A chat under way changes server for ``/resume`` only when the rule says so.)"""
    if configured(settings) or not held.url:
        return True
    return held.url.rstrip("/") == backend.base_url.rstrip("/")


def offered(backend: Backend, name: str) -> str | None:
    """Whether ``backend``'s server offers the model ``name``, for a switch in a chat
    (``/model NAME``): None when its list has it, else why it could not be checked (the
    list failed: the switch goes on unchecked). Raises ChatloopError when the server
    lists models and ``name`` is not one (with the closest, or some it offers), or
    when ``backend`` is the embedded model (its one file is not switched mid-chat)."""
    import difflib

    if backend.kind == "embedded":
        raise ChatloopError(
            "The embedded model cannot be switched mid-chat",
            "Start a server for several models, or chatloop --model PATH for another file.",
        )
    try:
        listed = backend.models()
    except BackendError as exc:
        return exc.message
    if listed and name not in listed:
        close = difflib.get_close_matches(name, listed, 1, 0.5)
        names = ", ".join(listed[:8]) + (", ..." if len(listed) > 8 else "")
        raise ChatloopError(
            f"The server offers no model {name!r}",
            f"Did you mean {close[0]}?" if close else f"It offers: {names}",
        )
    return None


def _choose_model(backend: Backend, held_model: str, seconds: float) -> list[str] | None:
    """Set ``backend.model`` when none was configured (``held_model`` when the server
    lists it, else its first); with one configured, still check that the server is
    there, so nothing is saved for a server that is not. Returns the models the server
    lists ([] for none, or for the embedded model), or None when the list has not come
    within ``seconds`` (the model then stays unset: the first request asks for it)."""
    if backend.kind == "embedded":
        if not backend.model:
            files = backend.models()
            backend.model = (files or [""])[0]
            return files
        return []
    try:
        listed = within(seconds, backend.models)  # (a request left behind ends with its answer)
    except Unreachable:
        raise
    except BackendError:  # it answered (a server without a model list): go on
        if not backend.model:
            raise
        return []
    if listed is None and not backend.model:
        backend.model = held_model  # (the session's, unchecked: else the server's first)
    elif listed is not None and not backend.model:
        backend.model = held_model if held_model and held_model in listed else (listed or [""])[0]
    return listed
