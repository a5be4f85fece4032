"""Background probes of open circuits: a recovered provider is noticed without waiting for traffic.

A circuit's half-open probe used to be the next real request after the cool-down; with little
traffic (or none for that model) a provider that had recovered stayed shunned until one came,
and the request that probed paid for a failure if it had not. ``CircuitProber`` instead looks
every ``interval_s`` for circuits whose cool-down is over and asks each deployment a cheap
question (a one-token, non-streamed chat or Messages request): the half-open slot is taken as
for any attempt (so no real request probes beside it), and its outcome closes the circuit or
re-opens it, exactly as a request's would. Bounded: one probe per deployment per cool-down (the
circuit admits one), at most ``MAX_PROBES`` per tick. The probe's answer goes to the router
only, not to the stats window: a one-token answer says nothing of a deployment's speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable

from gateway.errors import UpstreamError
from gateway.relay.attempt import retry_after
from gateway.relay.runner import AttemptRunner
from gateway.routing import Candidate, MeasuredRouter
from gateway.samples import Endpoint, Outcome, Sample
from gateway.upstream import MAX_ERROR_BODY, AttemptTimeouts

logger = logging.getLogger("gateway")
MAX_PROBES = 4
"""Probes started per tick, at most (whatever the number of open circuits)."""
PROBE_TIMEOUT_S = 10.0


class CircuitProber:
    """Runs ``probe_due`` every ``interval_s`` on the runner ``current`` returns (the runtime's, after reloads)."""

    def __init__(self, current: Callable[[], AttemptRunner], interval_s: float = 1.0) -> None:
        self.current = current
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await probe_due(self.current())


def due(router: MeasuredRouter) -> list[Candidate]:
    """The deployments whose circuit is open past its cool-down (each would admit one probe now)."""
    now = router.clock()
    circuits = router.state.health.circuits
    found = []
    for model in router.config.models:
        for deployment in model.deployments:
            circuit = circuits.get((model.name, deployment.name))
            if circuit is None or circuit.probing or circuit.state == "closed":
                continue
            if circuit.state == "open" and now < circuit.open_until:
                continue
            provider = router.config.provider(deployment.provider)
            found.append(Candidate(deployment, provider, reason="best-score", model=model.name))
    return found


async def probe_due(runner: AttemptRunner) -> int:
    """Probe the circuits that are due (at most ``MAX_PROBES``); returns how many were probed."""
    router = runner.router
    if not isinstance(router, MeasuredRouter):
        return 0
    candidates = [c for c in due(router) if _api(c) is not None][:MAX_PROBES]
    admitted = [c for c in candidates if router.attempt_started(c)]
    if admitted:
        await asyncio.gather(*(_probe(runner, router, c) for c in admitted))
    return len(admitted)


def _api(candidate: Candidate) -> Endpoint | None:
    apis = candidate.deployment.apis
    return "chat" if "chat" in apis else "messages" if "messages" in apis else None


async def _probe(runner: AttemptRunner, router: MeasuredRouter, candidate: Candidate) -> None:
    """One cheap request; its outcome is the circuit's probe result (recorded once, whatever happens)."""
    api = _api(candidate)
    assert api is not None
    body = {
        "model": candidate.deployment.model,
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
    }
    client = runner.upstreams[candidate.provider.name]
    model = router.config.model(candidate.model)
    connect_s = router.config.policy_for(model).connect_timeout_s if model is not None else PROBE_TIMEOUT_S
    timeouts = AttemptTimeouts(connect_s=connect_s, read_s=PROBE_TIMEOUT_S, total_s=PROBE_TIMEOUT_S)
    path = "/messages" if api == "messages" else "/chat/completions"
    started, wall = time.perf_counter(), time.time()
    outcome: Outcome = "upstream_error"
    status: int | None = None
    wait: float | None = None
    try:
        response = await client.send(path, json.dumps(body).encode(), timeouts, (), api)
        async with response:
            status = response.status
            await response.read_all(MAX_ERROR_BODY)
            if status < 400:
                outcome = "ok"
            elif status in (400, 404, 413, 422):
                outcome = "client_error"  # our question was refused, not the provider broken: no verdict
            wait = retry_after(response.headers.get("retry-after"), time.time())
    except UpstreamError:
        outcome = "upstream_error"
    except asyncio.CancelledError:
        outcome = "client_cancelled"
        raise
    finally:
        sample = Sample(
            model=candidate.model,
            deployment=candidate.name,
            provider=candidate.provider.name,
            endpoint=api,
            stream=False,
            outcome=outcome,
            started_at=wall,
            status=status,
            attempt_s=time.perf_counter() - started,
        )
        router.attempt_finished(candidate, sample, wait)
        logger.info(
            "circuit probe of %s (model %s): %s%s",
            candidate.name,
            candidate.model,
            outcome,
            f" ({status})" if status is not None else "",
        )
