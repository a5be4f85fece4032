"""OpenTelemetry's GenAI client metrics, as Prometheus series, beside the ``gateway_`` ones.

On with ``[metrics] otel_genai = true``. Names, attributes and bucket boundaries follow the
semantic conventions for generative AI metrics (``gen-ai-metrics.md``, status Development), as
the OpenTelemetry-to-Prometheus rules render them: dots become underscores, the unit ``s`` adds
``_seconds``, an annotation unit such as ``{token}`` adds nothing::

    gen_ai.client.operation.duration               gen_ai_client_operation_duration_seconds
    gen_ai.client.operation.time_to_first_chunk    gen_ai_client_operation_time_to_first_chunk_seconds
    gen_ai.client.operation.time_per_output_chunk  gen_ai_client_operation_time_per_output_chunk_seconds
    gen_ai.client.token.usage                      gen_ai_client_token_usage

The gateway is the GenAI client here, and each attempt at a provider is one operation: a fallback or
a hedge is two. Attributes (labels): ``gen_ai_operation_name`` (``chat``, also for Responses and
Messages, ``text_completion``, ``embeddings``), ``gen_ai_provider_name`` (the provider's name in the
config: name it after the conventions' well-known values, e.g. ``groq``, ``openai``, to match
dashboards built for them), ``gen_ai_request_model`` (the upstream model id the attempt asked for),
``server_address`` and ``server_port`` (of the provider's ``base_url``); ``error_type`` on the
duration (the upstream status, e.g. ``503``, else ``timeout``, ``broken_stream``,
``upstream_error``, ``client_cancelled``, ``client_error``; empty on success, which Prometheus reads
as absent); ``gen_ai_token_type`` (``input``, ``output``) on the token usage.
``gen_ai.response.model`` is left out: the provider chooses its value, and labels stay bounded by
the config. Chunks are output-bearing events; the first-chunk and per-chunk times are recorded for
streams only, as the conventions ask.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Histogram

from gateway.config import GatewayConfig
from gateway.samples import Endpoint, Sample

DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
"""The conventions' boundaries for operation duration, time to first chunk and time per output chunk."""
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
"""The conventions' boundaries for token usage."""
OPERATION_NAMES: dict[Endpoint, str] = {
    "chat": "chat",
    "completions": "text_completion",
    "embeddings": "embeddings",
    "responses": "chat",
    "messages": "chat",
}
"""The conventions' well-known operation names: OpenAI's Responses and Anthropic's Messages are chat
operations, as the conventions' OpenAI and Anthropic pages name them."""

_COMMON = ("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "server_address", "server_port")


class GenAIFamilies:
    """The four histograms, registered once in a registry (a reload keeps them)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration = Histogram(
            "gen_ai_client_operation_duration_seconds",
            "GenAI operation duration (one attempt at a provider).",
            [*_COMMON, "error_type"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.first_chunk = Histogram(
            "gen_ai_client_operation_time_to_first_chunk_seconds",
            "Time to receive the first chunk, from when the request was issued to the provider (streams).",
            _COMMON,
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.per_chunk = Histogram(
            "gen_ai_client_operation_time_per_output_chunk_seconds",
            "Time per output chunk after the first, from the end of the previous chunk (streams).",
            _COMMON,
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.tokens = Histogram(
            "gen_ai_client_token_usage",
            "Number of input and output tokens used.",
            [*_COMMON, "gen_ai_token_type"],
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )


def _server(base_url: str) -> tuple[str, str]:
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname or "", str(port)


def error_type(sample: Sample) -> str:
    if sample.outcome == "ok":
        return ""
    if sample.status is not None and sample.status >= 400:
        return str(sample.status)
    return sample.outcome


class GenAISink:
    """A sample sink that records each attempt in the GenAI families, labelled from one config."""

    def __init__(self, families: GenAIFamilies, config: GatewayConfig) -> None:
        self.families = families
        servers = {p.name: _server(p.base_url) for p in config.providers}
        self._labels: dict[tuple[str, str, Endpoint], tuple[str, ...]] = {}
        for model in config.models:
            for deployment in model.deployments:
                host, port = servers[deployment.provider]
                for endpoint, operation in OPERATION_NAMES.items():
                    labels = (operation, deployment.provider, deployment.model, host, port)
                    self._labels[(model.name, deployment.name, endpoint)] = labels

    def record(self, sample: Sample) -> None:
        labels = self._labels.get((sample.model, sample.deployment, sample.endpoint))
        if labels is None:
            return  # a sample of a config this one replaced
        f = self.families
        if sample.attempt_s is not None:
            f.duration.labels(*labels, error_type(sample)).observe(sample.attempt_s)
        if sample.stream:
            if sample.ttft_s is not None and sample.outcome != "client_cancelled":
                f.first_chunk.labels(*labels).observe(sample.ttft_s)
            if sample.chunk_gaps_s:
                per_chunk = f.per_chunk.labels(*labels)
                for gap in sample.chunk_gaps_s:
                    per_chunk.observe(gap)
        output = sample.billed_output_tokens
        # Billable tokens only: an answer, or a failure that produced output (as the cost counts them).
        if sample.outcome == "ok" or output:
            prompt = sample.usage_prompt_tokens
            prompt = prompt if prompt is not None else sample.prompt_tokens_estimate
            if prompt:
                f.tokens.labels(*labels, "input").observe(prompt)
            if output and sample.endpoint != "embeddings":
                f.tokens.labels(*labels, "output").observe(output)
