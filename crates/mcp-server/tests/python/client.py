"""The official MCP Python SDK's client against the toolkit's MCP server (tests/python_client.rs).

argv: URL MODE ANSWER -- MODE is the SDK's connect mode ("auto": server/discover, 2026-07-28;
"legacy": initialize); ANSWER is how the person answers an approval ("accept" or "decline").
Prints one JSON line: the tool names, the echo's text, the held call's text and whether it was an
error, and the questions asked.
"""

import asyncio
import json
import sys

import mcp_types as types
from mcp import Client

URL, MODE, ANSWER = sys.argv[1], sys.argv[2], sys.argv[3]
questions = []


async def elicit(context, params):
    questions.append(params.message)
    if ANSWER == "accept":
        return types.ElicitResult(action="accept", content={"approve": True})
    return types.ElicitResult(action="decline")


def text(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def main():
    async with Client(URL, mode=MODE, elicitation_callback=elicit) as client:
        tools = await client.list_tools()
        echo = await client.call_tool("echo", {"text": "from python"})
        held = await client.call_tool("transfer", {"to": "ann", "amount": 5})
        print(json.dumps({
            "protocol": client.protocol_version,
            "tools": sorted(t.name for t in tools.tools),
            "echo": text(echo),
            "held": text(held),
            "held_error": bool(held.is_error),
            "questions": questions,
        }))


asyncio.run(main())
