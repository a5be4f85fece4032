"""No reference cycle per request: everything a request builds is freed by reference counting once nothing refers
to it, not left for the collector (whose passes over old objects are rare in a busy gateway, ``gateway.server``).
Checked with the collector off during the requests, then one collection that keeps what it finds unreachable
(``gc.DEBUG_SAVEALL``): none of it may be a request's own objects."""

from __future__ import annotations

import contextvars
import gc
import types
from collections.abc import Callable, Iterator

import httpx
import pytest

from gateway.admission.access import AccessState, Ticket
from gateway.admission.auth import ClientKey, KeyLimits
from gateway.admission.ratelimit import InMemoryRateLimiter
from gateway.admission.usage import UsageTally
from gateway.fakes import FakeBehavior
from gateway.meter import StreamMeter
from gateway.relay.attempt import Attempt
from gateway.relay.request import ProxyRequest
from gateway.samples import Sample
from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
PER_REQUEST = (Ticket, UsageTally, ProxyRequest, Attempt, StreamMeter, Sample)


def in_cycles() -> dict[str, int]:
    """What one collection finds unreachable (only cycles are: the rest was freed by reference counting), by class."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        counts: dict[str, int] = {}
        for thing in gc.garbage:
            if isinstance(thing, PER_REQUEST):
                counts[type(thing).__name__] = counts.get(type(thing).__name__, 0) + 1
        return counts
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("stream", [True, False])
def test_a_request_leaves_no_cycle_behind(
    fakes: Fakes, start_gateway: StartGateway, collector_off: None, stream: bool
) -> None:
    gateway = start_gateway(gateway_config([fakes.start("a", FakeBehavior(output_tokens=8))]))
    body = {"model": "m", "messages": MESSAGES, "stream": stream}
    with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
        for _ in range(3):
            assert client.post("/chat/completions", json=body).status_code == 200
    # The ticket is released once the response is done, a moment after the client has read it.
    wait_until(lambda: gateway.runtime.access.state.in_flight.total == 0, what="every ticket released")
    assert in_cycles() == {}


def test_a_released_ticket_is_freed_by_reference_counting(collector_off: None) -> None:
    state = AccessState(InMemoryRateLimiter())
    key = ClientKey.anonymous(KeyLimits())

    def admitted_and_released() -> None:
        ticket = Ticket(state, key, window=0, reserved=0, estimate=10)
        ticket.release()

    contextvars.copy_context().run(admitted_and_released)  # the request's own context, dropped with it
    assert in_cycles() == {}


def test_a_broken_stream_leaves_no_exception_cycle(
    fakes: Fakes, start_gateway: StartGateway, collector_off: None
) -> None:
    """aiohttp keeps a broken response's error on its reader, whose frames the error's traceback keeps."""
    broken = fakes.start("a", FakeBehavior(output_tokens=8, drop_after=3))
    backup = fakes.start("b", FakeBehavior(output_tokens=8))
    gateway = start_gateway(gateway_config([broken, backup], deployments={"b": {"continue_prefill": True}}))
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
        for _ in range(3):
            assert client.post("/chat/completions", json=body).status_code == 200
    wait_until(lambda: gateway.runtime.access.state.in_flight.total == 0, what="every ticket released")
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        errors = [type(t).__name__ for t in gc.garbage if isinstance(t, Exception)]
        frames = [
            t.f_code.co_filename
            for t in gc.garbage
            if isinstance(t, types.FrameType) and "/gateway/fakes/" not in t.f_code.co_filename
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert errors == [] and frames == []  # (the fake provider's own cancelled watchers aside)
