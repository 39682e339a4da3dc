"""Runs inside the peers' virtual environment, with basic-agent-chat-loop's own code.

    python peer_seed.py save QUERIES REPEATS   -> prints the median seconds of one save
    python peer_seed.py make DIR COUNT         -> COUNT sessions + index in DIR/.chat-sessions

``save`` drives the seed project's ``SessionPersister.save_conversation``
(which rewrites the whole transcript on every query) on a conversation of
QUERIES queries; its collaborators that only print or count are stand-ins.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

from basic_agent_chat_loop.components.session_manager import SessionInfo, SessionManager
from basic_agent_chat_loop.components.session_persister import SessionPersister

TEXT = (
    "The tide tables for the harbour say high water at 06:30 and 18:45; the keeper "
    "logs the wind, the swell and the boats that leave before dawn. "
) * 3


def entries(queries: int) -> list[str]:
    out: list[str] = []
    for i in range(queries):
        out.append(f"\n## Query {i + 1} (10:00:00)\n")
        out.append(f"**You:** question {i}: {TEXT[:250]}\n\n")
        out.append(f"**Agent:** {TEXT[:500]}\n\n*Time: 1.0s | Tokens: 300*\n\n")
    return out


def save(queries: int, repeats: int, folder: Path) -> float:
    manager = SessionManager(sessions_dir=folder)
    state = SimpleNamespace(
        conversation_markdown=entries(queries), session_id="bench", query_count=queries
    )
    persister = SessionPersister(
        agent=None,
        agent_name="Bench",
        agent_path="bench.py",
        session_manager=manager,
        session_state=state,
        session_restorer=SimpleNamespace(
            previous_summary=None,
            resumed_from=None,
        ),
        token_tracker=None,
        colors_module=None,
        response_streamer=SimpleNamespace(total_input_tokens=1, total_output_tokens=1),
    )
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        assert asyncio.run(persister.save_conversation())
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def make(folder: Path, count: int, size: int) -> None:
    manager = SessionManager(sessions_dir=folder / ".chat-sessions")
    manager._ensure_sessions_dir()
    body = "".join(entries(max(1, size // 1100)))
    infos = []
    for i in range(count):
        sid = f"bench_{i:06d}"
        (manager.sessions_dir / f"{sid}.md").write_text(f"# Bench Conversation\n\n{body}")
        now = datetime.now()
        infos.append(
            SessionInfo(sid, "Bench", "bench.py", now, now, 10, 3000, f"question {i}").to_dict()
        )
    manager._save_index({"sessions": infos, "last_updated": datetime.now().isoformat()})


if __name__ == "__main__":
    if sys.argv[1] == "save":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            print(save(int(sys.argv[2]), int(sys.argv[3]), Path(tmp)))
    else:
        make(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
