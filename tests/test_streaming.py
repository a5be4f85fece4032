"""The streaming relay: bytes untouched and flushed at once; a broken upstream ends the stream with an
error event, never as if complete; a client hanging up cancels the upstream at once."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from gateway.fakes import FakeBehavior
from tests.support.clients import MESSAGES, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
SHORT = {"first_token_timeout_s": 2.0, "idle_timeout_s": 0.3}
STREAM = {"model": "m", "messages": MESSAGES, "stream": True}


def events(body: bytes) -> list[bytes]:
    return [event for event in body.split(b"\n\n") if event]


def last_error(body: bytes) -> dict[str, Any]:
    last = events(body)[-1]
    assert last.startswith(b"data: {"), last
    error: dict[str, Any] = json.loads(last[6:])["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def post_stream(gateway: Gateway, fake: dict[str, Any] | None = None, path: str = "/chat/completions") -> bytes:
    body = (
        dict(STREAM, fake=fake or {}) if path == "/chat/completions" else {"model": "m", "prompt": "p", "stream": True}
    )
    response = httpx.post(gateway.base_url + path, json=body, timeout=10)
    assert response.status_code == 200
    return response.content


def sample_outcomes(gateway: Gateway, count: int) -> list[str]:
    wait_until(lambda: len(gateway.samples.samples) >= count, what=f"{count} samples")
    return [s.outcome for s in gateway.samples.samples]


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
def test_bytes_are_relayed_untouched(fakes: Fakes, start_gateway: StartGateway, path: str) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=6, model="pinned"))
    gateway = start_gateway(gateway_config([fake]))
    via = post_stream(gateway, path=path)
    body = (
        dict(STREAM, model="a-upstream")
        if path == "/chat/completions"
        else {"model": "x", "prompt": "p", "stream": True}
    )
    direct = httpx.post(fake.base_url + path, json=body, timeout=10).content

    def normalised(raw: bytes) -> bytes:
        raw = re.sub(rb'"id": "fake-\d+"', b'"id": "X"', raw)
        return re.sub(rb'"created": \d+', b'"created": 0', raw)

    # Same bytes, separators and spacing included: nothing was parsed and re-serialised.
    assert normalised(via) == normalised(direct)
    assert via.endswith(b"data: [DONE]\n\n")


def test_each_event_reaches_the_client_while_the_upstream_still_streams(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=10, tokens_per_s=10))
    gateway = start_gateway(gateway_config([fake]))
    with httpx.stream("POST", gateway.base_url + "/chat/completions", json=STREAM, timeout=10) as response:
        seen = b""
        pieces = response.iter_raw()
        for piece in pieces:
            seen += piece
            if b'"content": " the"' in seen:
                break
        # The first token is here and the upstream is still pacing the other nine: nothing was buffered.
        assert fake.app.state.completed == 0 and fake.app.state.open_streams == 1
        seen += b"".join(pieces)
    assert seen.endswith(b"data: [DONE]\n\n")


def test_break_after_bytes_ends_with_an_error_event(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=8, drop_after=3))
    backup = fakes.start("b")
    gateway = start_gateway(gateway_config([fake, backup], policy=SHORT))
    body = post_stream(gateway)
    assert b"[DONE]" not in body
    error = last_error(body)
    assert error["code"] == "upstream_stream_broken"
    assert error["message"] == "a: the provider closed the stream mid-answer"
    assert body.count(b'"content": " ') == 3  # what was relayed before the break stays relayed
    assert backup.app.state.requests == 0  # bytes were sent: too late to fall back
    with pytest.raises(openai.APIError, match="the provider closed the stream mid-answer"):
        list(sdk(gateway.base_url).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert sample_outcomes(gateway, 2) == ["broken_stream", "broken_stream"]


def test_missing_done_after_finish_reason_ends_cleanly(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=4, no_done=True))
    gateway = start_gateway(gateway_config([fake], policy=SHORT))
    body = post_stream(gateway)
    assert b'"finish_reason": "stop"' in events(body)[-2]
    assert events(body)[-1] == b"data: [DONE]" and body.count(b"[DONE]") == 1
    chunks = list(sdk(gateway.base_url).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert sample_outcomes(gateway, 2) == ["ok", "ok"]


def test_empty_answer_without_done_ends_cleanly_and_is_not_retried(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=0, no_done=True))
    backup = fakes.start("b")
    gateway = start_gateway(gateway_config([fake, backup], policy=SHORT))
    body = post_stream(gateway)
    assert b'"finish_reason": "stop"' in events(body)[-2] and events(body)[-1] == b"data: [DONE]"
    assert backup.app.state.requests == 0
    assert sample_outcomes(gateway, 1) == ["ok"]
    assert gateway.samples.samples[0].output_tokens == 0


@pytest.mark.parametrize("stream_options", [None, {"include_usage": True}])
def test_finished_answer_whose_done_never_comes_ends_cleanly_soon_after_the_finish(
    fakes: Fakes, start_gateway: StartGateway, stream_options: dict[str, bool] | None
) -> None:
    # The provider keeps the connection open after its finish_reason and never sends [DONE]: the
    # client's stream ends cleanly about FINISH_LINGER_S later, not after the (long) idle timeout.
    fake = fakes.start("a", FakeBehavior(output_tokens=4, no_done=True, linger_s=60))
    gateway = start_gateway(gateway_config([fake], policy={"first_token_timeout_s": 2.0, "idle_timeout_s": 30.0}))
    body = dict(STREAM, stream_options=stream_options)
    started = time.monotonic()
    response = httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=25)
    assert time.monotonic() - started < 10, "the stream waited for the idle timeout"
    assert b'"finish_reason": "stop"' in events(response.content)[-2]
    assert events(response.content)[-1] == b"data: [DONE]"
    assert sample_outcomes(gateway, 1) == ["ok"]
    wait_until(lambda: fake.app.state.open_streams == 0, what="lingering upstream dropped")


def test_missing_done_without_finish_reason_is_an_error(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=4, no_done=True, no_finish=True))
    gateway = start_gateway(gateway_config([fake], policy=SHORT))
    body = post_stream(gateway)
    assert b"[DONE]" not in body
    error = last_error(body)
    assert error["message"] == "a: upstream stream ended before the answer was complete"
    with pytest.raises(openai.APIError, match="ended before the answer was complete"):
        list(sdk(gateway.base_url).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert sample_outcomes(gateway, 2) == ["broken_stream", "broken_stream"]


def test_stall_mid_stream_hits_the_idle_timeout(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=8, stall_after=2))
    gateway = start_gateway(gateway_config([fake], policy=SHORT))
    body = post_stream(gateway)
    error = last_error(body)
    assert error["message"] == "a: no data from upstream within the idle timeout"
    assert b"[DONE]" not in body and body.count(b'"content": " ') == 2
    wait_until(lambda: fake.app.state.open_streams == 0, what="stalled upstream dropped")
    assert sample_outcomes(gateway, 1) == ["timeout"]
    assert gateway.samples.samples[0].output_tokens == 2


def test_error_event_mid_stream_is_relayed(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=8, error_event_after=2))
    gateway = start_gateway(gateway_config([fake], policy=SHORT))
    with pytest.raises(openai.APIError, match="fake a: error mid-stream"):
        list(sdk(gateway.base_url).chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert sample_outcomes(gateway, 1) == ["upstream_error"]


def test_malformed_chunk_mid_stream_is_relayed_and_recorded(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=4, malformed_after=2))
    gateway = start_gateway(gateway_config([fake], policy=SHORT))
    body = post_stream(gateway)
    assert b"data: {not json\n\n" in body  # the gateway never rewrites what it relays
    # The stream completed: not the provider's health failure, counted apart.
    assert sample_outcomes(gateway, 1) == ["ok"]
    malformed = {"model": "m", "provider": "a"}
    assert gateway.metrics.registry.get_sample_value("gateway_malformed_events_total", malformed) == 1


def test_client_hang_up_mid_stream_cancels_upstream(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a", FakeBehavior(output_tokens=500, tokens_per_s=20))
    gateway = start_gateway(gateway_config([fake]))
    with httpx.stream("POST", gateway.base_url + "/chat/completions", json=STREAM, timeout=10) as response:
        pieces = response.iter_raw()  # held, so that the connection stays open until the block ends
        for piece in pieces:
            if b'"content": " ' in piece:
                break
        assert fake.app.state.open_streams == 1
    # Closing an unfinished response drops the connection; the upstream must follow at once.
    wait_until(lambda: fake.app.state.open_streams == 0, timeout=2.0, what="upstream stream cancelled")
    assert fake.app.state.cancelled == 1 and fake.app.state.completed == 0
    assert sample_outcomes(gateway, 1) == ["client_cancelled"]
    (sample,) = gateway.samples.samples
    assert sample.ttft_s is not None and sample.output_tokens is not None and sample.output_tokens >= 1


@pytest.mark.parametrize("stream", [True, False])
def test_client_hang_up_during_first_token_wait_cancels(
    fakes: Fakes, start_gateway: StartGateway, stream: bool
) -> None:
    fake = fakes.start("a", FakeBehavior(ttft_s=30))
    backup = fakes.start("b")
    gateway = start_gateway(gateway_config([fake, backup], policy={"first_token_timeout_s": 20}))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gateway.base_url + "/chat/completions", json=dict(STREAM, stream=stream), timeout=0.3)
    wait_until(lambda: fake.app.state.cancelled == 1, timeout=2.0, what="upstream request cancelled")
    assert fake.app.state.open_streams == 0
    assert sample_outcomes(gateway, 1) == ["client_cancelled"]
    assert backup.app.state.requests == 0
