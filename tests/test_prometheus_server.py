"""The real-Prometheus helper (``tests.prometheus``) picks a moment whose data is final.

Why: a scrape that Prometheus gives up on (the target slower than ``scrape_timeout``, which is the
0.5 s interval) is stored only when it ends, under the time it *started*: ``up`` 0 and a staleness
marker for every series, dated before any moment chosen while it was still running. An instant
selector evaluated at such a moment then finds nothing, while ``rate()`` (which skips staleness
markers) still has data: every gauge panel empty on a busy CI machine. Here a target holds one
scrape past the timeout, on cue, so the race is hit every time rather than once in many runs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.prometheus import SCRAPE_INTERVAL_S, PrometheusServer, prometheus_scraping
from tests.support.servers import ServerThread, serve
from tests.support.wait import wait_until

WINDOW, SCRAPES = "3s", 5


class StallingTarget:
    """A ``/metrics`` with one gauge and one counter; ``stall()`` holds the next scrape until ``release``."""

    def __init__(self) -> None:
        self.scrapes = 0
        self.stall_next = threading.Event()
        self.stalled = threading.Event()
        self.released = threading.Event()
        self.app = Starlette(routes=[Route("/metrics", self._metrics)])

    async def _metrics(self, request: Request) -> PlainTextResponse:
        if self.stall_next.is_set():
            self.stall_next.clear()
            self.stalled.set()
            await asyncio.to_thread(self.released.wait, 10)  # far past Prometheus's timeout: it gives up
        self.scrapes += 1
        text = f"# TYPE g gauge\ng 1\n# TYPE c counter\nc_total {self.scrapes}\n"
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


@pytest.fixture
def target() -> Iterator[tuple[StallingTarget, ServerThread]]:
    stalling = StallingTarget()
    with serve(stalling.app) as server:
        try:
            yield stalling, server
        finally:
            stalling.released.set()  # before the server stops: it waits for the held request


def _healthy(prometheus: PrometheusServer) -> float:
    """``healthy_since``, once it names a moment (bounded: 40 s, Prometheus's first scrape alone takes about 5)."""
    deadline = time.monotonic() + 40
    while (at := prometheus.healthy_since(WINDOW, SCRAPES)) is None:
        assert time.monotonic() < deadline, f"no {SCRAPES} successful scrapes in {WINDOW} within 40 s"
        time.sleep(SCRAPE_INTERVAL_S / 2)
    return at


def test_a_moment_chosen_while_a_scrape_is_failing_still_shows_every_series(
    target: tuple[StallingTarget, ServerThread],
) -> None:
    stalling, server = target
    with prometheus_scraping(server.url.removeprefix("http://")) as prometheus:
        _healthy(prometheus)
        stalling.stall_next.set()
        wait_until(stalling.stalled.is_set, timeout=10, what="a scrape held")
        at = _healthy(prometheus)  # asked while the held scrape is still running
        wait_until(lambda: prometheus.query("min_over_time(up[10s]) == 0"), timeout=10, what="the held scrape failed")
        stalling.released.set()
        assert prometheus.query("rate(c_total[3s])", at=at), "no rate at the moment chosen"
        assert prometheus.query("g", at=at), "the gauge is stale at the moment chosen"
