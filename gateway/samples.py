"""What one attempt at one deployment measured, and the sinks that receive it.

A ``Sample`` follows the definitions in DESIGN.md exactly; every field that could not be
measured is ``None`` (never zero), so that a percentile is never dragged by a missing value.

Where a Sample goes. ``AttemptRunner.record`` (``gateway.relay.runner``) makes exactly one per
admitted attempt, when it ends, and hands it on::

    AttemptRunner.record(attempt) ─► Sample
      ├─► router.attempt_finished    circuits, in-flight counts, recent answers: immediate,
      │                              on this replica (a circuit cannot wait for a snapshot)
      ├─► request.trace              the access-log line and the overhead metric of this request
      └─► sink: SampleFanout, in order
            ├─► StatsStore.record     the rolling window (memory, or buffered to Redis) ─┐
            ├─► USAGE_TAP             the request's tally: rate limits, its dollar hold   │
            ├─► Metrics.record        Prometheus counters and histograms                 │
            └─► AppOptions.sinks      the caller's (tests, the demo)                     │
                                                                                          │
    router.plan ◄── StatsStore.snapshot() (every replica's samples, refreshed) ◄─────────┘

So the router learns by two roads on purpose: its own state, at once, from this replica's
attempts (health must react to the next failure, not the next refresh), and the shared window,
a second or so later, from every replica's. The window is the only source of percentiles; the
router's own state holds circuits, in-flight counts and the last few answers (which show a drift
before the window's percentiles move).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from gateway.frozen import positional_maker

Outcome = Literal["ok", "upstream_error", "timeout", "broken_stream", "client_cancelled", "client_error", "deadline"]
"""How an attempt ended.

``client_error`` is an upstream 4xx that was the request's fault (context length, content
filter): it is relayed to the client and counts against neither the provider's success rate
nor its health. ``deadline``: the request's total deadline cut a stream the provider was still
sending (the answer was longer than the request allowed): like ``client_error``, neutral for
success and health, but its first token and speed so far are measurements of the provider.
"""

OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)

RequestKind = Literal["tools", "json", "plain"]
"""What a request asks of its answer, for validity kept per kind: tool calls (it declares tools), JSON (a JSON or
schema response format), or plain text. A deployment that breaks tool calls loses tool-using requests only."""
REQUEST_KINDS: tuple[RequestKind, ...] = ("tools", "json", "plain")

Validity = Literal[
    "valid",
    "tool_args_not_json",
    "tool_args_schema",
    "json_invalid",
    "json_schema",
    "empty",
    "truncated",
    "degenerate",
    "wrong_stop",
]
"""An answer's verdict (``gateway.quality``): ``valid``, or why it is not."""
VALIDITIES: tuple[Validity, ...] = (
    "valid",
    "tool_args_not_json",
    "tool_args_schema",
    "json_invalid",
    "json_schema",
    "empty",
    "truncated",
    "degenerate",
    "wrong_stop",
)

Endpoint = Literal["chat", "completions", "embeddings", "responses", "messages"]
"""The API a request speaks: OpenAI's chat completions, completions, embeddings and Responses, and
Anthropic's Messages. Also the values of a provider's or deployment's ``apis``."""
ENDPOINTS: tuple[Endpoint, ...] = ("chat", "completions", "embeddings", "responses", "messages")
DEFAULT_APIS: tuple[Endpoint, ...] = ("chat", "completions", "embeddings")
"""What a provider serves when its config names no ``apis``: the OpenAI-compatible trio."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One attempt's measurements. Created once when the attempt ends; immutable after."""

    model: str
    """The client-facing model name (``requested_model``)."""
    deployment: str
    """The deployment's name within the model (the provider's name unless the config says otherwise)."""
    provider: str
    endpoint: Endpoint
    stream: bool
    outcome: Outcome
    started_at: float
    """Wall-clock (unix) time the upstream request was sent. (The sample's time slice is that of
    the moment it is *recorded*, not this: see ``gateway.stats.window``.)"""
    status: int | None = None
    """The upstream HTTP status; None when no response arrived. A refusal of the gateway's key sent inside a 200 (an
    error body or event: ``gateway.errors.credentials_refusal``) is the 401 or 403 it stands for."""
    ttft_s: float | None = None
    """Upstream request sent → first chunk carrying output (content, reasoning or a tool call)."""
    first_answer_s: float | None = None
    """Upstream request sent → first visible answer token."""
    tokens_per_s: float | None = None
    """Answer tokens ÷ (last answer token − first answer token); None under 2 tokens."""
    e2e_s: float | None = None
    """Client request received → last byte sent (for failed attempts: → the failure)."""
    output_tokens: int | None = None
    """Answer tokens counted by the gateway's pinned encoding."""
    usage_prompt_tokens: int | None = None
    """As reported by the provider, for cost only. None means the provider did not report."""
    usage_completion_tokens: int | None = None
    usage_cached_tokens: int | None = None
    """Prompt tokens the provider reported serving from its prompt cache; None when it did not say."""
    prompt_tokens_estimate: int | None = None
    """The gateway's own estimate of the prompt's size, used when the provider reports no usage."""
    cost_usd: float | None = None
    hedged: bool = False
    """True when this attempt ran as a hedge beside another."""
    attempt_s: float | None = None
    """Upstream request sent → the attempt ended (answered, failed or cancelled): the client operation's duration."""
    chunk_gaps_s: tuple[float, ...] = ()
    """Seconds between consecutive output-bearing chunks after the first (streams; for the GenAI metrics)."""
    kind: RequestKind | None = None
    """What the request asked of its answer (tools, JSON, plain); None for embeddings."""
    validity: Validity | None = None
    """The answer's verdict; None when there was no answer to judge (a failure, a cancellation, embeddings)."""

    @property
    def billed_output_tokens(self) -> int | None:
        """Output tokens as the provider bills them: its reported usage, else the gateway's own count."""
        return self.usage_completion_tokens if self.usage_completion_tokens is not None else self.output_tokens


sample_from_fields = positional_maker(Sample)
"""``Sample(*values)``, every field given in order (``gateway.frozen``): what ``AttemptRunner.record`` builds one with,
once per attempt, at a fraction of the frozen ``__init__``'s cost."""


class SampleSink(Protocol):
    """Receives every finished attempt's ``Sample``.

    ``record`` is called on the event loop after the response's last byte; it must not block
    and must not raise (a stats backend buffers, a metrics exporter increments).
    """

    def record(self, sample: Sample) -> None: ...


class SampleFanout:
    """A sink that hands each sample to several sinks, in order."""

    def __init__(self, sinks: list[SampleSink]) -> None:
        self.sinks = list(sinks)

    def record(self, sample: Sample) -> None:
        for sink in self.sinks:
            sink.record(sample)


class SampleLog:
    """A sink that keeps the last ``limit`` samples in memory; tests and the demo read it."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self.samples: list[Sample] = []

    def record(self, sample: Sample) -> None:
        self.samples.append(sample)
        if len(self.samples) > self.limit:
            del self.samples[: len(self.samples) - self.limit]
