"""LangChain core's side of `tool_loop/native_run_2_rounds` (benches/loop_overhead.rs), for #27.

The same round as our bench, with the same parts:

- an instant in-process chat model that plays `common::noop_round`: when the request's last
  message is a tool result it answers "done", otherwise it calls `noop` with {"x": 1} (call id
  "c1"). Like our `common::Instant` it decides from the request alone; no network, no sleep;
- `noop(x: int)`, "does nothing", answering "ok" (`common::noop_tool`), as a `@tool`;
- tools bound once with `bind_tools` (the OpenAI tool format a provider would send), as our
  agent registers its tool once: the binding rides along in every model call, as our specs
  ride in every `ChatRequest`;
- one round = a fresh message list with the user's "go" → model → the AIMessage with one
  tool call appended → `noop.invoke(tool_call)` (argument validation by the tool's schema)
  → its ToolMessage appended → model again → the final answer checked.

Tracing is off on both sides: no callbacks, and xtask removes LangSmith's variables. Our side
does more than this (a session store append per message, a spawned task per tool call): so the
ratio, if anything, flatters LangChain.

Prints one line, `langchain_round median_us=… min_us=… max_us=… rounds=… repeats=…
langchain_core=… python=…`: microseconds per round, each repeat timing `rounds` rounds back to
back with `time.perf_counter_ns` after a warm-up. The defaults mirror criterion's run of ours:
~1 s of warm-up, then ~3 s of samples of ~30–60 ms each (criterion's upper half; see xtask).

    python round.py [--rounds 40] [--repeats 75] [--warmup 800]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import statistics
import sys
import time
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool


class InstantModel(BaseChatModel):
    """`common::Instant`: call `noop` until a tool result is there, then answer."""

    @property
    def _llm_type(self) -> str:
        return "instant"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        if isinstance(messages[-1], ToolMessage):
            message = AIMessage(content="done")
        else:
            message = AIMessage(
                content="",
                tool_calls=[{"name": "noop", "args": {"x": 1}, "id": "c1"}],
            )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(self, tools, *, tool_choice=None, **kwargs):  # noqa: ANN001, ANN201
        # What a provider's chat model does (ChatOpenAI's bind_tools): the tools in the
        # OpenAI format, bound as an argument of every call.
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


@tool
def noop(x: int) -> str:
    """does nothing"""
    return "ok"


MODEL = InstantModel().bind_tools([noop])


def round_once() -> None:
    """One `Agent::run`: 2 model calls + 1 tool, a fresh message list."""
    messages: list[BaseMessage] = [HumanMessage("go")]
    ai = MODEL.invoke(messages)
    messages.append(ai)
    for call in ai.tool_calls:
        messages.append(noop.invoke(call))
    answer = MODEL.invoke(messages)
    if answer.content != "done":
        raise SystemExit(f"unexpected answer {answer.content!r}: the round is not the bench's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="rounds per timed repeat")
    parser.add_argument("--repeats", type=int, default=75, help="timed repeats")
    parser.add_argument("--warmup", type=int, default=800, help="untimed rounds first")
    args = parser.parse_args()
    if args.rounds < 1 or args.repeats < 1 or args.warmup < 0:
        parser.error("--rounds and --repeats must be ≥ 1, --warmup ≥ 0")

    # The round must be the bench's: one tool call, its result, then the answer.
    # (Checked with `if`, not `assert`, so that `python -O` checks it too.)
    ai = MODEL.invoke([HumanMessage("go")])
    if ai.tool_calls != [{"name": "noop", "args": {"x": 1}, "id": "c1", "type": "tool_call"}]:
        raise SystemExit(f"the model's first answer is not one call of noop: {ai!r}")
    result = noop.invoke(ai.tool_calls[0])
    if not (isinstance(result, ToolMessage) and result.content == "ok" and result.tool_call_id == "c1"):
        raise SystemExit(f"noop's result is not the ToolMessage 'ok' for c1: {result!r}")

    for _ in range(args.warmup):
        round_once()
    per_round_us = []
    for _ in range(args.repeats):
        start = time.perf_counter_ns()
        for _ in range(args.rounds):
            round_once()
        per_round_us.append((time.perf_counter_ns() - start) / args.rounds / 1000)
    print(
        "langchain_round"
        f" median_us={statistics.median(per_round_us):.1f}"
        f" min_us={min(per_round_us):.1f}"
        f" max_us={max(per_round_us):.1f}"
        f" rounds={args.rounds} repeats={args.repeats}"
        f" langchain_core={importlib.metadata.version('langchain-core')}"
        f" python={platform.python_version()}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
