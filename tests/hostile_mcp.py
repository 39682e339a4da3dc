"""A hostile MCP server over stdio, for the tests: ``python hostile_mcp.py MODE``.

It speaks just enough JSON-RPC (initialize, tools/list, tools/call) to be a server,
then misbehaves as MODE says: ``hang`` (never answers a call), ``die`` (exits in
the middle of a call), ``huge`` (answers 10 MB), ``markup`` (tool names and
descriptions full of rich markup and terminal control), ``mute`` (never answers
initialize), ``clash`` (tool names that read alike as tool names).
"""

from __future__ import annotations

import json
import os
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "hang"
HOSTILE = "[bold red]loud[/] \x1b[2J\x1b]52;c;ZXZpbA==\x07 \u202e<script>"


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def tools() -> list[dict[str, object]]:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    if MODE == "clash":  # names that read alike once reduced to a tool name's letters
        names = ["a b", "a_b", "a.b", "a_b_2", "x" * 100, "x" * 100 + "y", "x" * 99 + "!"]
        return [{"name": n, "description": "", "inputSchema": schema} for n in names]
    name = f"echo{HOSTILE}" if MODE == "markup" else "echo"
    return [{"name": name, "description": f"Echoes. {HOSTILE}", "inputSchema": schema}]


for line in sys.stdin:
    request = json.loads(line)
    method, ident = request.get("method"), request.get("id")
    if ident is None:
        continue  # a notification
    if method == "initialize":
        if MODE == "mute":
            time.sleep(3600)
        send(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "result": {
                    "protocolVersion": request["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": f"hostile {HOSTILE}", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools()}})
    elif method == "tools/call":
        if MODE == "hang":
            time.sleep(3600)
        if MODE == "die":
            os._exit(3)
        text = "x" * (10 << 20) if MODE == "huge" else f"said {HOSTILE}"
        content = [{"type": "text", "text": text}]
        send({"jsonrpc": "2.0", "id": ident, "result": {"content": content, "isError": False}})
    else:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no"}})
