"""OpenAI's padded chat streams through the meter: every chunk ends with an ``obfuscation`` string of its own.

OpenAI adds ``"obfuscation":"<random letters and digits>"`` (a different length each chunk, to blur the
sizes an observer of the encrypted stream could read the text from) as the last field of every chunk, the
usage chunk of ``stream_options.include_usage`` too. The fast read of a chat stream's answer events
(``gateway.dialects.chat_template``) must read these streams exactly as the read it stands in for does:
each stream is metered by the meter as it is and by one whose dialect has no ``tally_kept`` (the typed
read of every event, else over dicts), and the readings must be equal (token counts, text, first token and
answer times, gaps, usage, finish, model, errors, malformed).

``tests/fixtures/openai/*.sse`` are two such streams, built to the byte shape of captured OpenAI streams
(field order, ``"usage":null`` with ``include_usage``, ``logprobs`` or not, ``refusal`` in the role chunk,
padding of 1 to 15 characters) around a text with quotes, newlines, backslashes, tabs, multi-byte UTF-8
(raw in one, ``\\u`` escapes in the other) and an emoji.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from gateway.dialects import CHAT
from gateway.dialects.chat_template import tally_kept
from gateway.meter import StreamMeter
from gateway.tokens import TokenCounter, load_token_counter
from tests.support.clock import FakeClock
from tests.test_meter_template import BEFORE, RAW, TEXTS, EagerMeter, chunked, other_event, read

FIXTURES = Path(__file__).parent / "fixtures" / "openai"
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
HEAD = (
    '{"id":"chatcmpl-C4Hq5a6K3RaPMymUv70btQNYv6SvY","object":"chat.completion.chunk","created":1755137921,'
    '"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_34a54111",'
)
USAGE = '{"prompt_tokens":20,"completion_tokens":32,"total_tokens":52,"prompt_tokens_details":{"cached_tokens":4}}'


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return load_token_counter("o200k_base")


def events_of(stream: bytes) -> list[bytes]:
    """A stream's events, each with its blank line: what a provider flushes one at a time."""
    return [event + b"\n\n" for event in stream.split(b"\n\n") if event]


def taken(chunks: list[bytes]) -> bool:
    """Whether the template read takes the stream (its kept chunks, read at the finish)."""
    meter = StreamMeter(FakeClock(), 0.0)
    for chunk in chunks:
        meter.feed(chunk)
    return tally_kept(meter._events, None, 3) is not None


def padding(rng: random.Random, empty: bool = False) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0 if empty else 1, 15)))


def padded(delta: str, obfuscation: str, usage_null: bool = True, finish: str = "null") -> bytes:
    """One chunk as OpenAI sends it, ``delta`` its delta's JSON and ``obfuscation`` the padding's bytes."""
    choice = f'"choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]'
    usage = ',"usage":null' if usage_null else ""
    return f'data: {HEAD}{choice}{usage},"obfuscation":"{obfuscation}"}}\n\n'.encode()


def openai_stream(rng: random.Random, texts: list[str], usage: bool, ascii_only: bool) -> list[bytes]:
    """A role chunk, one chunk a text, the finish, the usage chunk when ``usage``, and ``[DONE]``."""
    role = padded('{"role":"assistant","content":"","refusal":null}', padding(rng), usage)
    events = [role]
    for text in texts:
        content = json.dumps({"content": text}, ensure_ascii=ascii_only, separators=(",", ":"))
        events.append(padded(content, padding(rng), usage))
    events.append(padded("{}", padding(rng), usage, '"stop"'))
    if usage:
        events.append(f'data: {HEAD}"choices":[],"usage":{USAGE},"obfuscation":"{padding(rng)}"}}\n\n'.encode())
    return [*events, b"data: [DONE]\n\n"]


@pytest.mark.parametrize("name", ["chat_stream_include_usage.sse", "chat_stream.sse"])
def test_captured_shapes_are_read_as_texts_and_as_before(name: str, counter: TokenCounter) -> None:
    stream = (FIXTURES / name).read_bytes()
    events = events_of(stream)
    datas = [json.loads(event[6:]) for event in events[:-1]]
    text = "".join(d["choices"][0]["delta"].get("content", "") for d in datas if d["choices"])
    rng = random.Random(name)
    for chunks in [events, [stream], *(chunked(rng, events) for _ in range(30))]:
        for meter_class in (StreamMeter, EagerMeter):
            new = read(meter_class, CHAT, chunks, counter)
            assert new == read(meter_class, BEFORE, chunks, counter), chunks
    reading = read(StreamMeter, CHAT, events, counter)[0]
    assert reading.answer_text == text and reading.output_tokens == counter.count(text)
    assert reading.finished and reading.stop == "stop" and reading.response_model == datas[0]["model"]
    usage = datas[-1].get("usage") or {}
    assert reading.usage_completion_tokens == usage.get("completion_tokens")
    assert reading.ttft_s == 0.25  # the first content chunk, the second chunk fed (a tick is 0.125 s)
    assert taken(events)  # the fast read takes it


def test_random_padded_streams_read_as_before(counter: TokenCounter) -> None:
    """Padded streams of random texts (escapes, quotes, backslashes, empty texts, multi-byte UTF-8), with and
    without ``include_usage``, some with other events among them, cut one event a chunk, several, at random."""
    rng = random.Random(5)
    count = 0
    for _ in range(600):
        texts = [rng.choice(TEXTS) for _ in range(rng.randint(0, 40))]
        events = openai_stream(rng, texts, rng.random() < 0.5, rng.random() < 0.5)
        if rng.random() < 0.2:
            for _ in range(rng.randint(1, 3)):
                events.insert(rng.randrange(1, len(events)), other_event(rng, True))
        chunks = chunked(rng, events)
        for meter_class in (StreamMeter, EagerMeter):
            assert read(meter_class, CHAT, chunks, counter) == read(meter_class, BEFORE, chunks, counter), chunks
        count += taken(chunks)
    assert count > 200  # the padded streams are read as texts, not only refused


def test_paddings_that_are_no_plain_strings_read_as_before(counter: TokenCounter) -> None:
    """Paddings of any bytes, JSON or not (quotes that close the string early, escapes, open escapes, control
    bytes, invalid escapes, lone surrogates, empty): whatever they do, the reading is the one before."""
    rng = random.Random(11)
    count = 0
    for _ in range(2000):
        events = [padded('{"role":"assistant","content":""}', "r")]
        for _ in range(rng.randint(3, 8)):
            text = rng.choice([" a", " b", " c", "", "\\", '\\"'])
            value = b"".join(rng.choice(RAW[:2] * 40 + RAW + [b"\n", b"\\u00e9"]) for _ in range(rng.randint(0, 3)))
            events.append(padded(json.dumps({"content": text}, separators=(",", ":")), "PAD").replace(b"PAD", value))
        events.append(b"data: [DONE]\n\n")
        assert read(StreamMeter, CHAT, events, counter) == read(StreamMeter, BEFORE, events, counter), events
        count += taken(events)
    assert count > 200


STEM = b'"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"'


@pytest.mark.parametrize(
    "datas",
    [
        # The padding key twice in one event and not in the next: as many keys as events, misplaced.
        [b"A" + STEM + b"x" + STEM + b'y"}', b'B"}'],
        [b'B"}', b"A" + STEM + b"x" + STEM + b'y"}'],
        # An event without its padding's closing quote, one with two.
        [b"A" + STEM + b"x}", b"B" + STEM + b'y""}'],
        # The padding not last: a field after it.
        [b"A" + STEM + b'x","usage":null}', b"B" + STEM + b'y","usage":null}'],
        [b"A" + STEM + b'x","usage":null}', b"B" + STEM + b'y"}'],
        # A field that is read after the padding: usage, an error, a finish.
        [b"A" + STEM + b'x","usage":{"prompt_tokens":3}}', b"B" + STEM + b'y","usage":{"prompt_tokens":4}}'],
        [b"A" + STEM + b'x"}', b"B" + STEM + b'y","error":{"message":"boom"}}'],
        # Strings that move the quotes: a padding whose escape takes the quote after it, the next text opening a
        # string of its own (as many strings as the events have, each cut elsewhere); a text that is two strings.
        [b"C" + STEM + b'y\\"}', b',"D' + STEM + b'z"}'],
        [b"C\\" + STEM + b'y"}', b"D" + STEM + b'z"}'],
        [b'A", "B' + STEM + b'x"}', b"C" + STEM + b'y\\"}'],
        # Paddings of more than letters and digits, valid JSON: still no field anything reads.
        [b"A" + STEM + b'\\"}', b"B" + STEM + b'\\u00e9 \\\\"}'],
    ],
)
def test_events_out_of_place_among_padded_ones_read_as_before(datas: list[bytes], counter: TokenCounter) -> None:
    """Events of the run that break the padded shape where it is not checked (neither of the two events decoded
    whole): each alone would pass a count of the padding's keys or of the quotes; read as before."""
    head = b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"'  # the run's shared head
    good = [head + text + STEM + pad + b'"}\n\n' for text, pad in ((b"a", b"Qx"), (b"b", b"k"), (b"c", b"ZZ9"))]
    events = [padded('{"role":"assistant","content":""}', "r"), *good]
    events += [head + data + b"\n\n" for data in datas]
    events += [head + b"d" + STEM + b'p"}\n\n', b"data: [DONE]\n\n"]
    for meter_class in (StreamMeter, EagerMeter):
        assert read(meter_class, CHAT, events, counter) == read(meter_class, BEFORE, events, counter)


def test_responses_deltas_with_padding_read_their_text(counter: TokenCounter) -> None:
    """The Responses API pads its ``response.output_text.delta`` events too; its read has no template (each
    event is decoded), so the padding is one more field it does not read."""
    from gateway.dialects import dialect_for

    def named(kind: str, payload: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload})}\n\n".encode()

    rng = random.Random(2)
    texts = ["Hi", ' "there"', "\n", " é"]
    events = [named("response.created", {"response": {"id": "resp_1", "status": "in_progress"}})]
    for n, text in enumerate(texts):
        payload = {"sequence_number": n + 1, "item_id": "msg_1", "output_index": 0, "content_index": 0}
        events.append(
            named("response.output_text.delta", {**payload, "delta": text, "logprobs": [], "obfuscation": padding(rng)})
        )
    events.append(named("response.completed", {"response": {"id": "resp_1", "status": "completed"}}))
    clock = FakeClock(10.0)
    meter = StreamMeter(clock, 10.0, dialect_for("responses"))
    for event in events:
        clock.now += 0.125
        meter.feed(event)
    reading = meter.finish(counter)
    assert reading.answer_text == "".join(texts) and reading.output_tokens == counter.count("".join(texts))
