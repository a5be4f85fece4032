"""The figures a benchmark run produces, as plain data: what the report renders and the JSON keeps.

Why apart from the runner: the report (and a later run comparing itself with an earlier one)
needs only these numbers, never the processes or samples they came from.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.loadgen import Outcome


def utc_minute() -> str:
    """A result's date: now, to the minute, in UTC."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (no interpolation): an observed value, as percentiles are reported."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))
    return ordered[index]


@dataclass(frozen=True)
class Workload:
    """What the fake answers: ``tokens`` one-token events after ``ttft_s``, at ``tokens_per_s`` (0: unpaced)."""

    name: str
    ttft_s: float
    tokens_per_s: float
    tokens: int

    def body(self) -> bytes:
        """The request body; the pace travels in the body's ``fake`` object, which proxies relay untouched."""
        fake = {"ttft_s": self.ttft_s, "tokens_per_s": self.tokens_per_s, "output_tokens": self.tokens}
        request = {"model": "bench", "messages": [{"role": "user", "content": "Say something."}], "stream": True}
        return json.dumps({**request, "fake": fake}).encode()

    @property
    def ideal_e2e_ms(self) -> float:
        """End-to-end of one stream with nothing queued: the first token, then the rest at the pace."""
        pace = (self.tokens - 1) / self.tokens_per_s if self.tokens_per_s else 0.0
        return (self.ttft_s + pace) * 1000

    def describe(self) -> str:
        pace = "unpaced (as fast as the fake can send)" if self.tokens_per_s == 0 else f"{self.tokens_per_s:g} tokens/s"
        return f"TTFT {self.ttft_s * 1000:g} ms, {self.tokens} tokens (one per event), {pace}"


@dataclass(frozen=True)
class Measurement:
    """One closed-loop run of a workload against one target at one concurrency. Times in ms."""

    workload: str
    target: str
    concurrency: int
    ok: int
    errors: int
    error_kinds: dict[str, int]
    error_samples: list[str]
    wall_s: float
    rate: float
    ttft_p50: float
    ttft_p99: float
    e2e_p50: float
    e2e_p99: float
    proxy_cpu_ms: float | None
    """CPU ms per request of the proxy process; None when going direct."""
    fake_cpu_ms: float
    client_cpu_ms: float
    machine_cores: float
    """Cores the whole machine kept busy during the run (at most the core count)."""
    other_cores: float
    """Of those, cores not charged to the benchmark's processes or to the kernel's softirq work."""
    offered_rate: float | None
    """Paced: the rate the concurrency asks for (conc. ÷ a stream's unqueued end-to-end); None unpaced."""

    @classmethod
    def of(
        cls,
        workload: Workload,
        target: str,
        concurrency: int,
        outcome: Outcome,
        cpu_s: dict[str, float],
        machine_cores: float,
        other_cores: float,
    ) -> Measurement:
        per = 1000 / max(1, outcome.ok)
        proxy = cpu_s.get("proxy")
        return cls(
            workload=workload.name,
            target=target,
            concurrency=concurrency,
            ok=outcome.ok,
            errors=outcome.errors,
            error_kinds=dict(outcome.error_kinds),
            error_samples=list(outcome.error_samples),
            wall_s=outcome.wall_s,
            rate=outcome.rate,
            ttft_p50=quantile(outcome.ttft_s, 0.5) * 1000,
            ttft_p99=quantile(outcome.ttft_s, 0.99) * 1000,
            e2e_p50=quantile(outcome.e2e_s, 0.5) * 1000,
            e2e_p99=quantile(outcome.e2e_s, 0.99) * 1000,
            proxy_cpu_ms=None if proxy is None else proxy * per,
            fake_cpu_ms=cpu_s["fake"] * per,
            client_cpu_ms=cpu_s["clients"] * per,
            machine_cores=machine_cores,
            other_cores=other_cores,
            offered_rate=concurrency * 1000 / workload.ideal_e2e_ms if workload.tokens_per_s else None,
        )


@dataclass(frozen=True)
class MemoryFigure:
    """RSS of a proxy idle, with ``streams`` streams held open, and after they ended. Bytes."""

    target: str
    streams: int
    open_seen: int
    """Streams the fake had open when the RSS was read (should equal ``streams``)."""
    idle_rss: int
    open_rss: int
    after_rss: int
    errors: int

    @property
    def per_stream(self) -> float:
        return (self.open_rss - self.idle_rss) / max(1, self.open_seen)


@dataclass
class Results:
    """Everything one invocation measured, with where and how."""

    date: str
    machine: str
    command: str
    client_processes: int
    quiet_cores: float
    """Cores busy on the machine just before the run started (other programs)."""
    attempts: int
    """Runs per figure at most, while other programs took more than ``noisy_cores`` of the machine."""
    noisy_cores: float
    contended_idle_cores: float
    workloads: dict[str, str] = field(default_factory=dict)
    measurements: list[Measurement] = field(default_factory=list)
    memory: list[MemoryFigure] = field(default_factory=list)
    profile: list[str] = field(default_factory=list)
    """Paths (relative to the results folder) of profile outputs, if any."""

    def find(self, workload: str, target: str, concurrency: int) -> Measurement | None:
        for m in self.measurements:
            if (m.workload, m.target, m.concurrency) == (workload, target, concurrency):
                return m
        return None

    def concurrencies(self, workload: str) -> list[int]:
        return sorted({m.concurrency for m in self.measurements if m.workload == workload})

    def targets(self, workload: str) -> list[str]:
        return list(dict.fromkeys(m.target for m in self.measurements if m.workload == workload))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")


def load_json(path: Path) -> dict[str, Any] | None:
    """A JSON results file written earlier, or None if there is none."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data
