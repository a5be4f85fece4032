"""Background traffic for the demo, so that the leaderboard fills and routing shows without a user.

Requests arrive as a Poisson process at ``rate_per_s`` (seeded, so a run can be repeated):
mostly short streamed answers (a lookup or a label) with some long ones, since short answers
are won by the lowest first-token latency and long ones by the highest throughput, which is
exactly the trade-off the router has to make. At most ``max_in_flight`` requests are open at
once; an arrival beyond that is counted as skipped rather than queued, so the load stays
bounded whatever the providers do.

A ``conversation_share`` of the requests are turns of conversations (``x-session-id``): a few run at
once, each growing by a question and its answer per turn from a long system prompt, for 5–12 turns,
so that the providers' prompt caches and the gateway's session affinity show on the dashboard.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import aiohttp

from gateway.prompts import builtin_prompts

DONE_TAIL = b"data: [DONE]\n\n"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@dataclass(frozen=True, slots=True)
class TrafficMix:
    """What the generated requests look like. Token ranges are ``max_tokens`` bounds, inclusive."""

    rate_per_s: float
    models: tuple[tuple[str, float], ...]
    """Model names with their relative weights."""
    short_share: float = 0.7
    short_tokens: tuple[int, int] = (8, 48)
    long_tokens: tuple[int, int] = (200, 300)
    max_in_flight: int = 32
    timeout_s: float = 60.0
    conversation_share: float = 0.0
    """Share of requests that are the next turn of a conversation (a session), not a one-off prompt."""
    conversations: int = 4
    """Conversations open at once."""
    tool_share: float = 0.0
    """Share of one-off requests that declare a tool (``get_weather``): what a provider that breaks tool calls
    loses, while it keeps its plain chat."""


@dataclass(slots=True)
class TrafficCounts:
    """Running totals; the demo's status line reads them (and diffs them between lines)."""

    sent: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    by_provider: Counter[str] = field(default_factory=Counter)
    """Answered requests per provider (``x-gateway-provider``)."""
    by_route: Counter[str] = field(default_factory=Counter)
    """Answered requests per routing reason (``x-gateway-route``: best-score, explore, fallback, hedge)."""
    tools_by_provider: Counter[str] = field(default_factory=Counter)
    """Answered tool-using requests per provider."""
    long_by_provider: defaultdict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    """Answered long one-off requests (``TrafficMix.long_tokens``) per model, per provider: where speed, not the
    first token, decides, so where the router sends them shows the providers' profiles."""


def shares(counts: Counter[str]) -> str:
    """Counts as shares, largest first, e.g. ``fading 52% · steady 30%``."""
    total = sum(counts.values())
    if not total:
        return "none"
    return " · ".join(f"{name} {100 * n / total:.0f}%" for name, n in counts.most_common())


class TrafficGenerator:
    """Sends the mix to ``base_url`` (an OpenAI-style ``.../v1``) until cancelled.

    Create and run inside the event loop; cancelling ``run`` cancels every request in flight
    and closes the client.
    """

    def __init__(self, base_url: str, mix: TrafficMix, seed: int | None = None) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.mix = mix
        self.counts = TrafficCounts()
        self._rng = random.Random(seed)
        self._prompts = builtin_prompts()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._talks: dict[int, tuple[int, str, str, list[str]]] = {}
        """Open conversations by slot: (turns left, session id, model, its user turns after the system prompt)."""
        self._talk_ids = 0

    def _conversation(self, model: str) -> tuple[bytes, dict[str, str]]:
        """The next turn of one of the open conversations (a new one replaces one that is over)."""
        slot = self._rng.randrange(self.mix.conversations)
        turns = self._talks.get(slot)
        if turns is None or turns[0] <= 0:
            self._talk_ids += 1
            system = f"You are assistant #{self._talk_ids}. Follow the house style guide closely. " * 120
            turns = self._talks[slot] = (self._rng.randint(5, 12), f"demo-{self._talk_ids}", model, [system])
        left, name, model, history = turns
        history.append(f"Question {len(history)}: " + self._rng.choice(self._prompts)["messages"][-1]["content"])
        messages = [{"role": "system", "content": history[0]}]
        for index, text in enumerate(history[1:]):
            messages.append({"role": "user", "content": text})
            if index < len(history) - 2:
                messages.append({"role": "assistant", "content": "An earlier answer, kept in the history. " * 30})
        self._talks[slot] = (left - 1, name, model, history)
        body = {"model": model, "messages": messages, "stream": True, "max_tokens": self._rng.randint(20, 60)}
        return json.dumps(body).encode(), {"x-session-id": name}

    def _body(self) -> tuple[bytes, bool, str | None]:
        """A one-off request, whether it declares a tool, and its model if it asks for a long answer (None: short)."""
        names = [name for name, _ in self.mix.models]
        weights = [weight for _, weight in self.mix.models]
        model = self._rng.choices(names, weights)[0]
        long = self._rng.random() >= self.mix.short_share
        low, high = self.mix.long_tokens if long else self.mix.short_tokens
        body = dict(self._rng.choice(self._prompts))
        body.update(model=model, stream=True, max_tokens=self._rng.randint(low, high))
        # Drawn only when asked for: a mix without tools draws the same sequence as before.
        tools = self.mix.tool_share > 0 and self._rng.random() < self.mix.tool_share
        if tools:
            body.pop("response_format", None)
            body.update(tools=[WEATHER_TOOL], max_tokens=max(body["max_tokens"], 32))
        return json.dumps(body).encode(), tools, model if long and not tools else None

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.mix.timeout_s)
        connector = aiohttp.TCPConnector(limit=self.mix.max_in_flight)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            try:
                next_at = time.monotonic()
                while True:
                    next_at += self._rng.expovariate(self.mix.rate_per_s)
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                    if len(self._in_flight) >= self.mix.max_in_flight:
                        self.counts.skipped += 1
                        continue
                    headers = {"content-type": "application/json"}
                    tools, long = False, None
                    if self._rng.random() < self.mix.conversation_share:
                        model = self._rng.choices([n for n, _ in self.mix.models], [w for _, w in self.mix.models])[0]
                        body, session_headers = self._conversation(model)
                        headers.update(session_headers)
                    else:
                        body, tools, long = self._body()
                    task = asyncio.create_task(self._send(session, body, headers, tools, long))
                    self._in_flight.add(task)
                    task.add_done_callback(self._in_flight.discard)
            finally:
                for task in list(self._in_flight):
                    task.cancel()
                await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def _send(
        self,
        session: aiohttp.ClientSession,
        body: bytes,
        headers: dict[str, str],
        tools: bool = False,
        long: str | None = None,
    ) -> None:
        self.counts.sent += 1
        tail = b""
        provider = route = None
        status = None
        try:
            async with session.post(self.url, data=body, headers=headers) as response:
                status = response.status
                provider = response.headers.get("x-gateway-provider")
                route = response.headers.get("x-gateway-route")
                async for chunk in response.content.iter_any():
                    tail = (tail + chunk)[-len(DONE_TAIL) :]
        except (aiohttp.ClientError, TimeoutError):
            pass
        # The gateway ends a stream that broke after its first byte with an error event and no [DONE].
        if status == 200 and tail == DONE_TAIL:
            self.counts.ok += 1
            if provider:
                self.counts.by_provider[provider] += 1
                if tools:
                    self.counts.tools_by_provider[provider] += 1
                if long is not None:
                    self.counts.long_by_provider[long][provider] += 1
            if route:
                self.counts.by_route[route] += 1
        else:
            self.counts.failed += 1
