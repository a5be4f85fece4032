"""Samples end to end: one per attempt, and measurements that match the fake provider's pace.

Tolerances are wide enough for a busy 2-core machine: a late chunk only ever makes a measured
time longer, and the fake paces against absolute due times, so its speed does not drift.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from gateway.app import AppOptions, create_app
from gateway.fakes import FakeBehavior
from gateway.fakes.behavior import answer_words
from gateway.samples import Sample, SampleLog
from gateway.tokens import load_token_counter
from tests.support.clients import MESSAGES, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.servers import ServerThread
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]


def settled(gateway: Gateway, count: int) -> list[Sample]:
    wait_until(lambda: len(gateway.samples.samples) >= count, what=f"{count} samples")
    assert len(gateway.samples.samples) == count
    return list(gateway.samples.samples)


def test_injected_clock_is_the_time_base_of_every_measure(fakes: Fakes, test_servers: list[ServerThread]) -> None:
    """A clock far from perf_counter's: e2e and TTFT stay small only if both ends use it."""
    fake = fakes.start("a", FakeBehavior(output_tokens=4))
    samples = SampleLog()
    options = AppOptions(environ={}, sinks=[samples], clock=lambda: time.perf_counter() + 1e6)
    server = ServerThread(create_app(gateway_config([fake]), options)).start()
    test_servers.append(server)
    list(sdk(server.url + "/v1").chat.completions.create(model="m", messages=MESSAGES, stream=True))
    wait_until(lambda: len(samples.samples) == 1)
    (sample,) = samples.samples
    assert sample.e2e_s is not None and 0 < sample.e2e_s < 60
    assert sample.ttft_s is not None and 0 < sample.ttft_s <= sample.e2e_s


def test_one_sample_per_attempt(fakes: Fakes, start_gateway: StartGateway) -> None:
    servers = [
        fakes.start("a", FakeBehavior(status=500)),
        fakes.start("b", FakeBehavior(ttft_s=30)),
        fakes.start("c", FakeBehavior(output_tokens=5)),
    ]
    gateway = start_gateway(gateway_config(servers, policy={"first_token_timeout_s": 0.25}))
    before = time.time()
    chunks = list(sdk(gateway.base_url).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert chunks
    first, second, third = settled(gateway, 3)
    assert [(s.provider, s.deployment, s.outcome, s.status) for s in (first, second, third)] == [
        ("a", "a", "upstream_error", 500),
        ("b", "b", "timeout", 200),
        ("c", "c", "ok", 200),
    ]
    for sample in (first, second, third):
        assert (sample.model, sample.endpoint, sample.stream, sample.hedged) == ("m", "chat", True, False)
        assert before <= sample.started_at <= time.time()
        assert sample.e2e_s is not None and sample.e2e_s > 0
    assert first.started_at <= second.started_at <= third.started_at
    # Failed attempts measured nothing they could not measure.
    assert first.ttft_s is None and first.tokens_per_s is None and first.output_tokens is None
    assert second.ttft_s is None and second.cost_usd is None
    assert second.e2e_s is not None and second.e2e_s >= 0.25
    assert third.output_tokens == 5 and third.ttft_s is not None


def test_streamed_ttft_and_speed_match_the_fake(fakes: Fakes, start_gateway: StartGateway) -> None:
    ttft, speed, tokens = 0.3, 50.0, 26
    fake = fakes.start("a", FakeBehavior(ttft_s=ttft, tokens_per_s=speed, output_tokens=tokens))
    gateway = start_gateway(gateway_config([fake]))
    stream = sdk(gateway.base_url).chat.completions.create(
        model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    usage = chunks[-1].usage
    assert usage is not None and "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    (sample,) = settled(gateway, 1)
    assert sample.outcome == "ok"
    assert sample.ttft_s is not None and sample.first_answer_s is not None and sample.e2e_s is not None
    assert ttft <= sample.ttft_s < ttft + 0.25
    assert sample.first_answer_s == sample.ttft_s  # no reasoning: the first output is the first answer token
    # By definition tokens ÷ (last − first answer token): the fake's 26 tokens span 25 gaps of 1/50 s.
    expected = tokens / ((tokens - 1) / speed)
    assert sample.tokens_per_s == pytest.approx(expected, rel=0.3)
    window = (tokens - 1) / speed
    assert sample.e2e_s >= ttft + window
    assert sample.output_tokens == tokens
    # The provider's usage is kept apart (and prices the request): price_in 1.0, price_out 2.0 per 1M.
    assert (sample.usage_completion_tokens, sample.usage_prompt_tokens) == (
        usage.completion_tokens,
        usage.prompt_tokens,
    )
    assert sample.cost_usd == pytest.approx((usage.prompt_tokens * 1.0 + usage.completion_tokens * 2.0) / 1e6)


def test_reasoning_is_output_but_not_answer(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(ttft_s=0.1, tokens_per_s=100, output_tokens=11, reasoning_tokens=30))
    gateway = start_gateway(gateway_config([fake]))
    list(sdk(gateway.base_url).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    (sample,) = settled(gateway, 1)
    assert sample.ttft_s is not None and sample.first_answer_s is not None
    assert 0.1 <= sample.ttft_s <= sample.first_answer_s
    assert sample.output_tokens == 11  # the 30 reasoning tokens are not answer tokens
    assert sample.tokens_per_s == pytest.approx(11 / 0.1, rel=0.3)


def test_tool_call_stream_counts_its_arguments(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(ttft_s=0.1, tokens_per_s=100, output_tokens=6, tool_call=True))
    gateway = start_gateway(gateway_config([fake]))
    list(sdk(gateway.base_url).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    (sample,) = settled(gateway, 1)
    # The arguments are counted whole: the six words inside their JSON frame, {"q": " ... "}.
    expected = load_token_counter("o200k_base").count('{"q": "' + "".join(answer_words(0, 6)) + '"}')
    assert sample.outcome == "ok" and sample.output_tokens == expected
    assert sample.ttft_s is not None and sample.ttft_s >= 0.1


def test_non_streamed_yields_e2e_and_tokens(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(ttft_s=0.2, tokens_per_s=100, output_tokens=10))
    gateway = start_gateway(gateway_config([fake]))
    result = sdk(gateway.base_url).chat.completions.create(model="m", messages=MESSAGES)
    assert result.usage is not None
    (sample,) = settled(gateway, 1)
    assert (sample.outcome, sample.stream, sample.status) == ("ok", False, 200)
    assert sample.e2e_s is not None and sample.e2e_s >= 0.2 + 10 / 100
    assert sample.output_tokens == 10
    assert sample.ttft_s is None and sample.tokens_per_s is None and sample.first_answer_s is None
    assert sample.usage_completion_tokens == result.usage.completion_tokens
    assert sample.usage_prompt_tokens == result.usage.prompt_tokens


def test_embeddings_are_measured_by_latency_only(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(ttft_s=0.1))
    gateway = start_gateway(gateway_config([fake]))
    sdk(gateway.base_url).embeddings.create(model="m", input=["one", "two"])
    (sample,) = settled(gateway, 1)
    assert (sample.endpoint, sample.outcome) == ("embeddings", "ok")
    assert sample.e2e_s is not None and sample.e2e_s >= 0.1
    assert sample.output_tokens is None and sample.tokens_per_s is None
    assert sample.usage_prompt_tokens == 2
