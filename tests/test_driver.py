"""The stream driver (``backends.driver``) with a decoder of its own, against
``httpx.MockTransport``: the envelope every wire format shares."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from chatloop.backends.base import Cancel, Cancelled, Event, StreamCut, TextDelta, Timeouts
from chatloop.backends.driver import drive


@dataclass
class Server:
    body: str
    client: httpx.Client = field(init=False)
    base_url: str = "http://model.test"
    timeouts: Timeouts = field(default_factory=Timeouts)
    retries: int = 0

    def __post_init__(self) -> None:
        self.client = httpx.Client(
            transport=httpx.MockTransport(lambda request: httpx.Response(200, text=self.body))
        )


class Words:
    """A wire format of a word a line; ``END`` ends the stream, ``STOP`` the reply."""

    def __init__(self) -> None:
        self.began = self.ended = self.whole = False

    def items(self, lines: Iterator[str]) -> Iterator[str]:
        return lines

    def feed(self, item: str) -> Iterator[Event]:
        if item == "END":
            self.ended = True
        elif item == "STOP":
            self.whole = True
        else:
            self.began = True
            yield TextDelta(item)


def test_a_whole_reply_is_read_to_its_end_and_no_further() -> None:
    events = list(drive(Server("one\ntwo\nSTOP\nEND\nafter\n"), "/chat", {}, Words(), None))
    assert events == [TextDelta("one"), TextDelta("two")]


def test_a_stream_that_ends_before_the_reply_does_is_cut() -> None:
    asked: list[str] = []
    with pytest.raises(StreamCut):
        list(drive(Server("one\nEND\n"), "/chat", {}, Words(), None, lambda: asked.append("?")))
    assert asked == []  # something came: nothing to ask
    with pytest.raises(StreamCut):
        list(drive(Server(""), "/chat", {}, Words(), None, lambda: asked.append("?")))
    assert asked == ["?"]  # an empty stream with no end: the caller may ask why


def test_a_cancel_stops_the_reading_between_items() -> None:
    cancel = Cancel()
    stream = drive(Server("one\ntwo\nSTOP\n"), "/chat", {}, Words(), cancel)
    assert next(stream) == TextDelta("one")
    cancel.set()
    with pytest.raises(Cancelled):
        next(stream)
