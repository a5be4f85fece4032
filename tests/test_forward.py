"""``EventForwarder``: whole events only, error events held back, a continuation's opening dropped."""

from __future__ import annotations

import json
import random
from typing import Any

from gateway.relay.forward import EventForwarder


def chunk(delta: dict[str, Any] | None = None, **fields: Any) -> bytes:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": None}
    return b"data: " + json.dumps({"id": "x", "choices": [choice], **fields}).encode() + b"\n\n"


ROLE = chunk({"role": "assistant", "content": ""})
THE = chunk({"content": " the"})
FOX = chunk({"content": " fox"})
ERROR = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'


def test_whole_events_pass_untouched_and_at_once() -> None:
    forwarder = EventForwarder()
    assert forwarder.feed(ROLE + THE) == ROLE + THE
    assert forwarder.feed(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"


def test_an_unfinished_event_is_held_until_its_end_arrives() -> None:
    forwarder = EventForwarder()
    assert forwarder.feed(THE + FOX[:20]) == THE
    assert forwarder.feed(FOX[20:-1]) == b""
    assert forwarder.feed(FOX[-1:]) == FOX


def test_crlf_events_are_split_on_their_own_boundaries() -> None:
    forwarder = EventForwarder()
    crlf = THE.replace(b"\n\n", b"\r\n\r\n")
    assert forwarder.feed(crlf + b"data: {") == crlf
    assert forwarder.feed(b'"a": 1}\r\n\r\n') == b'data: {"a": 1}\r\n\r\n'


def test_flush_completes_a_last_event_that_lacked_its_blank_line() -> None:
    forwarder = EventForwarder()
    assert forwarder.feed(THE + b"data: [DONE]") == THE
    assert forwarder.flush() == b"data: [DONE]\n\n"
    assert forwarder.flush() == b""


def test_an_error_event_and_what_follows_it_are_held_back() -> None:
    forwarder = EventForwarder()
    assert forwarder.feed(THE + ERROR + FOX) == THE
    assert forwarder.error == ERROR
    assert forwarder.error_object == {"message": "overloaded", "type": "server_error"}
    assert forwarder.feed(FOX) == b""


def test_content_that_mentions_error_is_not_an_error_event() -> None:
    forwarder = EventForwarder()
    mention = chunk({"content": 'the "error" key'})
    assert forwarder.feed(mention) == mention
    logprobs = b'data: {"choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": {"token": "error"}}]}\n\n'
    assert forwarder.feed(logprobs) == logprobs
    assert forwarder.error is None


def test_a_continuation_drops_its_role_and_reasoning_until_the_first_content() -> None:
    forwarder = EventForwarder(continuation=True)
    reasoning = chunk({"reasoning_content": " hmm"})
    assert forwarder.feed(ROLE) == b""
    assert forwarder.feed(reasoning) == b""
    assert forwarder.feed(FOX + THE) == FOX + THE
    assert forwarder.feed(reasoning) == reasoning  # after the opening, everything goes through


def test_a_first_content_chunk_that_carries_the_role_loses_it() -> None:
    forwarder = EventForwarder(continuation=True)
    sent = forwarder.feed(chunk({"role": "assistant", "content": " fox"}))
    assert json.loads(sent[6:])["choices"][0]["delta"] == {"content": " fox"}


def test_a_continuation_with_nothing_to_add_passes_its_finish_and_done() -> None:
    forwarder = EventForwarder(continuation=True)
    finish = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
    assert forwarder.feed(ROLE + finish + b"data: [DONE]\n\n") == finish + b"data: [DONE]\n\n"


USAGE = b'data: {"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n'
DONE = b"data: [DONE]\n\n"


def test_only_the_usage_chunk_is_cut_from_a_chunk_the_rest_goes_as_it_came() -> None:
    forwarder = EventForwarder(drop_usage_only=True)
    brackets = chunk({"content": "[] and [ ]"})  # mentions [] but has choices: kept
    empty_no_usage = b'data: {"id": "x", "choices": []}\n\n'  # no usage: kept
    extra_blank = THE + b"\n\n"  # a blank line more than needed: relayed as it came
    data = ROLE + brackets + extra_blank + FOX + empty_no_usage + b": note []\n\n" + USAGE + DONE
    assert forwarder.feed(data) == ROLE + brackets + extra_blank + FOX + empty_no_usage + b": note []\n\n" + DONE


def test_a_usage_chunk_split_across_reads_is_cut_once_it_is_whole() -> None:
    forwarder = EventForwarder(drop_usage_only=True)
    assert forwarder.feed(THE + USAGE[:30]) == THE
    assert forwarder.feed(USAGE[30:] + USAGE + DONE[:5]) == b""
    assert forwarder.feed(DONE[5:]) == DONE


def test_a_usage_chunk_mentioning_error_goes_the_slow_way_with_the_same_result() -> None:
    forwarder = EventForwarder(drop_usage_only=True)
    named = b'data: {"choices": [], "usage": {"prompt_tokens": 1}, "note": "\\u0065rror"}\n\n'
    escaped = b'data: {"choices": [], "usage": {}, "\\u0065rror": {"message": "late"}}\n\n'
    assert forwarder.feed(THE + named + FOX) == THE + FOX
    assert forwarder.feed(FOX + escaped + THE) == FOX  # an error event after all: held, nothing after it
    assert forwarder.error == escaped
    assert forwarder.error_object == {"message": "late"}


def test_a_client_that_asked_for_usage_gets_it() -> None:
    forwarder = EventForwarder()
    assert forwarder.feed(THE + USAGE + DONE) == THE + USAGE + DONE


def test_a_stream_cut_anywhere_reaches_the_client_as_its_events_less_the_usage_chunks() -> None:
    events = [ROLE, THE, chunk({"content": "[]"}), USAGE, b": ping\n\n", FOX, b'data: {"choices": []}\n\n', USAGE, DONE]
    kept = [e for e in events if e != USAGE]
    stream = b"".join(events)
    rng = random.Random(20)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(0, 6)))
        forwarder = EventForwarder(drop_usage_only=True)
        out = b"".join(forwarder.feed(stream[a:b]) for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True))
        assert out + forwarder.flush() == b"".join(kept), cuts
