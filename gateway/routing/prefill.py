"""A first token split into its base latency and its prefill, for the router's fast view of a deployment.

A caching provider's first token is ``base + uncached prompt tokens × seconds per token``: the base
is what a fully cached prompt takes (queueing, the gateway's and the provider's own overhead), the
rest is the prefill of what was not cached. The fast view (``gateway.routing.estimates``) keeps the
two apart, so that one prediction holds for every prompt (``gateway.routing.predict``): a cold
60k-token prompt is ``base + 60k × s``, a warm turn that added 3k tokens ``base + 3k × s``, a warm
turn that pasted a 30k-token file ``base + 30k × s``.

Each answer measures one of them, given the view's current estimate of the other:

- a warm answer (most of its prompt cached) measures the base: its first token less its few
  uncached tokens' prefill (at the view's speed, once it has one);
- a cold answer measures the speed: its uncached tokens over its first token less the base (once
  the view has one), when that prefill is at least ``PREFILL_SHARE`` of the first token; past a
  short prompt's base, what is left is mostly noise, and would read as a prefill several times
  too fast.

The shared window (``gateway.stats``) keeps the raw values instead (first tokens, and tokens ÷
first token), which other replicas read as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.routing.estimates import DeploymentView
from gateway.samples import Sample

PREFILL_SHARE = 0.5
"""A cold answer measures the prefill speed when at least this share of its first token is prefill (past the base)."""
BASE_SHARE = 0.25
"""A warm answer's base is at least this share of its first token (a speed estimate still too slow cannot zero it)."""


@dataclass(frozen=True, slots=True)
class PrefillTerms:
    """What one answer says of a deployment's base latency and prefill speed (None: nothing)."""

    base_s: float | None = None
    prefill_s_per_token: float | None = None


_NOTHING = PrefillTerms()
"""What most answers say (no first token, or neither a warm one nor a prefill speed): one frozen object for all."""


def split(
    sample: Sample, warm_ttft_s: float | None, prefill_tokens_per_s: float | None, view: DeploymentView
) -> PrefillTerms:
    """``warm_ttft_s`` / ``prefill_tokens_per_s``: the answer's raw values (``stats.snapshot.cache_values``)."""
    ttft = sample.ttft_s
    if ttft is None or ttft <= 0:
        return _NOTHING
    if warm_ttft_s is not None:
        speed = view.estimate("prefill_s_per_token")
        prompt = sample.usage_prompt_tokens or sample.prompt_tokens_estimate or 0
        uncached = max(0, prompt - (sample.usage_cached_tokens or 0))
        prefilled = uncached * speed.mean if speed is not None else 0.0
        return PrefillTerms(base_s=max(warm_ttft_s - prefilled, BASE_SHARE * warm_ttft_s))
    if prefill_tokens_per_s is None:
        return _NOTHING
    base = view.estimate("warm_ttft_s")
    if base is None:
        return PrefillTerms(prefill_s_per_token=1.0 / prefill_tokens_per_s)
    tokens = prefill_tokens_per_s * ttft
    prefilling = ttft - base.mean
    if prefilling < PREFILL_SHARE * ttft:
        return _NOTHING
    return PrefillTerms(prefill_s_per_token=prefilling / tokens)
