"""Which deployments a request's ``provider`` object allows and puts first, and the soft constraints each breaks.

``only``/``ignore``/``max_price`` remove deployments, ``order`` puts the named ones first, ``allow_fallbacks =
false`` keeps only those; a filter that leaves none is the request's mistake (400).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.config import DeploymentConfig, ModelConfig, ProviderConfig
from gateway.errors import InvalidRequest
from gateway.policies import PolicyConfig
from gateway.routing.overrides import ProviderPreferences
from gateway.samples import RequestKind
from gateway.stats import DeploymentSummary


def matches(deployment: DeploymentConfig, names: Sequence[str]) -> bool:
    return deployment.name.lower() in names or deployment.provider.lower() in names


def allowed(
    model: ModelConfig, preferences: ProviderPreferences, providers: dict[str, ProviderConfig]
) -> list[DeploymentConfig]:
    """The deployments a request allows; a filter that leaves none is the request's mistake (400)."""
    deployments = list(model.deployments)
    if not preferences.order and preferences.only is None and not preferences.ignore:
        if preferences.max_price_in is None and preferences.max_price_out is None:
            return deployments  # nothing named, nothing filtered (most requests): all of them
    named = preferences.order or preferences.only or preferences.ignore
    known = {p.lower() for p in providers} | {d.name.lower() for d in deployments} if named else set()
    for field, names in (
        ("order", preferences.order),
        ("only", preferences.only or ()),
        ("ignore", preferences.ignore),
    ):
        for index, name in enumerate(names):
            if name not in known:
                raise InvalidRequest(
                    f"'provider.{field}[{index}]': unknown provider \"{name}\" (known: {', '.join(sorted(known))})",
                    param=f"provider.{field}",
                )
    if preferences.only is not None:
        deployments = _left(model, [d for d in deployments if matches(d, preferences.only)], "only")
    if preferences.ignore:
        deployments = _left(model, [d for d in deployments if not matches(d, preferences.ignore)], "ignore")
    max_in, max_out = preferences.max_price_in, preferences.max_price_out
    if max_in is not None or max_out is not None:
        within = [
            d
            for d in deployments
            if (max_in is None or d.price_in <= max_in) and (max_out is None or d.price_out <= max_out)
        ]
        if not within:
            cheapest = min(deployments, key=lambda d: (d.price_in, d.price_out))
            raise InvalidRequest(
                f"no deployment of model '{model.name}' is within 'provider.max_price' "
                f"(cheapest: {cheapest.name} at {cheapest.price_in:g}/{cheapest.price_out:g} USD per 1M tokens)",
                param="provider.max_price",
            )
        deployments = within
    return deployments


def _left(model: ModelConfig, deployments: list[DeploymentConfig], field: str) -> list[DeploymentConfig]:
    if not deployments:
        served = ", ".join(d.name for d in model.deployments)
        raise InvalidRequest(
            f"'provider.{field}' leaves no deployment of model '{model.name}' (deployments: {served})",
            param=f"provider.{field}",
        )
    return deployments


def as_preferred(
    order: Sequence[int], deployments: Sequence[DeploymentConfig], preferences: ProviderPreferences
) -> list[int]:
    """``order`` (indexes into ``deployments``) as the request's ``provider`` object steers it: the deployments its
    ``order`` names first, in that order; without fallbacks only those (only the first when it names none)."""
    if not preferences.order:
        return list(order) if preferences.allow_fallbacks else list(order)[:1]
    first: list[int] = []
    for name in preferences.order:
        first += [i for i in order if i not in first and matches(deployments[i], (name,))]
    if not preferences.allow_fallbacks:
        return first
    return first + [i for i in order if i not in first]


def broken(
    deployment: DeploymentConfig,
    summary: DeploymentSummary | None,
    policy: PolicyConfig,
    preferences: ProviderPreferences,
    kind: RequestKind | None = None,
    *,
    success: tuple[float, int],
    valid: tuple[float, int],
) -> tuple[str, ...]:
    """The soft constraints ``deployment`` breaks. Measured ones are judged on its own numbers once it has
    ``min_samples`` of them. ``success``: its success rate and attempts; ``valid``: its valid rate for ``kind`` and
    the answers of that kind judged."""
    found: list[str] = []
    if policy.max_price_in is not None and deployment.price_in > policy.max_price_in:
        found.append(f"price_in {deployment.price_in:g} > {policy.max_price_in:g}")
    if policy.max_price_out is not None and deployment.price_out > policy.max_price_out:
        found.append(f"price_out {deployment.price_out:g} > {policy.max_price_out:g}")
    if summary is None:
        return tuple(found)
    needed = max(1, policy.min_samples)
    # Counted only where a bound on first tokens or speeds asks (none by default): read per deployment per plan.
    first_tokens = speeds = False
    if policy.max_ttft_s is not None or preferences.max_ttft_s:
        first_tokens = summary.count("ttft_s") >= needed
    if policy.min_tokens_per_s is not None or preferences.min_tokens_per_s:
        speeds = summary.count("tokens_per_s") >= needed
    if policy.max_ttft_s is not None and first_tokens:
        ttft = summary.quantile("ttft_s", policy.ttft_quantile)
        if ttft is not None and ttft > policy.max_ttft_s:
            found.append(f"ttft {ttft:.3g}s > {policy.max_ttft_s:g}s")
    if policy.min_tokens_per_s is not None and speeds:
        tps = summary.quantile("tokens_per_s", 1.0 - policy.tps_quantile)
        if tps is not None and tps < policy.min_tokens_per_s:
            found.append(f"tokens/s {tps:.3g} < {policy.min_tokens_per_s:g}")
    (success_rate, attempts), (valid_rate, judged) = success, valid
    if policy.min_success_rate is not None and attempts >= needed and success_rate < policy.min_success_rate:
        found.append(f"success {success_rate:.2f} < {policy.min_success_rate:g}")
    floor = policy.min_valid_rate
    if floor and judged >= needed and valid_rate < floor:
        # Judged by the request's kind: a deployment that breaks tool calls loses tool-using requests only.
        reason = summary.top_reason(kind)
        found.append(f"valid {valid_rate:.2f} < {floor:g}" + (f" ({reason})" if reason else ""))
    for q, ceiling in preferences.max_ttft_s if first_tokens else ():
        value = summary.quantile("ttft_s", q)
        if value is not None and value > ceiling:
            found.append(f"ttft p{q * 100:g} {value:.3g}s > preferred {ceiling:g}s")
    for q, floor in preferences.min_tokens_per_s if speeds else ():
        # A throughput percentile is a floor: "p90" is the speed 90% of responses reached.
        value = summary.quantile("tokens_per_s", 1.0 - q)
        if value is not None and value < floor:
            found.append(f"tokens/s p{q * 100:g} {value:.3g} < preferred {floor:g}")
    return tuple(found)
