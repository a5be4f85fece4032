"""What a sample contributes to the stats: its metric values and each value's histogram bucket.

Worked out once per finished attempt, by every store (``gateway.stats.memory``, the Redis one) and the minute
history: compiled with mypyc where the build is used (``gateway.native``), so that each value's bucket (a log, a
division and a ceiling) is machine arithmetic, with no float made per step. Split from ``gateway.stats.snapshot``,
which re-exports what other modules import from it.
"""

from __future__ import annotations

from math import ceil, isnan, log
from typing import Final, Literal, get_args

from gateway.samples import Sample
from gateway.stats.sketch import LOG_GAMMA, MIN_VALUE, ZERO_BUCKET, bucket_of

Metric = Literal[
    "ttft_s",
    "first_answer_s",
    "tokens_per_s",
    "e2e_s",
    "output_tokens",
    "prompt_tokens",
    "cached_tokens",
    "warm_ttft_s",
    "cold_ttft_s",
    "prefill_tokens_per_s",
]
METRICS: tuple[Metric, ...] = get_args(Metric)
"""The prompt cache's metrics (``prompt_tokens`` .. ``prefill_tokens_per_s``) are described at ``cache_values``."""
WARM_SHARE: Final = 0.5
"""A first token is warm when at least this share of the prompt came from the provider's cache."""
MIN_PREFILL_TOKENS: Final = 1024
"""Uncached prompt tokens below which a first token says little of the prefill speed (latency dominates)."""


def sample_values(sample: Sample) -> dict[Metric, float]:
    """The metric values a sample contributes (missing ones are left out, never zero)."""
    values: dict[Metric, float] = {}
    if sample.ttft_s is not None:
        values["ttft_s"] = sample.ttft_s
    if sample.first_answer_s is not None:
        values["first_answer_s"] = sample.first_answer_s
    if sample.tokens_per_s is not None:
        values["tokens_per_s"] = sample.tokens_per_s
    if sample.outcome == "ok":
        # End-to-end and answer length describe complete answers only.
        if sample.e2e_s is not None:
            values["e2e_s"] = sample.e2e_s
        if sample.output_tokens is not None:
            values["output_tokens"] = float(sample.output_tokens)
    cache_values(sample, values)
    return values


def cache_values(sample: Sample, values: dict[Metric, float]) -> None:
    """What a sample says of the deployment's prompt cache, added to ``values``.

    - ``prompt_tokens`` and ``cached_tokens``: the usage of a complete answer whose provider reports
      cached tokens (a zero counts: it is a miss). Their sums' ratio is the deployment's hit ratio
      (``DeploymentSummary.hit_ratio``), weighted by tokens as a bill is.
    - ``warm_ttft_s`` / ``cold_ttft_s``: the first token when at least ``WARM_SHARE`` of the prompt was
      cached, or less (known only where cached tokens are reported).
    - ``prefill_tokens_per_s``: uncached prompt tokens ÷ first token, when at least
      ``MIN_PREFILL_TOKENS`` were uncached and the answer was cold: what predicts a long prompt's
      first token on a cold deployment. The prompt's size is the usage's, else the gateway's estimate.
    """
    prompt = sample.usage_prompt_tokens if sample.usage_prompt_tokens else sample.prompt_tokens_estimate
    cached = sample.usage_cached_tokens
    if not prompt or prompt <= 0:
        return
    if cached is not None and sample.outcome == "ok":
        values["prompt_tokens"] = float(prompt)
        values["cached_tokens"] = float(min(cached, prompt))
    ttft = sample.ttft_s
    if ttft is None or ttft <= 0:
        return
    if cached is not None:
        values["warm_ttft_s" if cached >= WARM_SHARE * prompt else "cold_ttft_s"] = ttft
    uncached = prompt - (cached or 0)
    # Only a cold answer's: a warm one's first token is mostly base latency (its few uncached tokens
    # over it would read as a slow prefill here, and, with that base subtracted, as a wildly fast one in
    # the router's view), so it says little of how fast a whole long prompt is prefilled.
    cold = cached is None or cached < WARM_SHARE * prompt
    if cold and uncached >= MIN_PREFILL_TOKENS:
        values["prefill_tokens_per_s"] = uncached / ttft


def sample_buckets(sample: Sample) -> dict[Metric, int]:
    """The histogram bucket of each value the sample contributes (see ``sample_values``), in the same order.

    Worked out from the sample directly, not through ``sample_values``' dict, each bucket as ``bucket_of`` works
    it out (inline: the stores call this per sample); the prompt cache's values exist only where a prompt and
    cached tokens were reported, or a long prompt."""
    buckets: dict[Metric, int] = {}
    value = sample.ttft_s
    if value is not None:
        buckets["ttft_s"] = ZERO_BUCKET if value <= MIN_VALUE or isnan(value) else ceil(log(value) / LOG_GAMMA)
    value = sample.first_answer_s
    if value is not None:
        buckets["first_answer_s"] = ZERO_BUCKET if value <= MIN_VALUE or isnan(value) else ceil(log(value) / LOG_GAMMA)
    value = sample.tokens_per_s
    if value is not None:
        buckets["tokens_per_s"] = ZERO_BUCKET if value <= MIN_VALUE or isnan(value) else ceil(log(value) / LOG_GAMMA)
    if sample.outcome == "ok":
        value = sample.e2e_s
        if value is not None:
            buckets["e2e_s"] = ZERO_BUCKET if value <= MIN_VALUE or isnan(value) else ceil(log(value) / LOG_GAMMA)
        if sample.output_tokens is not None:
            value = float(sample.output_tokens)  # bucket_of, inline as above
            buckets["output_tokens"] = (
                ZERO_BUCKET if value <= MIN_VALUE or isnan(value) else ceil(log(value) / LOG_GAMMA)
            )
    prompt = sample.usage_prompt_tokens or sample.prompt_tokens_estimate
    if prompt and (sample.usage_cached_tokens is not None or prompt >= MIN_PREFILL_TOKENS):
        values: dict[Metric, float] = {}
        cache_values(sample, values)
        for metric, cached in values.items():
            buckets[metric] = bucket_of(cached)
    return buckets
