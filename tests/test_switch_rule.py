"""The rule of a model switch in a chat on its own, without a session
(``server.offered``): a model the server lists, one it does not, a list that fails,
and the embedded model."""

from __future__ import annotations

import pytest

from chatloop.chat import server
from chatloop.errors import BackendError, ChatloopError
from tests.fakes import FakeBackend


class Listing(FakeBackend):
    def __init__(self, *names: str, fails: bool = False, kind: str = "fake") -> None:
        super().__init__()
        self.names, self.fails, self.kind = list(names), fails, kind

    def models(self) -> list[str]:
        if self.fails:
            raise BackendError("the list did not come", "")
        return self.names


def test_a_model_the_server_lists_is_offered_and_another_is_refused_with_the_closest() -> None:
    backend = Listing("qwen3:4b", "gemma3:1b")
    assert server.offered(backend, "gemma3:1b") is None
    with pytest.raises(ChatloopError, match="offers no model 'gemma3:2b'") as refused:
        server.offered(backend, "gemma3:2b")
    assert refused.value.hint == "Did you mean gemma3:1b?"
    assert server.offered(Listing(), "anything") is None  # (a server with no list)


def test_a_list_that_fails_lets_the_switch_go_on_unchecked_and_says_why() -> None:
    assert server.offered(Listing(fails=True), "gemma3:1b") == "the list did not come"


def test_the_embedded_model_is_not_switched_mid_chat() -> None:
    with pytest.raises(ChatloopError, match="cannot be switched mid-chat"):
        server.offered(Listing("a.gguf", kind="embedded"), "b.gguf")
