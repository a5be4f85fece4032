"""End to end with the real OpenAI SDK: the gateway gives the same answer as the provider directly,
forwards the body untouched but for ``model`` and ``provider``, and never leaks the client's key."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import openai

from gateway.config import parse_config
from gateway.fakes import FakeBehavior
from tests.support.clients import MESSAGES, async_sdk, sdk, stable
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]


def test_chat_same_answer_as_direct_sync(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=20))
    gateway = start_gateway(gateway_config([fake]))
    via, direct = sdk(gateway.base_url), sdk(fake.base_url)

    whole = via.chat.completions.create(model="m", messages=MESSAGES, temperature=0.5)
    assert whole.model == "a-upstream"  # the upstream reports the model it was asked for
    assert stable(whole) == stable(direct.chat.completions.create(model="a-upstream", messages=MESSAGES))

    def chunks(client: openai.OpenAI, model: str) -> list[Any]:
        stream = client.chat.completions.create(
            model=model, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        return [stable(chunk) for chunk in stream]

    streamed = chunks(via, "m")
    assert streamed == chunks(direct, "a-upstream")
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in streamed if c["choices"]) == (
        whole.choices[0].message.content
    )


def test_chat_same_answer_as_direct_async(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=9, tokens_per_s=500))
    gateway = start_gateway(gateway_config([fake]))

    async def both(client: openai.AsyncOpenAI, model: str) -> tuple[Any, list[Any]]:
        try:
            whole = await client.chat.completions.create(model=model, messages=MESSAGES)
            stream = await client.chat.completions.create(model=model, messages=MESSAGES, stream=True)
            return stable(whole), [stable(chunk) async for chunk in stream]
        finally:
            await client.close()

    async def go() -> None:
        via, direct = await asyncio.gather(
            both(async_sdk(gateway.base_url), "m"), both(async_sdk(fake.base_url), "a-upstream")
        )
        assert via == direct

    asyncio.run(go())


def test_async_concurrent_streams(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=16, tokens_per_s=400))
    gateway = start_gateway(gateway_config([fake]))

    async def one(client: openai.AsyncOpenAI) -> str:
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def go() -> list[str]:
        client = async_sdk(gateway.base_url)
        try:
            return await asyncio.gather(*(one(client) for _ in range(20)))
        finally:
            await client.close()

    answers = asyncio.run(go())
    assert len(set(answers)) == 1 and len(answers) == 20
    assert fake.app.state.max_open_streams > 1
    wait_until(lambda: len(gateway.samples.samples) == 20, what="20 samples")
    assert {s.outcome for s in gateway.samples.samples} == {"ok"}


def test_completions_embeddings_and_models(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=6))
    gateway = start_gateway(gateway_config([fake]))
    via, direct = sdk(gateway.base_url), sdk(fake.base_url)
    assert stable(via.completions.create(model="m", prompt="say")) == stable(
        direct.completions.create(model="a-upstream", prompt="say")
    )
    assert [stable(c) for c in via.completions.create(model="m", prompt="say", stream=True)] == [
        stable(c) for c in direct.completions.create(model="a-upstream", prompt="say", stream=True)
    ]
    for encoding in ("base64", "float"):
        got = via.embeddings.create(model="m", input=["one", "two"], encoding_format=encoding)
        want = direct.embeddings.create(model="a-upstream", input=["one", "two"], encoding_format=encoding)
        assert stable(got) == stable(want)
    models = via.models.list()
    assert [(m.id, m.object) for m in models] == [("m", "model")]
    wait_until(lambda: len(gateway.samples.samples) == 4, what="4 samples")
    assert [(s.endpoint, s.stream, s.outcome) for s in gateway.samples.samples] == [
        ("completions", False, "ok"),
        ("completions", True, "ok"),
        ("embeddings", False, "ok"),
        ("embeddings", False, "ok"),
    ]


def test_completions_embeddings_and_models_async(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=6))
    gateway = start_gateway(gateway_config([fake]))

    async def everything(client: openai.AsyncOpenAI, model: str) -> list[Any]:
        try:
            whole = await client.completions.create(model=model, prompt="say")
            stream = await client.completions.create(model=model, prompt="say", stream=True)
            chunks = [stable(chunk) async for chunk in stream]
            vectors = await client.embeddings.create(model=model, input="one")
            return [stable(whole), chunks, stable(vectors)]
        finally:
            await client.close()

    async def go() -> None:
        via = await everything(async_sdk(gateway.base_url), "m")
        assert via == await everything(async_sdk(fake.base_url), "a-upstream")
        client = async_sdk(gateway.base_url)
        try:
            assert [m.id async for m in client.models.list()] == ["m"]
        finally:
            await client.close()

    asyncio.run(go())


def test_body_forwarded_untouched_but_model_and_provider(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a")
    gateway = start_gateway(gateway_config([fake]))
    body: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief. ünïcødé ✓"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                },
            }
        ],
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
        "logprobs": True,
        "top_logprobs": 2,
        "n": 2,
        "stop": ["\n\n", "END"],
        "seed": 42,
        "temperature": 0.25,
        "top_p": 1,
        "max_tokens": 7,
        "user": "u-1",
        "metadata": {"k": "v"},
        "logit_bias": {"50256": -100},
        "some_future_field": {"nested": [1, 2.5, None, True]},
        "provider": {"order": ["a"], "allow_fallbacks": False},
        "stream": False,
    }
    response = httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=10)
    assert response.status_code == 200, response.text
    (recorded,) = fake.app.state.recorded
    expected = {k: v for k, v in body.items() if k != "provider"}
    expected["model"] = "a-upstream"
    assert recorded.body == expected
    assert list(recorded.body or {}) == list(expected)  # key order kept too
    assert len(response.json()["choices"]) == 2


def test_lone_surrogate_is_refused_before_any_upstream(fakes: Fakes, start_gateway: StartGateway) -> None:
    # Not valid Unicode: a clear 400 here beats an opaque failure at whichever provider is tried.
    fake = fakes.start("a")
    gateway = start_gateway(gateway_config([fake]))
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "caf\\u00e9 \\ud800"}]}'
    response = httpx.post(gateway.base_url + "/chat/completions", content=raw, timeout=10)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_json"
    assert fake.app.state.recorded == []


def test_model_rewritten_per_deployment(fakes: Fakes, start_gateway: StartGateway) -> None:
    first = fakes.start("a", FakeBehavior(status=503))
    second = fakes.start("b")
    gateway = start_gateway(gateway_config([first, second]))
    sdk(gateway.base_url).chat.completions.create(
        model="m", messages=MESSAGES, extra_body={"provider": {"sort": "price"}}
    )
    assert first.app.state.recorded[0].body == {"model": "a-upstream", "messages": MESSAGES}
    assert second.app.state.recorded[0].body == {"model": "b-upstream", "messages": MESSAGES}


def test_provider_key_sent_and_client_credentials_never(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", api_key="sk-provider")
    config = parse_config(
        {
            "providers": [{"name": "a", "base_url": fake.base_url, "api_key_env": "A_KEY"}],
            "models": [{"name": "m", "deployments": [{"provider": "a", "model": "up"}]}],
            # X-Forwarded-For below makes the client look remote to uvicorn's proxy-header handling.
            "auth": {"allow_unauthenticated": True},
        }
    )
    gateway = start_gateway(config, {"A_KEY": "sk-provider"})
    headers = {
        "Authorization": "Bearer client-key",
        "api-key": "client-key",
        "x-api-key": "client-key",
        "Cookie": "session=client",
        "Connection": "keep-alive, X-Hop",
        "X-Hop": "hop",
        "Keep-Alive": "timeout=5",
        "TE": "trailers",
        "Proxy-Authorization": "Basic client",
        "X-Forwarded-For": "10.1.1.1",
        "OpenAI-Organization": "org-1",
        "X-Trace": "t-1",
    }
    body = {"model": "m", "messages": MESSAGES}
    response = httpx.post(gateway.base_url + "/chat/completions", json=body, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    streamed = httpx.post(
        gateway.base_url + "/chat/completions", json={**body, "stream": True}, headers=headers, timeout=10
    )
    assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
    for recorded in fake.app.state.recorded:
        sent = recorded.headers
        assert sent["authorization"] == "Bearer sk-provider"
        for dropped in ("api-key", "x-api-key", "cookie", "x-hop", "keep-alive", "te", "proxy-authorization"):
            assert dropped not in sent, dropped
        assert "x-forwarded-for" not in sent
        assert "client-key" not in json.dumps(sent)
        assert sent["openai-organization"] == "org-1" and sent["x-trace"] == "t-1"


def test_response_headers_say_what_happened(fakes: Fakes, start_gateway: StartGateway) -> None:
    first, second = fakes.start("a"), fakes.start("b")
    gateway = start_gateway(gateway_config([first, second]))
    client = sdk(gateway.base_url)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)
    assert raw.headers["x-gateway-provider"] == "a"
    assert raw.headers["x-gateway-attempts"] == "1"
    assert raw.headers["x-gateway-route"] == "best-score"
    assert raw.headers["x-request-id"]

    fake = {"servers": {"a": {"status": 500}}}
    for stream in (False, True):
        fallback = client.chat.completions.with_raw_response.create(
            model="m", messages=MESSAGES, stream=stream, extra_body={"fake": fake}
        )
        assert fallback.headers["x-gateway-provider"] == "b"
        assert fallback.headers["x-gateway-attempts"] == "2"
        assert fallback.headers["x-gateway-route"] == "fallback"
        if stream:
            assert fallback.headers["content-type"].startswith("text/event-stream")


def test_client_keys_when_configured(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a")
    gateway = start_gateway(gateway_config([fake]), {"GATEWAY_API_KEYS": "k1, k2"})
    with_key = sdk(gateway.base_url, api_key="k2").chat.completions.create(model="m", messages=MESSAGES)
    assert with_key.choices
    try:
        sdk(gateway.base_url, api_key="wrong").chat.completions.create(model="m", messages=MESSAGES)
    except openai.AuthenticationError as exc:
        assert exc.status_code == 401
        assert exc.code == "invalid_api_key"
    else:
        raise AssertionError("a wrong client key was accepted")
    assert len(fake.app.state.recorded) == 1
    assert fake.app.state.recorded[0].headers.get("authorization") is None


def test_health_endpoints(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway = start_gateway(gateway_config([fakes.start("a")]))
    assert httpx.get(gateway.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(gateway.url + "/readyz").json() == {"status": "ready", "reasons": []}
