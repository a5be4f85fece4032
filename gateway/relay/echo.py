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

    Each prompt given as text is taken out of the answer text once per choice (``n``) where it is found (a
    whole body's choices are joined, and a stream sends each choice's echo in one piece), and what is left is
    counted, judged, and logged with the bodies; a provider that did not echo loses nothing. A prompt of token
    ids cannot be found in text: its number of ids is taken off the count instead.
    """
    counted = reading.output_tokens
    if not counted:
        return reading
    choices = body.get("n")
    choices = choices if isinstance(choices, int) and not isinstance(choices, bool) and choices > 0 else 1
    text = reading.answer_text
    ids = 0
    for prompt in _prompts(body.get("prompt")):
        if isinstance(prompt, int):
            ids += prompt * choices
        elif prompt and prompt in text:
            text = text.replace(prompt, "", choices)
    tokens = counter.count(text) if text != reading.answer_text else counted
    tokens = max(0, tokens - ids)
    if tokens == counted:
        return reading
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
