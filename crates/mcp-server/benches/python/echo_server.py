"""The official MCP Python SDK's server (`mcp` on PyPI, pinned in
crates/mcp-bridge/tests/python/requirements.txt) with the same `echo` tool as the toolkit's demo
server: the Python side of benches/versus_sdks.rs.

Usage: python echo_server.py stdio
       python echo_server.py http PORT

Over HTTP it runs the way the SDK recommends for throughput: stateless Streamable HTTP with plain
JSON responses (no session, no SSE framing), on 127.0.0.1 only, without uvicorn's per-request
access log.
"""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("echo-bench")


@server.tool()
def echo(text: str) -> str:
    """The text, back."""
    return text


if sys.argv[1:] == ["stdio"]:
    server.run("stdio")
elif len(sys.argv) == 3 and sys.argv[1] == "http":
    import uvicorn

    app = server.streamable_http_app(stateless_http=True, json_response=True, host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
else:
    sys.exit("usage: echo_server.py stdio | echo_server.py http PORT")
