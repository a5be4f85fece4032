"""The relay's per-chunk scans in C (``gateway.dialects.scans``, ``chat_read.c``) against the pure ones they stand for.

``find(data, needle)`` must answer ``data.find(needle)`` (the very offset) and ``chat_finish(data)`` chat's
``finish_reason`` pattern's search, on any bytes: random runs of the markers' pieces, every whitespace byte the
pattern's ``\\s`` takes and those it does not, random bytes, the test streams' events. Then the meter, the
forwarder and whole streamed requests run with the C scans put where the build puts them (the meter's and the
forwarder's ``_find``, chat's ``may_finish``) and with the pure ones: every reading, every forwarded byte and every
client message the same, for every cutting of every stream (events split across reads, several in one read, CRLF
line endings, comments, an error event, a stream broken mid-event). The redaction (``redactor``) masks as the former
method did, and gives the very bytes back when there is nothing to mask. The C functions come
from the build (``make native``); without a fresh one those comparisons are skipped (the pure gateway never calls
them), and the pure scans are still checked against ``bytes.find`` and the pattern.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import gateway.meter
import gateway.relay.forward
from gateway import native
from gateway.dialects import dialect_for, scans
from gateway.dialects.chat import ChatDialect
from gateway.relay.forward import EventForwarder
from gateway.tokens import TokenCounter, load_token_counter
from tests.support.native_c import load_built_c
from tests.test_chunk_path import FORWARDED, STREAMS, VOCABULARY, by_events, cuttings, watch
from tests.test_chunk_relay import serve_cuttings

MODULE = load_built_c("gateway.dialects._chat_read")
needs_build = pytest.mark.skipif(MODULE is None, reason="no fresh build of the C scans (make native)")

SPACES = [bytes([byte]) for byte in range(256) if bytes([byte]).isspace() or byte in (0x1C, 0x1D, 0x1E, 0x1F, 0x85)]
"""The bytes ``\\s`` takes in a bytes pattern (``isspace``: space, \\t, \\n, \\v, \\f, \\r) and some it does not."""


def samples(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    pieces = [*VOCABULARY, *SPACES, b'"finish_reason" :', b'"finish_reason"\t:\n"', b"\xa0", b"\x00"]
    found = [b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 14))) for _ in range(30_000)]
    found += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))) for _ in range(2_000)]
    for _, body in STREAMS.values():
        found += by_events(body)
    found += [b'"finish_reason"' + space + b":" + other + b'"' for space in SPACES for other in SPACES]
    return found


def scan_pairs() -> Iterator[tuple[str, Callable[..., int], Callable[..., bool]]]:
    yield "pure", bytes.find, scans._chat_finish
    if MODULE is not None:
        yield "C", MODULE.find, MODULE.chat_finish


@pytest.mark.parametrize("kind", ["pure", "C"])
def test_the_scans_answer_as_find_and_the_pattern_on_any_bytes(kind: str) -> None:
    pairs = {name: (find, finish) for name, find, finish in scan_pairs()}
    if kind not in pairs:
        pytest.skip("no fresh build of the C scans (make native)")
    find, finish = pairs[kind]
    rng = random.Random(7)
    needles = [b"", b"[DONE]", b'"error"', b"[]", b'"usage"', b"sk-secret", b"\n\n", b'"', b"x" * 50]
    found = finishes = 0
    for data in samples(41):
        assert finish(data) == (scans.CHAT_FINISH_REASON.search(data) is not None), data
        finishes += finish(data)
        for needle in (rng.choice(needles), data[rng.randint(0, len(data)) :][: rng.randint(0, 6)]):
            assert find(data, needle) == data.find(needle), (data, needle)
            found += find(data, needle) >= 0
    assert finishes > 100 and found > 1000  # both answers were met, many times
    # Long runs of a few bytes, so that a needle's first and last bytes meet at every offset (the C search tests 16
    # offsets at a time, then the rest one by one).
    for _ in range(3_000):
        data = bytes(rng.choice(b'ab"') for _ in range(rng.randint(0, 300)))
        needle = bytes(rng.choice(b'ab"') for _ in range(rng.randint(1, 20)))
        for probe in (needle, data[rng.randint(0, len(data)) :][: rng.randint(1, 40)]):
            assert find(data, probe) == data.find(probe), (data, probe)
        key = b'"finish_reason"' + bytes(rng.choice(b' \t:"') for _ in range(rng.randint(0, 4)))
        at = rng.randint(0, len(data))
        spliced = data[:at] + key + data[at:]
        assert finish(spliced) == (scans.CHAT_FINISH_REASON.search(spliced) is not None), spliced


@needs_build
def test_the_c_scans_refuse_what_find_refuses() -> None:
    assert MODULE is not None
    calls: list[Callable[[], Any]] = [
        lambda: MODULE.find(b"abc"),
        lambda: MODULE.find(b"abc", "a"),
        lambda: MODULE.find("abc", b"a"),
        lambda: MODULE.chat_finish("abc"),
        lambda: MODULE.chat_finish(b"a", b"b"),
    ]
    for call in calls:
        with pytest.raises(TypeError):
            call()


def test_the_gateway_uses_the_c_scans_only_with_a_fresh_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_NATIVE", "0")
    assert scans._load() == (bytes.find, scans._chat_finish)
    monkeypatch.setenv("GATEWAY_NATIVE", "1")
    if native.stale() is None:
        find, finish = scans._load()
        assert (find.__name__, finish.__name__) == ("find", "chat_finish") and find is not bytes.find
    # Chat's ``may_finish`` is the scan itself (no method around it): the meter binds it once per stream.
    assert ChatDialect("chat").may_finish is scans.chat_finish


@pytest.fixture
def c_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C scans where the build puts them, in this (pure) gateway."""
    assert MODULE is not None
    monkeypatch.setattr(gateway.meter, "_find", MODULE.find)
    monkeypatch.setattr(gateway.relay.forward, "_find", MODULE.find)
    monkeypatch.setattr(ChatDialect, "may_finish", staticmethod(MODULE.chat_finish))


def crlf(body: bytes) -> bytes:
    return body.replace(b"\n", b"\r\n")


def commented(body: bytes) -> bytes:
    """A comment before every third event (keep-alives, as some providers send them)."""
    events = by_events(body)
    return b"".join((b": keep-alive\n\n" if i % 3 == 0 else b"") + event for i, event in enumerate(events))


VARIED = {
    **FORWARDED,
    "bench chat, CRLF": ("chat", crlf(STREAMS["bench chat"][1])),
    "openai padded chat, comments": ("chat", commented(STREAMS["openai padded chat"][1])),
    "bench chat, broken mid-event": ("chat", STREAMS["bench chat"][1][:-60]),
}


def cut_anywhere(body: bytes, rng: random.Random) -> list[bytes]:
    """The stream cut at random offsets (inside a line ending, an event's data, a marker), one to 400 bytes a read."""
    pieces, at = [], 0
    while at < len(body):
        size = rng.randint(1, 400)
        pieces.append(body[at : at + size])
        at += size
    return pieces


def varied_cuttings(name: str, count: int) -> list[list[bytes]]:
    """One event a read and ``count`` random cuttings (by events, as ``cuttings``), then ``count`` at any offset."""
    _, body = VARIED[name]
    rng = random.Random(len(name))
    lf = body.replace(b"\r\n", b"\n")
    by_lf = cuttings(lf, count, seed=len(name) + 3) if lf.endswith(b"\n\n") else []
    found = [[piece.replace(b"\n", b"\r\n") for piece in pieces] if lf != body else pieces for pieces in by_lf]
    found += [cut_anywhere(body, rng) for _ in range(count)]
    assert all(b"".join(pieces) == body for pieces in found)
    return found


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return load_token_counter("o200k_base")


def meter_and_forwarder(name: str, counter: TokenCounter) -> list[Any]:
    dialect = dialect_for(VARIED[name][0])  # type: ignore[arg-type]
    seen: list[Any] = []
    for pieces in varied_cuttings(name, 30):
        seen.append(watch(pieces, dialect, counter))
        for options in ({}, {"drop_usage_only": True}, {"continuation": True, "said_tokens": 9}):
            forwarder = EventForwarder(dialect, **options)
            seen.append([(forwarder.feed(piece), forwarder.error, forwarder.error_object) for piece in pieces])
            seen.append(forwarder.flush())
    return seen


@needs_build
@pytest.mark.parametrize("name", list(VARIED))
def test_the_meter_and_forwarder_read_every_cutting_alike_with_the_c_scans(
    name: str, counter: TokenCounter, request: pytest.FixtureRequest
) -> None:
    pure = meter_and_forwarder(name, counter)
    request.getfixturevalue("c_scans")
    assert meter_and_forwarder(name, counter) == pure


@needs_build
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_whole_requests_send_the_same_bytes_with_the_c_scans(api: str, request: pytest.FixtureRequest) -> None:
    names = [name for name, (chat, _) in VARIED.items() if chat == "chat"]

    async def serve() -> list[Any]:
        return [await serve_cuttings(api, [VARIED[name][1]], varied_cuttings(name, 4)) for name in names]

    pure = asyncio.run(serve())
    request.getfixturevalue("c_scans")
    assert asyncio.run(serve()) == pure


def former_redact(secret: bytes | None, data: bytes) -> bytes:
    """``UpstreamClient.redact`` as it was (a method)."""
    if secret and data.find(secret) >= 0:
        return data.replace(secret, b"***")
    return data


@pytest.mark.parametrize("kind", ["pure", "C"])
def test_the_redaction_masks_as_before(kind: str) -> None:
    if kind == "C" and MODULE is None:
        pytest.skip("no fresh build of the C scans (make native)")
    rng = random.Random(3)
    data = [sample + b"sk-secret" * (i % 3) for i, sample in enumerate(samples(5)[:3000])]
    data += [bytes(rng.choice(b"sk-") for _ in range(rng.randint(0, 30))) for _ in range(2000)]
    for secret in (b"sk-secret", b"sk", b"s", None, b""):
        redact = scans.redactor(secret, MODULE if kind == "C" else None)
        for piece in data:
            got, former = redact(piece), former_redact(secret, piece)
            assert got == former, (secret, piece)
            if former is piece:
                assert got is piece  # nothing to mask: the very bytes, not a copy
    assert sum(b"***" in former_redact(b"sk-secret", piece) for piece in data) >= 2000


@pytest.mark.parametrize("name", ["bench chat", "chat with an error", "openai padded chat, comments"])
def test_a_forwarder_made_by_position_forwards_as_one_made_by_keyword(name: str) -> None:
    """The relay makes its forwarder by position (``replies._forwarder``): the same forwarder as by keyword."""
    dialect = dialect_for(VARIED[name][0])  # type: ignore[arg-type]
    for pieces in varied_cuttings(name, 10):
        for continuation, drop, said in [(False, False, 0), (False, True, 0), (True, False, 9), (True, True, 9)]:
            made = EventForwarder(dialect, continuation, drop, said)
            named = EventForwarder(dialect, continuation=continuation, drop_usage_only=drop, said_tokens=said)
            for piece in pieces:
                assert made.feed(piece) == named.feed(piece)
                assert (made.error, made.error_object) == (named.error, named.error_object)
            assert made.flush() == named.flush()
