"""The *sinks* stage of ``benchmarks.hotpath_stages`` split by piece, whole requests in process.

The same app, driver and stage clocks as ``--stages``, with the pieces under *sinks* wrapped as stages of their
own (each piece's exclusive CPU; what no piece claims stays under *sinks*: the fan-out, ``AccessLog.write``'s own
work, ``Ticket.release``, the routing events' metrics, the batch's write). Every wrapped call costs the clocks'
own time on a cold path beyond what ``calibrate`` takes off, so the pieces add up to more than ``--stages``'
*sinks*: compare a piece with itself (before/after, in alternating runs), not the sum with the stage.

    python -m benchmarks.hotpath_sinks                  # 1,000 requests, best of 3, streamed and non-streamed
    python -m benchmarks.hotpath_sinks --requests 2000 --repeats 5

A piece missing from the checkout (a method another version does not have) is left out.
"""

from __future__ import annotations

import argparse
import importlib
import os
import tempfile
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop

from benchmarks.hotpath_memory import Driver, running_app
from benchmarks.hotpath_stages import StageClock, _flush_lines, _instrument, best_stages, calibrate
from gateway.accesslog import configure_access_log
from gateway.runtime import runtime_of

PIECES: tuple[tuple[str, str, str, str], ...] = (
    ("gateway.stats.memory", "InMemoryStatsStore", "record", "stats: record"),
    ("gateway.stats.window", "SlicedWindow", "add", "stats: window"),
    ("gateway.stats.history", "MinuteBuckets", "add", "stats: minutes"),
    ("gateway.metrics.attempts", "AttemptSeries", "record", "metrics: record"),
    ("gateway.metrics.attempts", "AttemptSeries", "request_done", "metrics: request_done"),
    ("gateway.admission.usage", "UsageTap", "record", "usage tap"),
    ("gateway.admission.spending.ledger", "SpendLedger", "settle", "spend: settle"),
    ("gateway.admission.spending.ledger", "SpendLedger", "settle_now", "spend: settle"),
    ("gateway.accesslog", "AccessLog", "_taken", "access log: take"),
    ("gateway.accesslog", "AccessLog", "_made", "access log: make"),
    ("gateway.access_lines", "LineWriter", "add", "access log: hand over"),
)
"""(module, class, method, piece): each method found on its class is timed as its piece."""


def _wrap_pieces(clock: StageClock) -> None:
    for module, owner, name, piece in PIECES:
        cls = getattr(importlib.import_module(module), owner)
        if any(name in c.__dict__ for c in cls.__mro__):
            clock.wrap(cls, name, piece)


async def measure_pieces(
    requests: int,
    repeats: int,
    wrap_pieces: Callable[[StageClock], None],
    kept: Callable[[str], bool],
) -> dict[str, dict[str, float]]:
    """µs per request of each stage the stage clocks and ``wrap_pieces`` name and ``kept`` keeps (best of
    ``repeats``), streamed and non-streamed, whole requests in process."""
    results: dict[str, dict[str, float]] = {}
    async with running_app(1) as app:
        router_type = type(runtime_of({"app": app}).router)
        per_call = calibrate()
        for label, stream in (("streamed", True), ("non-streamed", False)):
            driver = Driver(app, stream)
            for _ in range(300):
                await driver.one()
            _flush_lines()

            def instrument(clock: StageClock) -> None:
                _instrument(clock, router_type)
                wrap_pieces(clock)

            best = await best_stages(driver, instrument, requests, repeats, per_call)
            results[label] = {s: us for s, us in best.items() if kept(s)}
    return results


async def measure(requests: int, repeats: int) -> dict[str, dict[str, float]]:
    """µs per request of each piece (best of ``repeats``), streamed and non-streamed."""
    pieces = {p for *_, p in PIECES}
    return await measure_pieces(requests, repeats, _wrap_pieces, lambda s: s in pieces or s == "sinks")


def render(results: dict[str, Any]) -> str:
    rows = sorted({s for stages in results.values() for s in stages}, key=lambda s: (s == "sinks", s))
    lines = ["| piece | streamed µs | non-streamed µs |", "|---|---|---|"]
    for stage in rows:
        name = "the rest of *sinks*" if stage == "sinks" else stage
        cells = [f"{results[label].get(stage, float('nan')):.1f}" for label in ("streamed", "non-streamed")]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    sums = [f"{sum(results[label].values()):.1f}" for label in ("streamed", "non-streamed")]
    lines.append(f"| sum | {' | '.join(sums)} |")
    return "\n".join(lines) + "\n"


def run_pieces(
    measure: Callable[[int, int], Coroutine[Any, Any, dict[str, dict[str, float]]]],
    render: Callable[[dict[str, Any]], str],
    description: str | None,
) -> None:
    """The command line of a split-by-piece benchmark (this one's, ``hotpath_finish``'s): whole requests in process
    with the access log written to a scratch file, ``measure``d and printed by ``render``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--requests", type=int, default=1000, help="requests per repeat (1000)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats, best of (3)")
    args = parser.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as sink:
        log_path = sink.name
    with open(log_path, "w") as log_stream:
        configure_access_log(log_stream)
        results = uvloop.run(measure(args.requests, args.repeats))
    os.unlink(log_path)
    print(render(results), end="")


def main() -> None:
    run_pieces(measure, render, __doc__.split("\n\n")[0] if __doc__ else None)


if __name__ == "__main__":
    main()
