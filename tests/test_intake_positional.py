"""Intake builds the ``ProxyRequest`` and the ``RouteRequest`` its keyword builds built, field for field.

``ProxyEndpoint._prepare`` now passes every field in order (``proxy_request_from_fields``,
``route_request_from_fields``). Here both are spied on during whole requests through the app (its real runtime,
the provider in memory), and at each call the former keyword build, copied below, is evaluated on ``_prepare``'s
own variables at that moment (for a natively served model, ``able`` is what the former code made of it,
``native_eligible``): the two must be equal. The requests vary what fills each field (streamed or not,
client deadlines, a session, a model suffix, tools, a trace wish, a query string), so a value passed in another
field's place shows.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any

import pytest

from benchmarks.hotpath_memory import Driver, running_app
from gateway import api as api_module
from gateway.relay.outbound import native_eligible
from gateway.relay.request import ProxyRequest, proxy_request_from_fields
from gateway.routing.plan import RouteRequest, route_request_from_fields

FORMER_PROXY_REQUEST = """ProxyRequest(
    request_id=request_id,
    endpoint=self.endpoint,
    path=_with_query(self.path, scope),
    body=body,
    stream=stream,
    requested_model=model_name,
    received_at=received_at,
    headers=forwardable_of(headers),
    prompt_tokens=prompt_tokens,
    timeout_s=deadlines.timeout_s,
    ttft_slo_s=deadlines.ttft_slo_s,
    session_key=session.key if session is not None else None,
    session_ttl_s=policy.session_ttl_s,
    translations=able.translations,
    omitted_tools=able.omitted_tools,
    expects=expects,
)"""
FORMER_ROUTE_REQUEST = """RouteRequest(
    model=model,
    endpoint=self.endpoint,
    stream=stream,
    prompt_tokens=prompt_tokens,
    max_tokens=max_tokens,
    preferences=preferences,
    pinned=pinned,
    session=session,
    kind=expects.kind if expects.judged else None,
    client=key.key_id,
    explain=_wants_trace(scope["headers"]),
)"""
"""``_prepare``'s two builds before they took their fields in order (copied)."""


def _spy(made: Any, former: str, seen: list[tuple[Any, Any]]) -> Any:
    code = compile(former, "former", "eval")

    def spied(*values: Any) -> Any:
        built = made(*values)
        caller = sys._getframe(1)
        names = {**vars(api_module), "ProxyRequest": ProxyRequest, "RouteRequest": RouteRequest}
        local = dict(caller.f_locals)
        if local["native"]:
            # What the former ``_prepare`` held for a natively served model (it now makes no ``Eligible``).
            local["able"] = native_eligible(local["model"])
        former_built = eval(code, names, local)
        # Compared at once: the request's trace fills in as it goes.
        seen.append((built, type(built) is type(former_built) and built == former_built))
        return built

    return spied


def _request(rng: random.Random) -> tuple[bytes, list[tuple[bytes, bytes]], bytes]:
    """A random chat request: its body, headers and query string."""
    body: dict[str, Any] = {
        "model": rng.choice(["bench", "bench:floor", "bench:nitro"]),
        "messages": [{"role": "user", "content": "hello " * rng.randrange(1, 300)}],
        "stream": rng.random() < 0.5,
    }
    if rng.random() < 0.5:
        body["max_tokens"] = rng.randrange(1, 4000)
    if rng.random() < 0.3:
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    if rng.random() < 0.3:
        body["response_format"] = {"type": "json_object"}
    raw = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    if rng.random() < 0.5:
        headers.append((b"x-request-timeout", str(rng.randrange(5, 50)).encode()))
    if rng.random() < 0.5:
        headers.append((b"x-slo-ttft-ms", str(rng.randrange(100, 5000)).encode()))
    if rng.random() < 0.4:
        headers.append((b"x-session-id", f"s{rng.randrange(5)}".encode()))
    if rng.random() < 0.3:
        headers.append((b"x-gateway-trace", b"1"))
    if rng.random() < 0.3:
        headers.append((b"x-forwarded-for", b"10.0.0.1"))
    return raw, headers, b"a=1" if rng.random() < 0.2 else b""


async def _run(requests: int) -> tuple[list[tuple[Any, Any]], list[tuple[Any, Any]]]:
    proxies: list[tuple[Any, Any]] = []
    routes: list[tuple[Any, Any]] = []
    rng = random.Random("intake")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            api_module,
            "proxy_request_from_fields",
            _spy(proxy_request_from_fields, FORMER_PROXY_REQUEST, proxies),
        )
        patch.setattr(
            api_module,
            "route_request_from_fields",
            _spy(route_request_from_fields, FORMER_ROUTE_REQUEST, routes),
        )
        async with running_app(1) as app:
            for _ in range(requests):
                driver = Driver(app, stream=False)
                driver.body, headers, query = _request(rng)
                driver.scope = {**driver.scope, "headers": headers, "query_string": query}
                await driver.one()
    return proxies, routes


def test_intake_builds_what_the_keyword_builds_built() -> None:
    proxies, routes = asyncio.run(_run(300))
    assert len(proxies) == len(routes) == 300
    assert all(same for _, same in proxies + routes)
    # The requests filled the fields a swap would show in: both deadlines, sessions, kinds, trace wishes.
    proxy_requests = [built for built, _ in proxies]
    route_requests = [built for built, _ in routes]
    assert {p.stream for p in proxy_requests} == {True, False}
    assert any(p.timeout_s and p.ttft_slo_s and p.timeout_s != p.ttft_slo_s for p in proxy_requests)
    assert any(p.session_key for p in proxy_requests)
    assert {r.explain for r in route_requests} == {True, False}
    assert len({r.kind for r in route_requests}) > 1
    assert any(r.max_tokens for r in route_requests) and any(r.max_tokens is None for r in route_requests)
