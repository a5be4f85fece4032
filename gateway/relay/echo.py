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


ECHO_BYTES_PER_ID = 0.5
"""Where no ``logprobs`` tell, a choice's first text is taken for the echo of a prompt of token ids only if it holds
at least this many bytes per id: every token but a special one (a BOS, which decodes to nothing) is a byte at least,
while a provider that ignores ``echo`` (llama.cpp's server does) starts with one generated token."""


class EchoedPrompt:
    """What each choice of an echoed completions stream repeats before its answer: its prompt. Per attempt.

    ``repeats(event)`` is True for an event whose every text is (the next part of) its choice's prompt: no output
    yet. A choice is ``index // n``-th prompt's (the API's order for a list of prompts). A prompt given as text is
    found in the events' text. One given as token ids has no text the gateway can find (their decoding is the
    model's tokenizer's, which it does not know), so the events' ``logprobs`` tell where they list the tokens: their
    ids (llama.cpp's ``content``) are matched against the prompt's, their number (OpenAI's and vLLM's ``tokens``)
    counted off it, and an event holding more than is left holds generated text (vLLM sends the echo and the first
    generated text in one event). Without them, a choice's first text is its echo if it is long enough to be
    (``ECHO_BYTES_PER_ID``): OpenAI sends the echo alone; where a provider joins the first generated text to it,
    the first token is timed one event late, never at the echo. ``echoed`` keeps each choice's echo so found, for
    ``without_echo`` to take out of the count.
    """

    __slots__ = ("_prompts", "_n", "_left", "_at", "echoed", "joined")

    def __init__(self, body: dict[str, Any]) -> None:
        n = body.get("n")
        self._n = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
        self._prompts = _prompts(body.get("prompt"))
        self._left: dict[int, str] = {}
        """Per choice index whose prompt is text: the part of it not repeated yet."""
        self._at: dict[int, int] = {}
        """Per choice index whose prompt is token ids: how many of them were repeated."""
        self.echoed: dict[int, str] = {}
        """Per choice index: the echo of a prompt of token ids, as its events gave it."""
        self.joined: dict[int, int] = {}
        """Per choice index whose first generated text was seen: how many of its prompt's ids that event repeated
        too (vLLM's echo joined to it; 0: nothing more, or the provider did not echo)."""

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
            number = index // self._n
            prompt = self._prompts[number] if number < len(self._prompts) else None
            if not isinstance(text, str) or prompt is None:
                return False
            if isinstance(prompt, str):
                left = self._left.get(index, prompt)
                if not left.startswith(text):
                    return False  # generated text (after the echo, or joined to it): the first token
                self._left[index] = left[len(text) :]
            else:
                at = self._repeated_ids(index, prompt, text, choice.get("logprobs"))
                if at is None:
                    return False
                self._at[index] = at
                self.echoed[index] = self.echoed.get(index, "") + text
            repeated = True
        return repeated

    def _repeated_ids(self, index: int, ids: list[int], text: str, logprobs: object) -> int | None:
        """How many of the prompt's ``ids`` will have been repeated with this event's ``text``; None: it holds
        generated text (then ``joined`` says how many of the ids it holds too)."""
        at = self._at.get(index, 0)
        listed = _listed(logprobs)
        if listed is None:
            if at == 0 and len(text.encode()) >= ECHO_BYTES_PER_ID * len(ids):
                return len(ids)
            self.joined[index] = 0
            return None
        count, listed_ids = listed
        rest = ids[at:]
        if count > len(rest) or (listed_ids is not None and listed_ids != rest[:count]):
            starts = count > len(rest) and (listed_ids is None or listed_ids[: len(rest)] == rest)
            self.joined[index] = len(rest) if starts else 0  # the echo's rest, then generated text; or no echo
            return None
        return at + count


def _listed(logprobs: object) -> tuple[int, list[object] | None] | None:
    """How many tokens a completions choice's ``logprobs`` lists, and their ids where it gives them (llama.cpp's
    ``content`` entries); None when it lists none."""
    if not isinstance(logprobs, dict):
        return None
    tokens = logprobs.get("tokens")
    if isinstance(tokens, list):
        return len(tokens), None
    content = logprobs.get("content")
    if isinstance(content, list):
        return len(content), [entry.get("id") if isinstance(entry, dict) else None for entry in content]
    return None


def told_by_answer(body: dict[str, Any], answer: bytes | None, completion: int | None, counted: int) -> EchoedPrompt:
    """What a whole answer says of its echo of each prompt of token ids, as a stream's ``EchoedPrompt`` would say it.

    The gateway cannot decode the ids, and a provider may ignore ``echo`` (llama.cpp's server does): so only what the
    answer says counts. A choice whose ``logprobs`` list its tokens: by their ids where given (llama.cpp's
    ``content``: the echo's are the prompt's), else by their number against the provider's ``usage`` (the same
    tokenizer: an echo adds the prompt's ids to the listed count, never to ``completion_tokens``), else by the first
    token's missing logprob (a prompt's first token has none); the echo's text is then its listed tokens', taken out
    of the count. Without ``logprobs``: the provider's ``usage.completion_tokens`` against the text's own count
    (``counted``), the echo there if the text holds at least half the prompts' ids more; its ids are taken off.
    With neither, nothing is taken off: an ignored ``echo`` never costs the answer its count."""
    told = EchoedPrompt(body)
    wanted = {
        index: prompt
        for number, prompt in enumerate(told._prompts)
        if not isinstance(prompt, str)
        for index in range(number * told._n, (number + 1) * told._n)
    }
    try:
        data = msgspec.json.decode(answer) if answer else None
    except msgspec.MsgspecError:
        data = None
    found = data.get("choices") if isinstance(data, dict) else None
    choices = {c.get("index", i): c for i, c in enumerate(found or ()) if isinstance(c, dict)}
    listed = {index: _listed(choice.get("logprobs")) for index, choice in choices.items()}
    total = sum(len(prompt) for prompt in wanted.values())
    if not any(listed.get(index) for index in wanted):
        more = completion is not None and counted - completion >= total / 2
        told.joined = {index: len(prompt) if more else 0 for index, prompt in wanted.items()}
        return told
    extra = sum(seen[0] for seen in listed.values() if seen) - completion if completion is not None else None
    for index, prompt in wanted.items():
        seen = listed.get(index)
        logprobs = choices[index].get("logprobs") if seen is not None else None
        if seen is None or not isinstance(logprobs, dict):
            told.joined[index] = 0
            continue
        if seen[1] is not None:
            echoed = seen[1][: len(prompt)] == prompt
        elif extra is not None:
            echoed = extra >= total / 2
        else:
            first = logprobs.get("token_logprobs")
            echoed = isinstance(first, list) and bool(first) and first[0] is None
        words = _listed_text(logprobs, len(prompt)) if echoed else None
        if words is not None:
            told.echoed[index] = words
        else:
            told.joined[index] = len(prompt) if echoed else 0
    return told


def _listed_text(logprobs: dict[str, Any], count: int) -> str | None:
    """The text of the first ``count`` tokens a choice's ``logprobs`` list (OpenAI's ``tokens``, llama.cpp's
    ``content`` entries' ``token``); None where they do not all give it."""
    tokens = logprobs.get("tokens")
    if not isinstance(tokens, list):
        content = logprobs.get("content")
        tokens = [e.get("token") if isinstance(e, dict) else None for e in content] if isinstance(content, list) else []
    words = tokens[:count]
    return "".join(words) if len(words) == count and all(isinstance(word, str) for word in words) else None


def without_echo(
    reading: Reading,
    body: dict[str, Any],
    counter: TokenCounter,
    echo: EchoedPrompt | None = None,
    answer: bytes | None = None,
) -> Reading:
    """``reading`` with its output tokens (and tokens per second) counted without the echoed prompt.

    Each prompt given as text is taken out of the answer text once per choice (``n``) where it is found (a
    whole body's choices are joined, and a stream sends each choice's echo in one piece), and what is left is
    counted, judged, and logged with the bodies; a provider that did not echo loses nothing. A prompt of token
    ids cannot be found in text: what a stream told of its echo (``echo``, the stream's ``EchoedPrompt``) is taken
    out (the echo's text as it came alone, the ids joined to generated text by their number; nothing where the
    provider did not echo); a whole answer's (``answer``, its body) is told alike by ``told_by_answer``. A choice
    nothing told of has its number of ids taken off.
    """
    counted = reading.output_tokens
    if not counted:
        return reading
    if echo is None and answer is not None:
        echo = told_by_answer(body, answer, reading.usage_completion_tokens, counted)
    choices = body.get("n")
    choices = choices if isinstance(choices, int) and not isinstance(choices, bool) and choices > 0 else 1
    text = reading.answer_text
    ids = 0
    for number, prompt in enumerate(_prompts(body.get("prompt"))):
        if isinstance(prompt, str):
            if prompt and prompt in text:
                text = text.replace(prompt, "", choices)
            continue
        for index in range(number * choices, (number + 1) * choices):
            seen = echo.echoed.get(index, "") if echo is not None else ""
            if seen and seen in text:
                text = text.replace(seen, "", 1)
            if echo is not None and index in echo.joined:
                ids += echo.joined[index]
            elif not seen:
                ids += len(prompt)  # not told (a whole answer, a choice past the stream's first token): all of them
    tokens = counter.count(text) if text != reading.answer_text else counted
    tokens = max(0, tokens - ids)
    if tokens == counted:
        return reading
    speed = reading.tokens_per_s
    if speed is not None:
        # The same window (first to last answer token) over fewer tokens; none under two, as DESIGN.md defines it.
        speed = speed * tokens / counted if tokens >= 2 else None
    return msgspec.structs.replace(reading, output_tokens=tokens, tokens_per_s=speed, answer_text=text)


def _prompts(prompt: object) -> list[str | list[int]]:
    """Each prompt as text, or as its token ids: a string, strings, token ids, or lists of them."""
    if isinstance(prompt, str):
        return [prompt]
    if not isinstance(prompt, list) or not prompt:
        return []
    if all(isinstance(item, int) for item in prompt):
        return [prompt]
    found: list[str | list[int]] = []
    for item in prompt:
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, list):
            found.append(item)
    return found
