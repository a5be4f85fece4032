"""``Sample`` values with known numbers, for the router's, the score's and the stats' unit tests.

Why: the score and the router are pure functions of a config, a stats snapshot and a request;
these builders let each test state exactly the measurements it is about.
"""

from __future__ import annotations

from typing import Any

from gateway.samples import Outcome, Sample


def sample(
    deployment: str,
    *,
    ttft: float | None = 0.5,
    tps: float | None = 100.0,
    tokens: int | None = 100,
    outcome: Outcome = "ok",
    model: str = "m",
    started_at: float = 1000.0,
    e2e: float | None = None,
) -> Sample:
    return Sample(
        model=model,
        deployment=deployment,
        provider=deployment,
        endpoint="chat",
        stream=True,
        outcome=outcome,
        started_at=started_at,
        ttft_s=ttft if outcome == "ok" else None,
        tokens_per_s=tps if outcome == "ok" else None,
        output_tokens=tokens if outcome == "ok" else None,
        e2e_s=e2e,
    )


def samples(
    deployment: str,
    n: int,
    *,
    ttft: float | None = 0.5,
    tps: float | None = 100.0,
    tokens: int | None = 100,
    outcome: Outcome = "ok",
    started_at: float = 1000.0,
) -> list[Sample]:
    return [
        sample(deployment, ttft=ttft, tps=tps, tokens=tokens, outcome=outcome, started_at=started_at) for _ in range(n)
    ]


def make_sample(
    model: str = "m",
    deployment: str = "d",
    *,
    outcome: Outcome = "ok",
    ttft_s: float | None = 0.2,
    tokens_per_s: float | None = 100.0,
    e2e_s: float | None = 1.0,
    output_tokens: int | None = 50,
) -> Sample:
    return Sample(
        model=model,
        deployment=deployment,
        provider=deployment,
        endpoint="chat",
        stream=True,
        outcome=outcome,
        started_at=0.0,
        ttft_s=ttft_s,
        first_answer_s=ttft_s,
        tokens_per_s=tokens_per_s,
        e2e_s=e2e_s,
        output_tokens=output_tokens,
    )


class KeptSamples:
    """A sample sink that keeps every ``Sample`` it is handed on the way to the sink it wraps (a runner's, in a test
    of what one request records)."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.samples: list[Sample] = []

    def record(self, sample: Sample) -> None:
        self.samples.append(sample)
        self.sink.record(sample)
