"""Where the demo's long answers should go, computed from the simulated providers' own distributions.

Why: the demo tells a story (long answers go to a fast streamer; when ``fading`` degrades they move), and a story
that the numbers do not back teaches the wrong thing. This module scores each provider for a long answer with the
router's own formula (``gateway.routing.cost``) and policy weights, fed with what each fake really draws (its
log-normal first token and speed, its error rate) rather than with anything measured, so the demo can say what a
router that knew everything would do, and a newcomer can compare that with what the status lines show.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.demo_setup import DEMO_MODELS, demo_config
from gateway.fakes.profiles import DEMO_PROFILES
from gateway.policies import BUILTIN_POLICIES, DEFAULT_POLICY
from gateway.routing.cost import Shape, Weights, cost, scores
from gateway.routing.draws import Draw

LONG_TOKENS = (250, 300)
"""The range of the demo traffic's long answers, up to the simulated providers' 300 tokens (``gateway.demo``)."""
LONG_ANSWER_TOKENS = sum(LONG_TOKENS) // 2
"""The middle of that range: the long answer the story scores."""
LONG_PROMPT_TOKENS = 80
"""About what the traffic's one-off prompts (the built-in set) weigh."""
NEAR_TIE = 0.1
"""Scores closer than this to the best are near-equal: the router's draws spread requests among them."""


@dataclass(frozen=True, slots=True)
class Expected:
    """One provider's expected cost for a long answer, as the policy scores it (lower is better)."""

    provider: str
    time_s: float
    money_usd: float
    score: float


def expected_long_answers(*, degraded: bool, tokens: int = LONG_ANSWER_TOKENS) -> list[Expected]:
    """The watched model's providers for a ``tokens``-long answer, best first, before or after ``fading`` degrades.

    Expected time is the mean first token plus ``tokens - 1`` times the mean seconds per token (the policy's
    ``estimate = "mean"``), a failure falling back to the quickest other provider, as ``routing.cost.scores`` has it.
    """
    model, _, providers = DEMO_MODELS[0]
    config = demo_config({name: f"http://127.0.0.1:1/{name}/v1" for name in providers})
    deployments = {d.provider: d for d in next(m for m in config.models if m.name == model).deployments}
    policy = BUILTIN_POLICIES[DEFAULT_POLICY]
    weights = Weights.of(policy)
    shape = Shape(prompt_tokens=LONG_PROMPT_TOKENS, output_tokens=float(tokens))
    names, costs = [], []
    for profile in DEMO_PROFILES:
        if profile.name not in deployments:
            continue
        figures = profile.degraded if degraded and profile.degraded is not None else profile.figures
        draw = Draw(
            ttft_s=figures.ttft_p50_s,
            s_per_token=1.0 / figures.tps_p50,
            failure=figures.error_rate,
            spread=(figures.ttft_sigma, figures.tps_sigma),
        )
        names.append(profile.name)
        costs.append(cost(draw, deployments[profile.name], shape, weights))
    scored = scores(costs, weights)
    best = min(scored)
    expected = [
        Expected(name, c.time_s, c.money_usd, score - best) for name, c, score in zip(names, costs, scored, strict=True)
    ]
    return sorted(expected, key=lambda e: e.score)


def long_answer_line(*, degraded: bool) -> str:
    """What a long answer of the watched model should take and cost on each provider, and where that sends it."""
    ranked = expected_long_answers(degraded=degraded)
    listed = " · ".join(
        f"{e.provider} {e.time_s:.1f} s (${e.money_usd * 1000:.2f}{' per 1,000' if i == 0 else ''})"
        for i, e in enumerate(ranked)
    )
    near = [e.provider for e in ranked if e.score < NEAR_TIE]
    policy = BUILTIN_POLICIES[DEFAULT_POLICY]
    line = f"a long {DEMO_MODELS[0][0]} answer ({LONG_ANSWER_TOKENS} tokens) should take, best first: {listed}; "
    if len(near) == 1:
        return line + f"once it has measured them, the router should send long answers to {near[0]}"
    return line + (
        f"{', '.join(near[:-1])} and {near[-1]} score within {NEAR_TIE:g} of each other under the {policy.name} "
        f"policy (time, and price at {policy.price_weight:g}), so long answers may go to any of them"
    )
