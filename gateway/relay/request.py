"""A validated client request on its way upstream, and the trace its attempts leave behind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.dialects import Dialect, dialect_for
from gateway.frozen import positional_maker
from gateway.quality import NOT_JUDGED, Expectation
from gateway.samples import Endpoint, Sample


@dataclass(slots=True)
class RequestTrace:
    """What the attempts of one request left behind, for the access log and the overhead metric.

    Filled in by the dispatcher as the request goes; per request, not shared.
    """

    samples: list[Sample] = field(default_factory=list)
    """Every attempt's ``Sample``, in the order the attempts ended."""
    upstream_sent_at: float | None = None
    """Clock reading when the first attempt's upstream request was sent."""
    upstream_ready_at: float | None = None
    """Clock reading when the committed attempt was ready: its first output chunk, or its whole body."""
    answer_text: str | None = None
    """The committed answer's text (only ever logged when ``server.log_bodies`` is on)."""
    provider_timings: dict[str, Any] | None = None
    """The answering provider's own timings, as it reported them (for the access log only)."""
    said_tokens: int = 0
    """After a mid-stream recovery: the output tokens of the answer's earlier parts (pinned encoding), which
    the continuation's provider counted as prompt; the access log moves them back to the output."""
    prompt_tokens_counted: int | None = None
    """The prompt counted with the pinned tokenizer (``gateway.relay.prompt_count``), once an attempt without
    usage needed it (None: not yet)."""
    queue_wait_s: float = 0.0
    """Time spent waiting for a free slot (every candidate full): in end-to-end, never in a first token."""
    queue_wait_before_sent_s: float = 0.0
    """The part of ``queue_wait_s`` before the first attempt was sent (not the gateway's overhead)."""


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """A validated client request, ready to be sent upstream. ``body`` no longer holds ``provider``."""

    request_id: str
    endpoint: Endpoint
    path: str
    """The OpenAI path below ``/v1``, e.g. ``/chat/completions``; appended to the provider's base URL."""
    body: dict[str, Any]
    stream: bool
    requested_model: str
    received_at: float
    """Clock reading when the gateway received the request (end-to-end starts here)."""
    headers: list[tuple[str, str]] = field(default_factory=list)
    prompt_tokens: int = 0
    trace: RequestTrace = field(default_factory=RequestTrace)
    timeout_s: float | None = None
    """The client's own total deadline (``x-request-timeout``), when it set one."""
    ttft_slo_s: float | None = None
    """The client's first-token objective (``x-slo-ttft-ms``): routed within, and never queued past."""
    session_key: str | None = None
    """The conversation this request continues (``gateway.sessions.identity``); None: no session."""
    session_ttl_s: float = 300.0
    translations: dict[str, dict[str, Any]] = field(default_factory=dict)
    """This very body translated to each API a deployment of the plan is reached in (``relay.outbound.eligible``);
    ``model`` is set per deployment. Empty for a request no deployment takes translated."""
    omitted_tools: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Per translation, the built-in tools left out of it (``relay.outbound.omitted_tools``)."""
    expects: Expectation = NOT_JUDGED
    """What the request asks of its answer (``gateway.quality``): its kind, and what its answers are judged by."""
    probe: bool = False
    """A background circuit probe (``gateway.relay.probe``): its samples go to the router and the events only."""

    @property
    def shown_model(self) -> str | None:
        """The model an answer on the Messages API names: the client's own ``model`` (suffix and all), not the
        deployment's id, since Claude Code drops the thinking blocks of an answer from another model than the one
        it asked for (and Anthropic then refuses the next turn of a tool call made while thinking). None elsewhere:
        the other APIs show the upstream's own id."""
        model = self.body.get("model")
        return (model if isinstance(model, str) else self.requested_model) if self.endpoint == "messages" else None

    @property
    def dialect(self) -> Dialect:
        """How this request's API reads streams and writes errors."""
        return dialect_for(self.endpoint)


proxy_request_from_fields = positional_maker(ProxyRequest)
"""``ProxyRequest(*values)``, every field given in order (``gateway.frozen``; ``trace`` a new ``RequestTrace``): how
intake builds one, once per request, at a fraction of the frozen ``__init__``'s cost with keywords."""
