"""Property: every event sequence the stream translator emits is a valid stream of the client's API.

Answers (reasoning, text, parallel tool calls, a stop reason, usage with cached tokens) are drawn at random,
streamed as an upstream would stream them (chat chunks, or Messages events), cut at random byte offsets,
translated, and the result is read by the SDK's own stream machinery (``anthropic``'s ``MessageStream``,
``openai``'s ``ResponseStream`` and ``ChatCompletionStream``, over the SDKs' ``MockTransport``): it must parse and
accumulate to the drawn answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import openai
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.translate.stream import StreamTranslator

TEXT = st.text(alphabet='ab c\né"{', min_size=1, max_size=6)
PROFILE = settings(max_examples=30, deadline=None)


@dataclass
class Answer:
    reasoning: list[str]
    text: list[str]
    calls: list[tuple[str, str, dict[str, Any], int]]
    """(id, name, arguments, pieces the arguments' JSON is cut into)."""
    stop: str
    prompt: int
    cached: int
    output: int


@st.composite
def answers(draw: st.DrawFn) -> Answer:
    calls = [
        (f"call_{i}", draw(st.sampled_from(["lookup", "run"])), {"q": draw(TEXT)}, draw(st.integers(1, 4)))
        for i in range(draw(st.integers(0, 2)))
    ]
    text = draw(st.lists(TEXT, min_size=0 if calls else 1, max_size=4))
    stop = "tool_calls" if calls else draw(st.sampled_from(["stop", "length"]))
    prompt = draw(st.integers(10, 5000))
    return Answer(
        draw(st.lists(TEXT, max_size=3)),
        text,
        calls,
        stop,
        prompt,
        draw(st.integers(0, prompt)),
        draw(st.integers(1, 500)),
    )


def _pieces(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)]


def chat_upstream(answer: Answer) -> bytes:
    head = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "up"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    out = chunk({"role": "assistant", "content": ""})
    out += b"".join(chunk({"reasoning_content": r}) for r in answer.reasoning)
    out += b"".join(chunk({"content": t}) for t in answer.text)
    for index, (call_id, name, arguments, count) in enumerate(answer.calls):
        start = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        out += chunk({"tool_calls": [start]})
        for piece in _pieces(json.dumps(arguments), count):
            out += chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    out += chunk({}, answer.stop)
    usage = {
        "prompt_tokens": answer.prompt,
        "completion_tokens": answer.output,
        "total_tokens": answer.prompt + answer.output,
        "prompt_tokens_details": {"cached_tokens": answer.cached},
    }
    out += b"data: " + json.dumps({**head, "choices": [], "usage": usage}).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


def messages_upstream(answer: Answer) -> bytes:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    usage = {
        "input_tokens": answer.prompt - answer.cached,
        "cache_read_input_tokens": answer.cached,
        "output_tokens": 1,
    }
    message = {"id": "msg_up", "type": "message", "role": "assistant", "model": "up", "content": [], "usage": usage}
    out = event("message_start", {"message": message}) + event("ping", {})
    index = 0
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    if answer.reasoning:
        deltas = [{"type": "thinking_delta", "thinking": r} for r in answer.reasoning]
        blocks.append(
            (
                {"type": "thinking", "thinking": "", "signature": ""},
                [*deltas, {"type": "signature_delta", "signature": "s"}],
            )
        )
    if answer.text:
        blocks.append(({"type": "text", "text": ""}, [{"type": "text_delta", "text": t} for t in answer.text]))
    for call_id, name, arguments, count in answer.calls:
        pieces = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(json.dumps(arguments), count)]
        blocks.append(({"type": "tool_use", "id": call_id, "name": name, "input": {}}, pieces))
    for block, deltas in blocks:
        out += event("content_block_start", {"index": index, "content_block": block})
        out += b"".join(event("content_block_delta", {"index": index, "delta": d}) for d in deltas)
        out += event("content_block_stop", {"index": index})
        index += 1
    reason = {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens"}[answer.stop]
    out += event(
        "message_delta",
        {"delta": {"stop_reason": reason, "stop_sequence": None}, "usage": {"output_tokens": answer.output}},
    )
    return out + event("message_stop", {})


def translated(upstream: bytes, source: str, client: str, request: dict[str, Any], cuts: list[int]) -> bytes:
    translator = StreamTranslator(source, client, request, "m")  # type: ignore[arg-type]
    out = b""
    start = 0
    for cut in sorted(c % (len(upstream) + 1) for c in cuts) + [len(upstream)]:
        out += translator.feed(upstream[start:cut])
        start = cut
    out += translator.flush()
    assert translator.error is None
    assert translator.clean_end() == b""  # the upstream's own ending closed the client's stream
    return out


def _transport(body: bytes) -> httpx2.Client:
    """An HTTP client (the SDKs' own httpx) whose every response is ``body``, as a stream: no server needed to
    run the SDK's parser."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    return httpx2.Client(transport=httpx2.MockTransport(handler))


CUTS = st.lists(st.integers(0, 100_000), max_size=6)


@PROFILE
@given(answers(), CUTS)
def test_chat_upstream_to_messages_client(answer: Answer, cuts: list[int]) -> None:
    body = translated(chat_upstream(answer), "chat", "messages", {}, cuts)
    with anthropic.Anthropic(api_key="k", base_url="http://t", http_client=_transport(body), max_retries=0) as client:
        with client.messages.stream(model="m", max_tokens=9, messages=[{"role": "user", "content": "x"}]) as stream:
            final = stream.get_final_message()
    expected: list[tuple[str, Any]] = []
    if answer.reasoning:
        expected.append(("thinking", "".join(answer.reasoning)))
    if answer.text:
        expected.append(("text", "".join(answer.text)))
    expected += [("tool_use", (call_id, name, arguments)) for call_id, name, arguments, _ in answer.calls]
    got = [
        (b.type, b.thinking if b.type == "thinking" else b.text if b.type == "text" else (b.id, b.name, b.input))
        for b in final.content
        if b.type in ("thinking", "text", "tool_use")
    ]
    assert got == expected
    assert final.stop_reason == {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens"}[answer.stop]
    assert final.usage.output_tokens == answer.output
    assert final.usage.cache_read_input_tokens == answer.cached
    assert final.usage.input_tokens == answer.prompt - answer.cached


@PROFILE
@given(answers(), CUTS)
def test_chat_upstream_to_responses_client(answer: Answer, cuts: list[int]) -> None:
    body = translated(chat_upstream(answer), "chat", "responses", {"model": "m", "input": "x"}, cuts)
    with openai.OpenAI(api_key="k", base_url="http://t/v1", http_client=_transport(body), max_retries=0) as client:
        with client.responses.stream(model="m", input="x") as stream:
            events = list(stream)
            last = events[-1]
            # A cut-short answer ends with response.incomplete, as OpenAI's do (the SDK's final is for completed).
            final = last.response if last.type == "response.incomplete" else stream.get_final_response()
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(numbers)))
    assert final.output_text == "".join(answer.text)
    calls = [(o.call_id, o.name, json.loads(o.arguments)) for o in final.output if o.type == "function_call"]
    assert calls == [(call_id, name, arguments) for call_id, name, arguments, _ in answer.calls]
    reasoning = [o for o in final.output if o.type == "reasoning"]
    assert ["".join(c.text for c in r.content or []) for r in reasoning] == (
        ["".join(answer.reasoning)] if answer.reasoning else []
    )
    assert final.status == ("incomplete" if answer.stop == "length" else "completed")
    assert final.usage is not None and final.usage.output_tokens == answer.output
    assert final.usage.input_tokens == answer.prompt
    assert final.usage.input_tokens_details.cached_tokens == answer.cached


@PROFILE
@given(answers(), CUTS)
def test_messages_upstream_to_chat_client(answer: Answer, cuts: list[int]) -> None:
    request = {"stream_options": {"include_usage": True}}
    body = translated(messages_upstream(answer), "messages", "chat", request, cuts)
    with openai.OpenAI(api_key="k", base_url="http://t/v1", http_client=_transport(body), max_retries=0) as client:
        with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "x"}]) as stream:
            for _ in stream:
                pass
            # The accumulated answer (``get_final_completion`` also parses, and refuses a cut-short one).
            final = stream.current_completion_snapshot
    message = final.choices[0].message
    assert (message.content or "") == "".join(answer.text)
    calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
    assert calls == [(call_id, name, arguments) for call_id, name, arguments, _ in answer.calls]
    assert final.choices[0].finish_reason == answer.stop
    assert final.usage is not None and final.usage.completion_tokens == answer.output
    assert final.usage.prompt_tokens == answer.prompt
    assert final.usage.prompt_tokens_details is not None
    assert final.usage.prompt_tokens_details.cached_tokens == answer.cached
