"""The request path's fast forms give what the forms they replaced gave (ids, shape errors, sessions, spenders)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import uvloop

from gateway import api, request_ids, shapes
from gateway.admission import limits
from gateway.admission.access import AccessControl, AccessState
from gateway.admission.auth import AdminKey, ClientKey, KeyLimits, KeyRing
from gateway.admission.ratelimit import InMemoryRateLimiter
from gateway.admission.spending import Budget, Spender
from gateway.config import AuthConfig, DeploymentConfig, LimitsConfig, ModelConfig, parse_config
from gateway.dialects import chat
from gateway.dialects.base import FINISH, NOTHING, OUTPUT, Look
from gateway.errors import InvalidRequest
from gateway.quality import PLAIN, Expectation, expect, expectation_of
from gateway.relay import DisconnectWatch, outbound
from gateway.routing import split_model_suffix
from gateway.routing.apis import reachable, translated_to
from gateway.routing.overrides import resolve_model
from gateway.samples import Endpoint
from gateway.sessions import identity
from gateway.sessions.identity import SessionId, session_of
from gateway.translate import Untranslatable, as_api, translate
from tests.support.random_models import random_model


def test_request_id_is_uuid4_hex_of_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(41)
    draws = [bytes(rng.getrandbits(8) for _ in range(16)) for _ in range(2000)]
    draws += [b"\x00" * 16, b"\xff" * 16]
    request_ids._ids.drop()  # each draw below is then the whole pool: one id's bytes
    for raw in draws:
        monkeypatch.setattr(os, "urandom", lambda n, raw=raw: raw)
        assert request_ids.new_request_id() == uuid.UUID(bytes=raw, version=4).hex
    monkeypatch.undo()
    made = {request_ids.new_request_id() for _ in range(1000)}
    assert len(made) == 1000
    assert all(len(i) == 32 and uuid.UUID(hex=i).version == 4 for i in made)


def _old_check_shape(body: Mapping[str, Any], endpoint: Endpoint) -> None:
    """``shapes.check_shape`` as it was: every field of the API in order, every message's param written."""
    for field, expected in shapes._FIELDS[endpoint].items():
        value = body.get(field)
        if value is not None and not shapes._is(value, expected):
            raise shapes._refuse(field, expected, value)

    def messages(items: list[Any], roles: tuple[str, ...]) -> None:
        for index, message in enumerate(items):
            param = f"messages[{index}]"
            if not isinstance(message, dict):
                raise shapes._refuse(param, shapes._OBJECT, message)
            shapes._check_message(message, param, roles)

    if endpoint == "chat":
        messages(body["messages"], shapes._CHAT_ROLES)
    elif endpoint == "messages":
        messages(body["messages"], shapes._MESSAGES_ROLES)
    elif endpoint == "responses" and isinstance(body.get("input"), list):
        shapes._check_input_items(body["input"])


_VALUES: list[Any] = [None, True, False, 0, 3, 2.5, -1, "", "text", [], ["a"], [{"type": "text"}], {}, {"a": 1}]
_ROLES: list[Any] = ["system", "developer", "user", "assistant", "tool", "function", "wizard", None, 3, ["user"]]


def _random_body(rng: random.Random) -> dict[str, Any]:
    names = sorted({name for fields in shapes._FIELDS.values() for name in fields} | {"model", "extra"})
    body: dict[str, Any] = {name: rng.choice(_VALUES) for name in rng.sample(names, rng.randint(0, 8))}
    turns: list[Any] = []
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.1:
            turns.append(rng.choice(_VALUES))
            continue
        turn: dict[str, Any] = {}
        if rng.random() < 0.9:
            turn["role"] = rng.choice(_ROLES)
        if rng.random() < 0.9:
            turn["content"] = rng.choice([*_VALUES, "hello", [{"type": "text", "text": "x"}], [{"text": 1}], [3]])
        turns.append(turn)
    body["messages"] = turns
    if rng.random() < 0.5:
        body["input"] = turns
    return body


def _outcome(check: Callable[[Mapping[str, Any], Endpoint], None], body: Mapping[str, Any], endpoint: Endpoint) -> Any:
    try:
        check(body, endpoint)
    except InvalidRequest as exc:
        return (exc.message, exc.param, exc.code, exc.status_code)
    return None


@pytest.mark.parametrize("endpoint", ["chat", "completions", "embeddings", "responses", "messages"])
def test_check_shape_refuses_as_before(endpoint: Endpoint) -> None:
    rng = random.Random(endpoint)
    refused = 0
    for _ in range(4000):
        body = _random_body(rng)
        before = _outcome(_old_check_shape, body, endpoint)
        assert _outcome(shapes.check_shape, body, endpoint) == before, body
        refused += before is not None
    assert 1000 < refused < 4000  # both verdicts, many times over


def _old_session_of(
    headers: list[tuple[str, str]], body: dict[str, Any], *, body_bytes: int, header_names: Sequence[str]
) -> SessionId | None:
    """``session_of`` as it was: the wanted names' set and each name's lower case made per request."""
    if header_names:
        wanted = {name.lower() for name in header_names}
        found = {name: value.strip() for name, value in headers if name in wanted}
        for name in header_names:
            value = found.get(name.lower())
            if value and len(value) <= identity.MAX_SESSION_VALUE:
                return SessionId(identity._digest("k", "m", "header", value), "header")
    return session_of(headers, body, model="m", scope="k", body_bytes=body_bytes, header_names=())


def test_session_of_finds_the_same_session() -> None:
    rng = random.Random(7)
    names = ["x-session-id", "X-Session-Id", "session_id", "x-amp-thread-id", "x-other", "Session-ID"]
    values = ["", "  ", "abc", " abc ", "z" * 300, "conv-1", "conv-2"]
    found = 0
    for round_ in range(3000):
        chosen = rng.sample(names, rng.randint(0, 4))
        header_names: Sequence[str] = tuple(chosen) if round_ % 3 else list(chosen)
        headers = [(rng.choice(names).lower(), rng.choice(values)) for _ in range(rng.randint(0, 5))]
        body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
        if rng.random() < 0.3:
            body["prompt_cache_key"] = rng.choice(values)
        size = rng.choice([100, 10_000])
        before = _old_session_of(headers, body, body_bytes=size, header_names=header_names)
        after = session_of(headers, body, model="m", scope="k", body_bytes=size, header_names=header_names)
        assert after == before, (headers, header_names)
        found += before is not None and before.source == "header"
    assert 300 < found < 3000


def _old_chat_expectation(body: dict[str, Any]) -> Expectation:
    """``expectation_of("chat", body)`` as it was: every field read, a new ``Expectation`` each time."""
    tools = expect._chat_tools(body)
    json_mode, schema = expect._format(body.get("response_format"), "json_schema")
    limit = expect._limit(body, "max_completion_tokens", "max_tokens")
    choice_none = body.get("tool_choice") == "none" or body.get("function_call") == "none"
    return Expectation(expect._kind(tools, choice_none, json_mode), tools, json_mode, schema, limit)


def test_chat_expectation_as_before() -> None:
    rng = random.Random(3)
    options: dict[str, list[Any]] = {
        "tools": [None, [], [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "x"],
        "functions": [None, [], [{"name": "g"}]],
        "response_format": [None, {"type": "json_object"}, {"type": "json_schema", "json_schema": {"schema": {}}}],
        "max_completion_tokens": [None, 0, 50, True],
        "max_tokens": [None, 100, -1],
        "tool_choice": [None, "none", "auto"],
        "function_call": [None, "none"],
        "temperature": [0.5],
    }
    shared = 0
    for _ in range(3000):
        body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        for name in rng.sample(sorted(options), rng.randint(0, 4)):
            body[name] = rng.choice(options[name])
        after = expectation_of("chat", body)
        assert after == _old_chat_expectation(body), body
        shared += after is PLAIN
    assert 100 < shared < 3000
    assert expectation_of("completions", {"prompt": "x"}).max_tokens == expect.COMPLETIONS_DEFAULT_MAX_TOKENS


def _old_nesting_exceeds(value: object, limit: int) -> bool:
    """``limits.nesting_exceeds`` as it was (a ``dict | list`` union built per child)."""
    level: list[Any] = [value] if isinstance(value, dict | list) else []
    depth = 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            for child in item.values() if isinstance(item, dict) else item:
                if isinstance(child, dict | list):
                    below.append(child)
        level = below
        depth += 1
    return False


class _Dict(dict[str, Any]):
    pass


def _random_tree(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth <= 0 or roll < 0.3:
        return rng.choice([None, 1, 2.5, "s", True, (1, [2])])  # a tuple does not nest, as before
    children = [_random_tree(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.6:
        return children
    kind = _Dict if roll > 0.95 else dict
    return kind((f"k{i}", child) for i, child in enumerate(children))


def test_nesting_exceeds_as_before() -> None:
    rng = random.Random(11)
    verdicts = set()
    for _ in range(3000):
        tree = _random_tree(rng, rng.randint(0, 9))
        for limit in (0, 1, 2, 4, 8):
            verdict = limits.nesting_exceeds(tree, limit)
            assert verdict == _old_nesting_exceeds(tree, limit), (tree, limit)
            verdicts.add(verdict)
    assert verdicts == {True, False}


def _old_first_look(event: dict[str, Any]) -> Look:
    """``ChatDialect.first_look`` as it was: ``choices_of``, then two ``any`` over the choices."""
    error = event.get("error")
    if error is not None:
        return Look("error", error)
    choices = chat.choices_of(event)
    if any(chat.carries_output(c) for c in choices):
        return OUTPUT
    if any(c.get("finish_reason") for c in choices):
        return FINISH
    return NOTHING


def _random_choice(rng: random.Random) -> Any:
    if rng.random() < 0.1:
        return rng.choice([None, "x", 3, []])
    choice: dict[str, Any] = {"index": 0}
    delta: dict[str, Any] = {}
    for name, values in (
        ("role", ["assistant"]),
        ("content", ["", "hi", None, 3]),
        ("reasoning_content", ["", "think"]),
        ("tool_calls", [[], [{"function": {"name": "f"}}]]),
        ("function_call", [None, {"arguments": "{}"}]),
    ):
        if rng.random() < 0.3:
            delta[name] = rng.choice(values)
    choice["delta"] = delta if rng.random() < 0.9 else rng.choice([None, "d"])
    if rng.random() < 0.5:
        choice["finish_reason"] = rng.choice([None, "", "stop", "length"])
    if rng.random() < 0.1:
        choice["text"] = rng.choice(["", "t"])
    return choice


def test_chat_first_look_as_before() -> None:
    rng = random.Random(5)
    dialect = chat.ChatDialect("chat")
    kinds = set()
    for _ in range(5000):
        event: dict[str, Any] = {"id": "c"}
        if rng.random() < 0.05:
            event["error"] = rng.choice([None, {"message": "boom"}])
        roll = rng.random()
        if roll < 0.9:
            event["choices"] = [_random_choice(rng) for _ in range(rng.randint(0, 3))]
        elif roll < 0.95:
            event["choices"] = rng.choice([None, {}, "x"])
        look = dialect.first_look(event)
        assert look == _old_first_look(event), event
        kinds.add(look.kind)
    assert kinds == {"error", "output", "finish", "none"}


def test_spender_of_is_what_spender_of_made_each_time() -> None:
    limits_config = LimitsConfig()
    defaults = KeyLimits.defaults(limits_config)
    team_budget = Budget(50.0)
    keys = [
        ClientKey("alice", "k1", defaults, team="eng", budget=Budget(10.0, "day")),
        ClientKey("bob", "k2", defaults, team="eng"),
        ClientKey("carol", "k3", defaults),
        ClientKey("dave", "k4", defaults, team="ops", budget=Budget(5.0)),
    ]
    ring = KeyRing(keys, teams={"eng": team_budget})
    access = AccessControl(ring, AdminKey(), AuthConfig(), limits_config, AccessState(InMemoryRateLimiter()))

    def made(key: ClientKey) -> Spender:
        team = ring.teams.get(key.team) if key.team else None
        return Spender.of(key.key_id, key.name, key.team, key.budget, team)

    for _ in range(3):
        for key in [*keys, access.anonymous]:
            assert access.spender_of(key) == made(key)
    assert access.spender_of(keys[0]) is access.spender_of(keys[0])
    # Another key object under the same id, or another team budget: made again, not the one kept.
    renewed = ClientKey("alice", "k1", defaults, team="eng", budget=Budget(20.0))
    assert access.spender_of(renewed) == made(renewed) != made(keys[0])
    ring.teams["eng"] = Budget(70.0)
    assert access.spender_of(keys[1]) == made(keys[1])
    assert access.spender_of(keys[1]).scopes[0].budget.limit_usd == 70.0


def _old_eligible(model: ModelConfig, api: Endpoint, body: dict[str, Any]) -> outbound.Eligible:
    """``relay.outbound.eligible`` as it was: ``reachable``, then ``translated_to`` for each deployment."""
    translations: dict[str, dict[str, Any]] = {}
    omitted: dict[str, tuple[str, ...]] = {}
    refusals: dict[str, Untranslatable] = {}
    whole: list[DeploymentConfig] = []
    partial: list[DeploymentConfig] = []
    for deployment in reachable(model, api):
        target = translated_to(deployment, api)
        if target is None:
            whole.append(deployment)
            continue
        key = outbound.translation_key(target, deployment)
        if key not in translations and key not in refusals:
            try:
                translation = translate(body, as_api(api), target, "", builtin_tools=deployment.builtin_tools)
            except Untranslatable as exc:
                refusals[key] = exc
            else:
                translations[key] = translation.body
                if translation.omitted_tools:
                    omitted[key] = translation.omitted_tools
        if key in translations:
            (partial if key in omitted else whole).append(deployment)
    refusal = next(iter(refusals.values()), None)
    kept = whole or partial
    if len(kept) == len(model.deployments):
        return outbound.Eligible(model, translations, omitted, refusal)
    return outbound.Eligible(dataclasses.replace(model, deployments=tuple(kept)), translations, omitted, refusal)


_BODIES: dict[Endpoint, list[dict[str, Any]]] = {
    "chat": [
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2},  # no Messages API form
    ],
    "messages": [
        {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]},
        {
            "model": "m",
            "max_tokens": 9,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        },
    ],
    "responses": [{"model": "m", "input": "hi"}, {"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}],
    "completions": [{"model": "m", "prompt": "hi"}],
    "embeddings": [{"model": "m", "input": "hi"}],
}


def _facts(able: outbound.Eligible) -> tuple[Any, ...]:
    """What an ``Eligible`` says, its refusal by type and message (an exception equals only itself)."""
    refusal = able.refusal
    return able.model, able.translations, able.omitted_tools, None if refusal is None else (type(refusal), str(refusal))


def test_eligible_as_before() -> None:
    rng = random.Random(9)
    apis = [["chat"], ["messages"], ["responses"], ["chat", "messages"], ["embeddings"], ["completions", "chat"]]
    narrowed = translated = 0
    for _ in range(300):
        model = random_model(rng, apis, translate_share=0.8, most=5)
        for endpoint, bodies in _BODIES.items():
            for body in bodies:
                after = outbound.eligible(model, endpoint, body)
                assert _facts(after) == _facts(_old_eligible(model, endpoint, body)), (endpoint, body, model)
                narrowed += after.model is not model
                translated += bool(after.translations)
    assert narrowed > 50 and translated > 50


def test_the_model_asked_for_resolves_as_before() -> None:
    provider = {"name": "p", "base_url": "http://127.0.0.1:9/v1"}
    names = ["m", "m:nitro", "x:floor", "other"]
    config = parse_config(
        {
            "providers": [provider],
            "models": [{"name": n, "deployments": [{"provider": "p", "model": "u"}]} for n in names],
        }
    )
    asked = [*names, "m:floor", "x", "x:floor:nitro", ":nitro", "nope:nitro", "nope", "other:nitro", "m:nitro:nitro"]
    for requested in asked:
        model_name, suffix_sort = split_model_suffix(requested, {m.name for m in config.models})
        assert resolve_model(config, requested) == (model_name, suffix_sort, config.model(model_name))


def test_the_policy_handed_to_the_session_look_up_is_the_one_it_found() -> None:
    """The session look-up (``session_identity``, ``session_route``) is given the policy of the model the request
    kept (``eligible`` may narrow its deployments); it used to find it again from the configured model of that name:
    the same policy object."""
    providers = [
        {"name": "c", "base_url": "http://127.0.0.1:9/v1", "apis": ["chat"]},
        {"name": "a", "base_url": "http://127.0.0.1:9/v1", "apis": ["messages"]},
    ]
    deployments = [{"provider": "c", "model": "u"}, {"provider": "a", "model": "v"}]
    models = [{"name": f"m{i}", "policy": p, "deployments": deployments} for i, p in enumerate(["fastest", "cheapest"])]
    config = parse_config({"providers": providers, "models": models})
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}  # the Messages API cannot take n
    for model in config.models:
        kept = outbound.eligible(model, "chat", body).model
        assert kept is not model and len(kept.deployments) == 1
        found = config.model(kept.name)
        assert found is not None and config.policy_for(kept) is config.policy_for(found)


def _watch_run(
    disarm_first: bool, loop_factory: Callable[[], asyncio.AbstractEventLoop], given: bool = False
) -> tuple[bool, bool, bool]:
    """(the serving task was cancelled, the watch says disconnected, the watcher let go of the task); ``given``: the
    watch handed the running loop (as the endpoint does) rather than finding it."""

    async def main() -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        hang_up = loop.create_future()

        async def receive() -> dict[str, Any]:
            await hang_up
            return {"type": "http.disconnect"}

        async def serve() -> DisconnectWatch:
            watch = DisconnectWatch(receive, loop) if given else DisconnectWatch(receive)
            if disarm_first:
                watch.disarm()
            hang_up.set_result(None)
            await asyncio.sleep(0.05)
            return watch

        task = loop.create_task(serve())
        try:
            watch = await task
        except asyncio.CancelledError:
            return True, True, True
        await asyncio.sleep(0)
        return False, watch.disconnected, watch._task is None

    runner = asyncio.Runner(loop_factory=loop_factory)
    try:
        return runner.run(main())
    finally:
        runner.close()


@pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop])
@pytest.mark.parametrize("given", [False, True])
def test_disconnect_watch_cancels_only_while_armed(
    loop_factory: Callable[[], asyncio.AbstractEventLoop], given: bool
) -> None:
    assert _watch_run(False, loop_factory, given) == (True, True, True)
    assert _watch_run(True, loop_factory, given) == (False, False, True)


def test_disconnect_watch_needs_a_running_loop() -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    with pytest.raises(RuntimeError, match="no running event loop"):
        DisconnectWatch(receive)


def _old_carries_output(choice: dict[str, Any]) -> bool:
    """``chat.carries_output`` as it was: the answer, then the reasoning, then a tool call's first delta."""
    if chat.answer_of(choice) or chat.reasoning_of(choice):
        return True
    delta = choice.get("delta")
    return isinstance(delta, dict) and bool(delta.get("tool_calls") or delta.get("function_call"))


class _Str(str):
    pass


def test_carries_output_as_before() -> None:
    rng = random.Random(8)
    fields: list[tuple[str, list[Any]]] = [
        ("role", ["assistant", None]),
        ("content", ["", "hi", None, 3, _Str("sub"), _Str(""), ["x"]]),
        ("refusal", [None, "no"]),
        ("reasoning_content", ["", "think", None]),
        ("reasoning", ["", "r", 1]),
        ("reasoning_details", [None, [], [{"type": "reasoning.text", "text": "t"}], [{"data": ""}]]),
        ("tool_calls", [None, [], [{"function": {"name": "f"}}], [{"function": {"arguments": "{}"}}]]),
        ("function_call", [None, {}, {"arguments": "{}"}]),
    ]
    seen = set()
    for _ in range(20000):
        delta: dict[str, Any] = {name: rng.choice(values) for name, values in fields if rng.random() < 0.3}
        choice: dict[str, Any] = {"index": 0}
        roll = rng.random()
        if roll < 0.85:
            choice["delta"] = delta
        elif roll < 0.9:
            choice["delta"] = _Dict(delta)
        elif roll < 0.95:
            choice["delta"] = rng.choice([None, "d", []])
        if rng.random() < 0.1:
            choice["text"] = rng.choice(["", "t", None])
        if rng.random() < 0.1:
            choice["message"] = rng.choice([{"content": "m"}, {"content": ""}, None])
        before = _old_carries_output(choice)
        assert chat.carries_output(choice) == before, choice
        seen.add(before)
    assert seen == {True, False}


def test_header_walks_as_before() -> None:
    rng = random.Random(2)
    names = [b"x-gateway-trace", b"X-Gateway-Trace", b"content-type", b"x-stainless-os", b"authorization", b""]
    values = [b"1", b" true ", b"TRUE", b"0", b"yes", b"", b"1 ", b"application/json", b"x" * 300]
    wanted = set()
    for _ in range(5000):
        headers = [(rng.choice(names), rng.choice(values)) for _ in range(rng.randint(0, 20))]
        before = any(n == b"x-gateway-trace" and v.strip().lower() in (b"1", b"true") for n, v in headers)
        assert api._wants_trace(headers) == before
        assert limits.header_bytes(headers) == sum(len(n) + len(v) for n, v in headers)
        wanted.add(before)
    assert wanted == {True, False}
