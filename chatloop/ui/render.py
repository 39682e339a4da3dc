"""What the REPL shows: the streaming reply, tool calls, errors, tables, the toolbar.

rich is imported by the REPL's modules (this one, ``commands`` and ``repl``;
``rich.markdown`` and ``rich.progress`` where they are used), never at the
package's top, so ``chatloop --version`` never pays for it. Domain values never
print themselves; these functions turn them into renderables.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prompt_toolkit.formatted_text import StyleAndTextTuples
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from chatloop.backends.base import Event, Finish, TextDelta, ThinkingDelta, ToolCallEvent
from chatloop.errors import ChatloopError
from chatloop.format import Message, empty_reply
from chatloop.ui.listing import describe, fork_words, queries_of, relative_time
from chatloop.ui.terminal_text import visible
from chatloop.ui.waiting import Ticker

if TYPE_CHECKING:  # a type only
    from chatloop.store.rows import SessionRow

_FENCE_RE = re.compile(r"^\s*(```|~~~)", re.MULTILINE)
METER_LEVELS = ((0.9, "ansired"), (0.8, "ansiyellow"), (0.7, "ansibrightyellow"))


LIVE_LINES = 24  # lines a streaming reply keeps live before finished paragraphs are printed
LIVE_CHARS = 4000  # or characters: a paragraph this long is printed up to its last words


class StreamView:
    """Shows one turn as it streams: text live, then as markdown once each reply ends.

    Only the reply's last paragraphs are live: once the live text passes
    ``LIVE_LINES`` lines or ``LIVE_CHARS`` characters, the paragraphs before its
    last blank line (outside a code fence) are printed once, as markdown, above
    it; a paragraph longer than ``LIVE_CHARS`` with no break (and no code
    fence) is printed as plain text up to its last quarter. So a token costs
    the same at the end of a long reply as at its start: the live region,
    redrawn at each refresh, stays about a screenful."""

    def __init__(
        self,
        console: Console,
        agent: str,
        acknowledgment: bool = False,
        label: str = "",
        ticker: Ticker | None = None,
    ) -> None:
        self.console = console
        self.ticker = ticker  # shows the wait for the model (``ui.waiting``), on a terminal
        self.agent = agent
        # the model's acknowledgment of a restoration prompt is labelled and dim, so it
        # does not read as the answer to the message that follows it (which may be
        # labelled too: ``label`` is printed above the reply's first words)
        self.acknowledgment = acknowledgment
        self.label = "The model acknowledges the summary:" if acknowledgment else label
        self._said = False  # text or a tool call since the view opened or the last results
        self._ended: str | None = None  # how the reply's stream ended (None: not yet, cut, failed)
        self._text: list[str] = []  # the live part of the reply (after what was printed)
        self._lines = 0  # newlines in the live part (since it was last looked at)
        self._chars = 0  # and characters
        self._shown = Text("")
        self._thinking = 0
        self._live: Live | None = None
        self.wait()

    def wait(self) -> None:
        """Show that the model is being waited for, until its first piece comes, ``hold``
        or ``close``."""
        if self.ticker is not None:
            self.ticker.show()

    def hold(self) -> None:
        """Stop showing the wait (the first piece came; other work shows itself now: a
        compaction's spinner, a question). Leaves nothing on the screen."""
        if self.ticker is not None:
            self.ticker.hide()

    def on_event(self, event: Event) -> None:
        self.hold()
        if isinstance(event, TextDelta):
            self._text.append(event.text)
            piece = visible(event.text)
            if not self._said and event.text.strip():
                self._said = True
                if self.label:
                    self.console.print(Text(self.label, style="dim"))
                    self.label = ""
            if self._live is None:
                self._shown = Text(piece, style="dim" if self.acknowledgment else "")
                self._live = Live(
                    self._shown,
                    console=self.console,
                    refresh_per_second=12,
                    vertical_overflow="visible",
                )
                self._live.start(refresh=True)  # the first words now, not at the next tick
            else:
                with self._live._lock:  # the refresh thread draws the same Text
                    self._shown.append(piece)  # O(1) a token, whatever the reply's length
            self._lines += event.text.count("\n")
            self._chars += len(event.text)
            if self._lines > LIVE_LINES or self._chars > LIVE_CHARS:
                self._print_finished()
        elif isinstance(event, ThinkingDelta):
            if not self._thinking:
                self.console.print(Text("thinking…", style="dim italic"))
            self._thinking += len(event.text)
        elif isinstance(event, ToolCallEvent):
            self._said = True
            self.end_text()
            self.console.print(
                Text(visible(f"→ {event.name}({_short(event.arguments, 100)})"), style="cyan")
            )
        elif isinstance(event, Finish):
            self._ended = event.reason
            self.end_text()

    def _print_finished(self) -> None:
        """Print the live text's finished paragraphs above the live region, once, and
        keep the rest live (see the class). Amortized O(1) a character: when nothing
        can be printed, it looks again only after as much text again."""
        assert self._live is not None
        text = "".join(self._text)
        cut, plain = finished_paragraphs(text), False
        if cut <= 0 and len(text) > LIVE_CHARS and not _FENCE_RE.search(text):
            cut, plain = text.rfind(" ", 0, len(text) - LIVE_CHARS // 4) + 1, True
        if cut <= 0:
            self._lines = self._chars = 0
            return
        head, tail = text[:cut], text[cut:]
        self._text, self._lines, self._chars = [tail], tail.count("\n"), len(tail)
        with self._live._lock:
            self._shown = Text(visible(tail), style="dim" if self.acknowledgment else "")
            self._live.update(self._shown, refresh=False)
        self._live.console.print(self._finished(head, plain))

    def end_text(self) -> None:
        """Replace the live text with its markdown rendering (``_as_markdown``)."""
        if self._live is None:
            return
        self._live.update(self._finished("".join(self._text), False))
        self._live.stop()
        self._live = None
        self._text, self._lines, self._chars = [], 0, 0

    @property
    def said(self) -> bool:
        """True once the reply showed text or a tool call (since the last results)."""
        return self._said

    def _finished(self, text: str, plain: bool) -> Any:
        """How finished text is printed: markdown; an acknowledgment (or ``plain``)
        as the text itself."""
        if self.acknowledgment:
            return Text(visible(text), style="dim")
        return Text(visible(text)) if plain else _as_markdown(text)

    def tool_results(self, message: Message) -> None:
        self._said, self._ended, self._thinking = False, None, 0  # the next reply's own
        for result in message.tool_results:
            style = "red" if result.is_error else "dim"
            first = result.content.strip().splitlines()[0] if result.content.strip() else "(empty)"
            self.console.print(Text(visible(f"← {result.name}: {_short(first, 100)}"), style=style))
        self.wait()  # the model is asked again, with the results

    def close(self, interrupted: bool = False, saved: bool = True) -> None:
        """End the view; ``saved`` says whether any text of an interrupted reply was kept
        (the interruption itself is always recorded)."""
        self.hold()
        self.end_text()
        if self._ended is not None and not self._said and not interrupted:
            said = empty_reply(self.acknowledgment, self._ended, self._thinking > 0)
            self.console.print(Text(said, style="dim"))
        if interrupted:
            said = (
                "(interrupted: the partial reply was saved)"
                if saved
                else "(interrupted before any reply arrived: marked so in the file)"
            )
            self.console.print(Text(said, style="yellow"))


def finished_paragraphs(text: str) -> int:
    """Where the finished paragraphs of ``text`` end: just after its last blank line
    outside a code fence (0: none), so that what comes before it renders as markdown
    the same whether or not the rest follows."""
    cut, fenced, at = 0, False, 0
    for line in text.splitlines(keepends=True):
        at += len(line)
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        elif not stripped and not fenced and at < len(text):
            cut = at
    return cut


def _as_markdown(text: str) -> Any:
    """Reply text as shown once it is final: markdown, code highlighted, whatever it
    holds; HTML in it (``<script>``, ``List<String>``, ``<<SYS>>``, ``a < b``) is shown
    as the text it is, never interpreted and never dropped; never terminal control.
    A link shows its target after its text, never as a hyperlink (OSC 8) whose target
    the terminal hides behind words a model chose."""
    shown = visible(text)
    if not shown.strip():
        return Text(shown)
    return _markdown_class()(shown, hyperlinks=False)


@functools.cache
def _markdown_class() -> type[Any]:
    """rich's Markdown reading HTML as text (imported when a reply is first shown)."""
    from markdown_it import MarkdownIt  # (rich's own markdown parser)
    from rich.markdown import Markdown

    parser = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")

    class TextHtmlMarkdown(Markdown):
        """Markdown whose parser has HTML off: a tag is text, as typed."""

        def __init__(self, markup: str, hyperlinks: bool) -> None:
            super().__init__("", hyperlinks=hyperlinks)  # (its own parse: of nothing)
            self.markup, self.parsed = markup, parser.parse(markup)

    return TextHtmlMarkdown


def _short(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def error(console: Console, exc: ChatloopError) -> None:
    """An error as one red line and a dim hint."""
    console.print(Text.assemble(("error: ", "bold red"), (visible(exc.message), "red")))
    if exc.hint:
        console.print(Text(visible(f"hint: {exc.hint}"), style="dim"))


def note(console: Console, text: str, style: str = "dim") -> None:
    console.print(Text(visible(text), style=style))


@contextmanager
def spinner(console: Console, text: str, trace: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner with elapsed time while slow work runs; yields a function that sets
    what is being done ("part 2 of 3"). The spinner leaves no trace on the screen;
    with ``trace`` a line naming the work stays above it."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    if trace:
        note(console, text)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:  # (with the trace above it, the spinner does not say the work again)
        task = bar.add_task("" if trace else text)
        yield lambda what: bar.update(
            task, description=f"({what})" if trace else f"{text} ({what})"
        )


def model_label(model: str) -> str:
    """A model name as shown: a file path (llama.cpp servers report one) becomes its name."""
    return Path(model).name if "/" in model else (model or "?")


# what the toolbar says of the next compaction's summary, made while the person reads
PREPARED = {"preparing": "preparing the summary…", "ready": "summary ready"}


def toolbar(parts: dict[str, Any], width: int | None = None) -> StyleAndTextTuples:
    """The bottom toolbar as prompt_toolkit (style, text) fragments, within ``width``
    columns when given (a toolbar is one line, cut at the edge): what matters most
    while chatting stays (agent, counts, the window's meter, unsaved messages), and
    the rest gives way in this order: the chain's total, the session's id (cut to
    its last characters), the model, the rest of the id."""
    used, window = parts.get("used", 0), parts.get("window") or 0
    session = visible(parts["session"] or "new session")  # (names from files and servers)
    chain = f" (chain {parts['chain_tokens']:,})" if parts.get("chain_tokens") else ""
    tail: StyleAndTextTuples = []
    if window:
        share = used / window
        style = next((s for level, s in METER_LEVELS if share >= level), "ansigreen")
        tail += [("", " · ctx "), (style, f"{used:,}/{window:,} {share:.0%}")]
    if parts.get("unsaved"):
        tail.append(("ansired bold", f" · {parts['unsaved']} not yet saved"))
    prepared = PREPARED.get(parts.get("prepared") or "")
    if prepared:
        tail.append(("ansicyan", f" · {prepared}"))
    model, agent = visible(parts["model"] or "?"), visible(parts["agent"])
    mark = "~" if parts.get("estimated") else ""  # counted by chatloop, not the server
    counts = f"{parts['queries']}q · {mark}{parts['tokens']:,} tok"
    fits: StyleAndTextTuples = []
    for keep_model, named, with_chain in (
        (True, session, True),
        (True, session, False),
        (True, _id_tail(session), False),
        (False, _id_tail(session), False),
        (False, "", False),
    ):
        middle = (f"· {model} " if keep_model else "") + (f"· {named} " if named else "")
        fits = [
            ("bold", f" {agent} "),
            ("", f"{middle}· {counts}"),
            ("", chain if with_chain else ""),
            *tail,
        ]
        if width is None or sum(len(fragment[1]) for fragment in fits) <= width:
            break
    return [fragment for fragment in fits if fragment[1]]


def _id_tail(session: str) -> str:
    """A session id cut to its last characters (the random part a handle is made of)."""
    return session if len(session) <= 12 else "…" + session[-8:]


def sessions_table(rows: Sequence[SessionRow], now: datetime) -> Table:
    """The /sessions view: number and handle first (what /resume takes: never squeezed
    out), then when, queries, agent and the title, which gives way first."""
    table = Table(
        box=None, pad_edge=False, show_header=True, header_style="bold", expand=True
    )  # the title takes what is left, and gives way first
    table.add_column("#", justify="right", no_wrap=True, min_width=2)
    table.add_column("handle", no_wrap=True, min_width=6)
    table.add_column("when", no_wrap=True, min_width=9)
    table.add_column("q", justify="right", no_wrap=True, min_width=3)
    table.add_column("agent", no_wrap=True, max_width=16, overflow="ellipsis")
    table.add_column("title or last question", no_wrap=True, overflow="ellipsis", ratio=1)
    for row in rows:
        # the marks first: a narrow terminal cuts the end of the title, never them
        status = "" if row.status == "closed" else f"[{row.status}] "
        if row.forked_at is not None:
            status += f"[{fork_words(row.forked_at)}] "
        status += f"[chain of {row.chain}] " if row.chain > 1 else ""
        cells = (
            str(row.number or "*"),
            row.handle or "-",
            relative_time(row.updated, now),
            queries_of(row),
            row.agent,
            status + describe(row)[:80],
        )
        table.add_row(*(Text(visible(cell)) for cell in cells))
    return table


def context_table(
    rows: Sequence[tuple[str, int, str]],
    window: int | None,
    total: int,
    mark: str = "",
    extra: Sequence[tuple[str, int, str]] = (),
    width: int = 100,
) -> Table:
    """The /context view: each message that would be sent, its tokens (``mark``: "~"
    when they are estimates), then ``extra`` (what is sent besides the messages: tool
    definitions, the template's fixed tokens; unnumbered), and the budget. In
    ``width`` columns the content gives way; the numbers never do."""
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("role", no_wrap=True, min_width=10)
    table.add_column("tokens", justify="right", no_wrap=True)
    numbers = len(f"{len(rows)}") + 10 + max(6, len(f"{mark}{total:,}")) + 6  # (and gaps)
    table.add_column(
        "content", overflow="ellipsis", no_wrap=True, max_width=max(10, min(70, width - numbers))
    )
    for i, (role, tokens, content) in enumerate(rows, 1):
        table.add_row(
            *(
                Text(visible(cell))
                for cell in (str(i), role, f"{mark}{tokens:,}", _short(content, 70))
            )
        )
    for role, tokens, content in extra:
        table.add_row(*(Text(cell) for cell in ("", role, f"{mark}{tokens:,}", content)))
    budget = (
        f"{mark}{total:,} of {window:,} tokens ({total / window:.0%})"
        if window
        else f"{mark}{total:,} tokens"
    )
    many = "" if len(rows) == 1 else "s"
    table.caption = f"next call: {len(rows)} message{many}, {budget}"
    return table
