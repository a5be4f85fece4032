"""Background probes of open circuits: a recovered provider is noticed without waiting for traffic.

A circuit's half-open probe used to be the next real request after the cool-down; with little
traffic (or none for that model) a provider that had recovered stayed shunned until one came,
and the request that probed paid for a failure if it had not. ``CircuitProber`` instead looks
every ``interval_s`` for circuits whose cool-down is over and asks each deployment a cheap
question (a one-token, non-streamed chat or Messages request). The probe is an attempt like any
other, through ``AttemptRunner`` (admitted, sent, recorded, with its events): the half-open slot
is taken as for any attempt (so no real request probes beside it), and its outcome closes the
circuit or re-opens it, exactly as a request's would. Bounded: one probe per deployment per
cool-down (the circuit admits one), at most ``MAX_PROBES`` per tick. Its sample goes to the router
and the events only (``ProxyRequest.probe``), not the stats window nor spend: a one-token answer
says nothing of a deployment's speed.

Probes follow demand (``gateway.routing.health.IdleProbes``): a deployment whose model nobody asked
for since is probed at most ``IDLE_PROBES`` times in a row while they fail, then left alone until a
request for its model comes; then probing starts again. A provider down for good costs a few
requests, not one every 2-15 s for as long as the process lives. A probe's ``Retry-After`` blocks
its own deployment only (``gateway.routing.capacity``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from gateway.background import every
from gateway.errors import UpstreamError
from gateway.relay.attempt import Attempt, ClientFault
from gateway.relay.budget import AttemptBudget
from gateway.relay.request import ProxyRequest
from gateway.relay.runner import AttemptRunner
from gateway.routing import Candidate
from gateway.routing.health import IdleProbes
from gateway.routing.serving import ServingRouter
from gateway.samples import Endpoint

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
        # An unexpected error in one tick is logged and the next tick probes again: a prober that died
        # would leave every open circuit to the next real request, silently.
        await every(lambda: self.interval_s, self._tick, "circuit probes")

    async def _tick(self) -> None:
        runner = self.current()
        if isinstance(runner.router, ServingRouter):
            await probe_due(runner, runner.router.state.idle_probes)


def due(router: ServingRouter) -> list[Candidate]:
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


async def probe_due(runner: AttemptRunner, idle: IdleProbes | None = None) -> int:
    """Probe the circuits that are due (at most ``MAX_PROBES``, only those with demand when ``idle`` is given);
    returns how many were probed."""
    router = runner.router
    if not isinstance(router, ServingRouter):
        return 0
    candidates = [c for c in due(router) if _api(c) is not None]
    if idle is not None:
        asked = router.state.asked
        candidates = [c for c in candidates if idle.wanted((c.model, c.name), asked[c.model])]
    started = [_start(runner, router, c) for c in candidates[:MAX_PROBES]]
    admitted = [s for s in started if s is not None]
    if admitted:
        results = await asyncio.gather(*(_probe(runner, *s) for s in admitted))
        if idle is not None:
            for (_, _, attempt), ok in zip(admitted, results, strict=True):
                idle.probed((attempt.candidate.model, attempt.candidate.name), ok)
    return len(admitted)


def _api(candidate: Candidate) -> Endpoint | None:
    apis = candidate.deployment.apis
    return "chat" if "chat" in apis else "messages" if "messages" in apis else None


def _start(
    runner: AttemptRunner, router: ServingRouter, candidate: Candidate
) -> tuple[ProxyRequest, AttemptBudget, Attempt] | None:
    """Admit one probe: a cheap request (one token, not streamed) and its attempt; None when not admitted."""
    api = _api(candidate)
    assert api is not None
    request = ProxyRequest(
        request_id=f"probe-{uuid.uuid4().hex}",
        endpoint=api,
        path="/messages" if api == "messages" else "/chat/completions",
        body={"model": candidate.model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1},
        stream=False,
        requested_model=candidate.model,
        received_at=runner.clock(),
        timeout_s=PROBE_TIMEOUT_S,
        probe=True,
    )
    model = router.config.model(candidate.model)
    if model is None:
        return None
    budget = AttemptBudget.for_request(
        router.config.policy_for(model), request.received_at, runner.clock, PROBE_TIMEOUT_S
    )
    attempt = runner.start(request, candidate, budget)
    return (request, budget, attempt) if attempt is not None else None


async def _probe(runner: AttemptRunner, request: ProxyRequest, budget: AttemptBudget, attempt: Attempt) -> bool:
    """Send one admitted probe; its outcome is the circuit's probe result (recorded once, by the runner)."""
    candidate = attempt.candidate
    try:
        await runner.open(request, attempt, budget)
    except (UpstreamError, ClientFault):
        pass  # ``open`` recorded it: a client fault (our question refused) is no verdict on the provider
    else:
        runner.finish_full(request, attempt)
    sample = request.trace.samples[-1]
    logger.info(
        "circuit probe of %s (model %s): %s%s",
        candidate.name,
        candidate.model,
        sample.outcome,
        f" ({sample.status})" if sample.status is not None else "",
    )
    return sample.outcome == "ok"
