"""Provider faults on real loopback servers: each ends in a correct answer or a clean, bounded error.

This module holds the faults not covered elsewhere, and this docstring indexes where every
fault of issue 6's list is tested (``module::test``; ``tf`` is this module):

- 429 with Retry-After, not retried within it:
  tf::test_a_rate_limited_provider_is_left_alone_until_it_may_be_asked[retry-after],
  test_attempts::test_rate_limited_then_served,
  test_errors::test_all_providers_rate_limited_is_429_with_retry_after,
  test_routing_live::test_retry_after_sets_the_cool_down
- 429 without Retry-After, no hammering:
  tf::test_a_rate_limited_provider_is_left_alone_until_it_may_be_asked[no-retry-after],
  test_routing_live::test_a_429_without_retry_after_cools_down_at_once
- 500 once: tf::test_a_500_once_costs_one_fallback_and_nothing_more,
  test_attempts::test_failed_first_attempt_falls_back[500]
- 503 persistent: tf::test_a_persistent_503_opens_the_circuit_and_others_serve,
  test_errors::test_all_providers_503_is_503
- connection refused: test_attempts::test_connection_refused_falls_back
- connection reset before headers: tf::test_a_connection_reset_before_headers_falls_back (retried when alone)
- no response at all (bounded by the timeout, not retried):
  tf::test_a_silent_provider_is_bounded_by_its_timeout_and_not_retried,
  test_attempts::test_failed_first_attempt_falls_back[hang-before-headers]
- slow first token (fails over at the TTFT limit):
  test_attempts::test_first_token_timeout_falls_back_and_cancels,
  test_errors::test_all_providers_time_out_is_504
- stream cut mid-answer: test_streaming::test_break_after_bytes_ends_with_an_error_event,
  tf::test_a_cut_in_the_middle_of_an_event_never_garbles_the_stream,
  test_recovery (finished elsewhere when a deployment can continue)
- stream stall: test_streaming::test_stall_mid_stream_hits_the_idle_timeout,
  test_recovery::test_every_kind_of_break_is_recovered[stall]
- malformed chunk: test_streaming::test_malformed_chunk_mid_stream_is_relayed_and_recorded
- missing [DONE]: test_streaming::test_missing_done_after_finish_reason_ends_cleanly,
  test_streaming::test_missing_done_without_finish_reason_is_an_error
- content-filter 400s (not retried, reason propagated):
  test_errors::test_upstream_client_fault_is_relayed_as_is_and_not_retried; a context-length 400 moves
  to a larger window: test_retries::test_a_prompt_too_long_for_8k_is_answered_by_the_128k_deployment,
  tf::test_an_error_event_that_blames_the_request_is_relayed_not_retried
- error event before the first token: tf::test_an_error_event_before_the_first_token_falls_back
- error event mid-stream: test_streaming::test_error_event_mid_stream_is_relayed,
  test_recovery::test_every_kind_of_break_is_recovered[error-event]
- a provider flapping down and up: tf::test_a_flapping_provider_is_avoided_then_returns
- the model that actually answered: tf::test_the_response_names_the_model_that_answered
- client disconnect storm, no upstream leak: tf::test_a_disconnect_storm_leaks_no_upstream_connection,
  test_streaming::test_client_hang_up_mid_stream_cancels_upstream
- mid-stream recovery: test_recovery (the whole module)
- under load (two replicas, Redis restarted, a provider killed): benchmarks/soak/, results in
  benchmarks/results/soak.md
- the same faults on the Responses and Messages APIs (error before headers, stall before the first
  token, error event before it: fallback; break, stall and error event after bytes: that API's error
  event; ``response.incomplete``): test_responses_api and test_messages_api, the
  ``test_a_failure_before_the_first_token_falls_back`` and ``..._after_bytes_...`` tests
- every real server's stream shape: test_stream_shapes (one captured stream each)
- a redirect (never followed), a 204, an empty or HTML 200 to a whole request: fallback, else a 502:
  tf::test_a_success_or_redirect_status_without_an_answer_falls_back_or_is_a_502,
  tf::test_a_stream_answered_with_a_redirect_or_no_content_is_a_502_in_the_apis_shape,
  tf::test_an_id_addressed_call_answered_with_a_redirect_is_a_502_never_followed
- an empty stream is the provider's answer, not repeated:
  tf::test_a_stream_that_ends_before_any_output_is_the_providers_answer_not_repeated
- a proxy's HTML 4xx in the client's API shape:
  tf::test_a_client_fault_status_with_an_html_body_reaches_the_client_in_its_apis_shape
- rate-limit headers of infinity: tf::test_a_rate_limit_header_of_infinity_never_fails_the_answer
- what a provider may make the gateway hold, each past its bound the provider's failure:
  a whole answer (``[limits] max_answer_bytes``):
  test_upstream_caps::test_a_whole_answer_of_the_limit_is_relayed_and_one_byte_more_falls_back,
  test_upstream_caps::test_an_endless_whole_answer_is_a_502_in_the_clients_shape_once_past_the_limit;
  a response head: test_upstream_caps::test_a_response_head_that_never_ends_falls_back_or_is_a_502;
  a chunked answer's trailers: test_upstream_caps::test_trailers_that_never_end_fall_back_or_are_a_502;
  one event of a stream, or what comes before its first output:
  test_upstream_caps::test_a_stream_that_never_ends_an_event_or_never_says_anything_falls_back_at_its_bound,
  test_upstream_caps::test_an_event_that_never_ends_mid_answer_ends_the_clients_stream_with_an_error_event
- a 200 whose body is an error object (whole or stream): the request's fault relayed as a 400 in the client's shape,
  the provider's a fallback: test_error_answers (the whole module)
- an answer whose fields hold what its API never allows there (a number for ``tool_calls``): relayed as it came,
  or a 502 in the client's API when a translation cannot read it, its attempt recorded either way:
  tf::test_a_whole_answer_of_an_odd_shape_is_relayed_and_its_attempt_recorded; every reader over any JSON:
  test_odd_answers
"""

from __future__ import annotations

import asyncio
import importlib
import json
import random
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from gateway.config import GatewayConfig
from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from gateway.sessions.response_owners import Owner
from tests.raw_upstream import RawUpstream
from tests.support.clients import MESSAGES, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
SHORT = {"first_token_timeout_s": 0.3, "idle_timeout_s": 0.3, "connect_timeout_s": 1.0}
CHAT = {"model": "m", "messages": MESSAGES}


def raw_config(first: RawUpstream, others: list[FakeServer], capable: tuple[str, ...] = ()) -> GatewayConfig:
    """A config whose first deployment is the raw upstream (named "raw"), then the fakes in order."""
    return gateway_config(
        [first, *others],
        base_policy={"extends": "fixed-order", **SHORT},
        deployments={p.name: {"continue_prefill": True} for p in others if p.name in capable},
    )


def served_by(gateway: Gateway, stream: bool = True, fake: dict[str, Any] | None = None) -> tuple[str, int]:
    """The provider that answered and the attempt count, after checking the answer is whole."""
    body = {**CHAT, "stream": stream, **({"fake": fake} if fake else {})}
    response = httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=10)
    assert response.status_code == 200, response.text
    if stream:
        assert response.content.endswith(b"data: [DONE]\n\n")
    return response.headers["x-gateway-provider"], int(response.headers["x-gateway-attempts"])


def outcomes(gateway: Gateway, count: int) -> list[tuple[str, str]]:
    wait_until(lambda: len(gateway.samples.samples) >= count, what=f"{count} samples")
    return [(s.provider, s.outcome) for s in gateway.samples.samples]


# -- Rate limits, transient and persistent errors -----------------------------------------------


@pytest.mark.parametrize(
    ("retry_after", "cooldown_s"),
    [("1", 30.0), (None, 1.0)],
    ids=["retry-after", "no-retry-after"],
)
def test_a_rate_limited_provider_is_left_alone_until_it_may_be_asked(
    fakes: Fakes, start_gateway: StartGateway, retry_after: str | None, cooldown_s: float
) -> None:
    """One 429, then silence towards that provider for its Retry-After (else the policy's cool-down)."""
    limited = fakes.start("a", FakeBehavior(status=429, retry_after=retry_after, fail_first=1))
    backup = fakes.start("b")
    gateway = start_gateway(gateway_config([limited, backup], policy={**SHORT, "cooldown_s": cooldown_s}))
    assert served_by(gateway) == ("b", 2)
    refused_at = limited.app.state.last_request_at  # when the request answered with a 429 arrived
    assert refused_at is not None
    providers = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        provider, attempts = served_by(gateway)
        providers.append(provider)
        if provider == "a":
            break
        assert attempts == 1  # straight to b: a is not asked, not even as a first try
        time.sleep(0.05)  # pacing the traffic, not waiting for a condition
    assert providers[-1] == "a", "a was never asked again"
    assert limited.app.state.requests == 2  # the 429, then the probe that found it healthy
    # Timed at the provider, from the 429's request to the next: the gateway's cool-down starts
    # between the two, so no client-side timing (off by the fallback's own milliseconds) is needed.
    asked_again_at = limited.app.state.last_request_at
    assert asked_again_at is not None
    waited = asked_again_at - refused_at
    assert waited >= 1.0  # not within its Retry-After (or cool-down)
    # b carried the traffic meanwhile: every request before a was asked again (how many fit in the wait is the
    # machine's pace, not the gateway's behaviour).
    assert len(providers) >= 2 and set(providers[:-1]) == {"b"}


def test_a_500_once_costs_one_fallback_and_nothing_more(fakes: Fakes, start_gateway: StartGateway) -> None:
    flaky, backup = fakes.start("a", FakeBehavior(status=500, fail_first=1)), fakes.start("b")
    gateway = start_gateway(gateway_config([flaky, backup], policy=SHORT))
    assert served_by(gateway) == ("b", 2)
    assert [served_by(gateway, stream=i % 2 == 0) for i in range(4)] == [("a", 1)] * 4  # no circuit for one error
    assert outcomes(gateway, 6)[:2] == [("a", "upstream_error"), ("b", "ok")]


def test_a_persistent_503_opens_the_circuit_and_others_serve(fakes: Fakes, start_gateway: StartGateway) -> None:
    down, backup = fakes.start("a", FakeBehavior(status=503)), fakes.start("b")
    # The default test deadlines (5 s), not SHORT's 0.3 s: the 503s come at once, and a 0.3 s first-token
    # deadline only timed the healthy backup out on a loaded machine (a 504, seen once at load average 15).
    policy = {"failure_threshold": 3, "cooldown_s": 30.0}
    gateway = start_gateway(gateway_config([down, backup], policy=policy))
    replies = [served_by(gateway, stream=i % 2 == 0) for i in range(10)]
    assert all(provider == "b" for provider, _ in replies)
    assert [attempts for _, attempts in replies] == [2, 2, 2] + [1] * 7  # the circuit opened after 3 failures
    assert down.app.state.requests == 3


# -- Below HTTP: resets, silence, a cut mid-event ------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_a_connection_reset_before_headers_falls_back(
    fakes: Fakes, start_gateway: StartGateway, raw: Callable[..., RawUpstream], stream: bool
) -> None:
    reset = raw("reset")
    gateway = start_gateway(raw_config(reset, [fakes.start("b")]))
    assert served_by(gateway, stream) == ("b", 2)
    assert reset.connections == 1
    assert outcomes(gateway, 2) == [("raw", "upstream_error"), ("b", "ok")]
    # Alone, it is retried (a reset before the headers is safe to repeat), then a clean 502 naming the provider.
    alone = start_gateway(raw_config(reset, []))
    response = httpx.post(alone.base_url + "/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
    assert response.status_code == 502
    assert reset.connections == 4  # 1 above, then the lone deployment's first try and its 2 retries
    message = response.json()["error"]["message"]
    assert message == "no provider could answer (3 attempts); last error: raw: cannot reach upstream (" + (
        "the connection to the provider was reset)"
    )


@pytest.mark.parametrize("stream", [True, False])
def test_a_silent_provider_is_bounded_by_its_timeout_and_not_retried(
    fakes: Fakes, start_gateway: StartGateway, raw: Callable[..., RawUpstream], stream: bool
) -> None:
    silent = raw("silent")
    gateway = start_gateway(raw_config(silent, [fakes.start("b")]))
    assert served_by(gateway, stream) == ("b", 2)
    assert outcomes(gateway, 2) == [("raw", "timeout"), ("b", "ok")]
    alone = start_gateway(raw_config(silent, []))
    started = time.monotonic()
    response = httpx.post(alone.base_url + "/chat/completions", json={**CHAT, "stream": stream}, timeout=10)
    assert response.status_code == 504, response.text
    assert time.monotonic() - started < 5  # the 0.3 s timeout ended it, far below the client's own 10 s
    assert silent.connections == 2  # once per request: never asked twice


def sse(*events: Any) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def chunk(content: str, role: bool = False) -> dict[str, Any]:
    delta = {"role": "assistant", "content": content} if role else {"content": content}
    return {
        "id": "raw-1",
        "object": "chat.completion.chunk",
        "model": "raw-upstream",
        "choices": [{"index": 0, "delta": delta}],
    }


CUT_MID_EVENT = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    + sse(chunk("", role=True), *(chunk(w) for w in answer_words(0, 3)))
    + sse(chunk(answer_words(3, 1)[0]))[:40]  # half of the fourth word's event, then the reset
)


@pytest.mark.parametrize("capable", [False, True], ids=["error-event", "recovered"])
def test_a_cut_in_the_middle_of_an_event_never_garbles_the_stream(
    fakes: Fakes, start_gateway: StartGateway, raw: Callable[..., RawUpstream], capable: bool
) -> None:
    cut = raw("script", CUT_MID_EVENT)
    backup = fakes.start("b", FakeBehavior(output_tokens=8))
    config = raw_config(cut, [backup], capable=("b",) if capable else ())
    gateway = start_gateway(config)
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "stream": True}, timeout=10)
    blocks = [b for b in response.content.split(b"\n\n") if b]
    parsed = [json.loads(b[6:]) for b in blocks if b != b"data: [DONE]"]  # every event whole and valid
    text = "".join(c["delta"].get("content") or "" for e in parsed for c in e.get("choices", []))
    if capable:
        assert text == "".join(answer_words(0, 8)) and blocks[-1] == b"data: [DONE]"
    else:
        assert text == "".join(answer_words(0, 3))  # the half event was never sent
        assert parsed[-1]["error"]["code"] == "upstream_stream_broken"
        # Plain words, not aiohttp's "TransferEncodingError: 400, message=..." (that 400 is no HTTP status);
        # which words depends on whether the reset or the close reached the gateway first.
        assert parsed[-1]["error"]["message"] in (
            "raw: the provider closed the stream mid-answer",
            "raw: the connection to the provider was reset mid-answer",
            "raw: upstream stream ended before the answer was complete",
        )


def _whole(body: dict[str, Any]) -> bytes:
    """A whole keep-alive HTTP response carrying ``body`` as JSON."""
    data = json.dumps(body).encode()
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(data), data)


ODD_SHAPES = {
    "tool_calls-a-number": {"role": "assistant", "content": "hi", "tool_calls": 5},
    "tool_calls-a-string": {"role": "assistant", "content": None, "tool_calls": "call"},
    "function_call-a-list": {"role": "assistant", "content": "hi", "function_call": [1, 2]},
    "content-a-number": {"role": "assistant", "content": 7},
}


@pytest.mark.parametrize("shape", sorted(ODD_SHAPES))
@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_a_whole_answer_of_an_odd_shape_is_relayed_and_its_attempt_recorded(
    start_gateway: StartGateway, raw: Callable[..., RawUpstream], shape: str, api: str
) -> None:
    # A provider's whole answer whose fields hold what no API allows there: the client gets an answer (its own
    # API's, the odd field left out where a translation cannot carry it) or an error in its API's shape, and the
    # attempt is recorded either way: its slot and in-flight count are given back.
    body = {
        "id": "x",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": ODD_SHAPES[shape], "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    odd = raw("stale", _whole(body))
    gateway = start_gateway(raw_config(odd, []))
    if api == "chat":
        response = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=10)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"] == ODD_SHAPES[shape]  # relayed as it came
    elif api == "messages":
        request = {"model": "m", "max_tokens": 64, "messages": MESSAGES}
        response = httpx.post(gateway.base_url + "/messages", json=request, timeout=10)
        # Not the client's fault (no 400): the provider's answer holds what the chat API never allows there.
        assert response.status_code == 502, response.text
        error = response.json()
        assert error["type"] == "error" and error["error"]["type"] == "api_error"
        assert error["error"]["message"].startswith("the provider's answer could not be read as the chat API")
    else:
        response = httpx.post(gateway.base_url + "/responses", json={"model": "m", "input": "hi"}, timeout=10)
        assert response.status_code == 502, response.text
        error = response.json()["error"]
        assert (error["type"], error["code"]) == ("upstream_error", "upstream_unreadable")
        assert error["message"].startswith("the provider's answer could not be read as the chat API")
    wait_until(lambda: len(gateway.samples.samples) >= 1, what="the attempt's sample")
    routes = httpx.get(gateway.base_url + "/gateway/routes", timeout=10).json()
    assert sum(d["in_flight"] for m in routes["data"] for d in m["deployments"]) == 0


@pytest.mark.parametrize(
    "header",
    ["x-ratelimit-remaining-requests: inf", "x-ratelimit-remaining-tokens: 1e400"],
)
def test_a_rate_limit_header_of_infinity_never_fails_the_answer(
    start_gateway: StartGateway, raw: Callable[..., RawUpstream], header: str
) -> None:
    # float() reads these as infinity, and int() of it raised OverflowError on every answer: a 500 for a 200.
    answer = _whole({"id": "x", "object": "chat.completion", "model": "m", "choices": []})
    odd = raw("stale", answer.replace(b"\r\n\r\n", f"\r\n{header}\r\n\r\n".encode(), 1))
    gateway = start_gateway(raw_config(odd, []))
    response = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=10)
    assert response.status_code == 200, response.text
    assert outcomes(gateway, 1) == [("raw", "ok")]


NOT_AN_ANSWER = {
    "redirect-307": b"HTTP/1.1 307 Temporary Redirect\r\nlocation: %(to)s\r\ncontent-length: 0\r\n\r\n",
    "redirect-301": b"HTTP/1.1 301 Moved Permanently\r\nlocation: %(to)s\r\ncontent-length: 0\r\n\r\n",
    "204": b"HTTP/1.1 204 No Content\r\n\r\n",
    "200-html": b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 13\r\n\r\n<html></html>",
    "200-empty": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n",
}


@pytest.mark.parametrize("answer", sorted(NOT_AN_ANSWER))
def test_a_success_or_redirect_status_without_an_answer_falls_back_or_is_a_502(
    fakes: Fakes, start_gateway: StartGateway, raw: Callable[..., RawUpstream], answer: str
) -> None:
    # Relayed as it came, the OpenAI SDK returned the HTML page as a str, failed to parse the empty 200 or 204, or
    # got the provider's redirect. Nothing reached the client yet: the next deployment answers, else a 502.
    elsewhere = raw("reset")
    script = NOT_AN_ANSWER[answer] % {b"to": elsewhere.base_url.encode() + b"/chat/completions?sig=1"}
    gateway = start_gateway(raw_config(raw("stale", script), [fakes.start("b")]))
    assert served_by(gateway, stream=False) == ("b", 2)
    alone = start_gateway(raw_config(raw("stale", script), []))
    with pytest.raises(openai.APIStatusError) as raised:
        sdk(alone.base_url).chat.completions.create(model="m", messages=MESSAGES)
    assert raised.value.status_code == 502
    error = raised.value.body
    assert isinstance(error, dict) and error["type"] == "upstream_error"
    if answer.startswith("redirect"):
        assert error["message"].endswith(
            f"upstream returned {answer[-3:]}: a redirect to {elsewhere.base_url}/chat/completions, not followed"
            " (check its base_url)"
        )
    else:
        assert error["code"] == "upstream_unreadable"
        assert error["message"].endswith("not a JSON answer")
    assert elsewhere.connections == 0  # the redirect was never followed: the key went nowhere else
    assert outcomes(alone, 1)[-1] == ("raw", "upstream_error")


@pytest.mark.parametrize(
    "body",
    [b"", b": keep-alive\n\n", json.dumps({"id": "x", "object": "chat.completion", "choices": []}).encode()],
    ids=["empty", "only-a-comment", "a-whole-answer"],
)
def test_a_stream_that_ends_before_any_output_is_the_providers_answer_not_repeated(
    start_gateway: StartGateway, raw: Callable[..., RawUpstream], body: bytes
) -> None:
    # It was raised without a status, which reads as a connection that failed before any answer: a lone
    # deployment was asked three times for what it had already answered (retry.safe_to_repeat).
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body)
    empty = raw("stale", head + body)
    gateway = start_gateway(raw_config(empty, []))
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "stream": True}, timeout=10)
    assert response.status_code == 502, response.text
    assert response.json()["error"]["message"].endswith("raw: stream ended before any output")
    assert empty.connections == 1


NGINX_413 = b"<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n</html>\r\n"


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_a_client_fault_status_with_an_html_body_reaches_the_client_in_its_apis_shape(
    start_gateway: StartGateway, raw: Callable[..., RawUpstream], api: str
) -> None:
    # nginx in front of a provider refuses a large body with its own HTML page; relayed as is to a native client,
    # the SDK found no error object in it (OpenAI's: a message that is the whole page, no type or code).
    head = b"HTTP/1.1 413 Request Entity Too Large\r\ncontent-type: text/html\r\ncontent-length: %d\r\n\r\n"
    proxy = raw("stale", head % len(NGINX_413) + NGINX_413)
    config = gateway_config(
        [proxy], base_policy={"extends": "fixed-order", **SHORT}, provider_options={"raw": {"apis": [api]}}
    )
    gateway = start_gateway(config)
    if api == "chat":
        response = httpx.post(gateway.base_url + "/chat/completions", json=CHAT, timeout=10)
        error = response.json()["error"]
    else:
        request = {"model": "m", "max_tokens": 8, "messages": MESSAGES}
        response = httpx.post(gateway.base_url + "/messages", json=request, timeout=10)
        assert response.json()["type"] == "error"
        error = response.json()["error"]
    assert response.status_code == 413 and response.headers["content-type"] == "application/json"
    assert error["type"] == ("invalid_request_error" if api == "chat" else "request_too_large")  # as each API says
    assert "413 Request Entity Too Large" in error["message"]


def test_an_id_addressed_call_answered_with_a_redirect_is_a_502_never_followed(
    start_gateway: StartGateway, raw: Callable[..., RawUpstream]
) -> None:
    # Relayed whole, the client got the 307 without its location (the gateway passes only a few headers on).
    elsewhere = raw("reset")
    odd = raw("stale", NOT_AN_ANSWER["redirect-307"] % {b"to": elsewhere.base_url.encode() + b"/responses/resp_1"})
    config = gateway_config(
        [odd], base_policy={"extends": "fixed-order", **SHORT}, provider_options={"raw": {"apis": ["responses"]}}
    )
    gateway = start_gateway(config)
    gateway.runtime.owners.remember("resp_1", Owner("m", "raw"))  # as the gateway binds a response it relayed
    response = httpx.get(gateway.base_url + "/responses/resp_1", timeout=10)
    assert response.status_code == 502, response.text
    assert response.json()["error"]["message"] == (
        f"raw: upstream returned 307: a redirect to {elsewhere.base_url}/responses/resp_1, not followed"
        " (check its base_url)"
    )
    assert elsewhere.connections == 0


@pytest.mark.parametrize("answer", ["redirect-307", "204"])
def test_a_stream_answered_with_a_redirect_or_no_content_is_a_502_in_the_apis_shape(
    start_gateway: StartGateway, raw: Callable[..., RawUpstream], answer: str
) -> None:
    odd = raw("stale", NOT_AN_ANSWER[answer] % {b"to": b"https://elsewhere.example/v1"})
    gateway = start_gateway(raw_config(odd, []))
    request = {"model": "m", "max_tokens": 16, "messages": MESSAGES, "stream": True}
    response = httpx.post(gateway.base_url + "/messages", json=request, timeout=10)
    assert response.status_code == 502, response.text
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "api_error"
    words = "a redirect to https://elsewhere.example/v1" if answer.startswith("redirect") else "before any output"
    assert words in error["error"]["message"]


# -- Error events before the first token ---------------------------------------------------------


def test_an_error_event_before_the_first_token_falls_back(fakes: Fakes, start_gateway: StartGateway) -> None:
    """A 200 whose stream opens with an error (overloaded, internal): nothing reached the client yet."""
    failing, backup = fakes.start("a", FakeBehavior(error_event_after=0)), fakes.start("b")
    gateway = start_gateway(gateway_config([failing, backup], policy=SHORT))
    assert served_by(gateway) == ("b", 2)
    assert outcomes(gateway, 2) == [("a", "upstream_error"), ("b", "ok")]
    alone = start_gateway(gateway_config([failing], policy=SHORT))
    response = httpx.post(alone.base_url + "/chat/completions", json={**CHAT, "stream": True}, timeout=10)
    assert response.status_code == 502
    assert response.json()["error"]["message"].endswith(
        "a: upstream error before the first token: fake a: error mid-stream"
    )


def test_an_error_event_that_blames_the_request_is_relayed_not_retried(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    refusing = fakes.start("a", FakeBehavior(error_event_after=0, error_code="context_length_exceeded"))
    backup = fakes.start("b")
    gateway = start_gateway(
        gateway_config([refusing, backup], policy=SHORT, deployments={"b": {"continue_prefill": True}})
    )
    response = httpx.post(gateway.base_url + "/chat/completions", json={**CHAT, "stream": True}, timeout=10)
    last = json.loads(response.content.split(b"\n\n")[-2][6:])
    assert last["error"]["code"] == "context_length_exceeded"  # the provider's reason, as it said it
    assert backup.app.state.requests == 0
    assert outcomes(gateway, 1) == [("a", "client_error")]


# -- Health over time, the answering model, disconnects ------------------------------------------


def test_a_flapping_provider_is_avoided_then_returns(fakes: Fakes, start_gateway: StartGateway) -> None:
    flapping, steady = fakes.start("a"), fakes.start("b")
    # The flapping is by status (503), not by time: the first-token deadline is the default's, so that a busy
    # machine's pause of a few tenths of a second on steady b (the only provider while a's circuit is open) is
    # not read as a fault of b.
    policy = {"failure_threshold": 2, "cooldown_s": 1.0, "max_cooldown_s": 2.0}
    gateway = start_gateway(gateway_config([flapping, steady], policy=policy))
    for cycle in range(2):
        assert served_by(gateway) == ("a", 1)
        httpx.post(flapping.url + "/_fake/behavior", json={"status": 503}).raise_for_status()
        failures = 0
        while (reply := served_by(gateway))[1] == 2:  # each request still tries a first, then b answers
            assert reply[0] == "b"
            failures += 1
            assert failures <= 20, f"the circuit did not open in cycle {cycle}"
        asked = flapping.app.state.requests
        assert [served_by(gateway) for _ in range(3)] == [("b", 1)] * 3  # b alone serves, a is left alone
        assert flapping.app.state.requests == asked
        httpx.post(flapping.url + "/_fake/behavior", json={"status": 200}).raise_for_status()
        deadline = time.monotonic() + 5
        while served_by(gateway)[0] != "a":  # after the cool-down a half-open probe finds it healthy
            assert time.monotonic() < deadline, f"a did not return in cycle {cycle}"
            time.sleep(0.05)  # pacing the traffic, not waiting for a condition
        # Closed again: a answers again. A recovered leader on thin evidence may be raced by the next one (a second
        # attempt that a wins), so the attempts are not counted here; a answering is what closed means.
        assert [served_by(gateway)[0] for _ in range(3)] == ["a"] * 3


@pytest.mark.parametrize("stream", [False, True])
def test_the_response_names_the_model_that_answered(fakes: Fakes, start_gateway: StartGateway, stream: bool) -> None:
    failing = fakes.start("a", FakeBehavior(status=500, model="a-model-v1"))
    answering = fakes.start("b", FakeBehavior(model="b-model-2025-01"))
    config = gateway_config([failing, answering], policy=SHORT, deployments={"b": {"name": "b-east"}})
    gateway = start_gateway(config)
    client = sdk(gateway.base_url)
    if stream:
        raw_stream = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, stream=True)
        models = {c.model for c in raw_stream.parse()}
        headers = raw_stream.headers
    else:
        raw_whole = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)
        models = {raw_whole.parse().model}
        headers = raw_whole.headers
    assert models == {"b-model-2025-01"}  # the upstream's own name, untouched
    assert (headers["x-gateway-provider"], headers["x-gateway-deployment"]) == ("b", "b-east")
    recorded = answering.app.state.recorded[0].body
    assert recorded is not None and recorded["model"] == "b-upstream"  # what was asked of it


def test_a_disconnect_storm_leaks_no_upstream_connection(fakes: Fakes, start_gateway: StartGateway) -> None:
    """Clients hang up at random points (before the first token, mid-answer); every upstream stream closes."""
    # The answer lasts 10 s: a client on a loaded machine may read 40 pieces only after seconds (the gateway's writes
    # fill the socket's buffer meanwhile), and one whose answer ended first would not have hung up at all.
    slow = fakes.start("a", FakeBehavior(ttft_s=0.05, output_tokens=2000, tokens_per_s=200))
    gateway = start_gateway(gateway_config([slow], policy={"first_token_timeout_s": 5.0, "idle_timeout_s": 5.0}))
    rng = random.Random(6)
    count = 60

    async def hang_up_early(client: httpx.AsyncClient, after_s: float) -> None:
        """Gone within ``after_s``: before the first token, or early in the answer, as the machine allows."""
        body = {**CHAT, "stream": True}
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(after_s):
                async with client.stream("POST", gateway.base_url + "/chat/completions", json=body) as response:
                    async for _ in response.aiter_raw():
                        pass

    async def hang_up_mid_answer(client: httpx.AsyncClient, chunks: int) -> None:
        """Gone after ``chunks`` pieces of the answer: it surely reached the provider, however busy the machine."""
        body = {**CHAT, "stream": True}
        async with client.stream("POST", gateway.base_url + "/chat/completions", json=body) as response:
            received = 0
            async for _ in response.aiter_raw():
                received += 1
                if received >= chunks:
                    break  # leaving the block closes the connection mid-answer

    async def storm() -> None:
        limits = httpx.Limits(max_connections=count)
        async with httpx.AsyncClient(timeout=10, limits=limits) as client:
            early = (hang_up_early(client, rng.uniform(0.01, 0.3)) for _ in range(count // 2))
            mid = (hang_up_mid_answer(client, rng.randint(1, 40)) for _ in range(count - count // 2))
            await asyncio.gather(*early, *mid)

    asyncio.run(storm())
    wait_until(lambda: slow.app.state.open_streams == 0, timeout=5, what="every upstream stream closed")
    # Every attempt the gateway started has ended (a client that left while its attempt was still
    # connecting leaves a sample but no request at the fake; one that left earlier, neither).
    inflight = {"provider": "a"}
    gauge = gateway.metrics.registry.get_sample_value
    wait_until(lambda: gauge("gateway_inflight_requests", inflight) == 0, what="no attempt in flight")
    assert len(gateway.samples.samples) >= slow.app.state.requests >= count - count // 2
    assert {s.outcome for s in gateway.samples.samples} == {"client_cancelled"}
    assert slow.app.state.completed == 0 and slow.app.state.max_open_streams > 1
    assert served_by(gateway, fake={"output_tokens": 4, "tokens_per_s": 0}) == ("a", 1)  # still healthy


def test_the_index_above_names_tests_that_exist() -> None:
    assert __doc__ is not None
    references = re.findall(r"\b(tf|test_\w+)::(test_\w+)", __doc__)
    assert len(references) > 25
    for module, name in references:
        tests = sys.modules[__name__] if module == "tf" else importlib.import_module(f"tests.{module}")
        assert callable(getattr(tests, name, None)), f"{module}::{name} does not exist"
