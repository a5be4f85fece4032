"""A real third-party server behind the gateway: llama.cpp's own server (``tests.llama_server``).

Chat completions, the Responses API and the Messages API, through the gateway and directly, with
the real SDKs: the same answers (greedy decoding, so deterministic). And the gateway's passive
clock against the server's own ``timings`` for the same request (it reports them in its usage
chunk): the gateway's first token must be within ``TTFT_TOLERANCE`` of the server's prompt time
(its first token is sampled as the prompt's evaluation ends), and the speed the gateway measured
(in the server's own tokens, over the gateway's answer window) within ``SPEED_TOLERANCE`` of its
``predicted_per_second``.
Answers are kept tiny (``MAX_TOKENS``) so the module runs in a few seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.config import GatewayConfig
from tests.aimock_server import AimockServer
from tests.llama_server import LlamaServer
from tests.support.clients import sdk
from tests.support.config import gateway_config
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
MAX_TOKENS = 12
PROMPT = "Write one short sentence about the sea."
TTFT_TOLERANCE = (0.5, 0.15)
"""(relative, absolute seconds): |gateway TTFT - server's prompt_ms| ≤ max(rel × expected, abs). The
gateway's clock also holds the HTTP round trip and the server's scheduling (measured here: 3-35 ms
over a 45-100 ms prompt time); the margin covers a 2-core machine shared with other work."""
SPEED_TOLERANCE = 0.25
"""Relative: the gateway's answer window holds network and event-loop jitter the server's does not
(measured here: within 1-2% of ``predicted_per_second`` at 20-37 tokens/s)."""


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    server = LlamaServer().start()
    try:
        yield server
    finally:
        server.stop()


def llama_config(server: LlamaServer) -> GatewayConfig:
    apis = {"llama": {"apis": ["chat", "responses", "messages"]}}
    return gateway_config([server], provider_options=apis, policy={"first_token_timeout_s": 30, "idle_timeout_s": 30})


def stream_chat(base_url: str, model: str) -> tuple[str, dict[str, float]]:
    """The answer text and the server's own ``timings`` of one streamed chat request."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    text: list[str] = []
    timings: dict[str, float] = {}
    with httpx.stream("POST", base_url + "/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices") or ():
                text.append((choice.get("delta") or {}).get("content") or "")
            timings = event.get("timings", timings)
    return "".join(text), timings


def test_chat_through_the_gateway_matches_direct_and_its_timings(
    llama: LlamaServer, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(llama_config(llama))
    stream_chat(llama.base_url, "warm-up")  # the first request after start pays one-off costs
    direct, _ = stream_chat(llama.base_url, "llama-upstream")
    through, timings = stream_chat(gateway.base_url, "m")
    assert through == direct and through
    wait_until(lambda: len(gateway.samples.samples) == 1, what="the attempt recorded")
    sample = gateway.samples.samples[0]
    assert sample.outcome == "ok" and sample.usage_completion_tokens == timings["predicted_n"]
    assert sample.ttft_s is not None and sample.tokens_per_s is not None and sample.output_tokens
    expected_ttft = timings["prompt_ms"] / 1000  # the first token is sampled at the end of the prompt's evaluation
    relative, absolute = TTFT_TOLERANCE
    assert abs(sample.ttft_s - expected_ttft) <= max(relative * expected_ttft, absolute), (sample.ttft_s, timings)
    window = sample.output_tokens / sample.tokens_per_s  # last answer token - first answer token
    server_tokens_per_s = (timings["predicted_n"] - 1) / window
    speed = timings["predicted_per_second"]
    assert abs(server_tokens_per_s - speed) <= SPEED_TOLERANCE * speed, (server_tokens_per_s, timings)


def test_responses_through_the_gateway_match_direct(llama: LlamaServer, start_gateway: StartGateway) -> None:
    gateway = start_gateway(llama_config(llama))
    with sdk(gateway.base_url, timeout=60) as through, sdk(llama.base_url, timeout=60) as direct:
        args = {"input": PROMPT, "max_output_tokens": MAX_TOKENS, "temperature": 0}
        straight = direct.responses.create(model="llama-upstream", **args)  # type: ignore[call-overload]
        via = through.responses.create(model="m", **args)  # type: ignore[call-overload]
        # responses.create(stream=True), not responses.stream(): llama.cpp's events leave out the
        # output_index the SDK's accumulating helper needs.
        events = through.responses.create(model="m", stream=True, **args)  # type: ignore[call-overload]
        streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert via.output_text == straight.output_text == streamed and streamed
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both answers recorded")
    sample = gateway.samples.samples[-1]
    assert sample.endpoint == "responses" and sample.outcome == "ok" and sample.ttft_s is not None
    assert sample.usage_completion_tokens is not None


def test_messages_through_the_gateway_match_direct(llama: LlamaServer, start_gateway: StartGateway) -> None:
    gateway = start_gateway(llama_config(llama))
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": PROMPT}]
    with (
        anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=60) as through,
        anthropic.Anthropic(base_url=llama.url, api_key="k", max_retries=0, timeout=60) as direct,
    ):
        greedy = {"temperature": 0}
        straight = direct.messages.create(model="x", max_tokens=MAX_TOKENS, messages=messages, extra_body=greedy)
        via = through.messages.create(model="m", max_tokens=MAX_TOKENS, messages=messages, extra_body=greedy)
        with through.messages.stream(model="m", max_tokens=MAX_TOKENS, messages=messages, extra_body=greedy) as stream:
            streamed = "".join(stream.text_stream)
    text = [b.text for b in straight.content if b.type == "text"][0]
    assert [b.text for b in via.content if b.type == "text"][0] == text == streamed and text
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both answers recorded")
    sample = gateway.samples.samples[-1]
    assert sample.endpoint == "messages" and sample.outcome == "ok" and sample.ttft_s is not None
    assert sample.usage_prompt_tokens is not None and sample.usage_completion_tokens == MAX_TOKENS


def test_openai_sdk_chat_through_the_gateway(llama: LlamaServer, start_gateway: StartGateway) -> None:
    gateway = start_gateway(llama_config(llama))
    with sdk(gateway.base_url, timeout=60) as client:
        whole = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": PROMPT}], max_tokens=MAX_TOKENS, temperature=0
        )
    assert whole.choices[0].message.content
    with pytest.raises(openai.BadRequestError), sdk(gateway.base_url) as client:
        client.chat.completions.create(model="m", messages=[], max_tokens=1)


def test_anthropic_sdk_through_translation_to_llama_cpp(llama: LlamaServer, start_gateway: StartGateway) -> None:
    """llama.cpp declared chat-only: the Messages client is served by translation, with the answer the server's
    own chat completions give the same prompt (greedy), streamed and whole."""
    config = gateway_config(
        [llama],
        provider_options={"llama": {"apis": ["chat"]}},
        policy={"first_token_timeout_s": 30, "idle_timeout_s": 30},
    )
    gateway = start_gateway(config)
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": PROMPT}]
    with sdk(llama.base_url) as direct:
        answer = direct.chat.completions.create(
            model="x", messages=[{"role": "user", "content": PROMPT}], max_tokens=MAX_TOKENS, temperature=0
        )
    expected = answer.choices[0].message.content
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=60) as through:
        greedy = {"temperature": 0}
        via = through.messages.create(model="m", max_tokens=MAX_TOKENS, messages=messages, extra_body=greedy)
        with through.messages.stream(model="m", max_tokens=MAX_TOKENS, messages=messages, extra_body=greedy) as stream:
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert expected and [b.text for b in via.content if b.type == "text"] == [expected] and streamed == expected
    assert via.stop_reason == final.stop_reason == "max_tokens" and final.usage.output_tokens == MAX_TOKENS
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both answers recorded")
    sample = gateway.samples.samples[-1]
    assert sample.deployment == "llama" and sample.outcome == "ok" and sample.output_tokens is not None


LONG_PROMPT = "hello " * 1500
"""About 1500 tokens: more than the server's context (``n_ctx`` 1024 in ``tests.llama_server``)."""


def test_a_prompt_past_llama_cpps_context_falls_back(llama: LlamaServer, start_gateway: StartGateway) -> None:
    """llama.cpp refuses a prompt past its context in its own words ("request (N tokens) exceeds the available
    context size (1024 tokens)", ``exceed_context_size_error``): the gateway reads that as the prompt too long for
    this deployment only, learns its window, and asks the next deployment (aimock here), which answers."""
    fixtures: list[dict[str, Any]] = [{"match": {"userMessage": "hello"}, "response": {"content": "a larger window"}}]
    with AimockServer(fixtures) as mock, sdk(llama_gateway(start_gateway, llama, mock).base_url, timeout=60) as client:
        replies = [
            client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": LONG_PROMPT}], max_tokens=MAX_TOKENS
            )
            for _ in range(2)
        ]
    assert [r.parse().choices[0].message.content for r in replies] == ["a larger window"] * 2
    assert [r.headers["x-gateway-provider"] for r in replies] == ["aimock", "aimock"]
    # The second prompt as large does not ask llama.cpp again: its window was learned from the first refusal.
    assert [r.headers["x-gateway-attempts"] for r in replies] == ["2", "1"]


def llama_gateway(start_gateway: StartGateway, llama: LlamaServer, mock: AimockServer) -> Gateway:
    """Model ``m`` on llama.cpp first, then aimock (in that order: the attempt policy is ``fixed-order``)."""
    policy = {"first_token_timeout_s": 30, "idle_timeout_s": 30}
    return start_gateway(gateway_config([llama, mock], policy=policy))


def test_a_messages_client_is_told_its_prompt_is_too_long(llama: LlamaServer, start_gateway: StartGateway) -> None:
    """The Messages API natively on llama.cpp: its refusal of a prompt past the context reaches an Anthropic
    client in Anthropic's shape and words (``prompt is too long: N tokens > W maximum``, on which Claude Code
    compacts its conversation)."""
    gateway = start_gateway(llama_config(llama))
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": LONG_PROMPT}]
    with (
        pytest.raises(anthropic.BadRequestError) as caught,
        anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=60) as client,
    ):
        client.messages.create(model="m", max_tokens=MAX_TOKENS, messages=messages)
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert (
        body["error"]["message"].startswith("prompt is too long: ")
        and "tokens > 1024 maximum" in body["error"]["message"]
    )


@pytest.mark.parametrize("apis", [["responses"], ["chat"]], ids=["native", "translated"])
def test_a_responses_client_is_told_its_context_is_exceeded_by_code(
    llama: LlamaServer, start_gateway: StartGateway, apis: list[str]
) -> None:
    """llama.cpp's refusal of a prompt past its context (``"code": 400``, ``exceed_context_size_error``) reaches a
    Responses client (Codex) with OpenAI's code for it, ``context_length_exceeded``, by which Codex knows its
    context is full; the server's words kept. Served natively and by translation from chat."""
    policy = {"first_token_timeout_s": 30, "idle_timeout_s": 30}
    gateway = start_gateway(gateway_config([llama], provider_options={"llama": {"apis": apis}}, policy=policy))
    with pytest.raises(openai.BadRequestError) as caught, sdk(gateway.base_url, timeout=60) as client:
        client.responses.create(model="m", input=LONG_PROMPT, max_output_tokens=MAX_TOKENS)
    assert caught.value.code == "context_length_exceeded"
    assert "exceeds the available context size (1024 tokens)" in caught.value.message


PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def test_an_image_to_a_model_without_a_projector_is_refused_not_retried(
    llama: LlamaServer, start_gateway: StartGateway
) -> None:
    """The tiny model has no vision projector: llama.cpp answers the image with its 500 ("image input is not
    supported - hint: … mmproj"). A lone deployment's 500 would be retried after a wait; this one is its refusal
    of the request, said to the client at once as a 400 naming the deployment."""
    gateway = start_gateway(llama_config(llama))
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}}
    look: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    with pytest.raises(openai.BadRequestError) as caught, sdk(gateway.base_url, timeout=60) as client:
        client.chat.completions.create(model="m", messages=look, max_tokens=MAX_TOKENS)
    assert caught.value.code == "image_input_unsupported"
    assert "deployment 'llama' does not accept image input (upstream returned 500" in caught.value.message
    assert caught.value.response.headers["x-gateway-attempts"] == "1"


@pytest.mark.parametrize("logprobs", [None, 1], ids=["plain", "logprobs"])
def test_token_ids_with_echo_at_a_server_that_does_not_echo(
    llama: LlamaServer, start_gateway: StartGateway, logprobs: int | None
) -> None:
    """llama.cpp's server ignores ``echo``: a prompt of token ids comes back without its echo. The gateway, which
    cannot decode the ids, must not take the first generated text for the echo (it is too short to be one, or its
    ``logprobs`` ids are not the prompt's): the first token is the server's first, and every token is counted."""
    timeouts = {"first_token_timeout_s": 30, "idle_timeout_s": 30}
    gateway = start_gateway(
        gateway_config([llama], provider_options={"llama": {"apis": ["completions"]}}, policy=timeouts)
    )
    ids = list(range(1000, 1048))
    body: dict[str, Any] = {"prompt": ids, "echo": True, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True}
    body |= {"stream_options": {"include_usage": True}} | ({"logprobs": logprobs} if logprobs is not None else {})
    text: list[str] = []
    timings: dict[str, float] = {}
    with httpx.stream("POST", gateway.base_url + "/completions", json={"model": "m", **body}, timeout=60) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                text += [choice.get("text") or "" for choice in event.get("choices") or ()]
                timings = event.get("timings", timings)
    wait_until(lambda: len(gateway.samples.samples) == 1, what="the attempt recorded")
    sample = gateway.samples.samples[0]
    assert sample.outcome == "ok" and sample.usage_completion_tokens == timings["predicted_n"]
    assert sample.output_tokens == gateway.runtime.counter.count("".join(text))  # nothing taken out as an echo
    assert sample.ttft_s is not None
    expected_ttft = timings["prompt_ms"] / 1000
    relative, absolute = TTFT_TOLERANCE
    assert abs(sample.ttft_s - expected_ttft) <= max(relative * expected_ttft, absolute), (sample.ttft_s, timings)


@pytest.mark.parametrize("logprobs", [None, 1], ids=["plain", "logprobs"])
def test_a_whole_answer_to_token_ids_with_echo_at_a_server_that_does_not_echo(
    llama: LlamaServer, start_gateway: StartGateway, logprobs: int | None
) -> None:
    """The same, not streamed: the answer's ``logprobs`` ids are not the prompt's, or (without them) its
    ``usage.completion_tokens`` is about the text's own count, so nothing is taken out as an echo."""
    timeouts = {"first_token_timeout_s": 30, "idle_timeout_s": 30}
    gateway = start_gateway(
        gateway_config([llama], provider_options={"llama": {"apis": ["completions"]}}, policy=timeouts)
    )
    body: dict[str, Any] = {"model": "m", "prompt": list(range(1000, 1048)), "echo": True, "max_tokens": MAX_TOKENS}
    body |= {"temperature": 0} | ({"logprobs": logprobs} if logprobs is not None else {})
    answer = httpx.post(gateway.base_url + "/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    text = answer.json()["choices"][0]["text"]
    wait_until(lambda: len(gateway.samples.samples) == 1, what="the attempt recorded")
    sample = gateway.samples.samples[0]
    assert sample.outcome == "ok" and sample.output_tokens == gateway.runtime.counter.count(text) > 0
