"""The fake provider caches prompt prefixes as real providers do: faster first tokens, cached tokens in usage."""

from __future__ import annotations

import json
import time
from typing import Any, cast

import httpx
import openai

from gateway.fakes import FakeBehavior
from gateway.fakes.cache import PromptCache, prefix_digests
from tests.support.fakes import Fakes

SYSTEM = "You are a careful assistant. " * 300  # ~2,000 tokens: long enough to cache
CACHING = FakeBehavior(output_tokens=4, cache_prompts=100, prefill_tokens_per_s=20_000.0)


def conversation(turns: int, system: str = SYSTEM) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i} " * 50})
        if i < turns - 1:
            messages.append({"role": "assistant", "content": f"answer {i} " * 50})
    return messages


def test_a_follow_up_turn_is_served_from_the_cache_and_its_first_token_is_sooner(fakes: Fakes) -> None:
    fake = fakes.start("p", CACHING)
    client = openai.OpenAI(base_url=fake.base_url, api_key="unused", max_retries=0, timeout=10)

    def turn(messages: list[dict[str, Any]]) -> tuple[int, int, float]:
        started = time.perf_counter()
        stream = client.chat.completions.create(
            model="m", messages=cast(Any, messages), stream=True, stream_options={"include_usage": True}
        )
        first = None
        usage = None
        for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter() - started
            usage = chunk.usage or usage
        assert usage is not None and usage.prompt_tokens_details is not None and first is not None
        return usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens or 0, first

    prompt1, cached1, ttft1 = turn(conversation(1))
    assert cached1 == 0 and prompt1 > 2000
    prompt2, cached2, ttft2 = turn(conversation(2))
    # The second turn starts with the first's whole prompt: all of it is cached, the new turn is not.
    assert prompt1 - 5 <= cached2 <= prompt1 and cached2 < prompt2
    assert ttft2 < ttft1 - 0.5 * (prompt1 / CACHING.prefill_tokens_per_s)
    counters = fake.app.snapshot()["cache"]
    assert counters["hits"] == 1 and counters["misses"] == 1 and counters["cached_tokens"] == cached2


def test_other_conversations_and_short_prompts_find_nothing_cached(fakes: Fakes) -> None:
    fake = fakes.start("p", CACHING)
    with httpx.Client(base_url=fake.base_url, timeout=10) as client:
        client.post("/chat/completions", json={"model": "m", "messages": conversation(2)})
        other = client.post("/chat/completions", json={"model": "m", "messages": conversation(2, SYSTEM + "!")})
        short = client.post("/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert other.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert short.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert fake.app.snapshot()["cache"]["hits"] == 0


def test_usage_shapes_are_selectable_per_request(fakes: Fakes) -> None:
    fake = fakes.start("p", CACHING)
    body = {"model": "m", "messages": conversation(1)}
    with httpx.Client(base_url=fake.base_url, timeout=10) as client:
        client.post("/chat/completions", json=body)
        deepseek = client.post("/chat/completions", json={**body, "fake": {"cache_usage": "deepseek"}}).json()
        anthropic = client.post("/chat/completions", json={**body, "fake": {"cache_usage": "anthropic"}}).json()
        messages = client.post(
            "/messages", json={"model": "m", "max_tokens": 4, "system": SYSTEM, "messages": conversation(1)[1:]}
        ).json()
        again = client.post(
            "/messages", json={"model": "m", "max_tokens": 4, "system": SYSTEM, "messages": conversation(1)[1:]}
        ).json()
        bad = client.post("/chat/completions", json={**body, "fake": {"cache_usage": "nope"}})
    assert deepseek["usage"]["prompt_cache_hit_tokens"] > 2000
    assert deepseek["usage"]["prompt_cache_miss_tokens"] == 0
    assert anthropic["usage"]["cache_read_input_tokens"] == deepseek["usage"]["prompt_cache_hit_tokens"]
    assert messages["usage"]["cache_read_input_tokens"] == 0
    assert again["usage"]["cache_read_input_tokens"] > 0 and again["usage"]["input_tokens"] >= 0
    assert bad.status_code == 400 and "cache_usage" in bad.json()["error"]["message"]


def test_the_cache_is_bounded_and_entries_expire() -> None:
    cache = PromptCache()
    bodies = [{"model": "m", "messages": conversation(1, f"{i} " + SYSTEM)} for i in range(3)]
    for body in bodies:
        cache.serve(body, 3000, 0.0, capacity=2, ttl_s=10.0, min_tokens=1024, prefill_tokens_per_s=0.0)
    assert len(cache.entries) == 2  # the oldest conversation's prefix was evicted
    hit = cache.serve(bodies[2], 3000, 5.0, capacity=2, ttl_s=10.0, min_tokens=1024, prefill_tokens_per_s=1000.0)
    assert hit.cached_tokens > 0 and hit.prefill_s == (3000 - hit.cached_tokens) / 1000.0
    late = cache.serve(bodies[1], 3000, 30.0, capacity=2, ttl_s=10.0, min_tokens=1024, prefill_tokens_per_s=1000.0)
    assert late.cached_tokens == 0 and late.prefill_s == 3.0


def test_prefixes_grow_with_the_conversation_and_name_their_head() -> None:
    first = prefix_digests({"model": "m", "messages": conversation(1)})
    second = prefix_digests({"model": "m", "messages": conversation(2)})
    assert second[: len(first)] == first and second[-1][1] > first[-1][1]
    assert prefix_digests({"model": "m", "tools": [{"x": 1}], "messages": conversation(1)})[0] != first[0]


def test_the_demo_traffic_holds_conversations_that_grow_turn_by_turn() -> None:
    from gateway.traffic import TrafficGenerator, TrafficMix

    generator = TrafficGenerator("http://127.0.0.1:9/v1", TrafficMix(1.0, (("m", 1.0),), conversations=1), seed=3)
    turns = [generator._conversation("m") for _ in range(4)]
    bodies = [json.loads(body) for body, _ in turns]
    assert len({headers["x-session-id"] for _, headers in turns}) == 1
    sizes = [len(b["messages"]) for b in bodies]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    for earlier, later in zip(bodies, bodies[1:], strict=False):
        assert later["messages"][: len(earlier["messages"])] == earlier["messages"], "each turn extends the last"
