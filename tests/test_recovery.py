"""Mid-stream recovery: a stream that breaks after part of the answer reached the client is finished
by a deployment marked ``continue_prefill``, and the client reads one complete answer.

The fake provider continues a prefill exactly (a chat's last assistant message, or a prompt ending
with the answer's first words) and counts ``max_tokens`` over the words it adds, as a model does,
so "complete" is checked word for word against the answer a healthy provider gives.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from tests.support.clients import MESSAGES, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
POLICY = {"first_token_timeout_s": 2.0, "idle_timeout_s": 0.3}
CAN = {"continue_prefill": True}
WHOLE = "".join(answer_words(0, 8))  # the answer every fake gives here, 8 words


def start(
    fakes: Fakes,
    start_gateway: StartGateway,
    first: FakeBehavior,
    *,
    capable: tuple[str, ...] = ("b",),
    others: tuple[str, ...] = ("b",),
    policy: dict[str, Any] | None = None,
    second: FakeBehavior | None = None,
    formats: dict[str, str] | None = None,
) -> tuple[Gateway, list[FakeServer]]:
    servers = [fakes.start("a", first)]
    servers += [fakes.start(name, second or FakeBehavior(output_tokens=8)) for name in others]
    extra = {
        name: {**CAN, **({"prefill_format": formats[name]} if formats and name in formats else {})} for name in capable
    }
    config = gateway_config(servers, policy={**POLICY, **(policy or {})}, deployments=extra)
    return start_gateway(config), servers


def events(body: bytes) -> list[Any]:
    """Each event's parsed data (the string "[DONE]" for the end marker)."""
    parsed = []
    for block in body.split(b"\n\n"):
        if block:
            assert block.startswith(b"data: "), block
            data = block[6:]
            parsed.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return parsed


def stream(gateway: Gateway, body: dict[str, Any] | None = None, path: str = "/chat/completions") -> list[Any]:
    payload = body or {"model": "m", "messages": MESSAGES, "stream": True}
    response = httpx.post(gateway.base_url + path, json=payload, timeout=10)
    assert response.status_code == 200
    return events(response.content)


def text_of(parsed: list[Any]) -> str:
    text = []
    for event in parsed:
        if isinstance(event, dict):
            for choice in event.get("choices", []):
                text.append(choice.get("delta", {}).get("content") or choice.get("text") or "")
    return "".join(text)


def outcomes(gateway: Gateway, count: int) -> list[tuple[str, str]]:
    wait_until(lambda: len(gateway.samples.samples) >= count, what=f"{count} samples")
    return [(s.provider, s.outcome) for s in gateway.samples.samples]


def breaks(gateway: Gateway, provider: str, result: str) -> float:
    labels = {"model": "m", "provider": provider, "result": result}
    return gateway.metrics.registry.get_sample_value("gateway_stream_breaks_total", labels) or 0.0


def assert_one_clean_answer(parsed: list[Any], expected: str = WHOLE) -> None:
    assert text_of(parsed) == expected
    assert parsed[-1] == "[DONE]" and parsed.count("[DONE]") == 1
    assert not any(isinstance(e, dict) and "error" in e for e in parsed)
    roles = [e for e in parsed if isinstance(e, dict) and any("role" in c.get("delta", {}) for c in e["choices"])]
    assert len(roles) == 1  # the continuation's own role chunk is not relayed
    finishes = [c["finish_reason"] for e in parsed if isinstance(e, dict) for c in e["choices"] if c["finish_reason"]]
    assert finishes == ["stop"]


def test_a_cut_stream_is_finished_by_a_deployment_that_continues_a_prefill(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    gateway, (a, b) = start(fakes, start_gateway, FakeBehavior(output_tokens=8, drop_after=3))
    assert_one_clean_answer(stream(gateway))
    prefill = b.app.state.recorded[0].body
    assert prefill is not None
    assert prefill["messages"] == [*MESSAGES, {"role": "assistant", "content": "".join(answer_words(0, 3))}]
    assert outcomes(gateway, 2) == [("a", "broken_stream"), ("b", "ok")]
    assert gateway.samples.samples[1].output_tokens == 5  # the continuation's own words only
    assert breaks(gateway, "a", "recovered") == 1
    decisions = {"model": "m", "provider": "b", "reason": "recovered"}
    assert gateway.metrics.registry.get_sample_value("gateway_routing_decisions_total", decisions) == 1
    # The SDK reads it as one ordinary stream.
    chunks = sdk(gateway.base_url).chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == WHOLE


@pytest.mark.parametrize(
    ("fault", "first_outcome"),
    [
        (FakeBehavior(output_tokens=8, stall_after=2), "timeout"),
        (FakeBehavior(output_tokens=8, error_event_after=4), "upstream_error"),
        (FakeBehavior(output_tokens=8, no_done=True, no_finish=True, drop_after=6), "broken_stream"),
    ],
    ids=["stall", "error-event", "ended-early"],
)
def test_every_kind_of_break_is_recovered(
    fakes: Fakes, start_gateway: StartGateway, fault: FakeBehavior, first_outcome: str
) -> None:
    gateway, _ = start(fakes, start_gateway, fault)
    assert_one_clean_answer(stream(gateway))
    assert outcomes(gateway, 2) == [("a", first_outcome), ("b", "ok")]


def test_a_stream_that_just_stops_after_the_last_word_gets_its_finish_from_the_continuation(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """Every word came, but no finish_reason and no [DONE]: the continuation has nothing to add but the end."""
    gateway, (_, b) = start(fakes, start_gateway, FakeBehavior(output_tokens=8, no_done=True, no_finish=True))
    assert_one_clean_answer(stream(gateway))
    assert outcomes(gateway, 2) == [("a", "broken_stream"), ("b", "ok")]
    assert gateway.samples.samples[1].output_tokens == 0


def test_completions_continue_from_the_prompt(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, (_, b) = start(fakes, start_gateway, FakeBehavior(output_tokens=8, drop_after=2))
    parsed = stream(gateway, {"model": "m", "prompt": "say", "stream": True}, "/completions")
    assert text_of(parsed) == WHOLE and parsed.count("[DONE]") == 1
    recorded = b.app.state.recorded[0].body
    assert recorded is not None and recorded["prompt"] == "say" + "".join(answer_words(0, 2))


def test_max_tokens_counts_what_was_already_said(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, (_, b) = start(fakes, start_gateway, FakeBehavior(output_tokens=32, drop_after=2))
    body = {"model": "m", "messages": MESSAGES, "stream": True, "max_tokens": 6}
    parsed = stream(gateway, body)
    assert text_of(parsed) == "".join(answer_words(0, 6))
    finishes = [c["finish_reason"] for e in parsed if isinstance(e, dict) for c in e["choices"] if c["finish_reason"]]
    assert finishes == ["length"]
    recorded = b.app.state.recorded[0].body
    assert recorded is not None and recorded["max_tokens"] == 4


def test_the_clients_own_prefill_is_extended(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, (_, b) = start(fakes, start_gateway, FakeBehavior(output_tokens=8, drop_after=2))
    mine = [*MESSAGES, {"role": "assistant", "content": " the"}]
    parsed = stream(gateway, {"model": "m", "messages": mine, "stream": True})
    assert text_of(parsed) == "".join(answer_words(1, 7))  # the rest of the answer after the client's word
    recorded = b.app.state.recorded[0].body
    assert recorded is not None
    assert recorded["messages"] == [*MESSAGES, {"role": "assistant", "content": "".join(answer_words(0, 3))}]


@pytest.mark.parametrize(
    ("prefill_format", "message_extra", "body_extra"),
    [
        ("plain", {}, {}),
        ("prefix", {"prefix": True}, {}),
        ("vllm", {}, {"continue_final_message": True, "add_generation_prompt": False}),
    ],
)
def test_the_prefill_is_marked_as_the_deployment_asks(
    fakes: Fakes,
    start_gateway: StartGateway,
    prefill_format: str,
    message_extra: dict[str, Any],
    body_extra: dict[str, Any],
) -> None:
    gateway, (_, b) = start(
        fakes, start_gateway, FakeBehavior(output_tokens=8, drop_after=1), formats={"b": prefill_format}
    )
    assert text_of(stream(gateway)) == WHOLE
    recorded = b.app.state.recorded[0].body
    assert recorded is not None
    assert recorded["messages"][-1] == {"role": "assistant", "content": " the", **message_extra}
    assert {k: recorded[k] for k in body_extra} == body_extra
    assert not {"continue_final_message", "add_generation_prompt"} - set(body_extra) & set(recorded)


def test_without_a_capable_deployment_the_stream_ends_with_the_error_event(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    gateway, (_, b) = start(fakes, start_gateway, FakeBehavior(output_tokens=8, drop_after=3), capable=())
    parsed = stream(gateway)
    assert "[DONE]" not in parsed
    assert parsed[-1]["error"]["code"] == "upstream_stream_broken"
    assert text_of(parsed) == "".join(answer_words(0, 3))
    assert b.app.state.requests == 0
    assert breaks(gateway, "a", "failed") == 1


def test_a_refused_prefill_does_not_mask_the_original_break(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, (_, b) = start(
        fakes,
        start_gateway,
        FakeBehavior(output_tokens=8, drop_after=3),
        second=FakeBehavior(output_tokens=8, reject_prefill=True),
    )
    parsed = stream(gateway)
    error = parsed[-1]["error"]
    assert (
        error["code"] == "upstream_stream_broken" and error["message"] == "a: the provider closed the stream mid-answer"
    )
    assert "prefill" not in error["message"]
    assert b.app.state.requests == 1
    assert outcomes(gateway, 2) == [("a", "broken_stream"), ("b", "client_error")]


def test_a_refusal_moves_on_to_the_next_capable_deployment(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, _ = start(
        fakes, start_gateway, FakeBehavior(output_tokens=8, drop_after=3), capable=("b", "c"), others=("b", "c")
    )
    body = {"model": "m", "messages": MESSAGES, "stream": True, "fake": {"servers": {"b": {"status": 503}}}}
    assert_one_clean_answer(stream(gateway, body))
    assert outcomes(gateway, 3) == [("a", "broken_stream"), ("b", "upstream_error"), ("c", "ok")]


def test_a_continuation_that_breaks_too_is_continued_again(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, _ = start(
        fakes, start_gateway, FakeBehavior(output_tokens=8, drop_after=2), capable=("b", "c"), others=("b", "c")
    )
    # b continues from word 2 and breaks after 3 more; c continues from word 5.
    body = {"model": "m", "messages": MESSAGES, "stream": True, "fake": {"servers": {"b": {"drop_after": 3}}}}
    assert_one_clean_answer(stream(gateway, body))
    assert outcomes(gateway, 3) == [("a", "broken_stream"), ("b", "broken_stream"), ("c", "ok")]
    assert breaks(gateway, "a", "recovered") == breaks(gateway, "b", "recovered") == 1


def test_recovery_is_bounded_by_the_attempt_count(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, (_, b, c) = start(
        fakes,
        start_gateway,
        FakeBehavior(output_tokens=8, drop_after=1),
        capable=("b", "c"),
        others=("b", "c"),
        second=FakeBehavior(output_tokens=8, drop_after=1),
        policy={"max_attempts": 2},
    )
    parsed = stream(gateway)
    assert (
        parsed[-1]["error"]["message"] == "b: the provider closed the stream mid-answer"
    )  # the latest break the client saw
    assert text_of(parsed) == "".join(answer_words(0, 2))
    assert (b.app.state.requests, c.app.state.requests) == (1, 0)


def test_a_break_during_reasoning_may_be_answered_anew_anywhere(fakes: Fakes, start_gateway: StartGateway) -> None:
    """No answer text reached the client yet: any deployment can answer; its reasoning is not repeated."""
    gateway, (_, b) = start(
        fakes,
        start_gateway,
        FakeBehavior(output_tokens=8, reasoning_tokens=2, drop_after=0),
        capable=(),
        second=FakeBehavior(output_tokens=8, reasoning_tokens=2),
    )
    parsed = stream(gateway)
    assert_one_clean_answer(parsed)
    reasoning = [
        c["delta"]["reasoning_content"]
        for e in parsed
        if isinstance(e, dict)
        for c in e["choices"]
        if "reasoning_content" in c.get("delta", {})
    ]
    assert reasoning == answer_words(0, 2)  # a's, once
    recorded = b.app.state.recorded[0].body
    assert recorded is not None and recorded["messages"] == MESSAGES


def test_tool_calls_and_several_choices_are_never_continued(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, (_, b) = start(fakes, start_gateway, FakeBehavior(output_tokens=8, drop_after=3, tool_call=True))
    assert stream(gateway)[-1]["error"]["code"] == "upstream_stream_broken"
    assert stream(gateway, {"model": "m", "messages": MESSAGES, "stream": True, "n": 2})[-1]["error"]
    assert b.app.state.requests == 0


def test_a_hedged_stream_is_recovered_from_the_candidates_the_race_left(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """Under a hedging policy the attempts run as a race; the candidates it did not start remain for recovery."""
    gateway, _ = start(
        fakes,
        start_gateway,
        FakeBehavior(output_tokens=8, drop_after=3),
        policy={"hedge_after_s": 5.0, "hedge_budget": 1.0},
    )
    assert_one_clean_answer(stream(gateway))
    assert outcomes(gateway, 2) == [("a", "broken_stream"), ("b", "ok")]


def assert_carried_over(prefill: dict[str, Any] | None, *, sent: int) -> None:
    """The continuation was asked to go on from a prefix of the broken stream's answer: the words the gateway read
    before the break, at least the first and at most the ``sent`` the provider sent. Which of them were read is
    timing: aiohttp drops a connection's unread bytes once it has seen the break, so under load the last pieces
    sent can be lost to the gateway (and the continuation then writes them; ``assert_one_clean_answer`` checks
    that the client's text came out whole and without a repeat)."""
    assert prefill is not None
    carried = prefill["messages"][-1]
    assert carried["role"] == "assistant"
    assert carried["content"] in ["".join(answer_words(0, n)) for n in range(1, sent + 1)]


def test_a_stream_that_won_a_hedge_is_continued_by_the_deployment_it_beat(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """The hedge that lost the race was cancelled, not failed: when the winner's stream breaks, it may finish it.

    Two deployments: ``a`` is late past the hedge threshold, so ``b`` starts beside it; ``a``'s first token still
    comes first (``b`` is later still), ``b`` is cancelled, and then ``a`` breaks. No candidate was left unstarted.
    """
    gateway, (_, b) = start(
        fakes,
        start_gateway,
        FakeBehavior(output_tokens=8, drop_after=3),
        policy={"hedge_after_s": 0.1, "hedge_budget": 1.0, "idle_timeout_s": 3.0},
    )
    steer = {"servers": {"a": {"ttft_s": 0.4}, "b": {"ttft_s": 1.2}}}
    parsed = stream(gateway, {"model": "m", "messages": MESSAGES, "stream": True, "fake": steer})
    assert_one_clean_answer(parsed)
    assert outcomes(gateway, 3) == [("b", "client_cancelled"), ("a", "broken_stream"), ("b", "ok")]
    assert b.app.state.requests == 2  # the hedge, then the continuation
    assert_carried_over(b.app.state.recorded[1].body, sent=3)
    assert breaks(gateway, "a", "recovered") == 1


def test_a_stream_that_won_a_cold_race_is_continued_by_a_racer_it_beat(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """A model's first stream races every deployment at once: none is left unstarted. The losers are drained
    (read on, unseen), not failed, so when the winner breaks one of them finishes the answer."""
    gateway, (_, b, c) = start(
        fakes,
        start_gateway,
        FakeBehavior(output_tokens=8, drop_after=3),
        capable=("b", "c"),
        others=("b", "c"),
        policy={"extends": "balanced", "idle_timeout_s": 3.0},
    )
    steer = {"servers": {"a": {"ttft_s": 0.05}, "b": {"ttft_s": 0.5}, "c": {"ttft_s": 0.8}}}
    parsed = stream(gateway, {"model": "m", "messages": MESSAGES, "stream": True, "fake": steer})
    assert_one_clean_answer(parsed)
    # The racers' order among unmeasured deployments is the router's draw: the first of them continues.
    (continued,) = [server for server in (b, c) if server.app.state.requests == 2]
    raced = [("a", "broken_stream"), ("b", "client_cancelled"), ("c", "client_cancelled")]
    assert sorted(outcomes(gateway, 4)) == sorted([*raced, (continued.name, "ok")])
    assert_carried_over(continued.app.state.recorded[1].body, sent=3)
