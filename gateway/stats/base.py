"""The interface every stats backend implements (``gateway.stats.factory`` picks one from the config)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.samples import Sample
from gateway.stats.history import History
from gateway.stats.snapshot import StatsSnapshot
from gateway.types import DeploymentKey


@dataclass(frozen=True, slots=True)
class StoreHealth:
    """``degraded`` with a reason when the shared backend is unreachable (the replica keeps serving).

    ``dropped_samples`` counts samples that never reached the shared backend (buffer full, or
    held so long they fell out of the window); ``buffered_samples`` those waiting to be written.
    """

    degraded: bool = False
    reason: str | None = None
    dropped_samples: int = 0
    buffered_samples: int = 0


class StatsStore(Protocol):
    """Keeps rolling statistics of samples and serves the snapshot the router reads.

    ``record`` is called on the event loop for every finished attempt and must neither block
    nor raise. ``snapshot`` is called on the request path and must not do I/O: it returns the
    latest local view, in which this replica's own samples count at once. ``start`` launches
    any background work (flushing, refreshing); ``sync`` does one round of it now (write what is
    buffered, re-read the shared window: tests and benchmarks use it instead of waiting for the
    background task); ``aclose`` flushes what it can and stops it. ``history`` reads the last half
    hour of the given deployments in one-minute points (``gateway.stats.history``), shared by every
    replica with Redis: for people reading the dashboard, never on a request's path.
    """

    def record(self, sample: Sample) -> None: ...

    def snapshot(self) -> StatsSnapshot: ...

    def health(self) -> StoreHealth: ...

    async def history(self, pairs: Sequence[DeploymentKey]) -> History: ...

    async def start(self) -> None: ...

    async def sync(self) -> None: ...

    async def aclose(self) -> None: ...
