"""A whole (non-streamed) chat, completions or embeddings body read from its bytes into a ``Tally``.

``ChatDialect.tally_body`` reads the body decoded into dicts, and decoding every field into a Python object
(the ``id``, ``created``, ``system_fingerprint``, each choice's ``logprobs``, an embedding's vectors) is work no
read needs. Decoded into ``ChatBody``, the fields the tally never reads are only checked as JSON and skipped.

The struct accepts only the shapes real answers send (an object, ``choices`` a list of objects, a ``delta``, if
any, an object with a string ``content``); anything else fails to decode and the body is read over dicts, which
stays the definition, as does a vLLM error body (``"object": "error"``, whose message is read from the whole
body). Where this read takes a body it gives the same ``Tally``: each field is read as the dict path reads its
key (an absent key and a ``null`` alike, as every check there treats them), through the same helpers, in the
same order; a key given twice is its last value in both. ``tests/test_whole_body.py`` holds the two to each other.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.dialects.base import Tally
from gateway.dialects.chat_events import (
    ChatChoice,
    answer_of,
    chat_stop,
    failed_whole,
    note_calls,
    read_timings,
    usage_of,
)
from gateway.errors import describe_error


class ChatBody(msgspec.Struct, gc=False):
    choices: list[ChatChoice] | None = None
    usage: Any = None
    error: Any = None
    object: Any = None
    model: Any = None
    x_groq: Any = None
    timings: Any = None
    metrics: Any = None
    perf_metrics: Any = None


_DECODER = msgspec.json.Decoder(ChatBody)


def tally_whole(body: bytes) -> Tally | None:
    """``ChatDialect.tally_body`` of ``body`` decoded, or None when it is not of the shape above (or not JSON)."""
    try:
        read = _DECODER.decode(body)
    except msgspec.MsgspecError:
        return None
    if read.object == "error":
        return None  # vLLM's error body: its message is read from the whole of it (``describe_error``)
    tally = Tally(finished=True)
    choices = read.choices or ()
    tally.answer = [answer_of(choice) for choice in choices]
    for choice in choices:
        message = choice.message
        if isinstance(message, dict) and (message.get("tool_calls") or message.get("function_call")):
            tally.tool_calls = True
            note_calls(tally, choice.index, message.get("tool_calls"), message.get("function_call"))
        stop = chat_stop(choice.finish_reason)
        tally.stop = stop if stop is not None else tally.stop
    tally.usage_prompt, tally.usage_completion, tally.usage_cached = usage_of(read.usage)
    tally.error_message = None if read.error is None else describe_error(read.error)[0]
    tally.error_message = tally.error_message or failed_whole([choice.finish_reason for choice in choices])
    tally.response_model = read.model if isinstance(read.model, str) else None
    read_timings(tally, read)
    return tally
