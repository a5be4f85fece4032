"""A model's ranking, explained: as JSON (``GET /v1/gateway/routes``) and as a table (``gateway check``).

Every number that put a deployment where it is appears; docs/routing.md ("What the explanation shows")
says what each field means. Times are seconds, money USD for one request of the shape shown.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gateway.policies import PolicyConfig
from gateway.routing.apis import upstream_api
from gateway.routing.choose import RACE_BUDGET
from gateway.routing.health import BUDGET_START
from gateway.routing.ranking import BeliefView, Ranked, Ranking
from gateway.samples import Endpoint
from gateway.tables import format_table

TERMS = (("time", "time"), ("ttft", "ttft"), ("throughput", "tps"), ("price", "price"), ("failure", "fail"))
"""The score's terms: their ``ScoreParts`` field and their short name in the table's "why" column."""


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def row_json(rank: int, row: Ranked, api: Endpoint) -> dict[str, Any]:
    """One ranked deployment, with the API a request on ``api`` reaches it in and whether by translation."""
    p = row.scored.prediction
    upstream = upstream_api(row.deployment, api)
    return {
        "rank": rank,
        "deployment": row.deployment.name,
        "provider": row.provider.name,
        "upstream_api": upstream,
        "translated": upstream is not None and upstream != api,
        "status": row.status,
        "score": round(row.scored.score, 4),
        "score_parts": {name: round(getattr(row.scored.parts, name), 4) for name, _ in TERMS},
        "predicted": {
            "ttft_s": _round(p.ttft_s),
            "tokens_per_s": _round(p.tokens_per_s, 1),
            "time_s": _round(p.time_s),
            "cost_usd": round(p.cost_usd, 8),
            "from_model_average": p.prior,
            "source": p.source,
            "uncertainty": round(p.uncertainty.time, 4),
            "ttft_uncertainty": round(p.uncertainty.ttft, 4),
            "tokens_per_s_uncertainty": round(p.uncertainty.tokens_per_s, 4),
            "samples": round(p.samples, 2),
            "newest_sample_age_s": _round(p.age_s, 2),
        },
        "success_rate": round(p.success_rate, 4),
        "attempts_in_window": p.attempts,
        "judged": row.judged,
        "violations": list(row.scored.violations),
        "circuit": row.circuit,
        "retry_in_s": round(row.retry_in_s, 2) if row.circuit == "open" else None,
        "in_flight": row.in_flight,
        "provider_in_flight": row.provider_in_flight,
        "max_concurrency": row.provider.max_concurrency,
        "concurrency_limit": row.limit,
        "full": row.full,
        "rate_limit": {
            "remaining_requests": row.remaining_requests,
            "remaining_tokens": row.remaining_tokens,
            "reset_in_s": _round(row.reset_in_s, 2),
            "out_for_s": round(row.blocked_in_s, 2),
        },
        "price_in": row.deployment.price_in,
        "price_out": row.deployment.price_out,
        "price_cached_in": row.deployment.price_cached_in,
        **({"belief": belief_json(row.belief)} if row.belief is not None else {}),
    }


def belief_json(belief: BeliefView) -> dict[str, Any]:
    return {
        "ttft_median_s": round(belief.ttft_s, 4),
        "ttft_spread": round(belief.ttft_spread, 4),
        "tokens_per_s_median": round(belief.tokens_per_s, 1),
        "tokens_per_s_spread": round(belief.tokens_per_s_spread, 4),
        "age_s": _round(belief.age_s, 2),
        "answers": belief.answers,
        "changed_since_heard": round(belief.changed, 4),
        "failure": round(belief.failure, 4),
        "p_best": round(belief.best, 4),
    }


class Budgeted(NamedTuple):
    """What a model's look budget paid for on this replica; the router keeps
    ``paid <= start + share × streamed requests``."""

    share: float
    start: int
    paid: int
    """Races and shadows: the looks that cost an extra attempt."""
    outside: int
    """Requests drawn away from the leader: explored, but no extra attempt and no budget."""


def budgeted(ranking: Ranking) -> Budgeted:
    share = look_share(ranking.policy)
    paid = ranking.races + ranking.shadows
    return Budgeted(share, int(BUDGET_START) if share else 0, paid, ranking.probes - paid)


def look_share(policy: PolicyConfig) -> float:
    """The share of streamed requests that may carry a look: none under a fixed policy or without exploring or
    racing."""
    looks = policy.explore_share > 0 and policy.explore_race and policy.ranking != "fixed"
    return RACE_BUDGET if looks else 0.0


def ranking_json(ranking: Ranking) -> dict[str, Any]:
    shape, policy = ranking.shape, ranking.policy
    budget = budgeted(ranking)
    return {
        "model": ranking.model.name,
        "policy": policy.name,
        "ranking": policy.ranking,
        "request": {
            "endpoint": shape.endpoint,
            "prompt_tokens": shape.prompt_tokens,
            "expected_output_tokens": shape.output_tokens,
            "expected_output_from": shape.output_source,
        },
        "exploration": {
            "requests": ranking.requests,
            "probes": ranking.probes,
            "races": ranking.races,
            "shadows": ranking.shadows,
            "cold_starts": ranking.cold_starts,
            "share": round(ranking.probes / ranking.requests, 4) if ranking.requests else 0.0,
            "budget": budget.share,
            "budget_of": "streamed requests",
            "budget_start": budget.start,
            "budget_paid": budget.paid,
            "extra_attempts_per_request": round(ranking.extra_attempts, 4),
        },
        "deployments": [row_json(i, row, shape.endpoint) for i, row in enumerate(ranking.rows, start=1)],
    }


def score_terms(row: Ranked) -> str:
    """The score's non-zero terms, e.g. ``time+0.78 price+0.26`` (``best`` when none): the "why" column."""
    terms = [(short, getattr(row.scored.parts, name)) for name, short in TERMS]
    return " ".join(f"{short}+{value:.2f}" for short, value in terms if value >= 0.005) or "best"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def ranking_table(ranking: Ranking) -> str:
    """The ranking as a fixed-width table, best first."""
    header = ["#", "deployment", "status", "score", "why", "ttft s", "tok/s", "time s", "±", "age s"]
    header += ["cost $", "success", "n", "in-flight", "p best"]
    rows: list[list[str]] = []
    notes: list[str] = []
    for rank, row in enumerate(ranking.rows, start=1):
        p = row.scored.prediction
        mark = "~" if p.prior else ""
        rows.append(
            [
                str(rank),
                row.deployment.name,
                row.status,
                f"{row.scored.score:.3f}",
                score_terms(row),
                _fmt(p.ttft_s, ".3f") + mark,
                _fmt(p.tokens_per_s, ".1f") + mark,
                _fmt(p.time_s, ".3f") + mark,
                f"{p.uncertainty.time:.0%}" if p.source == "recent" else "-",
                _fmt(p.age_s, ".1f"),
                f"{p.cost_usd:.6f}",
                f"{p.success_rate:.2f}",
                str(p.attempts),
                f"{row.in_flight}/{row.limit}",
                f"{row.belief.best:.0%}" if row.belief is not None else "-",
            ]
        )
        notes.extend(f"  {row.deployment.name}: breaks {violation}" for violation in row.scored.violations)
        if row.circuit != "closed":
            notes.append(f"  {row.deployment.name}: circuit {row.circuit}")
    shape = ranking.shape
    title = (
        f"{ranking.model.name} (policy {ranking.policy.name}; a request of {shape.prompt_tokens} prompt tokens, "
        f"{shape.output_tokens} output tokens from {shape.output_source})"
    )
    lines = [title, "  " + policy_summary(ranking.policy), format_table(header, rows)]
    if any(r.scored.prediction.prior for r in ranking.rows):
        lines.append("  ~ not measured yet: the model's average stands in")
    if ranking.requests:
        budget = budgeted(ranking)
        lines.append(
            f"  explored {ranking.probes} of {ranking.requests} requests ({ranking.probes / ranking.requests:.1%}; "
            f"{ranking.races} by racing the leader, {ranking.shadows} in its shadow, of a race budget of "
            f"{budget.share:.0%} of streamed requests and {budget.start} to start; {budget.outside} "
            f"drawn away from the leader; {ranking.extra_attempts:.2f} extra attempts per request), "
            f"besides {ranking.cold_starts} cold start{'' if ranking.cold_starts == 1 else 's'}"
        )
    return "\n".join(lines + notes)


def policy_summary(policy: PolicyConfig) -> str:
    """One line of what a policy optimises, for people reading ``gateway check`` and the dashboard."""
    if policy.ranking == "fixed":
        order = "fixed order"
    else:
        weights = [
            f"{name} {weight:g}"
            for name, weight in (
                ("time", policy.time_weight),
                ("ttft", policy.ttft_weight),
                ("throughput", policy.throughput_weight),
                ("price", policy.price_weight),
                ("failures", policy.failure_weight),
            )
            if weight
        ]
        share = look_share(policy)
        looks = f"a look (race or shadow) within {share:.0%} of streamed requests" if share else "no looks"
        order = (
            f"score = {' + '.join(weights)} (log2 ratios to the best); TTFT p{policy.ttft_quantile * 100:g}, "
            f"tokens/s p{policy.tps_quantile * 100:g} floor; {looks}"
        )
    if policy.hedge_after_s is not None:
        hedge = f"hedge after {policy.hedge_after_s:g}s"
    elif policy.hedge_quantile is not None:
        hedge = f"hedge after own TTFT p{policy.hedge_quantile * 100:g}"
    elif policy.hedge_tail:
        hedge = "hedge heavy first-token tails"
    else:
        hedge = "no hedging"
    if policy.hedging:
        hedge += f" (budget {policy.hedge_budget:.0%})"
    return f"{order}; {policy.max_attempts} attempts; {hedge}"
