"""Intake's fast paths give what the forms they replaced gave: a model served natively (``reachable``, ``eligible``),
a request that continues no session (``lookup_session``), a body too small to nest past the depth limit (its walk)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from types import SimpleNamespace
from typing import Any

from gateway import shapes
from gateway.admission.limits import check_shape as limits_check_shape
from gateway.admission.limits import containers_at_most
from gateway.config import LimitsConfig, parse_config
from gateway.errors import InvalidRequest
from gateway.policies import AFFINITIES, Affinity, PolicyConfig
from gateway.relay import outbound
from gateway.routing.apis import reachable
from gateway.routing.plan import SessionRoute
from gateway.samples import Endpoint
from gateway.session_route import AFFINITY_HEADER_NAME, session_identity, session_route
from gateway.sessions.bindings import Unavailable
from gateway.sessions.identity import session_of
from tests.support.random_models import random_model

_APIS = [["chat"], ["messages"], ["responses"], ["chat", "messages"], ["embeddings"], ["completions", "chat"]]
_ALL: list[Endpoint] = ["chat", "completions", "embeddings", "responses", "messages"]
_BODIES: list[dict[str, Any]] = [
    {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2},
    {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]},
    {"model": "m", "input": "hi", "tools": [{"type": "web_search"}]},
    {"model": "m", "prompt": "hi"},
    {"model": "m", "input": "hi"},
]


def _facts(able: outbound.Eligible) -> tuple[Any, ...]:
    refusal = able.refusal
    return able.model, able.translations, able.omitted_tools, None if refusal is None else (type(refusal), str(refusal))


def test_a_natively_served_model_is_reachable_and_eligible_whole_whatever_the_body() -> None:
    rng = random.Random(41)
    native = other = 0
    for _ in range(400):
        model = random_model(rng, _APIS, translate_share=0.7, most=5)
        for endpoint in _ALL:
            fast = outbound.natively_served(model, endpoint)
            assert fast == all(endpoint in d.apis for d in model.deployments)
            if not fast:
                other += 1
                continue
            native += 1
            assert reachable(model, endpoint) == model.deployments
            for body in _BODIES:
                whole = outbound.eligible(model, endpoint, body)
                assert _facts(outbound.native_eligible(model)) == _facts(whole)
                assert whole.model is model and outbound.native_eligible(model).model is model
    assert native > 100 and other > 100


def test_a_model_with_no_deployment_is_not_natively_served() -> None:
    provider = {"name": "p", "base_url": "http://127.0.0.1:9/v1"}
    model = parse_config(
        {"providers": [provider], "models": [{"name": "m", "deployments": [{"provider": "p", "model": "u"}]}]}
    ).models[0]
    empty = type(model)(model.name, (), model.policy)
    assert not outbound.natively_served(empty, "chat")
    assert not reachable(empty, "chat")


async def _former_lookup_session(
    runtime: Any,
    headers: list[tuple[str, str]],
    body: dict[str, Any],
    size: int,
    model: str,
    scope_id: str,
    policy: PolicyConfig,
) -> SessionRoute | None:
    """``session_route.lookup_session`` as it was, one coroutine whatever the request."""
    identity = session_of(
        headers,
        body,
        model=model,
        scope=scope_id,
        body_bytes=size,
        header_names=policy.session_headers,
        min_cacheable_tokens=policy.session_min_tokens,
    )
    if identity is None:
        return None
    affinity: Affinity = policy.affinity
    asked = next((v.strip().lower() for k, v in headers if k == AFFINITY_HEADER_NAME), None)
    if asked is not None:
        if asked not in AFFINITIES:
            raise InvalidRequest(
                f"header '{AFFINITY_HEADER_NAME}' must be one of {', '.join(AFFINITIES)}, got '{asked[:40]}'",
                param=AFFINITY_HEADER_NAME,
            )
        affinity = asked
    if affinity == "off":
        return SessionRoute(identity.key, identity.source, "off")
    found = await runtime.sessions.lookup(identity.key)
    if isinstance(found, Unavailable):
        return SessionRoute(identity.key, identity.source, affinity, "unavailable")
    if found is None:
        return SessionRoute(identity.key, identity.source, affinity, "unbound")
    return SessionRoute(identity.key, identity.source, affinity, "bound", found.deployment, found.prompt_tokens)


async def _inline(runtime: Any, headers: list[tuple[str, str]], body: dict[str, Any], size: int, policy: Any) -> Any:
    """What ``ProxyEndpoint._prepare`` does now: the identity, then the route only for a request that has one."""
    identity = session_identity(headers, body, size, "m", "k", policy)
    return None if identity is None else await session_route(runtime, headers, identity, policy)


def test_the_session_found_inline_is_what_lookup_session_found() -> None:
    rng = random.Random(41)
    binding = SimpleNamespace(deployment="d1", prompt_tokens=1234)
    answers = [None, Unavailable(), binding]
    asked = ["x-session-id", "x-gateway-affinity", "x-other", "session_id"]
    values = ["", "abc", " conv-1 ", "off", "OFF ", "strict", "auto", "bogus", "z" * 300]
    policies = [
        dataclasses.replace(PolicyConfig("p"), affinity=a, session_min_tokens=m)
        for a in ("auto", "strict", "off")
        for m in (1, 1024)
    ]

    async def main() -> tuple[int, int, int]:
        found = refused = none = 0
        for _ in range(3000):
            answer = rng.choice(answers)

            async def lookup(key: str, answer: Any = answer) -> Any:
                return answer

            runtime = SimpleNamespace(sessions=SimpleNamespace(lookup=lookup))
            headers = [(rng.choice(asked), rng.choice(values)) for _ in range(rng.randint(0, 4))]
            body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi " * rng.choice([1, 5000])}]}
            if rng.random() < 0.3:
                body["prompt_cache_key"] = rng.choice(values)
            size = rng.choice([100, 50_000])
            policy = rng.choice(policies)
            results = []
            for way in (_former_lookup_session, None):
                try:
                    if way is None:
                        results.append(await _inline(runtime, headers, body, size, policy))
                    else:
                        results.append(await way(runtime, headers, body, size, "m", "k", policy))
                except InvalidRequest as exc:
                    results.append((type(exc), str(exc), exc.param))
            assert results[0] == results[1], (headers, body.keys(), policy.affinity)
            refused += isinstance(results[0], tuple)
            none += results[0] is None
            found += isinstance(results[0], SessionRoute)
        return found, refused, none

    found, refused, none = asyncio.run(main())
    assert found > 300 and refused > 30 and none > 100


def _random_json(rng: random.Random, depth: int) -> Any:
    """A random JSON value up to ``depth`` containers deep; strings hold brackets now and then."""
    roll = rng.random()
    if depth <= 0 or roll < 0.3:
        return rng.choice([1, 2.5, True, None, "x", "a [bracket", "{brace}", "[{"])
    if roll < 0.65:
        return [_random_json(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}": _random_json(rng, depth - 1) for i in range(rng.randint(0, 3))}


def _containers(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_containers(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_containers(v) for v in value)
    return 0


def test_a_body_within_the_depth_limit_by_its_brackets_is_judged_as_by_the_walk() -> None:
    """``containers_at_most`` bounds the containers of what the text parses to; ``check_shape`` given it answers
    what it answers by the walk (the same choices, the same refusal), for bodies on both sides of the limit."""
    rng = random.Random(41)
    skipped = refused = 0
    for _ in range(4000):
        body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        body["extra"] = _random_json(rng, rng.randint(0, 9))
        if rng.random() < 0.2:
            body["n"] = rng.choice([1, 2, 0, "x"])
        raw = json.dumps(body).encode()
        bound = containers_at_most(raw)
        assert bound >= _containers(json.loads(raw))
        limits = LimitsConfig(max_json_depth=rng.randint(1, 12), max_n=4)
        answers: list[Any] = []
        for containers in (None, bound):
            try:
                answers.append(limits_check_shape(body, "chat", None, limits, containers))
            except InvalidRequest as exc:
                answers.append((str(exc), exc.param, exc.code))
        assert answers[0] == answers[1], (raw, limits.max_json_depth)
        skipped += bound <= limits.max_json_depth
        refused += isinstance(answers[0], tuple) and "nests deeper" in answers[0][0]
    assert skipped > 500 and refused > 500


def test_admission_refuses_a_deep_body_whatever_bound_it_is_given() -> None:
    """A bound over the limit (or none) walks; the text of a body nested past the limit always counts past it."""
    deep: Any = "x"
    for _ in range(70):
        deep = [deep]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "deep": deep}
    raw = json.dumps(body).encode()
    limits = LimitsConfig()
    assert containers_at_most(raw) > limits.max_json_depth
    for containers in (None, containers_at_most(raw)):
        try:
            limits_check_shape(body, "chat", None, limits, containers)
        except InvalidRequest as exc:
            assert "nests deeper" in str(exc)
        else:
            raise AssertionError("a body nested past the limit was admitted")


def _former_is(value: object, expected: str) -> bool:
    """``shapes._is`` as it was, its unions written in the checks."""
    if expected == shapes._NUMBER:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected == shapes._INTEGER:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == shapes._BOOLEAN:
        return isinstance(value, bool)
    if expected == shapes._STRING:
        return isinstance(value, str)
    if expected == shapes._OBJECT:
        return isinstance(value, dict)
    if expected == shapes._ARRAY:
        return isinstance(value, list)
    if expected == shapes._STRING_OR_ARRAY:
        return isinstance(value, str | list)
    return isinstance(value, str | dict)


def test_the_field_types_are_judged_and_described_as_with_unions() -> None:
    values: list[Any] = [0, 1, -2, 2.5, float("nan"), True, False, "", "s", [], [1], {}, {"a": 1}, None, (1,), b"x"]
    expected = {e for fields in shapes._FIELDS.values() for e in fields.values()}
    assert len(expected) == 8
    for kind in expected:
        for value in values:
            assert shapes._is(value, kind) == _former_is(value, kind), (value, kind)
    for value in values[:-2]:
        assert shapes._describe(value) == (
            "null"
            if value is None
            else "a boolean"
            if isinstance(value, bool)
            else f"the string '{value}'"
            if isinstance(value, str)
            else f"the number {value!r}"
            if isinstance(value, int | float)
            else "an array"
            if isinstance(value, list)
            else "an object"
        )
