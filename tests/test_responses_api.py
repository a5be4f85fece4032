"""The Responses API through the gateway: the real ``openai`` SDK, streamed and not, sync and async,
the same answer as going direct; faults; and stateful calls reaching the deployment that owns them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.config import GatewayConfig
from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from tests.support.clients import async_sdk, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]


@contextlib.contextmanager
def closing_sdk(base_url: str) -> Iterator[openai.OpenAI]:
    """An SDK client whose connections are closed at the end of the block (no socket left to the GC)."""
    client = sdk(base_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def clients() -> Iterator[Callable[[str], openai.OpenAI]]:
    """SDK clients closed at the test's end."""
    made: list[openai.OpenAI] = []

    def make(base_url: str) -> openai.OpenAI:
        made.append(sdk(base_url))
        return made[-1]

    yield make
    for client in made:
        client.close()


def responses_config(*fakes: FakeServer, **options: Any) -> GatewayConfig:
    apis = {f.name: {"apis": ["chat", "responses"]} for f in fakes}
    return gateway_config(list(fakes), provider_options=apis, **options)


def test_create_whole_and_streamed_match_going_direct(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], openai.OpenAI]
) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=6, tokens_per_s=200))
    gateway = start_gateway(responses_config(fake))
    through, direct = clients(gateway.base_url), clients(fake.base_url)
    via = through.responses.create(model="m", input="hi")
    straight = direct.responses.create(model="a-upstream", input="hi")
    assert via.output_text == straight.output_text == "".join(answer_words(0, 6))
    assert via.status == "completed" and via.usage is not None and via.usage.output_tokens == 6
    with through.responses.stream(model="m", input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == via.output_text
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both answers recorded")
    sample = gateway.samples.samples[-1]
    assert sample.endpoint == "responses" and sample.outcome == "ok" and sample.stream
    assert sample.output_tokens == 6 and sample.usage_completion_tokens == 6
    assert sample.ttft_s is not None and sample.tokens_per_s is not None


def test_async_stream_and_create(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=5))
    gateway = start_gateway(responses_config(fake))

    async def run() -> tuple[str, str]:
        async with async_sdk(gateway.base_url) as client:
            whole = await client.responses.create(model="m", input="hi")
            async with client.responses.stream(model="m", input="hi") as stream:
                async for _ in stream:
                    pass
                final = await stream.get_final_response()
        return whole.output_text, final.output_text

    assert asyncio.run(run()) == ("".join(answer_words(0, 5)),) * 2


def test_first_token_skips_created_and_in_progress(fakes: Fakes, start_gateway: StartGateway) -> None:
    """``response.created`` comes at once; the first token only after ``ttft_s``, and it counts from there."""
    fake = fakes.start("a", FakeBehavior(output_tokens=4, ttft_s=0.3, reasoning_tokens=2))
    gateway = start_gateway(responses_config(fake))
    with closing_sdk(gateway.base_url) as client, client.responses.stream(model="m", input="hi") as stream:
        types = [e.type for e in stream]
    assert types[:2] == ["response.created", "response.in_progress"]
    wait_until(lambda: len(gateway.samples.samples) == 1, what="the attempt recorded")
    sample = gateway.samples.samples[-1]
    assert sample.ttft_s is not None and sample.ttft_s >= 0.3
    assert sample.first_answer_s is not None and sample.first_answer_s >= sample.ttft_s
    assert sample.output_tokens == 4  # reasoning is not answer text


def test_a_model_without_responses_deployments_is_a_400_naming_the_api(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    # 400, not 404: Codex re-sends on every status but 400 and 401 (``api._model_error``).
    fake = fakes.start("a")
    # Chat, completions, embeddings only, and no translation (with it, chat would serve: test_translate_responses.py).
    gateway = start_gateway(gateway_config([fake], deployments={"a": {"translate": False}}))
    with pytest.raises(openai.BadRequestError) as raised, closing_sdk(gateway.base_url) as client:
        client.responses.create(model="m", input="hi")
    assert "Responses API" in str(raised.value) and "chat, completions, embeddings" in str(raised.value)
    assert raised.value.code == "model_not_found_for_api"
    with pytest.raises(openai.BadRequestError) as unknown, closing_sdk(gateway.base_url) as client:
        client.responses.create(model="nope", input="hi")
    assert unknown.value.code == "model_not_found"
    assert fake.app.state.requests == 0


def test_only_deployments_that_speak_responses_are_tried(fakes: Fakes, start_gateway: StartGateway) -> None:
    chat_only, both = fakes.start("a"), fakes.start("b", FakeBehavior(output_tokens=3))
    config = gateway_config(
        [chat_only, both],
        provider_options={"b": {"apis": ["chat", "responses"]}},
        deployments={"a": {"translate": False}},  # with translation on, "a" serves too (translated)
    )
    gateway = start_gateway(config)
    with closing_sdk(gateway.base_url) as client:
        for _ in range(3):
            assert client.responses.create(model="m", input="hi").output_text
    assert chat_only.app.state.requests == 0 and both.app.state.requests == 3


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [
        (FakeBehavior(status=503), "upstream_error"),
        (FakeBehavior(hang_s=10), "timeout"),
        (FakeBehavior(error_event_after=0), "upstream_error"),
        (FakeBehavior(fail_event_after=0), "upstream_error"),
    ],
)
def test_a_failure_before_the_first_token_falls_back(
    fakes: Fakes, start_gateway: StartGateway, fault: FakeBehavior, outcome: str
) -> None:
    bad, good = fakes.start("a", fault), fakes.start("b", FakeBehavior(output_tokens=4))
    gateway = start_gateway(responses_config(bad, good, policy={"first_token_timeout_s": 0.5}))
    with closing_sdk(gateway.base_url) as client, client.responses.stream(model="m", input="hi") as stream:
        final = stream.get_final_response()
    assert final.output_text == "".join(answer_words(0, 4))
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both attempts recorded")
    assert [s.outcome for s in gateway.samples.samples] == [outcome, "ok"]


@pytest.mark.parametrize(
    "fault",
    [FakeBehavior(output_tokens=8, drop_after=3), FakeBehavior(output_tokens=8, stall_after=3, stall_s=5)],
    ids=["break", "stall"],
)
def test_a_break_after_bytes_ends_with_a_responses_error_event(
    fakes: Fakes, start_gateway: StartGateway, fault: FakeBehavior
) -> None:
    fake, spare = fakes.start("a", fault), fakes.start("b")
    gateway = start_gateway(responses_config(fake, spare, policy={"idle_timeout_s": 0.5}))
    with closing_sdk(gateway.base_url) as client, client.responses.stream(model="m", input="hi") as stream:
        events = list(stream)
        with pytest.raises(RuntimeError, match="response.completed"):
            stream.get_final_response()
    wait_until(lambda: len(gateway.samples.samples) == 1, what="the attempt recorded")
    assert events[-1].type == "error"
    assert getattr(events[-1], "code", None) == "upstream_stream_broken"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "".join(answer_words(0, 3))
    assert spare.app.state.requests == 0  # no recovery for the Responses API
    assert gateway.samples.samples[-1].outcome in ("broken_stream", "timeout")


def test_an_error_event_after_the_200_is_relayed_and_not_a_success(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=8, fail_event_after=3))
    gateway = start_gateway(responses_config(fake))
    with closing_sdk(gateway.base_url) as client, client.responses.stream(model="m", input="hi") as stream:
        events = list(stream)
    assert events[-1].type == "response.failed"
    wait_until(lambda: len(gateway.samples.samples) == 1, what="the attempt recorded")
    assert gateway.samples.samples[-1].outcome == "upstream_error"


def test_max_output_tokens_ends_incomplete_an_outcome_of_its_own(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], openai.OpenAI]
) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=8))
    gateway = start_gateway(responses_config(fake))
    client = clients(gateway.base_url)
    with client.responses.stream(model="m", input="hi", max_output_tokens=3) as stream:
        events = list(stream)
    assert events[-1].type == "response.incomplete"
    whole = client.responses.create(model="m", input="hi", max_output_tokens=3)
    assert whole.status == "incomplete"
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both attempts recorded")
    assert [s.outcome for s in gateway.samples.samples] == ["client_error", "client_error"]


def test_previous_response_id_and_id_calls_reach_the_owner(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], openai.OpenAI]
) -> None:
    """Two deployments, each knowing only its own responses: the gateway sends each call to its owner."""
    a, b = fakes.start("a", FakeBehavior(output_tokens=3)), fakes.start("b", FakeBehavior(output_tokens=3))
    gateway = start_gateway(responses_config(a, b, base_policy={}))
    client = clients(gateway.base_url)
    # Each first turn is placed on a deployment of its own (an override); the follow-ups are not.
    placed = [{"provider": {"order": ["a" if i % 2 else "b"], "allow_fallbacks": False}} for i in range(6)]
    first = [client.responses.create(model="m", input=f"turn {i}", extra_body=placed[i]) for i in range(6)]
    owners = {r.id: ("a" if r.id in a.app.state.responses else "b") for r in first}
    assert set(owners.values()) == {"a", "b"}
    for response in first:
        follow = client.responses.create(model="m", input="next", previous_response_id=response.id)
        assert follow.id in (a if owners[response.id] == "a" else b).app.state.responses
        assert client.responses.retrieve(response.id).id == response.id
        assert client.responses.input_items.list(response.id).data
        assert client.responses.cancel(response.id).id == response.id
    doomed = first[0]
    client.responses.delete(doomed.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(doomed.id)  # forgotten: the gateway will not guess
    with pytest.raises(openai.NotFoundError) as raised:
        client.responses.create(model="m", input="x", previous_response_id="resp_never_seen")
    assert raised.value.code == "previous_response_not_found"


def test_the_owner_unavailable_is_said_clearly(
    fakes: Fakes, start_gateway: StartGateway, clients: Callable[[str], openai.OpenAI]
) -> None:
    a, b = fakes.start("a", FakeBehavior(output_tokens=3)), fakes.start("b")
    gateway = start_gateway(responses_config(a, b, policy={"failure_threshold": 1, "cooldown_s": 60}))
    client = clients(gateway.base_url)
    first = client.responses.create(model="m", input="hi")
    assert first.id in a.app.state.responses
    a.app.behavior = FakeBehavior(status=503)
    with pytest.raises(openai.APIStatusError):
        client.responses.create(model="m", input="again", previous_response_id=first.id)
    assert b.app.state.requests == 0  # never sent to a provider that does not hold it
    body = {"model": "m", "input": "x", "previous_response_id": first.id}
    messages = []
    for _ in range(10):  # until a's circuit opens: then the plan itself says who holds the response
        response = httpx.post(gateway.base_url + "/responses", json=body)
        assert response.status_code in (502, 503)
        messages.append(response.json()["error"]["message"])
        if "held by deployment" in messages[-1]:
            break
    assert "the previous response is held by deployment 'a', which cannot take a request now" in messages[-1]
    assert all("a: upstream returned 503" in m for m in messages[:-1])
    assert b.app.state.requests == 0
