"""The base of the gateway's series groups: which classes build a family, and its remembered children.

``Metrics`` (``gateway.metrics.series``) is assembled from one group per concern: attempts
(``attempts``), routing and provider health (``routing``), the stats store and its window
(``window``). Each group registers its families on the shared registry and reaches a child
through ``_series``; this base holds what they share. ``WorkerMetrics`` swaps the three family
classes for prometheus-client's own, whose values live in the multiprocess files.
"""

from __future__ import annotations

from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.config import GatewayConfig
from gateway.metrics.plain import PlainCounter, PlainGauge, PlainHistogram
from gateway.types import DeploymentKey

_Family = TypeVar("_Family", Counter, Gauge, Histogram)

SAMPLE_LABELS = ("model", "provider")
"""The labels of every per-sample series: the client-facing model and the provider that served it."""


def deployment_providers(config: GatewayConfig) -> dict[DeploymentKey, str]:
    """(model, deployment) → provider name, for labelling the window gauges."""
    return {(m.name, d.name): d.provider for m in config.models for d in m.deployments}


class SeriesFamilies:
    """What every series group shares: the family classes, the registry and the children already asked for.

    Not used alone: ``Metrics`` sets ``registry`` and ``_children`` before any group registers.
    """

    counter_class: type[Counter] = PlainCounter
    histogram_class: type[Histogram] = PlainHistogram
    gauge_class: type[Gauge] = PlainGauge

    registry: CollectorRegistry
    _children: dict[tuple[object, tuple[str, ...]], Any]

    def _series(self, family: _Family, *values: str) -> _Family:
        """``family.labels(*values)``, remembered: the hot path asks for the same few series on every
        request, and prometheus-client's ``labels`` validates and locks each time. Only for series
        that are never removed (the window gauges are, and do not come through here)."""
        key = (family, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*values)
        return child  # a child of ``family``, of its class (no ``cast``: a call per series asked for)

    def _forget(self, gauge: Gauge, *values: str) -> None:
        """Remove a series ``_series`` may have handed out: from the family, and from what it remembers, so that
        asking for it again makes a new one (a remembered child would no longer be in the registry)."""
        self._children.pop((gauge, values), None)
        self._remove(gauge, values)

    @staticmethod
    def _remove(gauge: Gauge, labels: tuple[str, ...]) -> None:
        try:
            gauge.remove(*labels)
        except KeyError:
            pass  # the series was never set: nothing to remove
