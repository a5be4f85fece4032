"""The *meter finish* and *attempt set-up* stages of ``benchmarks.hotpath_stages`` split by piece, in process.

The same app, driver and stage clocks as ``--stages``, with the pieces under the two stages wrapped as stages of
their own (each piece's exclusive CPU; what no piece claims stays under its stage: ``AttemptRunner.record``'s and
``StreamMeter.finish``'s own work, ``Dispatcher.dispatch``'s and ``reserve_spend``'s). A piece that is a module's
function is wrapped where its caller looks it up. Every wrapped call costs the clocks' own time on a cold path
beyond what ``calibrate`` takes off: compare a piece with itself (before/after, in alternating runs), not the sum
with the stage. It says why a streamed request's two stages cost about twice a non-streamed one's: the finish's
template read of the kept chunks against one decode of a whole body, and the set-up's first-token read and its
deadline.

    python -m benchmarks.hotpath_finish                  # 1,000 requests, best of 3, streamed and non-streamed
    python -m benchmarks.hotpath_finish --requests 2000 --repeats 5

A method called from compiled code (``gateway.native``) is called there directly, not through its wrapper: with the
compiled build, the pieces below are the ones Python code calls (all of them, as the build stands).
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from benchmarks.hotpath_sinks import measure_pieces, run_pieces
from benchmarks.hotpath_stages import StageClock

METHODS: tuple[tuple[str, str, str, str], ...] = (
    ("gateway.dialects.chat", "ChatDialect", "tally_kept", "finish: the template read (streamed)"),
    ("gateway.dialects.chat", "ChatDialect", "tally_whole", "finish: the whole body's read"),
    ("gateway.tokens", "TokenCounter", "count", "finish: tiktoken's count"),
    ("gateway.relay.queue", "SlotQueue", "released", "finish: the slot released"),
    ("gateway.models_config", "DeploymentConfig", "cost_usd", "finish: the cost"),
    ("gateway.relay.runner", "AttemptRunner", "start_first", "set-up: start_first"),
    ("gateway.relay.runner", "AttemptRunner", "start", "set-up: start"),
    ("gateway.relay.runner", "AttemptRunner", "open", "set-up: open"),
    ("gateway.relay.runner", "AttemptRunner", "commit", "set-up: commit"),
    ("gateway.relay.deadline", "Deadline", "__init__", "set-up: the first token's Deadline"),
    ("gateway.relay.deadline", "Deadline", "__enter__", "set-up: the first token's Deadline"),
    ("gateway.relay.deadline", "Deadline", "__exit__", "set-up: the first token's Deadline"),
    ("gateway.relay.replies", "StreamReply", "__init__", "set-up: StreamReply"),
    ("gateway.relay.attempt", "Attempt", "__init__", "set-up: Attempt"),
)
"""(module, class, method, piece). The relay's own ``Deadline`` is entered in ``send_to``, under *reply*: the
``Deadline`` piece counts both, and only the first token's is in *attempt set-up*."""

FUNCTIONS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("gateway.reading", "reading_of", ("gateway.meter",), "finish: reading_of"),
    ("gateway.reading", "read_full_reply", ("gateway.relay.verdict",), "finish: read_full_reply"),
    ("gateway.relay.verdict", "verdict", ("gateway.relay.runner",), "finish: the verdict"),
    ("gateway.samples", "sample_from_fields", ("gateway.relay.runner",), "finish: the Sample"),
    ("gateway.relay.first_token", "await_first_token", ("gateway.relay.runner",), "set-up: the first-token read"),
    ("gateway.relay.first_token", "note_status", ("gateway.relay.runner",), "set-up: note_status"),
    ("gateway.relay.dispatch", "attempt_in_order", ("gateway.relay.dispatch",), "set-up: attempt_in_order"),
    ("gateway.relay.outbound", "upstream_body", ("gateway.relay.runner",), "set-up: the upstream body"),
    (
        "gateway.relay.outbound",
        "upstream_of",
        ("gateway.relay.runner", "gateway.relay.dispatch"),
        "set-up: upstream_of",
    ),
)
"""(module, function, the modules that call it by their own global, piece)."""

STAGES = ("meter finish", "attempt set-up")


def _wrap_function(clock: StageClock, module: str, name: str, callers: tuple[str, ...], piece: str) -> None:
    """Time ``module.name`` as ``piece`` where each of ``callers`` looks it up (undone by ``clock.unwrap``)."""
    original = getattr(importlib.import_module(module), name)
    enter, leave = clock._enter, clock._exit
    if asyncio.iscoroutinefunction(original):

        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            enter(piece)
            try:
                return await original(*args, **kwargs)
            finally:
                leave()

        timed: Any = timed_async
    else:

        def timed_sync(*args: Any, **kwargs: Any) -> Any:
            enter(piece)
            try:
                return original(*args, **kwargs)
            finally:
                leave()

        timed = timed_sync
    for caller in callers:
        owner = importlib.import_module(caller)
        clock._undo.append((owner, name, getattr(owner, name)))  # type: ignore[arg-type]
        setattr(owner, name, timed)


def _wrap_pieces(clock: StageClock) -> None:
    for module, owner, name, piece in METHODS:
        clock.wrap(getattr(importlib.import_module(module), owner), name, piece)
    for module, name, callers, piece in FUNCTIONS:
        _wrap_function(clock, module, name, callers, piece)


async def measure(requests: int, repeats: int) -> dict[str, dict[str, float]]:
    """µs per request of each piece and of what is left of the two stages (best of ``repeats``)."""
    pieces = {piece for *_, piece in (*METHODS, *FUNCTIONS)}
    return await measure_pieces(requests, repeats, _wrap_pieces, lambda s: s in pieces or s in STAGES)


def render(results: dict[str, Any]) -> str:
    rows = sorted({s for stages in results.values() for s in stages}, key=lambda s: (s.split(":")[0], s in STAGES, s))
    lines = ["| piece | streamed µs | non-streamed µs |", "|---|---|---|"]
    for stage in rows:
        name = f"the rest of *{stage}*" if stage in STAGES else stage
        cells = [f"{results[label].get(stage, float('nan')):.1f}" for label in ("streamed", "non-streamed")]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    run_pieces(measure, render, __doc__.split("\n\n")[0] if __doc__ else None)


if __name__ == "__main__":
    main()
