"""A completions answer with ``echo: true``, metered for what the model generated, not for its prompt.

With ``echo``, ``/v1/completions`` answers each choice's text as the prompt followed by the completion (a stream
sends the prompt first). The meter reads every answer text alike, so it counted the echoed prompt as output: the
stats, the metrics, the access log, and the spend of an attempt without ``usage`` billed the prompt at the output
price. ``without_echo`` takes the prompt back out of the count (the provider's own ``usage.completion_tokens``
already leaves it out, and the bill reads that first), once per echoed attempt, after its last byte went out.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.reading import Reading
from gateway.tokens import TokenCounter


def echoes(endpoint: str, body: dict[str, Any]) -> bool:
    """The request asks a completions answer to repeat its prompt."""
    return endpoint == "completions" and body.get("echo") is True


def without_echo(reading: Reading, body: dict[str, Any], counter: TokenCounter) -> Reading:
    """``reading`` with its output tokens (and tokens per second) counted without the echoed prompt.

    One prompt and one choice: the text after the prompt is counted (and judged, and logged with the bodies),
    when the answer starts with it. Otherwise
    (several prompts or choices, whose texts a stream interleaves; a prompt of token ids) each choice's prompt
    is taken off the whole count, by its own count or its number of ids.
    """
    counted = reading.output_tokens
    if not counted:
        return reading
    prompts = _prompts(body.get("prompt"))
    choices = body.get("n")
    choices = choices if isinstance(choices, int) and not isinstance(choices, bool) and choices > 0 else 1
    text = reading.answer_text
    if len(prompts) == 1 and choices == 1 and isinstance(prompts[0], str) and text.startswith(prompts[0]):
        text = text[len(prompts[0]) :]  # what the validity check judges too: the prompt is not the answer
        tokens = counter.count(text)
    else:
        echoed = sum(counter.count(p) if isinstance(p, str) else p for p in prompts) * choices
        tokens = max(0, counted - echoed)
    speed = reading.tokens_per_s
    if speed is not None:
        # The same window (first to last answer token) over fewer tokens; none under two, as DESIGN.md defines it.
        speed = speed * tokens / counted if tokens >= 2 else None
    return msgspec.structs.replace(reading, output_tokens=tokens, tokens_per_s=speed, answer_text=text)


def _prompts(prompt: object) -> list[str | int]:
    """Each prompt as text, or as its number of token ids: a string, strings, token ids, or lists of them."""
    if isinstance(prompt, str):
        return [prompt]
    if not isinstance(prompt, list) or not prompt:
        return []
    if all(isinstance(item, int) for item in prompt):
        return [len(prompt)]
    found: list[str | int] = []
    for item in prompt:
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, list):
            found.append(len(item))
    return found
