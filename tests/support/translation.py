"""A chat deployment's stream, given as its chunks, as a Responses client's events (the stream translator alone)."""

from __future__ import annotations

import json
from typing import Any

from gateway.translate.stream import StreamTranslator


def chat_chunks_as_responses_events(request: dict[str, Any], chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each chunk fed as one ``data:`` event, then ``[DONE]``; the Responses events the translator wrote, in order."""
    translator = StreamTranslator("chat", "responses", request, "m")
    raw = b"".join(translator.feed(f"data: {json.dumps(c)}\n\n".encode()) for c in chunks)
    raw += translator.feed(b"data: [DONE]\n\n") + translator.flush()
    return [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]
