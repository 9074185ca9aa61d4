"""An MCP server written with the official Python SDK (`mcp` on PyPI, pinned in
requirements.txt), speaking Streamable HTTP's session revision on 127.0.0.1 with a short idle
timeout: a session with no request in flight for IDLE seconds is ended by the server, which
keeps running, and its id then answers HTTP 404. The mcp-bridge tests use it to prove that a
session the server expired is replaced without a restart and without the call waiting for its
timeout (#42.8).

The SDK also speaks the stateless 2026-07-28 revision, which has no sessions to expire; like
every server written before that revision, this one answers `server/discover` with "method not
found", so clients use the `initialize` handshake and a session. And like many servers with
nothing to push, it offers no standalone GET stream (HTTP 405, as the transport allows): the
SDK counts an open GET stream as activity, so a client holding one would never idle.

Usage: python idle_server.py PORT IDLE_SECONDS
"""

import json
import logging
import os
import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer

port = int(sys.argv[1])
idle = float(sys.argv[2])
logging.basicConfig(level=logging.INFO, stream=sys.stderr)

server = MCPServer("idle-expiry")



@server.tool()
def whoami(ctx: Context) -> dict:
    """The MCP session id this call arrived on and the server's process id."""
    headers = ctx.headers or {}
    return {"session": headers.get("mcp-session-id"), "pid": os.getpid()}


class SessionRevisionOnly:
    """Answers `server/discover` as a server of the session revision does (method not found),
    and a standalone GET stream with 405."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET":
            await send(
                {"type": "http.response.start", "status": 405, "headers": [(b"allow", b"POST, DELETE")]}
            )
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        messages = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        body = b"".join(m.get("body", b"") for m in messages)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if isinstance(request, dict) and request.get("method") == "server/discover":
            error = {"code": -32601, "message": "Method not found: server/discover"}
            out = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": error})
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": out.encode()})
            return
        replay = iter(messages)

        async def receive_again():
            return next(replay, None) or await receive()

        await self.app(scope, receive_again, send)


app = server.streamable_http_app(session_idle_timeout=idle, host="127.0.0.1")
uvicorn.run(SessionRevisionOnly(app), host="127.0.0.1", port=port, log_level="info")
