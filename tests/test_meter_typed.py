"""The meter's typed read of a chat stream against the dict read it stands in for.

``ChatDialect.tally`` over dicts is the definition; ``tally_array`` must give the same ``Tally``
for every stream it takes, and refuse (None) every stream it cannot read the same way. The
streams are built from every shape each field takes in ``tests/test_stream_shapes.py`` and
``tests/test_meter.py`` and from the shapes the dict read treats specially (null, absent, wrong
types), combined at random with a fixed seed.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from gateway.dialects import CHAT
from gateway.meter import StreamMeter, _parse_all
from gateway.sse import joined_events, whole_events
from gateway.tokens import TokenCounter, load_token_counter
from tests.support.clock import FakeClock

ABSENT = object()
CONTENT = [ABSENT, None, "", " word", "ünï", 3, ["part"]]
TOOL_CALLS = [
    ABSENT,
    None,
    [],
    [{"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}],
    [{"index": 0, "function": {"arguments": '{"a":'}}],
    [{"function": None}, "odd"],
    "text",
    {},
]
FUNCTION_CALL = [ABSENT, None, {}, {"name": "f"}, {"arguments": "1"}, {"arguments": 2}]
REASONING = [ABSENT, None, "", " think", 7]
DETAILS = [ABSENT, None, [], [{"type": "reasoning.text", "text": "t"}], [{"summary": ""}, {"data": "x"}], "s"]
FINISH = [ABSENT, None, "", "stop", 0, 1]
TEXT = [ABSENT, None, "", " completion", 5]
MESSAGE = [ABSENT, None, {"content": "m"}, {"tool_calls": [{"function": {"arguments": "a"}}]}, "m"]
USAGE = [
    ABSENT,
    None,
    {},
    {"prompt_tokens": 11, "completion_tokens": 5},
    {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}},
    {"completion_tokens": True, "prompt_cache_hit_tokens": 4},
    {"cache_read_input_tokens": 1, "prompt_tokens": -1},
    "usage",
]
X_GROQ = [ABSENT, None, {}, {"id": "g"}, {"usage": {"prompt_tokens": 9, "queue_time": 0.5, "total_time": 1}}, 4]
TIMINGS = [ABSENT, None, {}, {"predicted_ms": 12.5}, [1]]
ERROR = [ABSENT, None, {"message": "boom", "code": "x"}, "plain", {}]
MODEL = [ABSENT, None, "up-model", 4]


def pick(rng: random.Random, into: dict[str, Any], key: str, values: list[Any], absent_weight: int = 4) -> None:
    value = rng.choice(values + [ABSENT] * absent_weight)
    if value is not ABSENT:
        into[key] = value


def random_event(rng: random.Random) -> Any:
    if rng.random() < 0.01:
        return rng.choice([1, "s", None, [1]])  # not an object
    event: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1}
    pick(rng, event, "model", MODEL, 2)
    pick(rng, event, "error", ERROR, 30)
    pick(rng, event, "usage", USAGE, 10)
    pick(rng, event, "x_groq", X_GROQ, 20)
    for source in ("timings", "metrics", "perf_metrics"):
        pick(rng, event, source, TIMINGS, 20)
    shape = rng.random()
    if shape < 0.02:
        event["choices"] = rng.choice([None, "c", {}, [1]])
    elif shape > 0.05:
        choices: list[Any] = []
        for index in range(rng.choice([0, 1, 1, 1, 2])):
            choice: dict[str, Any] = {"index": index, "logprobs": None}
            pick(rng, choice, "finish_reason", FINISH, 2)
            pick(rng, choice, "text", TEXT, 20)
            pick(rng, choice, "message", MESSAGE, 30)
            if rng.random() < 0.02:
                choice["delta"] = rng.choice([None, "d", 3])
            elif rng.random() < 0.95:
                delta: dict[str, Any] = {}
                pick(rng, delta, "role", ["assistant"], 6)
                pick(rng, delta, "content", CONTENT, 1)
                pick(rng, delta, "tool_calls", TOOL_CALLS, 30)
                pick(rng, delta, "function_call", FUNCTION_CALL, 40)
                pick(rng, delta, "reasoning_content", REASONING, 20)
                pick(rng, delta, "reasoning", REASONING, 20)
                pick(rng, delta, "reasoning_details", DETAILS, 30)
                choice["delta"] = delta
            choices.append(choice)
        event["choices"] = choices
    return event


def dict_tally(datas: list[bytes], times: list[float]) -> Any:
    return CHAT.tally(list(zip(times, _parse_all(datas), strict=True)))


def typed_tally(datas: list[bytes], times: list[float]) -> Any:
    return CHAT.tally_array(b"[" + b",".join(datas) + b"]", times)


def test_the_typed_read_gives_the_dict_read_of_every_stream_it_takes() -> None:
    rng = random.Random(20)
    taken = refused = 0
    for _ in range(3000):
        events = [random_event(rng) for _ in range(rng.randint(0, 8))]
        datas = [json.dumps(event).encode() for event in events]
        times = [float(i) / 8 for i in range(len(datas))]
        expected = dict_tally(datas, times)
        tally = typed_tally(datas, times)
        if tally is None:
            refused += 1
        else:
            taken += 1
            assert tally == expected, events
    assert taken > 1000 and refused > 300  # both sides of the read are exercised


@pytest.mark.parametrize("calls", [b"5", b"true", b'"call"', b'{"a":1}'])
def test_a_tool_call_list_that_is_no_list_is_read_alike_as_none(calls: bytes) -> None:
    datas = [b'{"choices":[{"delta":{"content":"hi","tool_calls":' + calls + b"}}]}"]
    expected = dict_tally(datas, [0.0])
    assert expected.answer == ["hi"] and not expected.calls
    tally = typed_tally(datas, [0.0])
    assert tally is None or tally == expected


@pytest.mark.parametrize(
    "datas",
    [
        [b'{"choices":[]}', b"not json"],
        [b'{"choices":[{"delta":{"content":["a"]}}]}'],  # content that is no string: read over dicts
        [b'{"choices":[]},{"choices":[]}'],  # one event's data holding two values
        [b"[1]"],
        [b'{"x": NaN}'],
    ],
)
def test_refuses_what_it_cannot_read_as_the_dicts_are_read(datas: list[bytes]) -> None:
    assert typed_tally(datas, [0.0] * len(datas)) is None


@pytest.mark.parametrize(
    ("chunk", "declines_not"),
    [
        (b'data: {"a":1}\n\n', True),
        (b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: {"c":"data:x"}\n\n', True),
        (b'data: {"a":1}\n\ndata: {"b":"data: 2"}\n\n', True),  # "data: " inside an event's data
        (b"data:  1\n\ndata: \n\ndata: 1\n\n", True),  # a second space is the data's; an empty event
        (b'data:{"a":1}\n\n', False),
        (b'data: {"a":1}\r\n\r\n', False),
        (b'data: {"a":1}\n\n\n\ndata: {"b":2}\n\n', False),
        (b'data: {"a":1}\ndata: {"b":2}\n\n', False),
        (b'data: {"a":1}\n\n: keep-alive\n\n', False),
        (b": keep-alive\n\ndata: 1\n\n", False),
        (b"data: 1\n\nevent: x\ndata: 1\n\n", False),
        (b"\n\n", False),
    ],
)
def test_joined_events_is_the_comma_join_of_whole_events_or_declines(chunk: bytes, declines_not: bool) -> None:
    joined = joined_events(chunk)
    pieces = whole_events(chunk)
    assert joined is None or (joined == b",".join(pieces) and chunk.count(b"\n\n") == len(pieces))
    assert (joined is not None) == declines_not, chunk


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return load_token_counter("o200k_base")


def test_a_stream_the_typed_read_refuses_is_metered_over_dicts(counter: TokenCounter) -> None:
    def meter(content: object) -> Any:
        clock = FakeClock(10.0)
        m = StreamMeter(clock, 10.0)
        head = {"model": "m", "choices": [{"index": 0, "delta": {"content": " a"}, "finish_reason": None}]}
        odd = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": "stop"}]}
        clock.now = 10.5
        m.feed(b"data: " + json.dumps(head).encode() + b"\n\n")
        clock.now = 10.75
        # Kept whole (after the first output, no [DONE]): joined in finish.
        m.feed(b"data: " + json.dumps(head).encode() + b"\n\ndata: " + json.dumps(odd).encode() + b"\n\n")
        m.feed(b"data: [DONE]\n\n")
        return m.finish(counter)

    typed, over_dicts = meter(" b"), meter([" b"])  # list content: not read as text by either
    assert typed.answer_text == " a a b" and typed.chunk_gaps_s == (0.25, 0.0)
    assert over_dicts.answer_text == " a a" and over_dicts.finished and over_dicts.chunk_gaps_s == (0.25,)
    assert over_dicts.response_model == "m" and over_dicts.saw_done


def chat_stream(newline: bytes = b"\n", space: bool = True) -> bytes:
    def event(payload: dict[str, Any]) -> bytes:
        return b"data:" + (b" " if space else b"") + json.dumps(payload).encode() + newline + newline

    def delta(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return event({"id": "c", "model": "up", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    parts = [b": hello" + newline + newline, delta({"role": "assistant", "content": ""}), delta({"reasoning": " hm"})]
    parts += [delta({"content": f" w{i}"}) for i in range(6)]
    parts += [b'data: {"choices": [],' + newline + b'data: "x": 1}' + newline + newline]  # two data lines
    parts += [delta({}, "stop"), event({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 7}})]
    return b"".join(parts) + b"data: [DONE]" + newline + newline


@pytest.mark.parametrize(
    "stream",
    [
        chat_stream(),
        chat_stream(b"\r\n"),
        chat_stream(space=False),
        chat_stream().replace(b"[DONE]\n\n", b"[DONE]"),  # no blank line after the ending: end_of_stream's
        chat_stream().replace(b"}}\n\ndata: [DONE]", b"}}data: [DONE]"),  # no ending: one malformed event
    ],
)
def test_a_stream_cut_anywhere_reads_as_when_fed_byte_by_byte(counter: TokenCounter, stream: bytes) -> None:
    """Each event is timed by the chunk that completes it, however the chunks fall: the same reading
    as feeding the stream one byte at a time (which takes the splitter's path throughout), each byte at
    the time of the chunk it came in."""
    rng = random.Random(20)
    for _ in range(150):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(0, 8)))
        chunks = list(zip([0, *cuts], [*cuts, len(stream)], strict=True))

        def read(pieces: list[tuple[float, bytes]]) -> Any:
            clock = FakeClock(0.0)
            m = StreamMeter(clock, 0.0)
            for at, piece in pieces:
                clock.now = at
                m.feed(piece)
            m.end_of_stream()
            return m.finish(counter), m.done, m.finish_arrived

        fast = read([(float(i + 1), stream[a:b]) for i, (a, b) in enumerate(chunks)])
        slow = read([(float(i + 1), stream[k : k + 1]) for i, (a, b) in enumerate(chunks) for k in range(a, b)])
        assert fast == slow, cuts
        glued = b"}}data: [DONE]" in stream
        assert fast[0].answer_text == " w0 w1 w2 w3 w4 w5" and fast[0].malformed == glued
        assert fast[0].usage_completion_tokens == (None if glued else 7) and fast[1] == (not glued)
