"""The chat template read's checks made together (branch ``finish``) against the read as it was, result for result.

``tally_kept`` now checks the two answer events before the run and the run's texts as string bodies in one pass
(``_shaped_pair``), takes those two events' data as they are once they are of the shape (``_shaped_datas``), and
``tally_chunks`` asks for a delta's reasoning only when one of its reasoning fields is there. The former code is kept
in ``tests.support.former_chat_template``; both read the same kept entries and must agree: both refuse, or both give
equal ``Tally``s (answer pieces, times, usage, finish, model, errors, tool calls, timings), read whole or on from a
running tally, with and without the stream's end. The streams are ``test_meter_template``'s and
``test_meter_obfuscation``'s random ones, and streams built to reach every branch of the new checks: the events
before the run with a quote, a lone trailing backslash, a ``\\r``, a newline, a different shape; the run's texts
with the same faults; padded (OpenAI) streams with faulty paddings.
"""

from __future__ import annotations

import random

import pytest

from gateway.dialects.base import Tally
from gateway.dialects.chat_events import ChatChoice, ChatChunk, ChatDelta, tally_chunks
from gateway.dialects.chat_template import tally_kept
from gateway.kept_chunks import KeptChunks
from gateway.meter import StreamMeter
from tests.support import former_chat_template as former
from tests.support.clock import FakeClock
from tests.test_meter_obfuscation import openai_stream, padding
from tests.test_meter_template import RAW, chunked, random_stream

HEAD = 'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'


def kept(chunks: list[bytes]) -> KeptChunks:
    """The entries a meter keeps of ``chunks`` (one clock tick a chunk), unread."""
    clock = FakeClock(10.0)
    meter = StreamMeter(clock, 10.0)
    for chunk in chunks:
        clock.now += 0.125
        meter.feed(chunk)
    return meter._events


def running() -> Tally:
    """A tally some earlier batch left: answer, times, usage and a model already read."""
    tally = Tally(first_output_at=1.0, first_answer_at=1.0, last_answer_at=2.0, usage_prompt=7)
    tally.answer = ["earlier"]
    tally.output_events = [1.0, 2.0]
    tally.response_model = "earlier-model"
    return tally


def agree(entries: KeptChunks) -> bool:
    """Both reads of ``entries`` agree in every way they can be asked; whether the template read took them."""
    taken = False
    for into in (None, "running"):
        for tail in (3, 0):
            new = tally_kept(entries, running() if into else None, tail)
            old = former.tally_kept(entries, running() if into else None, tail)
            assert new == old, entries.datas
            taken = taken or new is not None
    return taken


def test_random_streams_read_as_the_former_code_reads_them() -> None:
    rng = random.Random(4101)
    taken = 0
    for _ in range(2500):
        taken += agree(kept(chunked(rng, random_stream(rng))))
    assert taken > 100


def test_random_padded_streams_read_as_the_former_code_reads_them() -> None:
    rng = random.Random(4102)
    taken = 0
    texts = [" a", " word", "é", 'q"', "\\", "", "x\ny", "😀", " 12"]
    for _ in range(800):
        words = [rng.choice(texts) for _ in range(rng.randint(0, 30))]
        events = openai_stream(rng, words, rng.random() < 0.7, rng.random() < 0.5)
        taken += agree(kept(chunked(rng, events)))
    assert taken > 100


def answer(text: str, suffix: str = '"},"finish_reason":null}]}') -> bytes:
    return (HEAD + '"delta":{"content":"' + text + suffix + "\n\n").encode()


ROLE = (HEAD + '"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n').encode()
FINISH = (HEAD + '"delta":{},"finish_reason":"stop"}]}\n\n').encode()
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":32}}\n\n'
FAULTS = ['x","role":"y', 'a"b', "a\\", "a\\\\", 'a\\"', "a\rb", "a\nb", "\\u00e9", "ok", "", '","', "a\\", "\\\\\\"]


@pytest.mark.parametrize("where", ["first", "second", "run-first", "run-second", "run", "last"])
@pytest.mark.parametrize("fault", FAULTS)
def test_each_check_refuses_or_takes_as_before(where: str, fault: str) -> None:
    """A fault in either event before the run, in the run's texts (its first, or another): each branch of the
    checks made together, the two before the run then read whole or not."""
    texts = [f"{chr(97 + i)} w" for i in range(12)]  # no text begins as the next: the run starts after two
    index = {"first": 0, "second": 1, "run-first": 2, "run-second": 3, "run": 6, "last": 11}[where]
    texts[index] = fault
    events = [ROLE, *(answer(text) for text in texts), FINISH, USAGE, b"data: [DONE]\n\n"]
    agree(kept(events))


def test_texts_of_any_bytes_read_as_the_former_code_reads_them() -> None:
    """The shape's events around any bytes, JSON or not, the two events before the run's included: whatever a
    text does to the quotes (closes its string early, escapes the closing quote, opens another, balances an extra
    element against a swallowed quote), both reads refuse it or read it alike."""
    rng = random.Random(4104)
    raw = [piece.decode() for piece in RAW]
    taken = 0
    for _ in range(8000):
        count = rng.randint(6, 10)
        texts = [f" w{index}" for index in range(count)] if rng.random() < 0.5 else [chr(97 + i) for i in range(count)]
        for _ in range(rng.randint(1, 3)):
            texts[rng.randrange(len(texts))] = "".join(rng.choice(raw) for _ in range(rng.randint(1, 3)))
        taken += agree(kept([ROLE, *(answer(text) for text in texts), FINISH, b"data: [DONE]\n\n"]))
    assert taken > 300


@pytest.mark.parametrize("at", [0, 1, 2, 4])
@pytest.mark.parametrize(
    "pair",
    [(b"a\\", b',"b'), (b'a","b', b"y\\"), (b"a\\\\\\", b',"b'), (b'a\\\\","b', b"y\\\\"), (b'a\\"', b"b")],
)
def test_texts_that_move_the_quotes_read_as_before(at: int, pair: tuple[bytes, bytes]) -> None:
    """Two texts that together keep the array's length but not its strings, before the run or in it."""
    texts = [" x", " w", " v", " u", " t", " s", " r"]
    texts[at : at + 2] = (piece.decode() for piece in pair)
    agree(kept([ROLE, *(answer(text) for text in texts), FINISH, b"data: [DONE]\n\n"]))


@pytest.mark.parametrize("where", [0, 1, 2, 5])
def test_events_before_the_run_of_another_shape_read_as_before(where: int) -> None:
    texts = [f" w{i}" for i in range(10)]
    events = [ROLE, *(answer(text) for text in texts), FINISH]
    events[1 + where] = answer(texts[where], '"},"finish_reason":null,"x":1}]}')
    agree(kept(events))


def test_the_bench_stream_is_taken_with_the_two_events_before_its_run() -> None:
    events = [ROLE, *(answer(f" word{i}") for i in range(32)), FINISH, USAGE, b"data: [DONE]\n\n"]
    entries = kept(events)
    assert entries.heads.index(entries.heads[len(entries.heads) // 2]) == 3  # the run starts after two answers
    assert agree(entries)


@pytest.mark.parametrize("faulty", [0, 1, 3])
def test_padded_events_with_faulty_paddings_read_as_before(faulty: int) -> None:
    rng = random.Random(faulty)
    events = openai_stream(rng, [f" w{i}" for i in range(10)], True, True)
    cut = events[1 + faulty]
    key = cut.rfind(b'"obfuscation":"') + len(b'"obfuscation":"')
    events[1 + faulty] = cut[:key] + b'\\"' + cut[key:]
    agree(kept(events))
    events[1 + faulty] = cut[:key] + padding(rng).encode() + b"\\" + cut[key:]
    agree(kept(events))


REASONING = [None, "", " think", ["x"], [{"type": "reasoning.text", "text": "t"}], [{"text": ""}], 0, {"a": 1}]


def test_tally_chunks_reads_reasoning_as_before() -> None:
    """Every combination of a delta's three reasoning fields, with and without content, a tool call or a finish."""
    rng = random.Random(4103)
    for _ in range(3000):
        events: list[ChatChunk | str] = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.1:
                events.append(rng.choice(["", " text"]))
                continue
            delta = ChatDelta(
                content=rng.choice([None, "", "x"]),
                tool_calls=rng.choice([None, None, None, [{"index": 0, "function": {"name": "f"}}]]),
                reasoning_content=rng.choice(REASONING),
                reasoning=rng.choice(REASONING),
                reasoning_details=rng.choice(REASONING),
            )
            choice = ChatChoice(delta=rng.choice([delta, delta, None]), finish_reason=rng.choice([None, "stop"]))
            events.append(ChatChunk(choices=[choice], model=rng.choice([None, "m"])))
        times = [float(index) for index in range(len(events))]
        reasoning = rng.random() < 0.5
        for tail in (0, 3):
            new = tally_chunks(events, times, tail, None, "m", reasoning)
            old = former.tally_chunks(events, times, tail, None, "m", reasoning)
            assert new == old, events
