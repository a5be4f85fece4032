"""The meter's read of a chat stream's kept chunks by a C scan of their bytes, when the build holds it.

``chat_template`` reads the answer events of one shape as their texts, but its exactness checks and
joins, each a C call or two, cost more than the decode they spare. ``chat_read.c`` (built by
``make native`` beside the mypyc modules, used under the same rule: ``gateway.native.load_c``) reads
every kept entry in one pass when each of its events is of the strict shape OpenAI-style providers send
(listed keys only, each with a value of its kind, ``data: `` lines, no escape outside the texts, texts
decoded exactly as JSON decoders do), and hands back what ``tally_chunks`` adds to a tally: the texts
joined, the times of the events that held one, the first model, the last finish reason, each usage
object's bytes (decoded here by msgspec, as the typed read decodes them), and whether the last event
held text. Anything it does not read exactly it refuses, and the entries are read as before
(``chat_template``, the typed read, the dicts); where there is no build (or ``GATEWAY_NATIVE=0``)
``tally_native`` is never called. ``tests/test_meter_cread.py`` holds its readings to those reads'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from gateway import native
from gateway.dialects.base import Tally
from gateway.dialects.chat_events import note_finish, read_end, usage_of
from gateway.kept_chunks import KeptChunks

Reader = Callable[[list[bytes], list[bytes], list[int], Any], Any]
"""``read_kept(heads, datas, parts, times)``: the C scan (``chat_read.c``)."""


def load_reader() -> Reader | None:
    """The C scan when the build is used, else None."""
    module = native.load_c("gateway.dialects._chat_read")
    return None if module is None else module.read_kept


READ_KEPT = load_reader()


def tally_native(entries: KeptChunks, into: Tally | None, timing_tail: int, read: Reader | None = None) -> Tally | None:
    """``chat_template.tally_kept`` of the same entries by the C scan (``read``, the build's by default); None
    (``into`` untouched) when the scan refuses them."""
    reader = read if read is not None else READ_KEPT
    if reader is None:
        return None
    got = reader(entries.heads, entries.datas, entries.parts, entries.times)
    if got is None:
        return None
    text, times, model, finish, usages, counted, events = got
    decoded: list[Any] = []
    if usages is not None:
        try:
            decoded = [msgspec.json.decode(usage) for usage in usages]
        except msgspec.MsgspecError:
            return None
    tally = into if into is not None else Tally()
    if events:
        tally._event_counted = counted
    if tally.response_model is None:
        tally.response_model = model
    for usage in decoded:
        tally._standard_usage = True
        prompt, completion, cached = usage_of(usage)
        tally.usage_prompt = prompt if prompt is not None else tally.usage_prompt
        tally.usage_completion = completion if completion is not None else tally.usage_completion
        tally.usage_cached = cached if cached is not None else tally.usage_cached
    if text is not None:
        tally.answer.append(text)
        if tally.first_answer_at is None:
            tally.first_answer_at = times[0]
        tally.last_answer_at = times[-1]
        if tally.first_output_at is None:
            tally.first_output_at = times[0]
        tally.output_events.extend(times)
    if finish is not None:
        note_finish(tally, finish)
    if timing_tail:
        read_end(tally, ())  # no event of the shape holds timings: Groq's usage alone, from earlier events
    return tally
