"""A request's prompt counted with the pinned tokenizer: what an attempt without usage is billed for.

A provider's ``usage`` is the bill. When an attempt carries none (a stream broken before its usage
chunk, a provider that does not report it), the prompt was still read and billed upstream; the
request's size estimate (its body's bytes / 4, made before routing, where speed matters more than
precision) runs two to three times high on short prompts. So the prompt's text (every string the
client wrote into its messages, system prompt, input, instructions and tools) is counted with the
same pinned encoding the answers are, once per request and only when needed, with the chat
template's own tokens as OpenAI documents them for its chat models (``MESSAGE_OVERHEAD`` per message,
``REPLY_PRIMING`` for the answer's start; OpenAI cookbook, "How to count tokens with tiktoken").
Other providers' templates differ by a few tokens per message: close, where the estimate was off
by a factor of two or three.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from gateway.relay.request import ProxyRequest
from gateway.tokens import TokenCounter
from gateway.translate.ir import Usage

PROMPT_FIELDS = ("system", "instructions", "messages", "input", "prompt", "tools", "functions")
"""The body's fields that carry what the model reads (chat and completions, Responses, Messages)."""
MESSAGE_OVERHEAD = 3
"""Template tokens around each message (its role and delimiters)."""
REPLY_PRIMING = 3
"""Template tokens that open the answer."""
_NOT_TEXT = frozenset({"role", "type", "id", "tool_call_id", "cache_control", "detail", "url", "image_url"})


def count_prompt(body: dict[str, Any], counter: TokenCounter) -> int:
    """Tokens of the prompt in ``body``, by ``counter``'s encoding: its text, and its messages' template."""
    text = counter.count("\n".join(_strings(body.get(name) for name in PROMPT_FIELDS)))
    messages = body.get("messages")
    template = MESSAGE_OVERHEAD * len(messages) + REPLY_PRIMING if isinstance(messages, list) else 0
    return text + template


def counted_prompt(request: ProxyRequest, counter: TokenCounter) -> int:
    """``request``'s prompt by ``counter``, counted once per request (kept in its trace for its other attempts)."""
    trace = request.trace
    if trace.prompt_tokens_counted is None:
        trace.prompt_tokens_counted = count_prompt(request.body, counter)
    return trace.prompt_tokens_counted


class CountedUsage:
    """The usage the gateway counts itself, for a translated answer whose provider reported none (the client's API
    must show one): the prompt counted as above, the output as the meter counted it (``output_tokens``), the same
    figures the access log and the cost take. Lazy: called only when the answer came without usage; ``used`` says
    whether it was (a whole answer's client is then told its usage is the gateway's estimate)."""

    def __init__(self, request: ProxyRequest, counter: TokenCounter, output_tokens: Callable[[], int | None]) -> None:
        self._request = request
        self._counter = counter
        self._output_tokens = output_tokens
        self.used = False

    def __call__(self) -> Usage:
        self.used = True
        return Usage(counted_prompt(self._request, self._counter), self._output_tokens() or 0)


def _strings(values: Any) -> Iterator[str]:
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            yield from _strings(value)
        elif isinstance(value, dict):
            yield from _strings(v for k, v in value.items() if k not in _NOT_TEXT)
