"""The interface every stats backend implements, and the factory that picks one from the config."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gateway.config import StatsConfig
from gateway.samples import Sample
from gateway.stats.snapshot import StatsSnapshot

if TYPE_CHECKING:
    from gateway.redis_client import RedisConnections


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
    any background work (flushing, refreshing); ``aclose`` flushes what it can and stops it.
    """

    def record(self, sample: Sample) -> None: ...

    def snapshot(self) -> StatsSnapshot: ...

    def health(self) -> StoreHealth: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


def open_stats_store(
    config: StatsConfig, wall_clock: Callable[[], float] = time.time, redis: RedisConnections | None = None
) -> StatsStore:
    """The store the config asks for. Cheap: connections are made in ``start``, with ``redis``'s
    background client when given (else the store opens and closes its own)."""
    from gateway.stats.memory import InMemoryStatsStore
    from gateway.stats.redis_store import RedisStatsStore

    if config.backend == "redis":
        return RedisStatsStore(config, wall_clock, redis)
    return InMemoryStatsStore(config, wall_clock)
