"""A completions answer with ``echo: true``, metered for what the model generated, not for its prompt.

With ``echo``, ``/v1/completions`` answers each choice's text as the prompt followed by the completion (a stream
sends the prompt first: alone, as OpenAI's, or with the first generated text, as vLLM's). The meter reads every
answer text alike, so it counted the echoed prompt as output: the stats, the metrics, the access log, and the spend
of an attempt without ``usage`` billed the prompt at the output price. ``without_echo`` takes the prompt back out of
the count (the provider's own ``usage.completion_tokens`` already leaves it out, and the bill reads that first), once
per echoed attempt, after its last byte went out. ``EchoedPrompt`` tells the meter which events before the first
token only repeat the prompt: they are no token, so the first token (TTFT, the commit to the stream, the routing
belief's first token) and the answer's speed are timed from the first generated text.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.reading import Reading
from gateway.tokens import TokenCounter


def echoes(endpoint: str, body: dict[str, Any]) -> bool:
    """The request asks a completions answer to repeat its prompt."""
    return endpoint == "completions" and body.get("echo") is True


class EchoedPrompt:
    """What each choice of an echoed completions stream repeats before its answer: its prompt. Per attempt.

    ``repeats(event)`` is True for an event whose every text is (the next part of) its choice's prompt: no output
    yet. A choice is ``index // n``-th prompt's (the API's order for a list of prompts); a prompt given as token
    ids has no text to find, so its echo is output as before (``without_echo`` still takes it out of the count).
    """

    __slots__ = ("_prompts", "_n", "_left")

    def __init__(self, body: dict[str, Any]) -> None:
        n = body.get("n")
        self._n = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
        self._prompts = [prompt if isinstance(prompt, str) else None for prompt in _prompts(body.get("prompt"))]
        self._left: dict[int, str | None] = {}
        """Per choice index: the part of its prompt not repeated yet (None: not known)."""

    def repeats(self, event: dict[str, Any]) -> bool:
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices:
            return False
        repeated = False
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("finish_reason") is not None:
                return False  # an answer's end is not held back (an answer of just its echo ends here)
            text, index = choice.get("text"), choice.get("index", 0)
            if not text or not isinstance(index, int):
                continue
            left = self._left[index] if index in self._left else self._prompt(index)
            if left is None or not isinstance(text, str) or not left.startswith(text):
                return False  # generated text (after the echo, or joined to it): the first token
            self._left[index] = left[len(text) :]
            repeated = True
        return repeated

    def _prompt(self, index: int) -> str | None:
        number = index // self._n
        return self._prompts[number] if number < len(self._prompts) else None


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
