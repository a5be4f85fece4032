"""Fast, gentle recovery of a provider that was down: a capped cool-down and background probes.

The issue's 61-second outage with a request every 4 s is played here in short policy values (a
cool-down of 0.2 s capped at 0.5 s, probes every second, a 3 s outage); the real-time version is
``benchmarks/faults.py``'s ``outage-61s`` line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import httpx

from gateway.app import AppOptions, create_app
from gateway.fakes import FakeBehavior
from gateway.policies import BUILTIN_POLICIES
from gateway.routing.health import IDLE_PROBES, HealthBoard
from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway, GatewayServers
from tests.support.servers import ServerThread
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
CHAT = {"model": "m", "messages": MESSAGES, "stream": True}
POLICY = {"extends": "fixed-order", "failure_threshold": 2, "cooldown_s": 0.2, "max_cooldown_s": 0.5}


def provider_of(gateway: Gateway) -> str:
    response = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=10)
    assert response.status_code == 200, response.text
    return response.headers["x-gateway-provider"]


def set_status(fake: FakeServer, status: int) -> None:
    fake.app.behavior = dataclasses.replace(fake.app.behavior, status=status)


def test_after_an_outage_the_primary_is_back_soon_after_it_recovers(fakes: Fakes, start_gateway: StartGateway) -> None:
    primary, backup = fakes.start("a"), fakes.start("b")
    gateway = start_gateway(gateway_config([primary, backup], policy=POLICY))
    assert provider_of(gateway) == "a"
    set_status(primary, 503)
    outage_ends = time.monotonic() + 3.0
    while time.monotonic() < outage_ends:
        assert provider_of(gateway) == "b"
        time.sleep(0.2)  # pacing the traffic (a request every 0.2 s), not waiting for a condition
    set_status(primary, 200)
    recovered_at = time.monotonic()
    while provider_of(gateway) != "a":
        assert time.monotonic() - recovered_at < 2.5, "the primary did not get its traffic back"
        time.sleep(0.2)


def test_an_open_circuit_is_probed_without_traffic(fakes: Fakes, start_gateway: StartGateway) -> None:
    primary, backup = fakes.start("a"), fakes.start("b")
    gateway = start_gateway(gateway_config([primary, backup], policy=POLICY))
    set_status(primary, 503)
    circuits = gateway.runtime.router.state.health.circuits
    while circuits.get(("m", "a")) is None or circuits[("m", "a")].state != "open":
        assert provider_of(gateway) == "b"
    probes_before = primary.app.state.requests
    wait_until(lambda: primary.app.state.requests > probes_before, timeout=3, what="a background probe")
    set_status(primary, 200)
    wait_until(lambda: circuits[("m", "a")].state == "closed", timeout=3, what="the probe closing the circuit")
    asked = primary.app.state.requests
    assert provider_of(gateway) == "a"
    assert primary.app.state.requests == asked + 1  # the probe was one cheap request, not a stream of them
    probe = primary.app.state.recorded[asked - 1].body
    assert probe is not None and probe["max_tokens"] == 1 and probe.get("stream") is None


def test_the_default_cool_down_escalation_is_capped() -> None:
    policy = BUILTIN_POLICIES["balanced"]
    board, key, now = HealthBoard(), ("m", "a"), 0.0
    for _ in range(policy.failure_threshold):
        board.record(key, "upstream_error", None, policy, now, lambda *_: None)
    cool_downs = []
    for _ in range(8):  # every half-open probe fails: the provider stays down
        circuit = board.circuits[key]
        cool_downs.append(circuit.open_until - now)
        now = circuit.open_until
        assert board.admit(key, now, lambda *_: None)
        board.record(key, "upstream_error", None, policy, now, lambda *_: None)
    assert cool_downs[:3] == [5.0, 10.0, 15.0]
    assert max(cool_downs) == 15.0  # a recovered provider waits at most 15 s for its probe
    # A Retry-After is still honoured beyond the cap.
    board.record(("m", "b"), "upstream_error", 60.0, policy, now, lambda *_: None, rate_limited=True)
    assert board.circuits[("m", "b")].open_until - now == 60.0


def cool_down_of_the_next_opening(answers_between: int) -> float:
    """Open a circuit, let its probe succeed, hear ``answers_between`` successes, then fail it open again 5 s later."""
    policy = BUILTIN_POLICIES["balanced"]
    board, key, now = HealthBoard(), ("m", "a"), 0.0
    for _ in range(policy.failure_threshold):
        board.record(key, "upstream_error", None, policy, now, lambda *_: None)
    now = board.circuits[key].open_until
    assert board.admit(key, now, lambda *_: None)
    board.record(key, "ok", None, policy, now, lambda *_: None)  # the probe answers: closed
    assert board.circuits[key].state == "closed"
    for _ in range(answers_between):
        board.record(key, "ok", None, policy, now + 1.0, lambda *_: None)
    now += 5.0  # well within max_cooldown_s of the close
    for _ in range(policy.failure_threshold):
        board.record(key, "upstream_error", None, policy, now, lambda *_: None)
    circuit = board.circuits[key]
    assert circuit.state == "open"
    return circuit.open_until - now


def test_a_re_opening_is_a_repeat_only_when_the_provider_did_not_answer_in_between() -> None:
    # No answer between the close and the next failures: the probe's success was no recovery, the cool-down doubles.
    assert cool_down_of_the_next_opening(0) == 10.0
    # It answered as many requests as the failures that open it: it had recovered, and this is a new outage
    # (a provider rate-limited in bursts is not shut out longer at each burst).
    assert cool_down_of_the_next_opening(BUILTIN_POLICIES["balanced"].failure_threshold) == 5.0


def test_a_probe_that_fails_keeps_the_circuit_open(fakes: Fakes, start_gateway: StartGateway) -> None:
    down = fakes.start("a", FakeBehavior(status=503))
    backup = fakes.start("b")
    gateway = start_gateway(gateway_config([down, backup], policy=POLICY))
    circuits = gateway.runtime.router.state.health.circuits
    while circuits.get(("m", "a")) is None or circuits[("m", "a")].state != "open":
        provider_of(gateway)
    asked = down.app.state.requests
    # The fake counts a probe when it arrives, the gateway re-opens the circuit when its 503 is back.
    wait_until(
        lambda: down.app.state.requests >= asked + 2 and circuits[("m", "a")].state == "open",
        timeout=5,
        what="two probes, the last one's failure recorded",
    )
    assert circuits[("m", "a")].level >= 1  # each failed probe escalated the cool-down (up to its cap)


def test_an_idle_open_circuit_is_probed_a_bounded_number_of_times(
    fakes: Fakes, test_servers: list[ServerThread]
) -> None:
    down = fakes.start("a", FakeBehavior(status=503))
    backup = fakes.start("b")
    app = create_app(gateway_config([down, backup], policy=POLICY), AppOptions(environ={}, probe_interval_s=0.05))
    gateway = GatewayServers(test_servers).serve(app)
    state = gateway.runtime.router.state
    circuits = state.health.circuits
    while circuits.get(("m", "a")) is None or circuits[("m", "a")].state != "open":
        provider_of(gateway)
    asked = down.app.state.requests
    # Nobody asks for model m now: a few probes, then none however long the circuit stays open.
    skipped = state.idle_probes.skipped
    wait_until(lambda: skipped.get(("m", "a"), 0) >= 20, timeout=10, what="ticks with the probe left out")
    assert down.app.state.requests == asked + IDLE_PROBES
    # Demand returns: probing starts again.
    assert provider_of(gateway) == "b"
    wait_until(lambda: down.app.state.requests > asked + IDLE_PROBES + 1, timeout=5, what="probes again")
