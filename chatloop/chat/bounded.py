"""THE way chatloop waits a bounded time for a call that may not return (a request a
server holds): ``within``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")

__all__ = ["within"]


def within(
    seconds: float, work: Callable[[], _T], late: Callable[[], None] = lambda: None
) -> _T | None:
    """What ``work`` returns, run in a daemon thread of its own, when it returns within
    ``seconds``; else None, after calling ``late`` (to cancel the work: a request still
    streaming stops at its next piece, or has its connection closed). Work that never
    returns is left behind and ends with the process. What ``work`` raises is raised
    here, in the waiting thread."""
    done = threading.Event()
    results: list[_T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(work())
        except BaseException as exc:  # (raised again in the waiting thread)
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="bounded", daemon=True).start()
    if not done.wait(seconds):
        late()
        return None
    if errors:
        raise errors[0]
    return results[0]
