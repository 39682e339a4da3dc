"""THE stream driver of the server backends: one envelope around every streamed reply,
with a ``Decoder`` per wire format (``openai_compat``: server-sent events; ``ollama``:
JSON lines).

The envelope, stated once: the request is opened (``http.open_stream``: retries,
cancellation from any thread); each item of the stream is checked against ``cancel``
before it is read; an item that says the reply is over stops the reading, and the rest
of the body is read off so the connection serves the next turn (``http.finish_body``);
an httpx failure is translated (``http.failure``); and a stream that ends without the
reply's end is cut, never whole (``http.cut``: ``StreamCut``), whatever came of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import httpx

from chatloop.backends.base import Cancel, Cancelled, Event, Timeouts
from chatloop.backends.http import cut, failure, finish_body, open_stream

__all__ = ["Decoder", "Server", "drive"]


class Server(Protocol):
    """What the driver needs of a server backend: its connection and its patience."""

    @property
    def client(self) -> httpx.Client: ...

    @property
    def base_url(self) -> str: ...

    @property
    def timeouts(self) -> Timeouts: ...

    @property
    def retries(self) -> int: ...


class Decoder(Protocol):
    """One wire format's reading of a streamed reply."""

    @property
    def began(self) -> bool:
        """Some of the reply came: text, thinking or a tool call."""
        ...

    @property
    def ended(self) -> bool:
        """The stream said it is over (``[DONE]``, Ollama's ``done``): read no further."""
        ...

    @property
    def whole(self) -> bool:
        """The reply had its end (a finish reason); else it was cut."""
        ...

    def items(self, lines: Iterator[str]) -> Iterator[str]:
        """The stream's items, from its lines (an event's data, a line)."""
        ...

    def feed(self, item: str) -> Iterator[Event]:
        """The events of one item; raises the error the server sent in it
        (``StreamInterrupted``, ``ContextOverflow``)."""
        ...


def drive(
    server: Server,
    path: str,
    body: dict[str, Any],
    decoder: Decoder,
    cancel: Cancel | None,
    empty: Callable[[], None] | None = None,
) -> Iterator[Event]:
    """Stream the reply to ``body`` POSTed to ``server``'s ``path`` (after its base
    URL), read by ``decoder``: its events
    as they come. Raises ``Cancelled`` when ``cancel`` is set, a ``BackendError`` for
    a failure, ``StreamCut`` when the stream ended without the reply's end (``empty``
    is called first when nothing came and no end was said: a server that closes an
    empty stream may say why when asked otherwise)."""
    base_url, timeouts = server.base_url, server.timeouts
    with open_stream(
        server.client,
        base_url + path,
        body,
        base_url=base_url,
        timeouts=timeouts,
        retries=server.retries,
        cancel=cancel,
    ) as response:
        try:
            lines = response.iter_lines()
            for item in decoder.items(lines):
                if cancel is not None and cancel.is_set:
                    raise Cancelled("Cancelled", "")
                yield from decoder.feed(item)
                if decoder.ended:
                    finish_body(lines, response)  # the connection serves the next turn
                    break
        except httpx.HTTPError as exc:
            raise failure(exc, base_url, timeouts, cancel) from exc
    if not decoder.whole:  # cut (or empty), whether or not the end was said
        if empty is not None and not decoder.ended and not decoder.began:
            empty()
        raise cut(base_url, decoder.began)
