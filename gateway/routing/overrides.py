"""Per-request routing overrides: OpenRouter's ``provider`` object and its model suffixes (``:nitro``, ``:floor``).

Names in ``order``/``only``/``ignore`` match a deployment's or its provider's name, case-insensitively. Everything is
validated here: a bad value is a 400 whose ``param`` names the field (``provider.sort``), never silently ignored. The
fields' meaning follows OpenRouter (docs/routing.md, "Per-request overrides").
"""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from gateway.config import GatewayConfig, ModelConfig
from gateway.errors import InvalidRequest

Sort = Literal["price", "throughput", "latency"]
MODEL_SUFFIXES: dict[str, Sort] = {":nitro": "throughput", ":floor": "price"}
_PERCENTILES = {"p50": 0.5, "p75": 0.75, "p90": 0.9, "p99": 0.99}
_FIELDS = (
    "order",
    "only",
    "ignore",
    "allow_fallbacks",
    "sort",
    "max_price",
    "preferred_min_throughput",
    "preferred_max_latency",
)


@dataclass(frozen=True, slots=True)
class ProviderPreferences:
    """A request's routing overrides, validated. Names are lower-cased."""

    order: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    allow_fallbacks: bool = True
    sort: Sort | None = None
    max_price_in: float | None = None
    """USD per 1M prompt tokens (``max_price.prompt``)."""
    max_price_out: float | None = None
    """USD per 1M output tokens (``max_price.completion``)."""
    min_tokens_per_s: tuple[tuple[float, float], ...] = ()
    """(quantile, floor) pairs: ``p50: 100`` means the median speed should be at least 100 tokens/s."""
    max_ttft_s: tuple[tuple[float, float], ...] = ()
    """(quantile, ceiling) pairs on TTFT: ``p90: 2`` means 90% of first tokens within 2 s."""

    @property
    def steers(self) -> bool:
        """Whether anything here changes which deployment goes first (the route is then "override")."""
        return self is not NO_PREFERENCES and self != NO_PREFERENCES  # most requests carry the shared default


NO_PREFERENCES = ProviderPreferences()


def split_model_suffix(model: str, known: Container[str]) -> tuple[str, Sort | None]:
    """``"m:nitro"`` → ``("m", "throughput")``; a configured model named with a colon wins over the suffix."""
    if model in known:
        return model, None
    for suffix, sort in MODEL_SUFFIXES.items():
        if model.endswith(suffix) and len(model) > len(suffix):
            return model[: -len(suffix)], sort
    return model, None


def resolve_model(config: GatewayConfig, requested: str) -> tuple[str, Sort | None, ModelConfig | None]:
    """The model asked for: its name, the sort its suffix asks for (``m:nitro``), and its config (None: unknown).
    A configured model named as asked wins over a suffix."""
    model = config.model(requested)
    if model is not None:
        return requested, None, model
    model_name, suffix_sort = split_model_suffix(requested, ())
    return model_name, suffix_sort, config.model(model_name) if model_name != requested else None


def parse_preferences(value: Any, suffix_sort: Sort | None = None) -> ProviderPreferences:
    """Validate a request's ``provider`` object (None when absent); raise ``InvalidRequest`` naming the field."""
    if value is None:
        return ProviderPreferences(sort=suffix_sort) if suffix_sort else NO_PREFERENCES
    if not isinstance(value, dict):
        raise InvalidRequest("'provider' must be an object", param="provider")
    _only_keys(value, _FIELDS, "provider")
    sort = _sort(value.get("sort"))
    if sort is not None and suffix_sort is not None and sort != suffix_sort:
        raise InvalidRequest(
            f'\'provider.sort\' is "{sort}" but the model suffix asks for "{suffix_sort}"', param="provider.sort"
        )
    max_in, max_out = _max_price(value.get("max_price"))
    only = value.get("only")
    return ProviderPreferences(
        order=_names(value.get("order"), "order") or (),
        only=_names(only, "only"),
        ignore=_names(value.get("ignore"), "ignore") or (),
        allow_fallbacks=_flag(value.get("allow_fallbacks"), "allow_fallbacks", True),
        sort=sort or suffix_sort,
        max_price_in=max_in,
        max_price_out=max_out,
        min_tokens_per_s=_cutoffs(value.get("preferred_min_throughput"), "preferred_min_throughput", "tokens/s"),
        max_ttft_s=_cutoffs(value.get("preferred_max_latency"), "preferred_max_latency", "seconds"),
    )


def _only_keys(value: dict[str, Any], supported: tuple[str, ...], field: str) -> None:
    for key in value:
        if key not in supported:
            raise InvalidRequest(
                f"'{field}.{key}' is not supported (supported: {', '.join(supported)})", param=f"{field}.{key}"
            )


def _names(value: Any, field: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidRequest(f"'provider.{field}' must be an array of provider names", param=f"provider.{field}")
    names = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise InvalidRequest(
                f"'provider.{field}[{index}]' must be a non-empty string", param=f"provider.{field}[{index}]"
            )
        names.append(item.strip().lower())
    return tuple(names)


def _flag(value: Any, field: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequest(f"'provider.{field}' must be true or false", param=f"provider.{field}")
    return value


def _sort(value: Any) -> Sort | None:
    if isinstance(value, dict):
        # OpenRouter's object form: {"by": "price", "partition": ...}; only "by" matters for one model.
        unknown = set(value) - {"by", "partition"}
        if unknown:
            name = sorted(unknown)[0]
            raise InvalidRequest(f"'provider.sort.{name}' is not supported", param=f"provider.sort.{name}")
        value = value.get("by")
    if value is None:
        return None
    if value in get_args(Sort):
        return cast(Sort, value)
    raise InvalidRequest(
        f"'provider.sort' must be one of {', '.join(get_args(Sort))}, got {_show(value)}", param="provider.sort"
    )


def _number(value: Any, field: str, *, positive: bool) -> float:
    # OpenRouter's SDKs send prices as decimal strings; accept both forms.
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRequest(f"'provider.{field}' must be a number, got {_show(value)}", param=f"provider.{field}")
    if value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise InvalidRequest(f"'provider.{field}' must be {bound}, got {value:g}", param=f"provider.{field}")
    return float(value)


def _max_price(value: Any) -> tuple[float | None, float | None]:
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise InvalidRequest("'provider.max_price' must be an object (prompt, completion)", param="provider.max_price")
    _only_keys(value, ("prompt", "completion"), "provider.max_price")
    prompt = value.get("prompt")
    completion = value.get("completion")
    return (
        None if prompt is None else _number(prompt, "max_price.prompt", positive=False),
        None if completion is None else _number(completion, "max_price.completion", positive=False),
    )


def _cutoffs(value: Any, field: str, unit: str) -> tuple[tuple[float, float], ...]:
    """A number (applies to p50) or an object of p50/p75/p90/p99 cutoffs."""
    if value is None:
        return ()
    if isinstance(value, dict):
        cutoffs = []
        for key, limit in value.items():
            if key not in _PERCENTILES:
                raise InvalidRequest(
                    f"'provider.{field}.{key}' is not a supported percentile (p50, p75, p90, p99)",
                    param=f"provider.{field}.{key}",
                )
            if limit is not None:
                cutoffs.append((_PERCENTILES[key], _number(limit, f"{field}.{key}", positive=True)))
        return tuple(cutoffs)
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return ((0.5, _number(value, field, positive=True)),)
    raise InvalidRequest(
        f"'provider.{field}' must be a number of {unit} or an object of percentiles", param=f"provider.{field}"
    )


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value[:40]}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    return repr(value)[:40]
