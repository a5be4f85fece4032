"""How the rolling statistics are laid out in Redis: key names, hash fields, and both translations.

With prefix ``gateway``, model ``llama-3.3-70b``, deployment ``groq`` and 10 s slices::

    {gateway:llama-3.3-70b:groq}:1750000000    hash, one per slice (named by its start, unix seconds)
        outcome:ok        -> 812             outcome counts
        outcome:timeout   -> 3
        validity:tools:valid -> 40           judged answers by request kind and verdict
        validity:tools:tool_args_not_json -> 2
        ttft_s:-120       -> 17              <metric>:<LogHistogram bucket index> -> count
        tokens_per_s:463  -> 9
    {gateway:llama-3.3-70b:groq}:writers    hash: writer id -> sequence number of its last write there
    {gateway:llama-3.3-70b:groq}:answers    list: the last answers one by one, oldest first, each a JSON array
                                            (``gateway.stats.answers``: what each replica's beliefs hear)
    {gateway:llama-3.3-70b:groq}:m:1750000020  hash, one per minute for 30 minutes: outcomes, ttft_s and
                                            tokens_per_s buckets (the dashboard's history, ``gateway.stats.history``)
    gateway:pairs       sorted set: "<model>:<deployment>" -> unix time of its last write
    gateway:epoch       a random token, replaced when a writer adds to a slice readers may have cached

The ``{...}`` hash tag puts every slice of one (model, deployment), its writers hash and its answers, in one
Redis Cluster slot: one script updates them together (``gateway.stats.redis_writes``).
Model and deployment names are percent-encoded, so a ``:``, ``{`` or ``}`` in a name can break
neither the key nor its tag. Every key has a TTL; slices expire a little after the window.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from urllib.parse import quote, unquote

from gateway.samples import OUTCOMES, Outcome
from gateway.stats.sketch import LogHistogram
from gateway.stats.snapshot import METRICS, VALIDITY_KEYS, DeploymentSummary, Metric
from gateway.types import DeploymentKey

EXPIRY_SLACK_S = 60
"""Slices outlive the window by this much, so a reader with a slightly late clock still finds them."""
EPOCH_TTL_S = 86_400

_OUTCOME_FIELDS: dict[str, Outcome] = {f"outcome:{o}": o for o in OUTCOMES}
_METRIC_NAMES: dict[str, Metric] = {m: m for m in METRICS}
_VALIDITY_FIELDS: dict[str, str] = {f"validity:{key}": key for key in VALIDITY_KEYS}


def _encode(name: str) -> str:
    return quote(name, safe="")


def pair_member(pair: DeploymentKey) -> str:
    return f"{_encode(pair[0])}:{_encode(pair[1])}"


def parse_pair_member(member: str) -> DeploymentKey | None:
    model, sep, deployment = member.partition(":")
    if not sep or not model or not deployment:
        return None
    return unquote(model), unquote(deployment)


def slice_key(prefix: str, pair: DeploymentKey, index: int, slice_s: int) -> str:
    return f"{{{prefix}:{pair_member(pair)}}}:{index * slice_s}"


def writers_key(prefix: str, pair: DeploymentKey) -> str:
    return f"{{{prefix}:{pair_member(pair)}}}:writers"


def answers_key(prefix: str, pair: DeploymentKey) -> str:
    return f"{{{prefix}:{pair_member(pair)}}}:answers"


def pairs_key(prefix: str) -> str:
    return f"{prefix}:pairs"


def epoch_key(prefix: str) -> str:
    return f"{prefix}:epoch"


def slice_ttl_s(window_s: int, slice_s: int) -> int:
    return window_s + slice_s + EXPIRY_SLACK_S


def summary_fields(summary: DeploymentSummary) -> Iterator[tuple[str, int]]:
    """The (field, increment) pairs that add ``summary`` to a slice's hash."""
    for outcome, n in summary.outcomes.items():
        yield f"outcome:{outcome}", n
    for key, n in summary.validity.items():
        yield f"validity:{key}", n
    for metric, histogram in summary.histograms.items():
        for bucket, n in histogram.counts.items():
            yield f"{metric}:{bucket}", n


def cell_count(summary: DeploymentSummary) -> int:
    """How many hash fields ``summary`` occupies."""
    return len(summary.outcomes) + len(summary.validity) + sum(len(h.counts) for h in summary.histograms.values())


def summary_from_hash(pair: DeploymentKey, fields: Mapping[str, str]) -> DeploymentSummary | None:
    """A slice's hash read back; None if it is empty. Fields this version does not know (or that hold
    no count) are skipped, so that a newer gateway writing a new metric does not break an older one
    reading beside it."""
    if not fields:
        return None
    summary = DeploymentSummary(pair[0], pair[1])
    counts: dict[Metric, dict[int, int]] = {}
    for name, raw in fields.items():
        if not raw.isdigit():  # negative, or not a count at all: not written by a gateway
            continue
        n = int(raw)
        if n == 0:
            continue
        outcome = _OUTCOME_FIELDS.get(name)
        if outcome is not None:
            summary.outcomes[outcome] = n
            continue
        validity = _VALIDITY_FIELDS.get(name)
        if validity is not None:
            summary.validity[validity] = n
            continue
        name, _, bucket = name.partition(":")
        metric = _METRIC_NAMES.get(name)
        if metric is not None and bucket.lstrip("-").isdigit():
            counts.setdefault(metric, {})[int(bucket)] = n
    for metric, buckets in counts.items():
        summary.histograms[metric] = LogHistogram(buckets)
    return summary if summary.outcomes or summary.histograms else None
