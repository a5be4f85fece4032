"""The C scan of a chat stream's kept chunks (``gateway.dialects.chat_native``, ``chat_read.c``) against the reads it
stands in for: the template read, the typed read, the dicts.

Every stream is metered by a meter whose dialect reads its kept chunks by the C scan first (as the gateway does with
a build), by one whose dialect reads them as the pure gateway does (the template read, then typed, then dicts), and
by one that reads every event typed or over dicts; the readings (token counts, text, times, usage, finish, model,
errors) and the meter's ``done`` and ``malformed`` must be equal, read whole and in folds. The tallies themselves are
compared too (the answer joined), and how many streams the scan takes is checked, so that the equalities are not
only those of its refusals. The scan comes from the build (``make native``); without a fresh one these tests are
skipped (the pure gateway never calls it).
"""

from __future__ import annotations

import dataclasses
import json
import random
from array import array
from collections.abc import Callable
from typing import Any

import pytest

from gateway import native
from gateway.dialects import CHAT
from gateway.dialects.base import Tally
from gateway.dialects.chat import ChatDialect
from gateway.dialects.chat_native import load_reader, tally_native
from gateway.kept_chunks import KeptChunks
from gateway.meter import StreamMeter
from gateway.tokens import TokenCounter, load_token_counter
from tests.support.clock import FakeClock
from tests.support.native_c import load_built_c
from tests.test_meter_obfuscation import USAGE, openai_stream, padded, padding
from tests.test_meter_template import BEFORE, RAW, TEXTS, EagerMeter, chunked, random_stream, read, stream_of
from tests.test_meter_typed import random_event

NAME = "gateway.dialects._chat_read"


MODULE = load_built_c(NAME)
READ: Callable[..., Any] | None = None if MODULE is None else MODULE.read_kept
needs_scan = pytest.mark.skipif(READ is None, reason="no fresh build of the C scan (make native)")


class ScanDialect(ChatDialect):
    """Chat as the gateway reads it with a build: the C scan, else the template read (then typed, then dicts)."""

    def tally_kept(self, entries: KeptChunks, into: Tally | None = None, final: bool = True) -> Tally | None:
        tally = tally_native(entries, into, 3 if final else 0, READ)
        return tally if tally is not None else super().tally_kept(entries, into, final)


SCAN = ScanDialect("chat")


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return load_token_counter("o200k_base")


def kept(chunks: list[bytes]) -> KeptChunks:
    meter = StreamMeter(FakeClock(), 0.0)
    for at, chunk in enumerate(chunks):
        meter._clock.now = float(at)  # type: ignore[attr-defined]
        meter.feed(chunk)
    meter.end_of_stream()
    return meter._events


def plain(tally: Tally) -> dict[str, Any]:
    """A tally's fields, its answer joined (the scan adds it as one string) and its output times as a list."""
    fields = {field.name: getattr(tally, field.name) for field in dataclasses.fields(tally)}
    fields["answer"] = "".join(tally.answer)
    fields["output_events"] = list(tally.output_events)
    return fields


def scanned(chunks: list[bytes]) -> bool:
    """Whether the scan takes the stream's kept chunks; when it does, its tally is the one the meter reads
    without it (from a running tally too)."""
    entries = kept(chunks)
    tally = tally_native(entries, None, 3, READ)
    if tally is None:
        return False
    reference = StreamMeter(FakeClock(), 0.0, BEFORE)._read(entries, None, True)
    assert plain(tally) == plain(reference), chunks
    start = Tally(answer=["before"], first_answer_at=-1.0, usage_prompt=3, output_events=[-1.0], _groq_usage={"a": 1})
    again = dataclasses.replace(start, answer=list(start.answer), output_events=list(start.output_events))
    assert tally_native(entries, start, 0, READ) is start
    reference = StreamMeter(FakeClock(), 0.0, BEFORE)._read(entries, again, False)
    assert plain(start) == plain(reference), chunks
    return True


def same(chunks: list[bytes], counter: TokenCounter) -> None:
    for meter_class in (StreamMeter, EagerMeter):
        got = read(meter_class, SCAN, chunks, counter)
        assert got == read(meter_class, CHAT, chunks, counter), chunks
        assert got == read(meter_class, BEFORE, chunks, counter), chunks


@needs_scan
def test_the_template_tests_streams_read_as_before(counter: TokenCounter) -> None:
    rng = random.Random(410)
    taken = 0
    for _ in range(1200):
        chunks = chunked(rng, random_stream(rng))
        same(chunks, counter)
        taken += scanned(chunks)
    assert taken > 200


@needs_scan
def test_openai_padded_streams_read_as_before(counter: TokenCounter) -> None:
    rng = random.Random(411)
    taken = 0
    for _ in range(300):
        texts = [rng.choice(TEXTS) for _ in range(rng.randint(0, 40))]
        chunks = chunked(rng, openai_stream(rng, texts, rng.random() < 0.7, rng.random() < 0.5))
        same(chunks, counter)
        taken += scanned(chunks)
    assert taken > 250


@pytest.mark.parametrize(
    "texts",
    [
        [f" word{i}" for i in range(32)],
        ["日", "本", "語", "😀", " ü", "n", "ï", "\U0010ffff", "\x7f"],
        ["a\\", "\\", 'b"', '"', "\n", "\\n", "\u2028", "\u2029", "é", "/", "\b\f\r\t", "\x00", "\x1f"],
        ["", "", " a", "", " b"],
        ["<|endoftext|>", " the", " end"],
        [],
    ],
)
@needs_scan
def test_plain_answers_are_scanned_and_read_as_before(texts: list[str], counter: TokenCounter) -> None:
    raw = stream_of([])
    utf8 = [
        f'data: {{"choices":[{{"delta":{{"content":{json.dumps(t, ensure_ascii=False)}}}}}]}}\n\n'.encode()
        for t in texts
    ]
    for chunks in (stream_of(texts), [*raw[:1], *utf8, *raw[1:]]):
        same(chunks, counter)
        assert scanned(chunks)
        reading = read(StreamMeter, SCAN, chunks, counter)[0]
        assert reading.answer_text == "".join(texts) and reading.usage_completion_tokens == 32


@needs_scan
def test_the_typed_tests_random_events_read_as_before(counter: TokenCounter) -> None:
    """Every field's odd values (the typed read's tests): what the scan takes it reads as the others do."""
    rng = random.Random(412)
    taken = 0
    for _ in range(2500):
        events = [random_event(rng) for _ in range(rng.randint(0, 8))]
        compact = rng.random() < 0.5
        separators = (",", ":") if compact else (", ", ": ")
        ascii_only = rng.random() < 0.5
        datas = [json.dumps(event, separators=separators, ensure_ascii=ascii_only).encode() for event in events]
        chunks = [b"data: " + data + b"\n\n" for data in datas] + [b"data: [DONE]\n\n"]
        same(chunks, counter)
        taken += scanned(chunks)
    assert taken > 300


MUTATIONS = [
    b'"',
    b"\\",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",
    b"\\u00e9",
    b"\\x",
    b"\x01",
    b"\x7f",
    b"\xff",
    b"\xc3",
    b"\xa9",
    "é".encode(),
    "\u2028".encode(),
    b"\xed\xa0\x80",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b" ",
    b"\t",
    b"\n",
    b"\r",
    b"0",
    b"-",
    b".5",
    b"e1",
    b"n",
    b"null",
    b'"x"',
    b',"x":1',
]


@needs_scan
def test_streams_with_bytes_replaced_inserted_or_removed_read_as_before(counter: TokenCounter) -> None:
    rng = random.Random(413)
    taken = 0
    for round_ in range(3000):
        if round_ % 2:
            texts = [rng.choice(TEXTS) for _ in range(rng.randint(1, 12))]
            events = openai_stream(rng, texts, rng.random() < 0.7, rng.random() < 0.5)
        else:
            events = stream_of([rng.choice(TEXTS) for _ in range(rng.randint(1, 12))])
        stream = bytearray(b"".join(events[:-1]))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(stream))
            kind = rng.randrange(3)
            if kind == 0:
                stream[at : at + rng.randint(1, 3)] = rng.choice(MUTATIONS)
            elif kind == 1:
                stream[at:at] = rng.choice(MUTATIONS)
            else:
                del stream[at : at + rng.randint(1, 3)]
        whole = bytes(stream) + events[-1]
        chunks = chunked(rng, [event + b"\n\n" for event in whole.split(b"\n\n") if event])
        same(chunks, counter)
        taken += scanned(chunks)
    assert taken > 150  # a change within a text or a skipped string, or one that leaves JSON of the shape


@needs_scan
def test_texts_of_raw_bytes_read_as_before(counter: TokenCounter) -> None:
    """A text's bytes between the quotes, JSON or not (they may close the string and go on as JSON)."""
    rng = random.Random(414)
    prefix = b'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"'
    suffix = b'"},"finish_reason":null}]}\n\n'
    extra = [b'"},"finish_reason":"stop","index":1,"delta":{"content":"', b'","role":"x', b'"},{"delta":{"content":"']
    taken = 0
    for _ in range(2000):
        events = []
        for _ in range(rng.randint(1, 8)):
            pieces = RAW[:2] * 6 + RAW + MUTATIONS + extra
            events.append(prefix + b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 3))) + suffix)
        events.append(b"data: [DONE]\n\n")
        same(events, counter)
        taken += scanned(events)
    assert taken > 250


@needs_scan
def test_a_character_cut_between_two_texts_is_no_text() -> None:
    """Each text is checked as UTF-8 alone: two texts that hold halves of one character are not JSON."""
    cut = "€".encode()
    chunks = stream_of(["a", "b"])
    chunks[1] = chunks[1].replace(b'"a"', b'"' + cut[:2] + b'"')
    chunks[2] = chunks[2].replace(b'"b"', b'"' + cut[2:] + b'"')
    assert not scanned(chunks)


HEAD = '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'


@pytest.mark.parametrize(
    ("event", "taken"),
    [
        ('{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}', True),
        ('{"choices":[{"index":0,"delta":{"content":"x","content":"y"}}]}', False),  # a key twice
        ('{"choices":[{"index":0,"delta":{"con\\u0074ent":"x"}}]}', False),  # an escape in a key
        ('{"id":"a\\u0062","choices":[{"delta":{"content":"x"}}]}', False),  # an escape in a skipped string
        ('{"id":"é","choices":[{"delta":{"content":"x"}}]}', False),  # past ASCII in a skipped string
        ('{"model":"m\\/n","choices":[{"delta":{"content":"x"}}]}', False),
        ('{"choices":[{"delta":{"content":"\\ud83d\\ude00 \\uD83D\\uDE00"}}]}', True),  # a surrogate pair
        ('{"choices":[{"delta":{"content":"\\ud83d"}}]}', False),  # a lone high surrogate
        ('{"choices":[{"delta":{"content":"\\ude00"}}]}', False),  # a lone low surrogate
        ('{"choices":[{"delta":{"content":"\\ud83d\\u0041"}}]}', False),  # a high one before no low one
        ('{"choices":[{"delta":{"content":"\\ud83dx"}}]}', False),
        ('{"choices":[{"delta":{"content":"\\u12"}}]}', False),
        ('{"choices":[{"delta":{"content":"\\u12G4"}}]}', False),
        ('{"choices":[{"delta":{"content":"\\a"}}]}', False),  # no such escape
        ('{"choices":[{"delta":{"content":"\\u0000\\u001f\\u007f\\u0080\\u07ff\\u0800\\uffff"}}]}', True),
        ('{"choices":[{"delta":{"content":"a\tb"}}]}', False),  # a raw control byte
        ('{"choices":[{"delta":{"content":"\u2028\u2029"}}]}', True),
        ('{"choices":[{"delta":{"content":"x"}},{"index":1,"delta":{"content":"y"}}]}', True),  # two choices
        ('{"choices":[{"delta":{"content":""}},{"index":1,"delta":{"content":"y"}}]}', True),
        ('{"choices":[{"delta":{}},{"delta":{"content":"y"},"finish_reason":"length"}]}', True),
        ('{"choices":[{"delta":{"content":"x"},"finish_reason":"stop"},{"finish_reason":"length"}]}', True),
        ('{"choices":[{"delta":{"content":"x"},"finish_reason":"odd"}]}', True),
        ('{"choices":[{"delta":{"content":"x"},"finish_reason":""}]}', True),
        ('{"choices":[{"delta":{"content":"x"},"finish_reason":1}]}', False),
        ('{"choices":[{}]}', True),
        ('{"choices":[]}', True),
        ("{}", True),
        ('{"choices":null}', False),
        ('{"choices":[{"delta":null}]}', False),
        ('{"choices":[{"delta":{"content":null,"role":null,"refusal":null}}]}', True),
        ('{"choices":[{"delta":{"content":"x","tool_calls":null,"function_call":null}}]}', True),
        (
            '{"choices":[{"delta":{"content":"","reasoning_content":null,"reasoning":null,"reasoning_details":null}}]}',
            True,
        ),
        ('{"choices":[{"delta":{"content":"","reasoning":"r"}}]}', False),
        ('{"choices":[{"delta":{"tool_calls":[]}}]}', False),
        ('{"choices":[{"delta":{"content":"x"},"text":null,"message":null,"logprobs":null}]}', True),
        ('{"choices":[{"delta":{"content":"x"},"logprobs":{}}]}', False),
        ('{"choices":[{"delta":{"content":3}}]}', False),
        ('{"choices":[{"index":"0","delta":{"content":"x"}}]}', False),
        ('{"choices":[{"index":00,"delta":{"content":"x"}}]}', False),
        ('{"choices":[{"index":-1,"delta":{"content":"x"}}]}', True),
        ('{"choices":[{"index":1.0,"delta":{"content":"x"}}]}', False),
        ('{"created":12345678901234567890,"choices":[]}', False),
        ('{"created":1e3,"choices":[]}', False),
        ('{"model":null,"choices":[{"delta":{"content":"x"}}]}', True),
        ('{"model":4,"choices":[]}', False),
        (
            '{"usage":{"prompt_tokens":5,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":2}},"choices":[]}',
            True,
        ),
        ('{"usage":{"prompt_tokens":5,"completion_tokens":true,"x":[1,2.5e-3,"s\\n",null,{}]},"choices":[]}', True),
        ('{"usage":{"prompt_cache_hit_tokens":3},"choices":[]}', True),
        ('{"usage":{"a":"\\ud800"},"choices":[]}', False),  # msgspec refuses the lone surrogate
        ('{"usage":{"a":1,},"choices":[]}', False),
        ('{"usage":{"a":01},"choices":[]}', False),
        ('{"usage":{"a" 1},"choices":[]}', False),
        ('{"usage":[1],"choices":[]}', False),
        ('{"usage":null,"choices":[]}', True),
        ('{"usage":5,"choices":[]}', False),
        ('{"error":{"message":"boom"}}', False),
        ('{"error":null,"choices":[]}', False),
        ('{"timings":{"predicted_ms":1}}', False),
        ('{"x_groq":{"usage":{"prompt_tokens":1}}}', False),
        ('{"obfuscation":"abc","service_tier":"default","system_fingerprint":null,"choices":[]}', True),
        ('{ "choices" : [ { "delta" : { "content" : "x" } } ] }', True),  # spaces
        ('{\t"choices":[]\t}', True),
        ('{"choices":[]} ', False),  # a space after the event
        ('{"choices":[],}', False),
        ('{"choices":[{"delta":{"content":"x"},}]}', False),
        ('{"choices":[{"delta":{"content":"x"}}],"choices":[]}', False),
        ('{"provider":"p","choices":[]}', False),
        ('[{"choices":[]}]', False),
        ('"x"', False),
    ],
)
@needs_scan
def test_each_form_is_scanned_or_refused(event: str, taken: bool, counter: TokenCounter) -> None:
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":" a"},"finish_reason":null}]}\n\n'
    texts = [" b", " c", " d"]
    chunks = [role, f"data: {event}\n\n".encode()]
    chunks += [f'data: {HEAD}"choices":[{{"delta":{{"content":"{text}"}}}}]}}\n\n'.encode() for text in texts]
    chunks.append(b"data: [DONE]\n\n")
    same(chunks, counter)
    assert scanned(chunks) == taken
    # The same event as one event's data (kept before the first output) and among several in one chunk.
    first = [f"data: {event}\n\n".encode(), *chunks]
    same(first, counter)
    assert scanned(first) == taken
    joined = [chunks[0], b"".join(chunks[1:4]), b"".join(chunks[4:])]
    same(joined, counter)


@pytest.mark.parametrize(
    "chunks",
    [
        [b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"choices":[{"delta":{"content":"b"}}]}\n\n'],
        [b'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\n'],
        [b'data:{"choices":[{"delta":{"content":"a"}}]}\n\n'],
        [b'data:  {"choices":[{"delta":{"content":"a"}}]}\n\n'],
        [b': keep-alive\n\ndata: {"choices":[{"delta":{"content":"a"}}]}\n\n'],
        [b'event: x\ndata: {"choices":[{"delta":{"content":"a"}}]}\n\n'],
        [b'data: {"choices":[{"delta":\ndata: {"content":"a"}}]}\n\n'],
        [b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: not json\n\n'],
        [b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n\n'],
        [b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"choices":[{"delta":{"content":"b"}}]}'],
        [b'data: {"choices":[{"delta":{"content":"a"}}]}\n\nid: 1\n\n'],
    ],
)
@needs_scan
def test_sse_forms_read_as_before(chunks: list[bytes], counter: TokenCounter) -> None:
    role = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":" a"},"finish_reason":null}]}\n\n'
    for stream in ([role, *chunks, b"data: [DONE]\n\n"], [role + chunks[0], b"data: [DONE]\n\n"]):
        same(stream, counter)
        scanned(stream)


@needs_scan
def test_a_refusal_leaves_the_running_tally_untouched() -> None:
    assert READ is not None
    entries = kept(stream_of([" a", " b", " c", " d"]) + [b"data: not json\n\n"])
    into = Tally(answer=["x"], usage_prompt=1)
    assert tally_native(entries, into, 3, READ) is None
    assert into == Tally(answer=["x"], usage_prompt=1)
    usage = kept([b'data: {"choices":[],"usage":{"a":"\\ud800"}}\n\n'])
    assert READ(usage.heads, usage.datas, usage.parts, usage.times) is not None  # msgspec's decode refuses it
    assert tally_native(usage, into, 3, READ) is None and into == Tally(answer=["x"], usage_prompt=1)


@needs_scan
def test_the_scan_checks_its_arguments() -> None:
    assert READ is not None
    with pytest.raises(TypeError):
        READ([], [], [])
    with pytest.raises(TypeError):
        READ([b""], [b"{}"], [0], array("d"))  # times shorter than datas
    with pytest.raises(TypeError):
        READ([b""], [b"{}"], [0], array("f", [1.0]))
    assert READ([b""], [b"{}"], [0], array("d", [1.0])) == (None, [], None, None, None, False, 1)
    assert READ([b""], [b"{}"], [], array("d", [1.0])) is None  # whole chunks: "data: " lines
    assert READ([b"x"], [b"{}"], [0], array("d", [1.0])) is None  # one event's data is kept without a head
    assert READ([b""], ["{}"], [0], array("d", [1.0])) is None


def test_the_pure_gateway_never_loads_the_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_NATIVE", "0")
    assert native.load_c(NAME) is None and load_reader() is None


@needs_scan
def test_the_build_compiles_the_scan_and_stamps_its_source() -> None:
    assert "dialects/chat_read.c" in native.source_hashes()
    assert native.built_files(native.NATIVE_DIR)[NAME].exists()
    padded_chunk = padded('{"content":"x"}', padding(random.Random(1)))
    assert scanned([padded_chunk] * 6 + [f'data: {{"choices":[],"usage":{USAGE}}}\n\n'.encode()])


@needs_scan
@pytest.mark.parametrize(
    ("same", "other"),
    [('"stop"', '"length"'), ("null", "null")],
)
@pytest.mark.parametrize("usage", [False, True])
def test_events_of_one_head_say_again_what_they_say(same: str, other: str, usage: bool, counter: TokenCounter) -> None:
    """Every event of the head says the same finish (or usage), and one between them (of another head) says another:
    the last says it again, read whole or as its text (an event that says more than its text is no template)."""
    event = (
        'data: {"id":"ID","model":"m","choices":[{"index":0,"delta":{"content":"TEXT"},"finish_reason":FINISH}]USAGE}'
    )
    usages = (',"usage":{"completion_tokens":2}', ',"usage":{"completion_tokens":9}') if usage else ("", "")
    events = [event.replace("TEXT", text).replace("FINISH", same).replace("USAGE", usages[0]) for text in " abcd"]
    between = event.replace("TEXT", " x").replace("FINISH", other).replace("USAGE", usages[1])
    events.insert(4, between.replace("ID", "other"))  # no head shared: read whole
    chunks = [chunk.replace("ID", "c").encode() + b"\n\n" for chunk in events] + [b"data: [DONE]\n\n"]
    same_reading = read(StreamMeter, SCAN, chunks, counter)
    assert same_reading == read(StreamMeter, BEFORE, chunks, counter)
    assert scanned(chunks)


@needs_scan
def test_the_dialect_reads_by_the_scan_when_the_build_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [f" word{i}" for i in range(32)]
    entries = kept(stream_of(texts))
    assert len((CHAT.tally_kept(entries) or Tally()).answer) == 32  # the template read: one string a text
    monkeypatch.setattr("gateway.dialects.chat.READ_KEPT", READ)
    assert (CHAT.tally_kept(entries) or Tally()).answer == ["".join(texts)]  # the scan's: the texts joined
    odd = b'data: {"choices":[{"delta":{"content":"x","n":1}}]}\n\n'  # a key the scan does not know
    assert len((CHAT.tally_kept(kept([*stream_of(texts)[:-1], odd])) or Tally()).answer) == 33  # the template's
