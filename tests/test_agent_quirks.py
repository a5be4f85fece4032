"""What coding agents trip over, through the real SDKs: retry hints on Messages errors, count_tokens
without the endpoint upstream, the body limit, ``store: false`` responses left unbound."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.accesslog import ACCESS_LOGGER
from gateway.config import GatewayConfig
from gateway.fakes import FakeBehavior
from gateway.sessions.bindings import InMemoryBindingStore, RedisBindingStore
from gateway.sessions.response_owners import NAMESPACE
from tests.redis_server import RedisServer
from tests.support.access import access_lines
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
MESSAGES: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]


def messages_config(*fakes: FakeServer, **options: Any) -> GatewayConfig:
    return gateway_config(list(fakes), provider_options={f.name: {"apis": ["messages"]} for f in fakes}, **options)


def test_a_wrong_key_is_not_retried_by_the_anthropic_sdk(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    gateway = start_gateway(messages_config(fakes.start("a")), environ={"GATEWAY_API_KEYS": "right"})
    with (
        anthropic.Anthropic(base_url=gateway.url, api_key="wrong", max_retries=3, timeout=10) as client,
        pytest.raises(anthropic.AuthenticationError) as raised,
    ):
        client.messages.create(model="m", max_tokens=8, messages=MESSAGES)
    assert [line["status"] for line in access_lines(caplog, 1)] == [401]
    headers = raised.value.response.headers
    assert headers["x-should-retry"] == "false"
    assert headers["request-id"] == headers["x-request-id"]
    assert raised.value.request_id == headers["request-id"]  # the SDK reads it as Anthropic's own


@pytest.mark.parametrize(
    ("body", "status", "retry"),
    [
        ({"model": "nope", "max_tokens": 8, "messages": MESSAGES}, 404, "false"),
        ({"model": "m", "messages": MESSAGES}, 400, "false"),  # max_tokens missing
        ({"model": "m", "max_tokens": 8, "messages": MESSAGES, "pad": "x" * 3000}, 413, "false"),
        ({"model": "m", "max_tokens": 8, "messages": MESSAGES, "fake": {"status": 503}}, 503, "true"),
        ({"model": "m", "max_tokens": 8, "messages": MESSAGES, "fake": {"status": 422}}, 422, "false"),
    ],
)
def test_every_messages_error_says_whether_a_retry_can_help(
    fakes: Fakes, start_gateway: StartGateway, body: dict[str, object], status: int, retry: str
) -> None:
    gateway = start_gateway(messages_config(fakes.start("a"), extra={"server": {"max_body_bytes": 2048}}))
    response = httpx.post(gateway.base_url + "/messages", json=body)
    assert response.status_code == status
    assert response.headers["x-should-retry"] == retry and response.headers["request-id"]
    assert response.json()["type"] == "error"  # Anthropic's shape, a 413 included


def test_retry_hints_cover_the_routes_beside_the_endpoint_and_only_the_messages_api(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(messages_config(fakes.start("a")), environ={"GATEWAY_API_KEYS": "right"})
    counted = httpx.post(gateway.base_url + "/messages/count_tokens", json={"model": "m", "messages": MESSAGES})
    wrong_method = httpx.get(gateway.base_url + "/messages")
    chat = httpx.post(gateway.base_url + "/chat/completions", json={"model": "m", "messages": MESSAGES})
    assert counted.status_code == 401 and counted.headers["x-should-retry"] == "false"
    assert wrong_method.status_code == 405 and wrong_method.headers["x-should-retry"] == "false"
    assert chat.status_code == 401 and "x-should-retry" not in chat.headers


def test_count_tokens_falls_back_past_a_404_and_keeps_the_query(fakes: Fakes, start_gateway: StartGateway) -> None:
    bare, counting = fakes.start("a", FakeBehavior(count_tokens=False)), fakes.start("b")
    gateway = start_gateway(messages_config(bare, counting))
    # Claude Code asks ``?beta=true`` (this SDK's beta client does not): sent by hand.
    counted = httpx.post(
        gateway.base_url + "/messages/count_tokens?beta=true", json={"model": "m", "messages": MESSAGES}
    )
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    assert "x-gateway-count" not in counted.headers
    asked = [(r.path, r.query) for f in (bare, counting) for r in f.app.state.recorded]
    assert asked == [("/v1/messages/count_tokens", "beta=true")] * 2


def test_count_tokens_is_estimated_when_no_deployment_can_count(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway")
    gateway = start_gateway(messages_config(fakes.start("a", FakeBehavior(count_tokens=False))))
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as client:
        short = client.messages.count_tokens(model="m", messages=MESSAGES)
        long = client.messages.with_raw_response.count_tokens(
            model="m",
            system="You are a careful assistant.",
            messages=[{"role": "user", "content": "hello there " * 50}],
            tools=[{"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}}],
        )
    assert long.headers["x-gateway-count"] == "estimated"
    assert 100 < long.parse().input_tokens < 200 and 0 < short.input_tokens < 10
    assert any("counted with the pinned tokenizer" in r.getMessage() for r in caplog.records)


def test_count_tokens_of_a_model_without_messages_deployments_is_estimated(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    fake = fakes.start("a")
    gateway = start_gateway(gateway_config([fake]))  # chat only: Claude Code may reach it by translation
    counted = httpx.post(gateway.base_url + "/messages/count_tokens", json={"model": "m", "messages": MESSAGES})
    assert counted.status_code == 200 and counted.headers["x-gateway-count"] == "estimated"
    assert counted.json()["input_tokens"] > 0 and fake.app.state.recorded == []


def test_the_default_body_limit_takes_a_long_agent_session(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=2))
    gateway = start_gateway(messages_config(fake))
    assert gateway.runtime.config.server.max_body_bytes == 32_000_000
    history = [{"role": "user", "content": "x" * 6_000_000}]
    response = httpx.post(
        gateway.base_url + "/messages", json={"model": "m", "max_tokens": 8, "messages": history}, timeout=30
    )
    assert response.status_code == 200


def test_store_false_responses_are_not_bound(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=2))
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": ["responses"]}}))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
        unstored = client.responses.create(model="m", input="hi", store=False)
        with client.responses.stream(model="m", input="hi", store=False) as stream:
            streamed = stream.get_final_response()
        stored = client.responses.create(model="m", input="hi")
    store = gateway.runtime.owners.store
    assert isinstance(store, InMemoryBindingStore)
    assert store.get(NAMESPACE, unstored.id) is None and store.get(NAMESPACE, streamed.id) is None
    assert store.get(NAMESPACE, stored.id) is not None


def test_store_false_leaves_no_key_in_redis(fakes: Fakes, start_gateway: StartGateway, tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis").start()
    try:
        fake = fakes.start("a", FakeBehavior(output_tokens=2))
        stats = {"backend": "redis", "redis_url": redis.url, "key_prefix": "quirks"}
        gateway = start_gateway(
            gateway_config([fake], provider_options={"a": {"apis": ["responses"]}}, extra={"stats": stats})
        )
        with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0) as client:
            for _ in range(3):
                client.responses.create(model="m", input="hi", store=False)
            stored = client.responses.create(model="m", input="hi")
        bindings = gateway.runtime.owners.store
        assert isinstance(bindings, RedisBindingStore)
        gateway.server.call(bindings.flush())
        keys = redis.client().keys("{quirks:bind:response:*")
        assert keys == [f"{{quirks:bind:response:{stored.id}}}"]
        assert redis.client().ttl(keys[0]) > 29 * 86_400  # a stored one is bound as long as OpenAI keeps it
    finally:
        redis.stop()


def test_translation_refusals_and_translated_upstream_errors_carry_retry_hints(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """On a chat-only model: a block the chat API cannot take is a 400 naming it, which Anthropic's SDK (as Claude
    Code) does not re-send; a translated deployment's own errors keep their status, and their hint follows it."""
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake = fakes.start("a")
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": ["chat"]}}))
    document: Any = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
    with (
        anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=3, timeout=10) as client,
        pytest.raises(anthropic.BadRequestError) as raised,
    ):
        client.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": [document]}])
    headers = raised.value.response.headers
    assert headers["x-should-retry"] == "false" and headers["request-id"] == raised.value.request_id
    assert (
        "'messages[0].content[0].source.type' cannot be translated to the Chat Completions API" in raised.value.message
    )
    assert isinstance(raised.value.body, dict) and raised.value.body["error"]["type"] == "invalid_request_error"
    wait_until(lambda: len(access_lines(caplog)) == 1, what="the request logged (after its last byte)")
    assert [line["status"] for line in access_lines(caplog)] == [400] and not fake.app.state.recorded
    for status, retry in ((422, "false"), (503, "true"), (429, "true")):
        httpx.post(fake.url + "/_fake/behavior", json={"status": status})
        response = httpx.post(
            gateway.base_url + "/messages", json={"model": "m", "max_tokens": 8, "messages": MESSAGES}
        )
        assert response.status_code == status and response.json()["type"] == "error"
        assert response.headers["x-should-retry"] == retry and response.headers["request-id"]


@pytest.mark.parametrize("apis", [["messages"], ["chat"], ["responses"]])
def test_a_messages_answer_names_the_model_the_client_asked_for(
    fakes: Fakes, start_gateway: StartGateway, apis: list[str]
) -> None:
    """Claude Code drops the thinking blocks of an answer naming another model than it asked for (and Anthropic then
    refuses the next turn of a tool call made while thinking): whole or streamed, native or translated, the answer
    names the client's model, never the deployment's id (the ``x-gateway-deployment`` header says which answered)."""
    fake = fakes.start("a", FakeBehavior(output_tokens=2, reasoning_tokens=2))
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": apis}}))
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as client:
        whole = client.messages.create(model="m", max_tokens=64, messages=MESSAGES)
        with client.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
            streamed = stream.get_final_message()
    assert whole.model == streamed.model == "m"
    assert all(r.body is not None and r.body["model"] == "a-upstream" for r in fake.app.state.recorded)
