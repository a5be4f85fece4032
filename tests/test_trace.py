"""The routing trace: asked for with ``x-gateway-trace: 1``, returned in the ``x-gateway-trace``
header, and read back in full (after a stream has ended) through the explanation endpoint."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.fakes import FakeBehavior
from gateway.routing.trace import HEADER_LIMIT, TraceStore, header_value
from tests.support.clients import MESSAGES
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

KEY = "sk-gw-tracer-0123456789"
OTHER = "sk-gw-other-0123456789"
ADMIN = "sk-gw-admin-0123456789"


def start(fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path) -> Gateway:
    a = fakes.start("a", FakeBehavior(status=503))
    b, c = fakes.start("b"), fakes.start("c")
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[[keys]]\nname = "t"\nkey = "{KEY}"\n\n[[keys]]\nname = "o"\nkey = "{OTHER}"\n')
    config = gateway_config([a, b, c], extra={"auth": {"api_keys_file": str(keys)}})
    return start_gateway(config, {"GATEWAY_ADMIN_KEY": ADMIN})


def post(gateway: Gateway, body: dict[str, Any], trace: bool = True) -> httpx.Response:
    headers = {"authorization": f"Bearer {KEY}", **({"x-gateway-trace": "1"} if trace else {})}
    return httpx.post(gateway.base_url + "/chat/completions", json=body, headers=headers, timeout=10)


def explained(gateway: Gateway, request_id: str, key: str = KEY) -> httpx.Response:
    return httpx.get(
        gateway.url + "/v1/gateway/routes",
        params={"request_id": request_id},
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )


def final_trace(gateway: Gateway, request_id: str) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def ready() -> bool:
        response = explained(gateway, request_id)
        if response.status_code == 200 and response.json()["final"]:
            found.update(response.json())
            return True
        return False

    wait_until(ready, what="the final trace")
    return found


def test_the_trace_header_matches_the_explanation_endpoint(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    gateway = start(fakes, start_gateway, tmp_path)
    body = {"model": "m", "messages": MESSAGES, "stream": True, "provider": {"ignore": ["c"]}}
    response = post(gateway, body)
    assert response.status_code == 200 and response.headers["x-gateway-provider"] == "b"
    raw = response.headers["x-gateway-trace"]
    assert len(raw.encode()) <= HEADER_LIMIT and raw.isascii()
    header = json.loads(raw)
    assert header["id"] == response.headers["x-request-id"] and header["final"] is False
    assert header["model"] == "m" and header["policy"] == "test" and set(header["q"]) == {"ttft", "tps", "estimate"}
    assert [c["d"] for c in header["c"]] == ["a", "b"]
    first, second = header["c"]
    assert (first["role"], second["role"]) == ("override", "fallback")  # the request steered (ignore)
    assert first["price"] == [1.0, 2.0] and "cost_usd" in first["pred"] and "success_rate" in first["pred"]
    assert header["x"] == [{"d": "c", "p": "c", "why": "override"}]
    # At the header's time, a had failed and b was answering (its stream had only begun).
    assert [(a["d"], a["o"]) for a in header["a"]] == [("a", "upstream_error"), ("b", "answering")]
    assert header["a"][0]["st"] == 503

    full = final_trace(gateway, header["id"])
    assert full["c"] == header["c"] and full["x"] == header["x"], "one ranking behind both"
    assert [(a["d"], a["o"]) for a in full["a"]] == [("a", "upstream_error"), ("b", "ok")]
    assert full["a"][1]["usd"] > 0 and "ttft_s" in full["a"][1]


def test_only_the_requests_key_or_the_admin_reads_a_trace(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    gateway = start(fakes, start_gateway, tmp_path)
    response = post(gateway, {"model": "m", "messages": MESSAGES})
    request_id = response.headers["x-request-id"]
    final_trace(gateway, request_id)
    assert explained(gateway, request_id, ADMIN).status_code == 200
    assert explained(gateway, request_id, OTHER).status_code == 404
    assert explained(gateway, "no-such-request").status_code == 404
    assert httpx.get(gateway.url + "/v1/gateway/routes", params={"request_id": request_id}).status_code == 401
    untraced = post(gateway, {"model": "m", "messages": MESSAGES}, trace=False)
    assert "x-gateway-trace" not in untraced.headers
    assert explained(gateway, untraced.headers["x-request-id"]).status_code == 404


def test_a_refused_request_carries_its_trace(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    gateway = start(fakes, start_gateway, tmp_path)
    response = post(gateway, {"model": "m", "messages": MESSAGES, "provider": {"only": ["a"]}})
    assert response.status_code == 503
    trace = json.loads(response.headers["x-gateway-trace"])
    # Its lone deployment was asked again (the default two retries), and every attempt is in the trace.
    assert trace["final"] and [(a["d"], a["o"]) for a in trace["a"]] == [("a", "upstream_error")] * 3
    assert {x["d"] for x in trace["x"]} == {"b", "c"}


def test_a_long_trace_is_cut_to_the_header_limit() -> None:
    candidates = [
        {"rank": i, "d": f"deployment-{i:03d}", "p": "p", "status": "ready", "score": 0.1 * i,
         "terms": {"time": 0.5, "price": 0.25}, "pred": {"ttft_s": 0.25, "tokens_per_s": 120.5, "cost_usd": 0.0001}}
        for i in range(1, 80)
    ]  # fmt: skip
    trace = {"v": 1, "id": "r1", "final": True, "c": candidates, "a": [{"n": 1, "d": "deployment-001", "o": "ok"}]}
    cut = json.loads(header_value(trace))
    assert len(header_value(trace)) <= HEADER_LIMIT and cut["cut"] is True
    assert cut["c"][0] == candidates[0], "the leaders keep their numbers"
    assert "pred" not in cut["c"][-1] and len(cut["c"]) < len(candidates)
    assert cut["a"] == trace["a"]
    small = {"v": 1, "id": "r2", "final": True, "c": candidates[:2], "a": []}
    assert json.loads(header_value(small)) == small


def test_traces_are_kept_for_a_bounded_time_and_number() -> None:
    now = [0.0]
    store = TraceStore(limit=2, ttl_s=10.0, clock=lambda: now[0])
    for name in ("a", "b", "c"):
        store.put(name, "k", {"id": name})
    assert store.get("a") is None and store.get("c") == ("k", {"id": "c"})
    now[0] = 11.0
    assert store.get("c") is None


def test_excluded_candidates_say_why_and_candidates_carry_the_measured_values() -> None:
    import random

    from gateway.config import StatsConfig
    from gateway.routing import Candidate, RouteRequest
    from gateway.routing.belief_live import LiveBeliefRouter
    from gateway.routing.trace import build_trace
    from gateway.stats import InMemoryStatsStore
    from tests.support.clock import FakeClock
    from tests.support.config import routing_config
    from tests.support.samples import sample, samples

    clock = FakeClock()
    config = routing_config(
        [("a", 1, 1), ("b", 1, 2), ("c", 1, 1)], policy={"failure_threshold": 1, "cooldown_s": 5}, max_concurrency=1
    )
    store = InMemoryStatsStore(StatsConfig(window_s=60, slice_s=1), wall_clock=clock)
    other = store.as_replica("other")  # another replica's answers: the beliefs hear them, this one's health not
    for name, ttft in (("a", 0.2), ("b", 0.5), ("c", 0.3)):
        for s in samples(name, 20, ttft=ttft, tps=100.0, started_at=clock.now):
            other.record(s)
    router = LiveBeliefRouter(config, store, rng=random.Random(7), clock=clock)
    model = config.models[0]

    def candidate(name: str) -> Candidate:
        deployment = next(d for d in model.deployments if d.name == name)
        return Candidate(deployment, config.provider(deployment.provider), model="m")

    assert router.attempt_started(candidate("a"))
    # A refusal with a Retry-After opens a's circuit at once, however well its answers went.
    router.attempt_finished(candidate("a"), sample("a", outcome="upstream_error", started_at=clock.now), 5.0)
    assert router.attempt_started(candidate("c"))  # c's provider is now at its max_concurrency of 1
    request = RouteRequest(model=model, endpoint="chat", stream=True, prompt_tokens=100, max_tokens=50, explain=True)
    plan = router.plan(request)
    trace = build_trace("r", plan, [], final=False)
    # c is full, not excluded: a request overflows past it, or waits for its slot (in whichever order the draw put
    # the two).
    assert sorted((c["d"], c["status"], c["load"]) for c in trace["c"]) == [
        ("b", "ready", [0, 0, 1]),
        ("c", "at capacity", [1, 1, 1]),
    ]
    b = next(c for c in trace["c"] if c["d"] == "b")
    assert b["pred"]["ttft_s"] == pytest.approx(0.5, rel=0.03) and b["pred"]["tokens_per_s"] == pytest.approx(
        100, rel=0.03
    )
    assert b["pred"]["time_s"] == pytest.approx(0.5 + 50 / 100, rel=0.03) and b["price"] == [1.0, 2.0]
    why = {x["d"]: x for x in trace["x"]}
    assert why["a"]["why"] == "rate limited" and why["a"]["retry_in_s"] == pytest.approx(5.0)
    assert "c" not in why
    assert trace["shape"] == {"prompt": 100, "output": 50, "from": "request"}
