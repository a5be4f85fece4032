"""The fake provider's prompt cache: a bounded LRU of prompt prefixes, each with a TTL.

Why: a gateway that routes conversations by where their prompt is cached can only be tested
against upstreams that cache as real providers do. Real providers (OpenAI, DeepSeek, Anthropic,
vLLM hosts) keep a recently sent prompt's prefix for minutes; a request that starts with it skips
that part's prefill, so its first token comes sooner, and the cached part is billed cheaper and
reported in ``usage``. This fake does the same, at message granularity:

- a prompt is the list of its messages (chat/Messages ``messages`` after ``system``/``tools``;
  Responses ``input``; a completion's ``prompt``); each message boundary is a prefix, named by a
  chained digest of the messages up to it, and sized in tokens as ``chat.prompt_tokens`` does
  (4 bytes of JSON per token, cumulatively);
- the longest prefix of the request found in the cache (unexpired, at least ``cache_min_tokens``)
  is its cached part; every prefix of the request at least that long is then stored (refreshing
  its TTL), the least recently used going first beyond ``cache_prompts`` entries;
- the first token waits ``uncached tokens ÷ prefill_tokens_per_s`` on top of ``ttft_s``;
- usage reports the cached tokens in the shape ``cache_usage`` names: ``openai``
  (``prompt_tokens_details.cached_tokens``), ``deepseek`` (``prompt_cache_hit_tokens`` /
  ``prompt_cache_miss_tokens``), ``anthropic`` (``cache_read_input_tokens`` /
  ``cache_creation_input_tokens``), or ``none``.

The counters (``GET /_fake/state`` → ``cache``) say how many requests hit, missed, and how many
prompt tokens were served from the cache: what a test checks the gateway's routing against.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

CacheUsage = Literal["openai", "deepseek", "anthropic", "none"]
CACHE_USAGES: tuple[CacheUsage, ...] = ("openai", "deepseek", "anthropic", "none")
BYTES_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class PromptUse:
    """What one request's prompt cost the fake: its size, the part served from cache, the prefill wait."""

    prompt_tokens: int
    cached_tokens: int = 0
    prefill_s: float = 0.0
    usage_shape: CacheUsage = "openai"

    def chat_usage(self, completion_tokens: int) -> dict[str, Any]:
        """An OpenAI-style ``usage`` object (chat, completions) with the cached part in the chosen shape."""
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        }
        if self.usage_shape == "openai":
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        elif self.usage_shape == "deepseek":
            usage["prompt_cache_hit_tokens"] = self.cached_tokens
            usage["prompt_cache_miss_tokens"] = self.prompt_tokens - self.cached_tokens
        elif self.usage_shape == "anthropic":
            usage["cache_read_input_tokens"] = self.cached_tokens
            usage["cache_creation_input_tokens"] = 0
        return usage


CURRENT: ContextVar[PromptUse | None] = ContextVar("fake_prompt_use", default=None)
"""The request being served's ``PromptUse`` (each ASGI request runs in its own task, so its own context)."""


@dataclass(slots=True)
class CacheCounters:
    hits: int = 0
    """Requests whose prompt started with a cached prefix."""
    misses: int = 0
    """Requests long enough to cache that found nothing cached."""
    cached_tokens: int = 0
    prompt_tokens: int = 0
    """Prompt tokens of every request the cache judged (hits and misses)."""

    def as_dict(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "cached_tokens": self.cached_tokens,
            "prompt_tokens": self.prompt_tokens,
        }


class PromptCache:
    """Prompt prefixes by chained digest → expiry. Usage::

    use = cache.serve(body, prompt_tokens, now, capacity=1000, ttl_s=300, min_tokens=1024, prefill_tokens_per_s=2000)
    use.cached_tokens, use.prefill_s
    """

    def __init__(self) -> None:
        self.entries: OrderedDict[str, float] = OrderedDict()
        self.counters = CacheCounters()

    def serve(
        self,
        body: dict[str, Any],
        prompt_tokens: int,
        now: float,
        *,
        capacity: int,
        ttl_s: float,
        min_tokens: int,
        prefill_tokens_per_s: float,
        usage_shape: CacheUsage = "openai",
    ) -> PromptUse:
        """Judge one request's prompt against the cache, then cache its prefixes (when ``capacity`` > 0)."""
        prefixes = prefix_digests(body)
        total = max(prompt_tokens, prefixes[-1][1] if prefixes else 0)
        cached = 0
        if capacity > 0:
            for digest, tokens in reversed(prefixes):
                if tokens < min_tokens:
                    break
                expires = self.entries.get(digest)
                if expires is not None and expires > now:
                    cached = min(tokens, total)
                    break
            if total >= min_tokens:
                self.counters.prompt_tokens += total
                self.counters.cached_tokens += cached
                if cached:
                    self.counters.hits += 1
                else:
                    self.counters.misses += 1
            for digest, tokens in prefixes:
                if tokens >= min_tokens:
                    self.entries[digest] = now + ttl_s
                    self.entries.move_to_end(digest)
            while len(self.entries) > capacity:
                self.entries.popitem(last=False)
        prefill = (total - cached) / prefill_tokens_per_s if prefill_tokens_per_s > 0 else 0.0
        return PromptUse(total, cached, prefill, usage_shape)

    def clear(self) -> None:
        self.entries.clear()


def prefix_digests(body: dict[str, Any]) -> list[tuple[str, int]]:
    """Each message boundary of the prompt: (chained digest, tokens up to it), shortest first.

    The head (model, system, instructions, tools) is part of the first prefix, so two prompts
    with different system prompts or tools never share a cached prefix, as at a real provider.
    """
    head = {k: body.get(k) for k in ("model", "system", "instructions", "tools")}
    turns = body.get("messages")
    if not isinstance(turns, list):
        items = body.get("input", body.get("prompt", ""))
        turns = items if isinstance(items, list) else [items]
    digest = hashlib.sha256(_canonical(head).encode("utf-8", "surrogatepass"))
    # Instructions outside the turns (Messages' ``system``, Responses' ``instructions``, tools) are prompt too.
    size = sum(len(json.dumps(v)) for k, v in head.items() if k != "model" and v is not None)
    prefixes = []
    for turn in turns:
        digest.update(b"\x1e" + _canonical(turn).encode("utf-8", "surrogatepass"))
        size += len(json.dumps(turn)) + 2  # sized as the whole prompt is (``chat.prompt_tokens``)
        prefixes.append((digest.hexdigest(), max(1, size // BYTES_PER_TOKEN)))
    return prefixes


def _canonical(value: Any) -> str:
    return json.dumps(_unmarked(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _unmarked(value: Any) -> Any:
    """``value`` without Anthropic's ``cache_control`` marks: they say where to cache, not what the prompt is, and
    Claude Code moves its mark to the newest block every turn (Anthropic still reads the earlier prefix)."""
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value
