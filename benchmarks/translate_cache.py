"""Prompt caching through translation: the cached share of prompt tokens, native chat vs translated.

Run: ``python -m benchmarks.translate_cache [--conversations 4] [--turns 10]`` (seconds; writes
``benchmarks/results/translate-cache.md``).

The scenario: agent-like conversations (a ~2.5k-token system prompt, two tools, then turns of a user
message of ~400 tokens, every other answer a tool call whose result goes back in the next turn) sent
to a gateway whose only deployment is a chat-only fake that caches prompt prefixes as providers do
(``gateway.fakes.cache``: per message boundary, 1024 tokens at least). The same conversations are sent
three ways, each on a fresh fake (empty cache) and a fresh gateway:

- ``chat``: natively, with the ``openai`` SDK's chat completions;
- ``messages``: with the ``anthropic`` SDK, translated Messages → chat;
- ``responses``: with the ``openai`` SDK's Responses API (the full input each turn, ``store: false``, as
  Codex sends it), translated Responses → chat.

Each client keeps its own history in its own API, built from the answers it got, as a real client does.
Reported per way: the share of prompt tokens the provider served from its cache (its own counters),
and the same from the usage the client received. Translation keeps the cache when its prefix is
byte-identical turn to turn; the target is within 5 points of native. Also reported: what translating
one long agent request costs the gateway (``translation_cost``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai

from gateway.app import AppOptions, create_app
from gateway.fakes import FakeBehavior, FakeProvider
from gateway.relay.outbound import encode_body
from gateway.translate import translate_request
from tests.support.config import gateway_config
from tests.support.servers import ServerThread

SYSTEM = "You are a careful coding agent. " + " ".join(f"Rule {i}: keep the repository tidy." for i in range(400))
TOOL_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
USER = "Please look at the module and tell me what it does. " * 30
RESULT = "def lookup(q): return index[q]  # " + "x" * 600
OUT = Path(__file__).parent / "results" / "translate-cache.md"


@dataclass(frozen=True)
class _Upstream:
    name: str
    base_url: str


@dataclass
class Share:
    way: str
    provider_cached: int = 0
    provider_prompt: int = 0
    client_cached: int = 0
    client_prompt: int = 0
    requests: int = 0

    def provider(self) -> float:
        return 100.0 * self.provider_cached / self.provider_prompt if self.provider_prompt else 0.0

    def client(self) -> float:
        return 100.0 * self.client_cached / self.client_prompt if self.client_prompt else 0.0


class Stack:
    """One chat-only caching fake and a gateway over it, on loopback threads."""

    def __init__(self) -> None:
        behavior = FakeBehavior(output_tokens=40, cache_prompts=4096, cache_min_tokens=1024)
        self.fake = FakeProvider("chatonly", behavior)
        self.fake_server = ServerThread(self.fake).start()
        upstream = _Upstream("chatonly", self.fake_server.url + "/v1")
        config = gateway_config([upstream], provider_options={"chatonly": {"apis": ["chat"]}})
        self.gateway = ServerThread(create_app(config, AppOptions(environ={}))).start()
        self.url = self.gateway.url

    def tools(self, on: bool) -> None:
        """The next answers are tool calls (JSON arguments) or text."""
        self.fake.behavior = self.fake.behavior.merged({"tool_call": on})

    def counters(self) -> dict[str, int]:
        return dict(httpx.get(self.fake_server.url + "/_fake/state").json()["cache"])

    def stop(self) -> None:
        self.gateway.stop()
        self.fake_server.stop()


def _chat(stack: Stack, conversations: int, turns: int, share: Share) -> None:
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    tools: list[Any] = [{"type": "function", "function": {"name": "lookup", "parameters": TOOL_SCHEMA}}]
    for c in range(conversations):
        history: list[Any] = [{"role": "system", "content": f"{SYSTEM} Session {c}."}]
        for turn in range(turns):
            stack.tools(turn % 2 == 1)
            last = history[-1]
            if last.get("tool_calls"):
                history.append({"role": "tool", "tool_call_id": last["tool_calls"][0]["id"], "content": RESULT})
            history.append({"role": "user", "content": f"{USER} Turn {turn}."})
            answer = client.chat.completions.create(model="m", messages=history, tools=tools, max_tokens=200)
            message = answer.choices[0].message
            history.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
            usage = answer.usage
            assert usage is not None
            details = usage.prompt_tokens_details
            share.client_cached += details.cached_tokens or 0 if details is not None else 0
            share.client_prompt += usage.prompt_tokens
            share.requests += 1
    client.close()


def _messages(stack: Stack, conversations: int, turns: int, share: Share) -> None:
    client = anthropic.Anthropic(base_url=stack.url, api_key="k", max_retries=0)
    tools: list[Any] = [{"name": "lookup", "input_schema": TOOL_SCHEMA}]
    for c in range(conversations):
        history: list[Any] = []
        for turn in range(turns):
            stack.tools(turn % 2 == 1)
            content: list[Any] = []
            if history and history[-1]["content"][-1]["type"] == "tool_use":
                content.append(
                    {"type": "tool_result", "tool_use_id": history[-1]["content"][-1]["id"], "content": RESULT}
                )
            content.append({"type": "text", "text": f"{USER} Turn {turn}."})
            history.append({"role": "user", "content": content})
            answer = client.messages.create(
                model="m", system=f"{SYSTEM} Session {c}.", messages=history, tools=tools, max_tokens=200
            )
            history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]})
            usage = answer.usage
            cached = usage.cache_read_input_tokens or 0
            share.client_cached += cached
            share.client_prompt += usage.input_tokens + cached + (usage.cache_creation_input_tokens or 0)
            share.requests += 1
    client.close()


def _responses(stack: Stack, conversations: int, turns: int, share: Share) -> None:
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    tools: list[Any] = [{"type": "function", "name": "lookup", "parameters": TOOL_SCHEMA, "strict": False}]
    for c in range(conversations):
        items: list[Any] = []
        for turn in range(turns):
            stack.tools(turn % 2 == 1)
            if items and items[-1]["type"] == "function_call":
                items.append({"type": "function_call_output", "call_id": items[-1]["call_id"], "output": RESULT})
            items.append(
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"{USER} Turn {turn}."}]}
            )
            answer = client.responses.create(
                model="m",
                instructions=f"{SYSTEM} Session {c}.",
                input=items,
                tools=tools,
                store=False,
                max_output_tokens=200,
            )
            for item in answer.output:
                if item.type == "function_call":
                    items.append(
                        {
                            "type": "function_call",
                            "call_id": item.call_id,
                            "name": item.name,
                            "arguments": item.arguments,
                        }
                    )
                elif item.type == "message":
                    text = "".join(p.text for p in item.content if p.type == "output_text")
                    items.append(
                        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
                    )
            usage = answer.usage
            assert usage is not None
            share.client_cached += usage.input_tokens_details.cached_tokens
            share.client_prompt += usage.input_tokens
            share.requests += 1
    client.close()


WAYS: dict[str, Callable[[Stack, int, int, Share], None]] = {
    "chat": _chat,
    "messages": _messages,
    "responses": _responses,
}


def measure(way: str, conversations: int, turns: int) -> Share:
    stack = Stack()
    share = Share(way)
    try:
        WAYS[way](stack, conversations, turns, share)
        counters = stack.counters()
    finally:
        stack.stop()
    share.provider_cached, share.provider_prompt = counters["cached_tokens"], counters["prompt_tokens"]
    return share


def agent_body(turns: int = 60) -> dict[str, Any]:
    """A long Claude-Code-like Messages request (~200 KiB): system prompt, 20 tools, tool round trips, thinking."""
    messages: list[Any] = [{"role": "user", "content": "start"}]
    for i in range(turns):
        thinking = {"type": "thinking", "thinking": "t" * 300, "signature": ""}
        call = {"type": "tool_use", "id": f"toolu_{i}", "name": "Read", "input": {"path": "/a/b", "n": i}}
        messages.append({"role": "assistant", "content": [thinking, {"type": "text", "text": "ok"}, call]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "x" * 2000}
        messages.append({"role": "user", "content": [result, {"type": "text", "text": "go on " * 50}]})
    tools = [{"name": f"t{i}", "description": "d" * 500, "input_schema": TOOL_SCHEMA} for i in range(20)]
    system = [{"type": "text", "text": SYSTEM[:20000], "cache_control": {"type": "ephemeral"}}]
    return {"model": "m", "max_tokens": 32000, "system": system, "messages": messages, "tools": tools, "stream": True}


def translation_cost(runs: int = 50) -> tuple[int, float]:
    """(body KiB, median milliseconds) to translate ``agent_body`` Messages → chat and encode it, as the relay does."""
    body = agent_body()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        encode_body(translate_request(body, "messages", "chat", "upstream"))
        times.append((time.perf_counter() - started) * 1000)
    return len(json.dumps(body)) // 1024, statistics.median(times)


def report(shares: list[Share], conversations: int, turns: int, cost: tuple[int, float]) -> str:
    native = shares[0]
    lines = [
        "# Prompt caching through translation",
        "",
        f"Run {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')} on {platform.machine()} "
        f"({platform.python_version()}): `python -m benchmarks.translate_cache --conversations {conversations} "
        f"--turns {turns}`.",
        "",
        "A chat-only caching fake behind the gateway; the same agent conversations sent natively (chat) and",
        "translated (Messages → chat, Responses → chat). Cached share of prompt tokens, as the provider",
        "counted it and as the usage the client received reported it.",
        "",
        "| client API | upstream | requests | cached (provider) | cached (client usage) | vs native |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for share in shares:
        delta = share.provider() - native.provider()
        upstream = "chat (native)" if share.way == "chat" else "chat (translated)"
        lines.append(
            f"| {share.way} | {upstream} | {share.requests} | {share.provider():.1f}% | {share.client():.1f}% | "
            f"{delta:+.1f} pts |"
        )
    worst = max(abs(s.provider() - native.provider()) for s in shares)
    lines += ["", f"Largest gap to native: {worst:.1f} points (target: within 5).", ""]
    lines += [
        f"Translation's own cost: a {cost[0]} KiB Claude-Code-like request (system prompt, 20 tools, 60 tool",
        f"round trips with thinking) translated Messages → chat and encoded in {cost[1]:.2f} ms (median of 50).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    shares = [measure(way, args.conversations, args.turns) for way in WAYS]
    text = report(shares, args.conversations, args.turns, translation_cost())
    args.out.write_text(text)
    print(text)
    print(json.dumps({s.way: round(s.provider(), 2) for s in shares}))


if __name__ == "__main__":
    main()
