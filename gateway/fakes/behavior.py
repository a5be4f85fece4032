"""What a fake provider does and remembers: its behaviour (speed, faults) and its counters.

``FakeBehavior`` is set per server and overridable per request (``gateway.fakes.provider``); every
API the fake speaks (chat and completions, Responses, Messages) reads the same fields, so each
fault can be staged in each API.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.fakes.cache import PromptCache

WORDS = (
    "the quick brown fox jumps over lazy dog and then runs far away into forest where it finds "
    "small river with clear water under bright sun while birds sing songs of joy"
).split()


@functools.cache
def _pass_order(number: int) -> tuple[int, ...]:
    """The order of ``WORDS`` in the answer's ``number``-th pass over them: as written first, then shuffled
    (seeded), so that a long answer is text that does not loop (a loop is an invalid answer's mark)."""
    order = list(range(len(WORDS)))
    if number:
        random.Random(number).shuffle(order)
    return tuple(order)


def answer_words(start: int, count: int) -> list[str]:
    """Answer tokens ``start .. start+count``: " word" pieces, one token each, the same for the same position."""
    size = len(WORDS)
    return [" " + WORDS[_pass_order(i // size)[i % size]] for i in range(start, start + count)]


def answer_word(position: int) -> str:
    """The answer's word at ``position`` (no leading space)."""
    return answer_words(position, 1)[0][1:]


@dataclass(frozen=True, slots=True)
class FakeBehavior:
    """How a fake provider answers. Times in seconds; ``-1`` means "never" for the *_after fields."""

    ttft_s: float = 0.0
    """Delay before the first output chunk (the role chunk is sent at once with the headers)."""
    ttft_jitter: float = 0.0
    """Log-normal sigma applied to ``ttft_s`` per request (0: fixed)."""
    tokens_per_s: float = 0.0
    """Pace of the answer after its first token; 0 streams as fast as possible."""
    tps_jitter: float = 0.0
    """Log-normal sigma applied to ``tokens_per_s`` per request (0: fixed)."""
    output_tokens: int = 32
    """Answer length, cut to the request's ``max_tokens`` / ``max_completion_tokens``."""
    chunk_tokens: int = 1
    reasoning_tokens: int = 0
    """Reasoning tokens streamed (``delta.reasoning_content``) before the answer."""
    tool_call: bool = False
    """Answer with a tool call (the same words, as its JSON arguments' string) instead of content. A request that
    declares tools is answered so whatever this says (``gateway.fakes.quality``)."""
    tool_name: str = "lookup"
    tool_args_head: str = '{"q": "'
    """The call's arguments before the answer's words (set per request from the declared tool's schema) ..."""
    tool_args_tail: str = '"}'
    """... and after them."""
    invalid_tool_json_rate: float = 0.0
    """Share of tool-call answers whose arguments are not JSON (seeded; ``gateway.fakes.quality``)."""
    empty_rate: float = 0.0
    """Share of answers with no text and no call, and a plain stop."""
    repeat_rate: float = 0.0
    """Share of answers that loop over their first few words."""
    truncate_rate: float = 0.0
    """Share of answers cut with ``length`` at an eighth of their length."""
    reply: str | None = None
    """Answer with this text instead of the usual words (for a tool call: these are its whole JSON arguments),
    so that a task's exact rubric can be met: what a test's task file asks of the fake."""
    fault: str | None = None
    """This request's quality fault (``invalid_tool_json``, ``empty``, ``repeat``, ``truncate``): drawn from the
    rates above, or forced per request."""
    agent: bool = False
    """Play a coding agent's model (``gateway.fakes.agent``): call the shell tool the request offers with
    ``agent_command`` when the user has the turn, then answer with what the tool returned (as ``reply``)."""
    agent_command: str = "echo agent-round-trip"
    check_thinking: bool = False
    """Check a request's reasoning as its vendor does (``gateway.fakes.reasoning.fault``): 400 for opaque reasoning
    this fake did not make; a Messages request with thinking on, unless the last assistant turn, when it called a
    tool, starts with the thinking block this fake signed; a chat one (with ``opaque_reasoning``, as Gemini), unless
    each function-call step of the current turn carries the thought signature this fake gave it."""
    opaque_reasoning: bool = False
    """Reason opaquely as each vendor does (``gateway.fakes.reasoning``): Messages adds a ``redacted_thinking`` block
    to its thinking, Responses encrypts its reasoning item when ``include`` asks for it, chat signs its tool call as
    Gemini does (``extra_content.google.thought_signature``)."""
    agent_patch: str | None = None
    """A patch the agent's model applies instead, with Codex's ``apply_patch`` (a custom tool, offered to chat and
    Messages as a function of one string, ``input``: ``gateway.translate.freeform``)."""
    agent_read: str | None = None
    """A file the agent's model reads instead, with the CLI's file viewer (Claude Code's ``Read``, Codex's
    ``view_image``): a picture's path makes the tool's result an image."""
    agent_search: str | None = None
    """A query the agent's model searches its client's deferred tools for instead, with Codex's ``tool_search`` (run
    by the client, offered to chat and Messages as a function: ``gateway.translate.tool_search``)."""
    status: int = 200
    """An error status to answer with (subject to ``fail_first`` and ``error_rate``)."""
    error_code: str | None = None
    """The ``error.code`` of an error answer or error event, e.g. ``context_length_exceeded``."""
    retry_after: str | None = None
    echo_key: bool = False
    """Quote the key the request carried in an error answer's message, as some providers do (what the gateway must
    never pass on to its client)."""
    fail_first: int = 0
    """Only the first N requests to this server fail with ``status`` (0: every request)."""
    error_rate: float = 1.0
    """Share of requests that fail with ``status`` (seeded)."""
    slots: int = 0
    """Requests served at once (0: no limit); past it ``over_slots`` says what happens (``gateway.fakes.capacity``)."""
    over_slots: str = "queue"
    """``queue``: wait in line for a slot (the first token comes later under load); ``reject``: answer 429
    with the rate-limit headers (``ratelimit_remaining`` > 0: the refusal is about load, not budget)."""
    ratelimit_remaining: int | None = None
    """``x-ratelimit-remaining-requests`` on a refusal above ``slots`` (None: 1000, budget left). 0: every
    request is refused with a 429 saying the provider is out of budget until ``ratelimit_reset``."""
    ratelimit_reset: str = "1s"
    """``x-ratelimit-reset-requests``: when the budget resets (OpenAI's format: ``1s``, ``6m0s``, ``20ms``)."""
    hang_s: float = 0.0
    """Wait this long before sending any headers."""
    stall_after: int = -1
    """After this many answer chunks, stop sending (for ``stall_s``) without closing."""
    stall_s: float = 3600.0
    drop_after: int = -1
    """After this many answer chunks, drop the connection mid-stream."""
    malformed_after: int = -1
    """After this many answer chunks, send a chunk that is not JSON."""
    error_event_after: int = -1
    """After this many answer chunks, send an error event and end the stream (Responses: a top-level
    ``error`` event; Messages: ``event: error``)."""
    fail_event_after: int = -1
    """Responses API: after this many answer chunks, end the stream with ``response.failed``."""
    no_done: bool = False
    """End the stream without its ending (``data: [DONE]``, ``response.completed``, ``message_stop``)."""
    no_finish: bool = False
    """Send no ``finish_reason`` (``stop_reason``; the Responses item's closing events): with ``no_done``,
    an answer that just stops."""
    linger_s: float = 0.0
    """After the finish chunk, keep the stream open this long before the rest (usage, ``[DONE]``)."""
    context_window: int = 0
    """Refuse (400 ``context_length_exceeded``, stating this limit) a request whose body is more than this
    many tokens, counted as its bytes / 4; 0: no limit."""
    text_only: bool = False
    """Refuse a request with an image part as llama.cpp's server does for a model loaded without its vision
    projector: 500, ``image input is not supported - hint: … mmproj`` (``gateway.fakes.provider.NO_IMAGES``)."""
    reject_prefill: bool = False
    """Answer 400 to a request that continues a prefill, as a provider that cannot continue one does."""
    prefill_tokens_per_s: float = 0.0
    """Prompt tokens prefilled per second: the first token waits uncached prompt tokens ÷ this on top of
    ``ttft_s`` (0: prefill takes no time)."""
    cache_prompts: int = 0
    """Prompt prefixes the provider keeps cached (least recently used out first; 0: no prompt cache)."""
    cache_ttl_s: float = 300.0
    """How long a cached prefix lives after its last use."""
    cache_min_tokens: int = 1024
    """Shorter prefixes are never cached (providers cache prompts above ~1k tokens)."""
    cache_usage: str = "openai"
    """How usage reports cached tokens: ``openai``, ``deepseek``, ``anthropic`` or ``none``."""
    count_tokens: bool = True
    """Whether ``POST /v1/messages/count_tokens`` exists (False: 404, as on many Anthropic-compatible hosts)."""
    model: str | None = None
    """The model id to report; by default the one the request named."""
    embedding_dim: int = 8
    seed: int | None = None
    draw_seed: int | None = None
    """Per request: draw this request's jitter and failure from a generator seeded by it (and the provider's name),
    not the provider's own: the same request draws the same wherever it is replayed (a benchmark's common random
    numbers, so that two routers compared on one schedule differ by their choices, not by their luck)."""

    def merged(self, overrides: dict[str, Any]) -> FakeBehavior:
        known = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown fake behaviour fields: {', '.join(sorted(unknown))}")
        merged = dataclasses.replace(self, **overrides)
        if merged.fault not in (None, "invalid_tool_json", "empty", "repeat", "truncate"):
            raise ValueError(f"fault must be invalid_tool_json, empty, repeat or truncate, got {merged.fault!r}")
        if merged.cache_usage not in ("openai", "deepseek", "anthropic", "none"):
            raise ValueError(f"cache_usage must be openai, deepseek, anthropic or none, got {merged.cache_usage!r}")
        return merged


@dataclass(slots=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    query: str = ""


@dataclass(slots=True)
class FakeState:
    requests: int = 0
    in_flight: int = 0
    """Inference requests being answered or waiting for a slot now."""
    max_in_flight: int = 0
    """The most ``in_flight`` ever was: what the gateway sent at once."""
    refused: int = 0
    """Requests refused with 429 above ``slots``."""
    open_streams: int = 0
    max_open_streams: int = 0
    completed: int = 0
    cancelled: int = 0
    last_request_at: float | None = None
    """``time.monotonic()`` when the last inference request arrived."""
    recorded: list[RecordedRequest] = field(default_factory=list)
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Responses API: the stored responses by id (what ``GET /v1/responses/{id}`` returns)."""
    response_inputs: dict[str, list[Any]] = field(default_factory=dict)
    cache: PromptCache = field(default_factory=PromptCache)
    """The provider's prompt cache and its hit/miss counters (``gateway.fakes.cache``)."""
    """Responses API: each stored response's input items."""


class FakeHost(Protocol):
    """What an API's answers need of the provider serving them."""

    name: str
    state: FakeState

    def jittered(self, value: float, sigma: float) -> float: ...
