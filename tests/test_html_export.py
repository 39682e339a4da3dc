"""``export --format html`` and ``/export``'s HTML: one self-contained, safe page.

The page is checked twice: as text here (what it holds, that hostile text stays
text: no script, no event attribute, no link but http/https/mailto, no raw control
character), and in a real browser (headless Debian Chromium driven by Playwright):
a real chain made against the real model server loads with no console error and no
request, holds every message of ``export --format json``, folds and unfolds, and
its lineage links scroll to their files; a hostile page runs nothing and requests
nothing. Without Chromium or Playwright the browser tests are skipped, saying why,
unless ``CHATLOOP_REQUIRE_E2E`` is set (CI): then they fail.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Iterator
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatloop.errors import ChatloopError
from chatloop.format import Message, Thinking, ToolCall, ToolResult, Usage
from chatloop.store.store import Store
from chatloop.ui import as_html
from chatloop.ui.commands import this_session
from chatloop.ui.terminal_text import visible
from tests.conftest import T0, new_meta
from tests.pty_driver import run
from tests.strategies import examples, messages, title_st

CHROMIUM = Path("/usr/bin/chromium")
SAMPLES = Path(__file__).resolve().parent.parent / "sample_conversations"
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# what a script, an event attribute or a link would set or do if anything ran
PWN = "window.__pwned = (window.__pwned || 0) + 1"
HOSTILE_TEXTS = [
    f"<script>{PWN}</script> and <img src=x onerror=\"{PWN}\"> and <svg onload='{PWN}'>",
    f"[click](javascript:{PWN.replace(' ', '')}) [data](data:text/html,<script>{PWN}</script>)",
    f'<a href="javascript:{PWN}">raw</a> [upper](JAVASCRIPT:alert(1)) '
    f"[spaced]( javascript:alert(1)) <javascript:alert(1)> [vb](vbscript:msgbox) [f](file:///etc/passwd)",
    "![tracker](https://example.invalid/pixel.png) ![local](x.png) [rel](/etc/passwd)",
    "<!-- /chatloop:aaaaaaaa 00000000 -->\n## Summary\n<!-- SESSION_SUMMARY -->\nI am the summary",
    "ansi \x1b[2J\x1b[31mred\x1b[0m osc \x1b]8;;https://evil.invalid\x07link\x1b]8;;\x07 "
    "title \x1b]0;pwned\x07 csi \x9b31m bell \x07",
    "bidi \u202eevil\u202c and \u2066isolate\u2069 end",
    '"><style>body{display:none}</style><meta http-equiv="refresh" content="0;url=https://x">',
    "```html\n<script>" + PWN + "</script>\n```\n\n```nosuchlanguage\n<b>x</b>\n```",
    "| left | right | <b>mid</b> |\n| :--- | ---: | :---: |\n| 1 | 2 | <i onclick=x>3</i> |",
]
# how many links within the page have no target there
DEAD_LINKS = """[...document.querySelectorAll('a[href^="#"]')]
  .filter(a => !document.getElementById(a.getAttribute('href').slice(1))).length"""
# a link to a file other than the page itself
ELSEWHERE = "a => a.protocol === 'file:' && a.pathname !== location.pathname"
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\u2069", "\u202c")


def page_of(messages: list[Message], **meta: Any) -> str:
    pieces: list[str] = []
    fields = {"id": "20261207-120000-abcdefgh", "title": "A page", **meta}
    as_html.write_html([(new_meta(**fields), messages)], pieces.append)
    return "".join(pieces)


class Parsed(HTMLParser):
    """The page's tags, attributes, text and style: what a browser would build."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.styles: list[str] = []
        self._in_style = False
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        (self.styles if self._in_style else self.text).append(data)

    def hrefs(self) -> list[str]:
        return [a["href"] or "" for tag, a in self.tags if "href" in a]


def every_kind() -> list[Message]:
    at = T0
    later = T0 + timedelta(seconds=5)
    return [
        Message.create("user", at, text="RESTORATION-PROMPT text", restore=True),
        Message.create("assistant", at, text="ACK-TEXT", restore=True, usage=Usage(9, 3)),
        Message.create("user", at, text="CARRIED-QUESTION", restore=True, copy=True),
        Message.create("user", at, text="FIRST-QUESTION"),
        Message.create(
            "assistant",
            later,
            text="",
            thinking=(Thinking("THINKING-TEXT"),),
            tool_calls=(ToolCall("c1", "read_file", '{"path": "notes.txt"}'),),
            usage=Usage(40, 9, estimated=True),
            duration=1.25,
            stop_reason="tool_calls",
        ),
        Message.create(
            "tool",
            later,
            tool_results=(
                ToolResult("c1", "read_file", "RESULT-LINE\n" * 40, approved="once"),
                ToolResult("c2", "broken", "ERROR-TEXT", is_error=True),
            ),
        ),
        Message.create("assistant", later, text="Some **bold** REPLY-TEXT", model="other-model"),
        Message.create("user", later, text="UNSENT-TEXT", unsent=True),
        Message.create("user", later, text="SECOND-QUESTION", interrupted=True),
        Message.create("assistant", later, interrupted=True, stop_reason="cancelled"),
        Message.create("summary", later, text="SUMMARY-TEXT", fallback=True),
    ]


def test_every_kind_of_message_is_a_card_of_its_own_kind() -> None:
    page = page_of(every_kind(), parent_id="20261206-120000-parentaa")
    parsed = Parsed(page)
    cards = [a["class"] for tag, a in parsed.tags if tag == "article"]
    assert cards == [
        "card restore",
        "card assistant restore",
        "card user carried",
        "card user",
        "card assistant",
        "card tool",
        "card assistant",
        "card user unsent",
        "card user",
        "card assistant",
        "card summary",
    ]
    text = "".join(parsed.text)
    for word in ("RESTORATION-PROMPT", "ACK-TEXT", "CARRIED-QUESTION", "THINKING-TEXT"):
        assert word in text
    assert "query 1" in text and "query 2" in text and "query 3" not in text  # (unsent: none)
    assert "~40 in / ~9 out tokens" in text and "1.2 s" in text and "other-model" in text
    assert "approval: once" in text and "ERROR-TEXT" in text and "not sent" in text
    assert "interrupted" in text and "(no reply: interrupted before any text arrived)" in text
    assert "built without the model" in text and "continues 20261206-120000-parentaa" in text
    assert [h for h in parsed.hrefs() if h.startswith("#")] == []  # (its part is not here)
    assert "<strong>bold</strong>" in page  # a reply is markdown
    folds = [a for tag, a in parsed.tags if tag == "details"]
    kinds = [(f["class"], "open" in f) for f in folds]
    # thinking, the restoration and the summary folded; the short call and error open,
    # the long result folded
    assert ("thinking", False) in kinds and ("restore", False) in kinds
    assert ("summary", False) in kinds and ("call", True) in kinds
    assert ("result", False) in kinds and ("result error", True) in kinds


def test_a_forks_copies_are_carried_over_and_its_restoration_is_one() -> None:
    messages = [
        Message.create("user", T0, text="R", restore=True),
        Message.create("assistant", T0, text="ACK", restore=True),
        Message.create("user", T0, text="Q", restore=True, copy=True),
        Message.create("assistant", T0, text="A", restore=True, copy=True),
        Message.create("user", T0, text="NEW"),
    ]
    page = page_of(messages, parent_id="20261206-120000-parentaa", extra={"forked_at": 1})
    cards = [a["class"] for tag, a in Parsed(page).tags if tag == "article"]
    assert cards == [
        "card restore",
        "card assistant restore",
        "card user carried",
        "card assistant carried",
        "card user",
    ]
    assert "branches from" in page and "after query 1" in page


def test_hostile_text_in_every_field_stays_text() -> None:
    hostile = "\n\n".join(HOSTILE_TEXTS)
    messages = [
        Message.create("user", T0, text=hostile),
        Message.create(
            "assistant",
            T0,
            text=hostile,
            thinking=(Thinking(hostile),),
            tool_calls=(ToolCall(hostile, hostile, hostile),),
            model=hostile,
            stop_reason=hostile,
        ),
        Message.create("tool", T0, tool_results=(ToolResult(hostile, hostile, hostile, True),)),
        Message.create("summary", T0, text=hostile),
    ]
    page = page_of(messages, title=hostile, agent=hostile, model=hostile, cwd=hostile)
    parsed = Parsed(page)
    tags = {tag for tag, _ in parsed.tags}
    assert not tags & {"script", "img", "iframe", "object", "embed", "form", "input", "base"}
    assert [tag for tag, _ in parsed.tags].count("style") == 1
    assert [tag for tag, _ in parsed.tags].count("meta") == 5  # (charset, CSP, 3 of ours)
    for tag, attrs in parsed.tags:
        assert not [name for name in attrs if name.startswith("on") or name == "style"], tag
        if tag != "meta":
            assert not any("javascript" in (v or "").lower() for v in attrs.values()), tag
    for href in parsed.hrefs():
        assert href.startswith(("#", "https://", "http://", "mailto:")), href
    assert "https://example.invalid/pixel.png" in parsed.hrefs()  # an image: a link only
    assert not any(c in page for c in RAW_CONTROLS)
    text = "".join(parsed.text)
    assert "<script>" in text and "onerror=" in text  # shown, as text
    assert "javascript:" in text  # a refused link stays its text
    assert "␛[2J" in text and "\\u202e" in text  # the terminal's symbols
    assert "I am the summary" in text


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(messages(), max_size=4), title_st)
def test_any_messages_make_a_page_of_text_only(made: list[Message], title: str) -> None:
    page = page_of(made, title=title, agent=title)
    parsed = Parsed(page)
    assert {tag for tag, _ in parsed.tags} <= SAFE_TAGS
    for tag, attrs in parsed.tags:
        assert set(attrs) <= SAFE_ATTRIBUTES, tag
        href = attrs.get("href")
        assert href is None or href.startswith(("#", "https:", "http:", "mailto:")), href
    assert not any(c in page for c in RAW_CONTROLS)
    assert len([a for tag, a in parsed.tags if tag == "article"]) == len(made)


# every tag and attribute a page may hold: what the renderer writes, and CommonMark's
# fmt: off
SAFE_TAGS = frozenset((
    "html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "h3", "h4", "h5",
    "h6", "p", "main", "section", "dl", "dt", "dd", "article", "div", "span", "time",
    "details", "summary", "pre", "code", "a", "strong", "em", "ul", "ol", "li", "blockquote",
    "hr", "br", "nav", "svg", "path", "text", "rect", "g", "table", "thead", "tbody", "tr",
    "th", "td", "s",
))
SAFE_ATTRIBUTES = frozenset((
    "lang", "charset", "http-equiv", "content", "name", "class", "id", "datetime", "open",
    "href", "rel", "start", "xmlns", "width", "height", "viewbox", "role", "x", "y", "rx", "d",
    "aria-label",
))
# fmt: on


def test_tables_align_by_class_never_by_style() -> None:
    reply = "| a | b | c |\n| :-- | --: | :-: |\n| 1 | ~~2~~ | 3 |"
    parsed = Parsed(page_of([Message.create("assistant", T0, text=reply)]))
    cells = [(tag, a.get("class")) for tag, a in parsed.tags if tag in ("th", "td")]
    assert cells == [
        ("th", "align-left"),
        ("th", "align-right"),
        ("th", "align-center"),
        ("td", "align-left"),
        ("td", "align-right"),
        ("td", "align-center"),
    ]
    assert "s" in {tag for tag, _ in parsed.tags}
    assert not any("style" in a for _, a in parsed.tags)


def test_links_keep_only_web_and_mail_targets_and_show_them() -> None:
    reply = (
        "[site](https://example.org/a?b=1&c=2) [mail](mailto:a@example.org) "
        "[bad](javascript:alert(1)) <https://example.org/auto> "
        "![pic](http://example.org/p.png)"
    )
    page = page_of([Message.create("assistant", T0, text=reply)])
    parsed = Parsed(page)
    links = [h for h in parsed.hrefs() if not h.startswith("#")]
    assert links == [
        "https://example.org/a?b=1&c=2",
        "mailto:a@example.org",
        "https://example.org/auto",
        "http://example.org/p.png",
    ]
    text = "".join(parsed.text)
    assert "(https://example.org/a?b=1&c=2)" in text and "(mailto:a@example.org)" in text
    assert "[bad](javascript:alert(1))" in text and "[image: pic]" in text
    assert "(https://example.org/auto)" not in text  # an autolink shows its target already
    assert all(
        'rel="noopener noreferrer nofollow"' in a for a in re.findall(r"<a [^>]+>", page)[1:]
    )


def test_the_policy_allows_the_stylesheet_by_its_hash_and_nothing_else() -> None:
    parsed = Parsed(page_of([Message.create("assistant", T0, text="```python\nx = 1\n```")]))
    (policy,) = [
        a["content"] or ""
        for tag, a in parsed.tags
        if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    ]
    (css,) = parsed.styles
    digest = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
    assert policy.startswith("default-src 'none'; ")
    assert f"style-src 'sha256-{digest}'" in policy and "script" not in policy
    spans = [a.get("class") for tag, a in parsed.tags if tag == "span"]
    assert "k" in spans or "n" in spans  # highlighted by Pygments, with classes
    assert ".hl .k" in css and "prefers-color-scheme: dark" in css


def test_the_page_is_written_as_the_messages_are_read() -> None:
    """Each card goes to ``write`` before the next message is read: memory holds one
    message, not the session (``bench/html_export.py`` measures a large one)."""
    read = 0
    writes_when_read: list[int] = []
    pieces: list[str] = []

    def messages() -> Iterator[Message]:
        nonlocal read
        for i in range(200):
            read += 1
            writes_when_read.append(len(pieces))
            yield Message.create("user", T0, text=f"question {i}")

    as_html.write_html([(new_meta(id="20261207-120000-abcdefgh"), messages())], pieces.append)
    assert read == 200
    assert writes_when_read == list(range(2, 202))  # head, session head, then one each
    assert max(len(p) for p in pieces[2:-1]) < 2000


def test_the_lineage_links_every_session_of_the_page_and_draws_the_rest(
    store: Store,
) -> None:
    from chatloop.store.rows import SessionRow

    def row(sid: str, parent: str | None, forked_at: int | None = None) -> SessionRow:
        return SessionRow(
            1, sid, "", "", f"title {sid}", "", "", "", "", "", "closed", 2, 0, 0, 0,
            parent, None, None, "", True, False, 0, forked_at=forked_at,
        )  # fmt: skip

    root, child, fork, other = (
        row("20261201-000000-aaaaaaaa", None),
        row("20261202-000000-bbbbbbbb", "20261201-000000-aaaaaaaa"),
        row("20261203-000000-cccccccc", "20261202-000000-bbbbbbbb", forked_at=1),
        row("20261204-000000-dddddddd", "20261202-000000-bbbbbbbb"),
    )
    children = {root.id: [child], child.id: [fork, other], other.id: [root]}  # (a loop too)
    shown = frozenset({root.id, child.id, fork.id})
    pieces: list[str] = []
    as_html.write_html([], pieces.append, as_html.Lineage(root, children, fork.id, shown))
    page = "".join(pieces)
    parsed = Parsed(page)
    links = [h for h in parsed.hrefs() if h.startswith("#")]
    assert links == [f"#{as_html.anchor(r.id)}" for r in (root, child, fork)]
    assert page.count('class="elsewhere"') == 1 and "fork after query 1" in page
    assert page.count("<rect") == 4  # each session once, the loop back to root not again


def test_export_args_choose_the_format_by_flag_or_suffix() -> None:
    split = this_session.export_args
    assert split("") == ("md", "")
    assert split("notes.md") == ("md", "notes.md")
    assert split("page.HTML") == ("html", "page.HTML")
    assert split("--format html") == ("html", "")
    assert split("--format=html out file.txt") == ("html", "out file.txt")
    assert split("--format md x.html") == ("md", "x.html")
    for bad in ("--format", "--format pdf", "--formats html"):
        with pytest.raises(ChatloopError):
            split(bad)


def test_export_in_the_chat_writes_a_page(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.repl_driver import drive, fake_server

    monkeypatch.chdir(tmp_path)
    lines = "<b>hi</b>\r/export page.html\r/export --format html other\r/export\rexit\r"
    _, shown = drive(store, fake_server([]), lines)
    assert "Exported to page.html" in shown and "Exported to other" in shown
    for name in ("page.html", "other"):
        page = (tmp_path / name).read_text(encoding="utf-8")
        assert page.startswith("<!DOCTYPE html>") and "&lt;b&gt;hi&lt;/b&gt;" in page
        assert "Reply number 1 here" in page
    (markdown,) = tmp_path.glob("*.md")  # /export alone: the markdown, as before
    assert b"## Query 1\n<b>hi</b>\n" in markdown.read_bytes()


@pytest.mark.parametrize(
    "sample",
    sorted(p.relative_to(SAMPLES).as_posix() for p in SAMPLES.rglob("*.md")),
)
def test_every_sample_and_older_format_is_a_page(sample: str) -> None:
    """The golden transcripts (format 2, format 1, legacy) as pages: every message a
    card, every question's text in it."""
    import io

    from chatloop.format import parse_markdown

    path = SAMPLES / sample
    session = parse_markdown(path.read_bytes()).session
    sink = io.BytesIO()
    problems = list(as_html.write_html_files([path], sink))
    page = sink.getvalue().decode("utf-8")
    parsed = Parsed(page)
    cards = [a for tag, a in parsed.tags if tag == "article"]
    assert len(cards) == len(session.messages) > 0, problems
    text = "".join(parsed.text)
    for m in session.messages:
        if m.role == "user":
            assert visible(m.text) in text


def hostile_session(store: Store) -> str:
    """A closed session file whose every text is hostile; its id."""
    hostile = "\n\n".join(HOSTILE_TEXTS)
    writer = store.create(new_meta(title=hostile, model=hostile, agent=hostile))
    writer.append(Message.create("user", T0, text=hostile))
    writer.append(
        Message.create(
            "assistant",
            T0,
            text=hostile,
            thinking=(Thinking(hostile),),
            tool_calls=(ToolCall("c1", "read_file", hostile),),
        )
    )
    writer.append(Message.create("tool", T0, tool_results=(ToolResult("c1", "x", hostile),)))
    writer.append(Message.create("assistant", T0, text=hostile))
    writer.finalize(Message.create("summary", T0, text=hostile))
    meta_id = writer.meta.id
    writer.close()
    return meta_id


def test_export_writes_a_new_private_html_file(store: Store, tmp_path: Path) -> None:
    meta_id = hostile_session(store)
    out = tmp_path / "page.html"
    done = run(
        "export", meta_id, "--format", "html", "-o", str(out), home=store.root, cwd=store.cwd
    )
    assert done.returncode == 0, done.stderr
    assert out.stat().st_mode & 0o777 == 0o600
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "&lt;script&gt;" in page and not any(c in page for c in RAW_CONTROLS)
    again = run(
        "export", meta_id, "--format", "html", "-o", str(out), home=store.root, cwd=store.cwd
    )
    assert again.returncode == 1 and "already exists" in again.stderr
    to_stdout = run("export", meta_id, "--format", "html", home=store.root, cwd=store.cwd)
    assert to_stdout.stdout == page


# -- in a real browser ------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium under Playwright, one for the module."""
    why = ""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        why = "Playwright is not installed (pip install -e '.[dev]')"
    if not why and not CHROMIUM.exists():
        why = "Chromium is not installed (apt-get install chromium; .ci/run does)"
    if why:
        if os.environ.get("CHATLOOP_REQUIRE_E2E"):
            pytest.fail(f"CHATLOOP_REQUIRE_E2E is set: {why}")
        pytest.skip(why)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=BROWSER_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


class Visit:
    """A page opened from ``path``, with every console message, error and request
    (beside the file itself) it made."""

    def __init__(self, browser: Any, path: Path, **context: Any) -> None:
        self.context = browser.new_context(**context)
        self.page = self.context.new_page()
        self.console: list[str] = []
        self.requests: list[str] = []
        self.url = path.resolve().as_uri()
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        self.page.on("dialog", lambda d: (self.console.append(f"dialog: {d.message}"), d.dismiss()))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(self.url, wait_until="load")

    def others(self) -> list[str]:
        return [url for url in self.requests if url.split("#")[0] != self.url]

    def close(self) -> None:
        self.context.close()


def test_a_hostile_page_runs_nothing_and_requests_nothing(
    browser: Any, store: Store, tmp_path: Path
) -> None:
    meta_id = hostile_session(store)
    out = tmp_path / "hostile.html"
    done = run(
        "export", meta_id, "--format", "html", "-o", str(out), home=store.root, cwd=store.cwd
    )
    assert done.returncode == 0, done.stderr
    visit = Visit(browser, out)
    page = visit.page
    try:
        assert page.evaluate("window.__pwned") is None
        assert page.evaluate("document.scripts.length") == 0
        protocols = page.eval_on_selector_all("a[href]", "els => els.map(a => a.protocol)")
        assert set(protocols) <= {"file:", "http:", "https:", "mailto:"}
        assert page.eval_on_selector_all("a[href]", f"els => els.filter({ELSEWHERE}).length") == 0
        for summary in page.query_selector_all("details > summary"):
            summary.click()  # every fold opened: nothing in one acts either
        assert page.evaluate("[...document.querySelectorAll('details')].every(d => d.open)")
        text = page.inner_text("main")
        assert "<script>" in text and "javascript:" in text and "I am the summary" in text
        assert not any(c in text for c in RAW_CONTROLS)
        assert page.evaluate("window.__pwned") is None
        assert visit.console == [] and visit.others() == []
    finally:
        visit.close()


@pytest.mark.e2e
def test_a_real_chain_as_a_page(
    browser: Any, store: Store, llama_server: str, tmp_path: Path
) -> None:
    """A chain made against the real server (a compaction, then a fork) exported with
    ``--chain``: no console error, no request, every message of the JSON export in it,
    folds that open and close, lineage links that scroll to their file; a screenshot is
    left in tmp_path for people to look at."""
    from chatloop.backends.openai_compat import OpenAICompatBackend
    from chatloop.config import Settings
    from tests.hosts import chat

    settings = Settings(
        max_tokens=16, summary_max_tokens=32, context_window=2048, summaries="wait",
        titles="first", prepare_compaction="off",
    )  # fmt: skip
    session, _ = chat(store, OpenAICompatBackend(llama_server), settings=settings)
    session.send("Tell me about the lighthouse keeper and the `tide table` in notes.txt.")
    session.compact()
    session.send("Go on about the harbour in winter.")
    session.fork(1)
    session.send("What about the bridge?")
    session.close()

    listed = json.loads(run("sessions", "--json", home=store.root, cwd=store.cwd).stdout)
    last = listed[0]["id"]
    out = tmp_path / "chain.html"
    done = run(
        "export", last, "--chain", "--format", "html", "-o", str(out),
        home=store.root, cwd=store.cwd,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    exported = run("export", last, "--chain", "--format", "json", home=store.root, cwd=store.cwd)
    sessions = json.loads(exported.stdout)
    assert len(sessions) == 3  # root, its compaction's child, the fork

    visit = Visit(browser, out, viewport={"width": 1000, "height": 800})
    page = visit.page
    try:
        assert visit.console == [] and visit.others() == []
        for s in sessions:
            part = page.query_selector(f"#{as_html.anchor(s['meta']['id'])}")
            assert part is not None
            for m in s["messages"]:
                card = page.query_selector(f"#{as_html.anchor(s['meta']['id'])}-{m['key']}")
                assert card is not None, m
                # (its parts' text apart: two parts' texts joined would make one word)
                shown = words(card.evaluate(CARD_TEXT))
                texts = [
                    m["text"],
                    *(t["text"] for t in m["thinking"]),
                    *(c["name"] + " " + c["arguments"] for c in m["tool_calls"]),
                    *(r["content"] for r in m["tool_results"]),
                ]
                for text in texts:
                    missing = [w for w in words(visible(text)) if w not in shown]
                    assert missing == [], (m["role"], text)

        fold = page.query_selector("article.summary details")
        assert fold is not None and not fold.evaluate("d => d.open")
        body = fold.query_selector(".reply")
        assert body is not None and not body.is_visible()
        fold.query_selector("summary").click()
        assert fold.evaluate("d => d.open") and body.is_visible()
        fold.query_selector("summary").click()
        assert not fold.evaluate("d => d.open") and not body.is_visible()
        page.emulate_media(media="print")  # printed, every fold is open
        assert body.is_visible()
        page.emulate_media(media="screen")
        assert not body.is_visible()

        assert page.evaluate(DEAD_LINKS) == 0  # every link within the page has its target
        ids = page.eval_on_selector_all("[id]", "els => els.map(e => e.id)")
        assert len(ids) == len(set(ids))  # (a fork's copies keep their keys: ids differ)
        nodes = page.query_selector_all("a.node-link")
        assert len(nodes) == 3
        for s, node in reversed(list(zip(sessions, nodes, strict=True))):
            target = f"#{as_html.anchor(s['meta']['id'])}"
            assert node.get_attribute("href") == target
            page.evaluate("window.scrollTo(0, 0)")
            node.click()
            page.wait_for_function("t => location.hash === t", arg=target)
            box = page.evaluate(
                "t => { const r = document.querySelector(t).getBoundingClientRect();"
                " return [r.top, r.bottom, innerHeight]; }",
                target,
            )
            top, bottom, height = box
            assert -1 < top < height and bottom > 0, (target, box)  # (-1: sub-pixel)
        page.mouse.move(0, 0)  # (nothing hovered or focused in the picture)
        page.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
        shot = tmp_path / "chain.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        if os.environ.get("CHATLOOP_SCREENSHOT"):  # (README's picture: docs/html-export.png)
            page.set_viewport_size({"width": 1000, "height": 1500})
            page.screenshot(path=os.environ["CHATLOOP_SCREENSHOT"])
        assert visit.console == [] and visit.others() == []
    finally:
        visit.close()


# every text node of a card's body (after its head: role, time, tokens), space apart
CARD_TEXT = """c => { const out = []; for (const part of [...c.children].slice(1)) {
  const walk = document.createTreeWalker(part, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) out.push(walk.currentNode.data); } return out.join(' '); }"""


def words(text: str) -> set[str]:
    """The words of ``text``: what markdown rendering keeps of it (it drops marks such
    as ``**`` and backticks, never a word)."""
    return set(re.findall(r"\w+", text))
