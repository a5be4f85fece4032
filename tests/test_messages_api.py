"""The Messages API through the gateway: the real ``anthropic`` SDK, create and stream, sync and async,
the same answer as going direct; the provider key in ``x-api-key``; errors in Anthropic's shape; faults."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import pytest

from gateway.config import GatewayConfig
from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
MESSAGES: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]
KEY = "sk-ant-provider-secret"


def messages_config(*fakes: FakeServer, **options: Any) -> GatewayConfig:
    apis = {f.name: {"apis": ["messages"]} for f in fakes}
    return gateway_config(list(fakes), provider_options=apis, **options)


@pytest.fixture
def clients() -> Iterator[Callable[..., anthropic.Anthropic]]:
    """Anthropic SDK clients (no retries), closed at the test's end."""
    made: list[anthropic.Anthropic] = []

    def make(base_url: str, api_key: str = "client-key") -> anthropic.Anthropic:
        made.append(anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=10))
        return made[-1]

    yield make
    for client in made:
        client.close()


def test_create_and_stream_match_going_direct(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[..., anthropic.Anthropic]
) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=6, tokens_per_s=200), api_key=KEY)
    config = gateway_config([fake], provider_options={"a": {"apis": ["messages"], "api_key_env": "A_KEY"}})
    gateway = start_gateway(config, environ={"A_KEY": KEY})
    through, direct = clients(gateway.url), clients(fake.url, KEY)
    via = through.messages.create(model="m", max_tokens=64, messages=MESSAGES)
    straight = direct.messages.create(model="a-upstream", max_tokens=64, messages=MESSAGES)
    text = "".join(answer_words(0, 6))
    assert [b.text for b in via.content if b.type == "text"] == [b.text for b in straight.content if b.type == "text"]
    assert via.content[0].type == "text" and via.content[0].text == text
    assert via.stop_reason == "end_turn" and via.usage.output_tokens == 6
    with through.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text and final.stop_reason == "end_turn"
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both answers recorded")
    sample = gateway.samples.samples[-1]
    assert sample.endpoint == "messages" and sample.outcome == "ok"
    assert sample.output_tokens == 6 and sample.usage_completion_tokens == 6
    assert sample.ttft_s is not None and sample.tokens_per_s is not None
    # The provider's key went in x-api-key, the SDK's anthropic-version with it; the client's key went nowhere.
    sent = fake.app.state.recorded[-1].headers
    assert sent["x-api-key"] == KEY and "authorization" not in sent
    assert sent["anthropic-version"] == direct.default_headers["anthropic-version"]
    assert all("client-key" not in v for r in fake.app.state.recorded for v in r.headers.values())
    # The API dimension of the metrics.
    value = gateway.metrics.registry.get_sample_value
    labels = {"model": "m", "api": "messages", "upstream_api": "messages", "status_class": "2xx"}
    wait_until(lambda: value("gateway_api_requests_total", labels) == 2, what="both requests counted by API")
    assert (
        value("gateway_api_ttft_seconds_count", {"model": "m", "api": "messages"}) == 1
    )  # the stream; a whole body has none


def test_async_create_and_stream(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=5, reasoning_tokens=2))
    gateway = start_gateway(messages_config(fake))

    async def run() -> tuple[str, str]:
        async with anthropic.AsyncAnthropic(base_url=gateway.url, api_key="k", max_retries=0) as client:
            whole = await client.messages.create(model="m", max_tokens=64, messages=MESSAGES)
            async with client.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
                final = await stream.get_final_message()
        text = [b for b in whole.content if b.type == "text"][0].text
        return text, [b for b in final.content if b.type == "text"][0].text

    assert asyncio.run(run()) == ("".join(answer_words(0, 5)),) * 2
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both answers recorded")
    streamed = gateway.samples.samples[-1]
    assert streamed.output_tokens == 5  # thinking is not answer text
    assert streamed.first_answer_s is not None and streamed.ttft_s is not None
    assert streamed.first_answer_s >= streamed.ttft_s


def test_client_headers_pass_through_and_the_gateway_key_is_accepted_both_ways(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[..., anthropic.Anthropic]
) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=2))
    gateway = start_gateway(messages_config(fake), environ={"GATEWAY_API_KEYS": "gw-key"})
    body = {"model": "m", "max_tokens": 8, "messages": MESSAGES}
    extra = {"anthropic-version": "2023-01-01", "anthropic-beta": "tools-2024"}
    by_x_api_key = httpx.post(gateway.base_url + "/messages", json=body, headers={"x-api-key": "gw-key", **extra})
    by_bearer = httpx.post(gateway.base_url + "/messages", json=body, headers={"authorization": "Bearer gw-key"})
    assert by_x_api_key.status_code == by_bearer.status_code == 200
    beta = httpx.post(gateway.base_url + "/messages?beta=true", json=body, headers={"x-api-key": "gw-key"})
    assert beta.status_code == 200 and fake.app.state.recorded[2].query == "beta=true"
    sent, bare = fake.app.state.recorded[0].headers, fake.app.state.recorded[1].headers
    assert sent["anthropic-version"] == "2023-01-01" and sent["anthropic-beta"] == "tools-2024"
    assert bare["anthropic-version"] == "2023-06-01"  # the default, when the client named none
    assert "gw-key" not in " ".join([*sent.values(), *bare.values()])
    with pytest.raises(anthropic.AuthenticationError) as raised:
        clients(gateway.url, "wrong").messages.create(model="m", max_tokens=8, messages=MESSAGES)
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid API key"},
    }


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({"model": "nope", "max_tokens": 8, "messages": MESSAGES}, 404, "not_found_error"),
        ({"model": "m", "messages": MESSAGES}, 400, "invalid_request_error"),
        ({"model": "m", "max_tokens": 8, "messages": []}, 400, "invalid_request_error"),
        (b"{not json", 400, "invalid_request_error"),
    ],
)
def test_the_gateways_own_errors_use_anthropics_shape(
    fakes: Fakes, start_gateway: StartGateway, body: object, status: int, kind: str
) -> None:
    gateway = start_gateway(messages_config(fakes.start("a")))
    content = body if isinstance(body, bytes) else None
    response = httpx.post(gateway.base_url + "/messages", content=content, json=None if content else body)
    assert response.status_code == status
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == kind and error["error"]["message"]
    assert set(error) == {"type", "error"} and set(error["error"]) == {"type", "message"}


def test_no_capacity_and_a_chat_only_model_are_anthropic_shaped(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(status=503))
    gateway = start_gateway(messages_config(fake))
    response = httpx.post(gateway.base_url + "/messages", json={"model": "m", "max_tokens": 8, "messages": MESSAGES})
    assert response.status_code == 503 and response.json()["error"]["type"] == "overloaded_error"
    # A chat-only model with translation off (on, it would answer translated: tests/test_translate_messages.py).
    chat_only = start_gateway(gateway_config([fakes.start("b")], deployments={"b": {"translate": False}}))
    response = httpx.post(chat_only.base_url + "/messages", json={"model": "m", "max_tokens": 8, "messages": MESSAGES})
    assert response.status_code == 404 and "Messages API" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [
        (FakeBehavior(status=529), "upstream_error"),
        (FakeBehavior(hang_s=10), "timeout"),
        (FakeBehavior(error_event_after=0), "upstream_error"),
    ],
)
def test_a_failure_before_the_first_token_falls_back(
    fakes: Fakes,
    start_gateway: StartGateway,
    clients: Callable[..., anthropic.Anthropic],
    fault: FakeBehavior,
    outcome: str,
) -> None:
    bad, good = fakes.start("a", fault), fakes.start("b", FakeBehavior(output_tokens=4))
    gateway = start_gateway(messages_config(bad, good, policy={"first_token_timeout_s": 0.5}))
    with clients(gateway.url).messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
        assert "".join(stream.text_stream) == "".join(answer_words(0, 4))
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both attempts recorded")
    assert [s.outcome for s in gateway.samples.samples] == [outcome, "ok"]


@pytest.mark.parametrize(
    "fault",
    [
        FakeBehavior(output_tokens=8, drop_after=3),
        FakeBehavior(output_tokens=8, stall_after=3, stall_s=5),
        FakeBehavior(output_tokens=8, error_event_after=3),
    ],
    ids=["break", "stall", "error-event"],
)
def test_after_bytes_the_stream_ends_with_an_anthropic_error_event(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[..., anthropic.Anthropic], fault: FakeBehavior
) -> None:
    fake, spare = fakes.start("a", fault), fakes.start("b")
    gateway = start_gateway(messages_config(fake, spare, policy={"idle_timeout_s": 0.5}))
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        with clients(gateway.url).messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
            for text in stream.text_stream:
                seen.append(text)
    assert "".join(seen) == "".join(answer_words(0, 3))
    assert raised.value.body is not None
    assert spare.app.state.requests == 0  # not marked continue_prefill: no recovery
    wait_until(lambda: len(gateway.samples.samples) == 1, what="the attempt recorded")
    assert gateway.samples.samples[0].outcome in ("broken_stream", "timeout", "upstream_error")


def test_ping_never_starts_the_first_token_clock(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=3, ttft_s=0.3))
    gateway = start_gateway(messages_config(fake))
    body = {"model": "m", "max_tokens": 8, "messages": MESSAGES, "stream": True}
    raw = httpx.post(gateway.base_url + "/messages", json=body).content
    assert b"event: ping" in raw and raw.rstrip().endswith(b'{"type": "message_stop"}')
    wait_until(lambda: len(gateway.samples.samples) == 1, what="the attempt recorded")
    ttft = gateway.samples.samples[0].ttft_s
    assert ttft is not None and ttft >= 0.3


def test_count_tokens_goes_to_a_messages_deployment(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a")
    gateway = start_gateway(messages_config(fake))
    client = anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0)
    with client:
        counted = client.messages.count_tokens(model="m", messages=MESSAGES)
    assert counted.input_tokens > 0
    assert fake.app.state.recorded[-1].path == "/v1/messages/count_tokens"
    assert fake.app.state.recorded[-1].body == {"model": "a-upstream", "messages": MESSAGES}
    assert gateway.samples.samples == []  # not an answer: nothing to measure


def test_a_broken_text_answer_is_finished_by_a_deployment_that_continues_a_prefill(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[..., anthropic.Anthropic]
) -> None:
    """Anthropic continues an assistant prefill natively: the client gets one message, the whole answer."""
    broken = fakes.start("a", FakeBehavior(output_tokens=8, drop_after=3))
    spare = fakes.start("b", FakeBehavior(output_tokens=8))
    config = messages_config(broken, spare, deployments={"b": {"continue_prefill": True}})
    gateway = start_gateway(config)
    with clients(gateway.url).messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "".join(answer_words(0, 8))
    assert final.stop_reason == "end_turn" and final.id.startswith("msg_a_")  # one message: the first's
    assert [b.type for b in final.content] == ["text"]
    sent = spare.app.state.recorded[-1].body
    assert sent is not None
    assert sent["messages"][-1] == {"role": "assistant", "content": "".join(answer_words(0, 3))}
    assert sent["max_tokens"] == 64 - 3
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both attempts recorded")
    assert [s.outcome for s in gateway.samples.samples] == ["broken_stream", "ok"]


def test_no_recovery_with_extended_thinking(fakes: Fakes, start_gateway: StartGateway) -> None:
    """Anthropic refuses a prefill with thinking on: the stream ends with the error event instead."""
    broken = fakes.start("a", FakeBehavior(output_tokens=8, drop_after=3))
    spare = fakes.start("b", FakeBehavior(output_tokens=8))
    gateway = start_gateway(messages_config(broken, spare, deployments={"b": {"continue_prefill": True}}))
    body = {
        "model": "m",
        "max_tokens": 64,
        "messages": MESSAGES,
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    raw = httpx.post(gateway.base_url + "/messages", json=body).content
    assert raw.rstrip().endswith(b"}") and b"event: error" in raw and b"message_stop" not in raw
    assert spare.app.state.requests == 0


def test_the_gateways_rate_limit_is_anthropic_shaped(fakes: Fakes, start_gateway: StartGateway) -> None:
    limits = {"limits": {"requests_per_minute_per_key": 1}}
    gateway = start_gateway(messages_config(fakes.start("a"), extra=limits), environ={"GATEWAY_API_KEYS": "k1"})
    body = {"model": "m", "max_tokens": 8, "messages": MESSAGES}
    headers = {"x-api-key": "k1"}
    assert httpx.post(gateway.base_url + "/messages", json=body, headers=headers).status_code == 200
    limited = httpx.post(gateway.base_url + "/messages", json=body, headers=headers)
    assert limited.status_code == 429 and limited.headers["retry-after"]
    assert limited.json()["type"] == "error" and limited.json()["error"]["type"] == "rate_limit_error"
