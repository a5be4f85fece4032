"""A client's own deadlines, from its request headers: a total deadline and a first-token objective.

``x-request-timeout: 20`` (seconds; the style of OpenAI's SDK ``timeout`` and Envoy's
``x-envoy-upstream-rq-timeout-ms``) bounds the whole request below the policy's
``total_timeout_s``; ``x-slo-ttft-ms: 800`` (llm-d's name) asks for a first token within 800 ms:
the router prefers deployments whose median first token is within it (as
``provider.preferred_max_latency`` does), and the request never waits for a slot longer than it.
A malformed value is the client's mistake (400), named by header.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.errors import InvalidRequest

TIMEOUT_HEADER = b"x-request-timeout"
TTFT_SLO_HEADER = b"x-slo-ttft-ms"


@dataclass(frozen=True, slots=True)
class ClientDeadlines:
    timeout_s: float | None = None
    ttft_slo_s: float | None = None


NO_DEADLINES = ClientDeadlines()


def read_deadlines(headers: Iterable[tuple[bytes, bytes]]) -> ClientDeadlines:
    timeout_s = ttft_slo_s = None
    for name, value in headers:
        if name == TIMEOUT_HEADER:
            timeout_s = _positive(value, "x-request-timeout", "seconds")
        elif name == TTFT_SLO_HEADER:
            ttft_slo_s = _positive(value, "x-slo-ttft-ms", "milliseconds") / 1000.0
    if timeout_s is None and ttft_slo_s is None:
        return NO_DEADLINES
    return ClientDeadlines(timeout_s, ttft_slo_s)


def _positive(raw: bytes, header: str, unit: str) -> float:
    try:
        value = float(raw.decode("latin-1").strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InvalidRequest(
            f"header '{header}' must be a positive number of {unit}, got {raw.decode('latin-1')!r}", param=header
        )
    return value
