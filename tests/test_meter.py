"""The meter against an injected clock: exact TTFT, first answer, tokens per second and counts.

Clock readings are binary fractions, so every difference is exact and compared with ``==``.
"""

from __future__ import annotations

import json
import random
from array import array
from typing import Any

import pytest

from gateway.dialects.base import Tally, ToolCall
from gateway.meter import StreamMeter
from gateway.reading import Reading, read_full_reply, reading_of
from gateway.tokens import TokenCounter, load_token_counter
from tests.support.clock import FakeClock

SENT_AT = 100.0


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return load_token_counter("o200k_base")


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    event = {"id": "c1", "object": "chat.completion.chunk", "model": "up-model", "choices": [choice], **extra}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def run(counter: TokenCounter, timeline: list[tuple[float, bytes]], *, end: bool = False) -> Reading:
    """Feed each chunk at its clock reading (seconds after the request was sent)."""
    clock = FakeClock(SENT_AT)
    meter = StreamMeter(clock, SENT_AT)
    for at, data in timeline:
        clock.now = SENT_AT + at
        meter.feed(data)
    if end:
        meter.end_of_stream()
    return meter.finish(counter)


def test_chat_stream_with_reasoning(counter: TokenCounter) -> None:
    usage = {"prompt_tokens": 11, "completion_tokens": 99, "total_tokens": 110}
    reading = run(
        counter,
        [
            (0.125, chunk({"role": "assistant", "content": ""})),  # the role chunk carries no output
            (0.25, chunk({"reasoning_content": " think"})),
            (0.375, chunk({"reasoning_content": " hard"})),
            (0.5, chunk({"content": " the"})),
            (0.625, chunk({"content": " quick"})),
            (1.0, chunk({"content": " brown fox"})),
            (1.125, chunk({}, finish="stop")),
            (1.25, event({"id": "c1", "choices": [], "usage": usage})),
            (1.5, DONE),
        ],
    )
    assert reading == Reading(
        ttft_s=0.25,  # reasoning is output: TTFT ends at the first reasoning delta
        first_answer_s=0.5,
        last_answer_s=1.0,
        tokens_per_s=4 / 0.5,  # 4 answer tokens over 0.5 s; reasoning and the wait before are excluded
        output_tokens=4,
        answer_text=" the quick brown fox",
        usage_prompt_tokens=11,
        usage_completion_tokens=99,  # the provider's count is kept apart, never used as output_tokens
        finished=True,
        saw_done=True,
        response_model="up-model",
        chunk_gaps_s=(0.125, 0.125, 0.125, 0.375),  # between output chunks: not the role chunk, not the finish
        stop="stop",
    )


def test_reasoning_field_named_reasoning_is_excluded_too(counter: TokenCounter) -> None:
    reading = run(
        counter,
        [
            (0.25, chunk({"reasoning": " the quick brown fox jumps"})),
            (0.5, chunk({"content": " over"})),
            (0.75, chunk({"content": " lazy"})),
        ],
    )
    assert (reading.ttft_s, reading.first_answer_s, reading.output_tokens) == (0.25, 0.5, 2)
    assert reading.tokens_per_s == 2 / 0.25
    assert reading.answer_text == " over lazy"


def test_tool_call_deltas_are_output(counter: TokenCounter) -> None:
    name_only = {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup"}}]}
    reading = run(
        counter,
        [
            (0.25, chunk(name_only)),  # no arguments yet, but a tool call has begun: TTFT ends here
            (0.5, chunk({"tool_calls": [{"index": 0, "function": {"arguments": " the quick"}}]})),
            (1.5, chunk({"tool_calls": [{"index": 0, "function": {"arguments": " brown"}}]})),
            (1.75, chunk({}, finish="tool_calls")),
            (2.0, DONE),
        ],
    )
    assert reading.ttft_s == 0.25
    assert reading.first_answer_s == 0.5
    assert reading.last_answer_s == 1.5
    assert reading.output_tokens == 3
    assert reading.tokens_per_s == 3.0
    assert reading.finished and reading.saw_done


def test_legacy_function_call_deltas_are_output(counter: TokenCounter) -> None:
    reading = run(
        counter,
        [
            (0.25, chunk({"function_call": {"name": "f"}})),
            (0.5, chunk({"function_call": {"arguments": " the"}})),
            (0.75, chunk({"function_call": {"arguments": " quick"}})),
        ],
    )
    assert (reading.ttft_s, reading.first_answer_s, reading.output_tokens, reading.tokens_per_s) == (0.25, 0.5, 2, 8.0)


def test_completions_stream_text(counter: TokenCounter) -> None:
    def text(piece: str, finish: str | None = None) -> bytes:
        return event({"object": "text_completion", "choices": [{"index": 0, "text": piece, "finish_reason": finish}]})

    reading = run(
        counter, [(0.5, text(" the")), (0.75, text(" quick")), (1.0, text(" brown")), (1.25, text("", "length"))]
    )
    assert (reading.ttft_s, reading.first_answer_s, reading.last_answer_s) == (0.5, 0.5, 1.0)
    assert reading.output_tokens == 3
    assert reading.tokens_per_s == 6.0
    assert reading.finished and not reading.saw_done


def test_one_token_gives_no_tokens_per_second(counter: TokenCounter) -> None:
    reading = run(counter, [(0.5, chunk({"content": " the"})), (0.75, chunk({}, finish="stop")), (1.0, DONE)])
    assert reading.output_tokens == 1
    assert reading.ttft_s == reading.first_answer_s == reading.last_answer_s == 0.5
    assert reading.tokens_per_s is None


def test_tokens_all_in_one_chunk_give_no_tokens_per_second(counter: TokenCounter) -> None:
    reading = run(counter, [(0.5, chunk({"content": " the quick brown fox"})), (1.0, DONE)])
    assert reading.output_tokens == 4
    assert reading.tokens_per_s is None  # no window to divide by


def test_no_output_at_all(counter: TokenCounter) -> None:
    reading = run(counter, [(0.25, chunk({"role": "assistant"})), (0.5, chunk({}, finish="stop")), (0.75, DONE)])
    assert reading.ttft_s is None and reading.first_answer_s is None and reading.tokens_per_s is None
    assert reading.output_tokens == 0
    assert reading.finished and reading.saw_done


def test_an_event_is_timed_when_its_last_byte_arrives(counter: TokenCounter) -> None:
    first = chunk({"content": " the"})
    second = chunk({"content": " quick"})
    clock = FakeClock(SENT_AT)
    meter = StreamMeter(clock, SENT_AT)
    clock.now = SENT_AT + 0.25
    meter.feed(first[:10])
    assert meter.first_output_at is None and meter.ttft_s is None
    clock.now = SENT_AT + 0.5
    meter.feed(first[10:] + second[:5])
    assert meter.ttft_s == 0.5
    clock.now = SENT_AT + 1.5
    meter.feed(second[5:])
    reading = meter.finish(counter)
    assert (reading.first_answer_s, reading.last_answer_s, reading.tokens_per_s) == (0.5, 1.5, 2.0)


def test_end_of_stream_completes_an_unterminated_event(counter: TokenCounter) -> None:
    clock = FakeClock(SENT_AT)
    meter = StreamMeter(clock, SENT_AT)
    clock.now = SENT_AT + 0.5
    meter.feed(chunk({"content": " the"}))
    clock.now = SENT_AT + 0.75
    meter.feed(chunk({"content": " quick"}, finish="stop").rstrip(b"\n"))
    clock.now = SENT_AT + 1.0
    meter.end_of_stream()
    reading = meter.finish(counter)
    assert reading.output_tokens == 2
    assert reading.last_answer_s == 1.0
    assert reading.finished and not reading.saw_done


def test_error_event_counts_as_first_output_and_is_reported(counter: TokenCounter) -> None:
    clock = FakeClock(SENT_AT)
    meter = StreamMeter(clock, SENT_AT)
    clock.now = SENT_AT + 0.25
    meter.feed(event({"error": {"message": "overloaded", "type": "server_error"}}))
    assert meter.ttft_s == 0.25  # the wait is over: the error must reach the client, not be retried blindly
    reading = meter.finish(counter)
    assert reading.error_message == "overloaded"
    assert reading.ttft_s is None  # but it is not output in the sample
    assert reading.output_tokens == 0


def test_malformed_event_before_output_is_flagged(counter: TokenCounter) -> None:
    clock = FakeClock(SENT_AT)
    meter = StreamMeter(clock, SENT_AT)
    meter.feed(b"data: {not json\n\n")
    assert meter.malformed
    assert meter.first_output_at is None
    clock.now = SENT_AT + 0.5
    meter.feed(chunk({"content": " the"}))
    reading = meter.finish(counter)
    assert reading.output_tokens == 1 and reading.ttft_s == 0.5
    assert reading.malformed


def test_malformed_event_after_output_is_reported(counter: TokenCounter) -> None:
    reading = run(counter, [(0.5, chunk({"content": " the"})), (0.75, b"data: {oops\n\n"), (1.0, DONE)])
    assert reading.malformed and reading.output_tokens == 1
    assert not run(counter, [(0.5, chunk({"content": " the"})), (1.0, DONE)]).malformed


def test_done_is_noted_at_once() -> None:
    meter = StreamMeter(FakeClock(SENT_AT), SENT_AT)
    meter.feed(DONE[:8])
    assert not meter.done
    meter.feed(DONE[8:])
    assert meter.done


def test_several_choices_all_count(counter: TokenCounter) -> None:
    two = {
        "choices": [
            {"index": 0, "delta": {"content": " the"}, "finish_reason": None},
            {"index": 1, "delta": {"content": " quick"}, "finish_reason": None},
        ]
    }
    reading = run(counter, [(0.5, event(two)), (1.0, chunk({"content": " brown"}))])
    assert reading.output_tokens == 3
    assert reading.tokens_per_s == 6.0


def test_read_full_reply_of_a_whole_response(counter: TokenCounter) -> None:
    body = {
        "id": "x",
        "object": "chat.completion",
        "model": "up-model",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": " the quick brown"}, "finish_reason": "stop"},
            {
                "index": 1,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": " fox"}}],
                },
                "finish_reason": "tool_calls",
            },
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 40, "total_tokens": 45},
    }
    reading = read_full_reply(json.dumps(body).encode(), counter)
    assert reading == Reading(
        output_tokens=4,
        answer_text=" the quick brown fox",
        usage_prompt_tokens=5,
        usage_completion_tokens=40,
        finished=True,
        response_model="up-model",
        tool_calls=True,
        calls=(ToolCall("f", " fox"),),
        stop="tool",  # the last choice's reason
    )


def test_read_full_reply_of_an_error_and_of_garbage(counter: TokenCounter) -> None:
    error = read_full_reply(b'{"error": {"message": "bad", "type": "x"}}', counter)
    assert error.error_message == "bad" and error.output_tokens == 0
    assert read_full_reply(b"<html>oops</html>", counter) == Reading(malformed=True)
    # Usage counts that are not integers are ignored rather than trusted.
    odd = read_full_reply(b'{"choices": [], "usage": {"prompt_tokens": true, "completion_tokens": "7"}}', counter)
    assert odd.usage_prompt_tokens is None and odd.usage_completion_tokens is None


def test_chunks_after_the_first_token_read_the_same_however_they_are_cut(counter: TokenCounter) -> None:
    """After the first output whole-event chunks are kept and split in ``finish``: the reading
    must not depend on how the stream was cut, nor on which path a chunk took."""
    words = [" the", " quick", " brown", " fox", " jumps"]
    role = chunk({"role": "assistant", "content": ""})
    pieces = [chunk({"content": w}) for w in words]
    tail = chunk({}, finish="stop") + event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}})
    one_per_chunk = [(0.25, role), (0.5, pieces[0]), (0.75, pieces[1]), (1.0, pieces[2] + pieces[3])]
    one_per_chunk += [(1.25, pieces[4]), (1.5, tail), (1.75, DONE)]
    # The same bytes at the same times, cut so that one chunk ends mid-event (split at once)
    # and the next finishes it and brings whole events (kept whole).
    rest = pieces[2] + pieces[3]
    cut = [(0.25, role), (0.5, pieces[0]), (0.75, pieces[1] + rest[:7]), (1.0, rest[7:])]
    cut += [(1.25, pieces[4]), (1.5, tail + DONE)]
    expected = run(counter, one_per_chunk)
    assert run(counter, cut) == expected
    assert (expected.first_answer_s, expected.last_answer_s, expected.output_tokens) == (0.5, 1.25, 5)
    assert expected.finished and expected.saw_done and expected.usage_completion_tokens == 5


def test_a_stream_cut_at_any_byte_reads_the_same(counter: TokenCounter) -> None:
    """``feed`` keeps a chunk whole only when the splitter holds nothing (``SSESplitter.buffer``) and the chunk
    ends an event: whichever byte the stream is cut at, that check sends the halves down the right paths."""
    words = [" one", " two", " three"]
    stream = chunk({"role": "assistant", "content": ""}) + b"".join(chunk({"content": w}) for w in words)
    stream += chunk({}, finish="stop") + DONE
    expected = run(counter, [(0.5, stream)])
    assert expected.output_tokens == 3 and expected.finished and expected.saw_done
    for at in range(1, len(stream)):
        cut = run(counter, [(0.5, stream[:at]), (0.5, stream[at:])])
        assert (cut.output_tokens, cut.answer_text, cut.finished, cut.saw_done) == (
            expected.output_tokens,
            expected.answer_text,
            expected.finished,
            expected.saw_done,
        ), at


def test_a_finish_reason_in_a_chunk_kept_whole_is_seen_at_once() -> None:
    meter = StreamMeter(FakeClock(SENT_AT), SENT_AT)
    meter.feed(chunk({"content": " the"}))
    assert meter.first_output_at is not None and not meter.finish_arrived
    meter.feed(chunk({"content": " quick"}) + chunk({}, finish="stop"))
    assert meter.finish_arrived and not meter.done
    meter.feed(DONE)
    assert meter.done


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 1200, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 1024}},  # OpenAI
        {
            "prompt_tokens": 1200,
            "completion_tokens": 3,
            "prompt_cache_hit_tokens": 1024,
            "prompt_cache_miss_tokens": 176,
        },
        {"prompt_tokens": 1200, "completion_tokens": 3, "cache_read_input_tokens": 1024},  # Anthropic-style
    ],
    ids=["openai", "deepseek", "anthropic-style"],
)
def test_cached_prompt_tokens_are_read_in_every_shape(counter: TokenCounter, usage: dict[str, object]) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}], "usage": usage}
    meter = StreamMeter(FakeClock(SENT_AT), SENT_AT)
    meter.feed(b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n")
    reading = meter.finish(counter)
    assert (reading.usage_prompt_tokens, reading.usage_cached_tokens) == (1200, 1024)
    whole = {"choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}], "usage": usage}
    assert read_full_reply(json.dumps(whole).encode(), counter).usage_cached_tokens == 1024


def test_no_cached_tokens_reported_is_none_not_zero(counter: TokenCounter) -> None:
    whole = {"choices": [{"index": 0, "message": {"content": "hi"}}], "usage": {"prompt_tokens": 9}}
    assert read_full_reply(json.dumps(whole).encode(), counter).usage_cached_tokens is None


@pytest.mark.parametrize("kept", [list, lambda times: array("d", times)], ids=["list", "folded array"])
def test_chunk_gaps_are_each_arrival_less_the_one_before(counter: TokenCounter, kept: Any) -> None:
    # The gaps come from the output events' arrivals as kept: a list, or (after a fold) machine floats.
    rng = random.Random(3)
    for size in (0, 1, 2, 33):
        times = sorted(rng.uniform(100.0, 200.0) for _ in range(size))
        tally = Tally()
        tally.output_events = kept(times)
        gaps = reading_of(tally, counter, SENT_AT, True).chunk_gaps_s
        assert gaps == tuple(later - earlier for earlier, later in zip(times, times[1:], strict=False))
        assert len(gaps) == max(0, size - 1) and all(isinstance(gap, float) for gap in gaps)
