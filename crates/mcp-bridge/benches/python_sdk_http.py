"""The Python MCP SDK's Streamable HTTP client against the same server as `benches/stdio.rs`'s
HTTP row, for the comparison in docs/benchmarks.md (not part of any test).

    python3 -m venv /tmp/mcpvenv && /tmp/mcpvenv/bin/pip install mcp
    /tmp/mcpvenv/bin/python benches/python_sdk_http.py http://127.0.0.1:PORT/mcp [CALLS]
"""
import asyncio
import sys
import time

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, n: int) -> None:
    async with streamable_http_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()
            for i in range(50):
                await session.call_tool("echo", {"message": f"w{i}"})
            lat = []
            t0 = time.perf_counter()
            for i in range(n):
                s = time.perf_counter()
                r = await session.call_tool("echo", {"message": f"m{i}"})
                lat.append(time.perf_counter() - s)
                assert r.content[0].text.endswith(f"m{i}")
            total = time.perf_counter() - t0
    lat.sort()
    pct = lambda p: lat[round((len(lat) - 1) * p)] * 1e6
    print(f"| python mcp SDK (streamable HTTP) | {n} | {n / total:.0f} | {pct(0.5):.0f} | {pct(0.99):.0f} |")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000))
