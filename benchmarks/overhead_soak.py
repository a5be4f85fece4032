"""The soak: paced streams through the gateway at a steady concurrency for a long while, its RSS
read every 10 s, to show whether memory grows with the requests served.

Why the slope is taken twice: the in-memory stats keep a window (300 s by default) of
histogram slices, so RSS may rightly climb until the window is full; what must not happen is
growth after that. The second half of a 10-minute soak is past the window. The slope is also
given per request served, the unit a leak comes in.

    python -m benchmarks.overhead --soak          # 600 s
    python -m benchmarks.overhead --soak 120 --soak-concurrency 256
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import procs
from benchmarks.figures import quantile, utc_minute
from benchmarks.loadgen import LoadGenerator
from benchmarks.overhead_report import table

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLE_EVERY_S = 10.0
PACED = {"ttft_s": 0.05, "tokens_per_s": 100.0, "output_tokens": 32}
GROWTH_LIMIT_BYTES_PER_REQUEST = 16.0
"""A second-half slope under this many bytes per request served counts as no growth."""


@dataclass(frozen=True)
class SoakFigures:
    date: str
    machine: str
    command: str
    duration_s: float
    concurrency: int
    requests: int
    errors: int
    error_kinds: dict[str, int]
    rate: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    samples: list[tuple[float, int]]
    """(seconds since start, gateway RSS bytes)."""

    @property
    def rss(self) -> list[int]:
        return [rss for _, rss in self.samples]

    def slope(self, since_s: float = 0.0) -> float:
        """Least-squares RSS slope in bytes per second over the samples taken after ``since_s``."""
        points = [(t, float(rss)) for t, rss in self.samples if t >= since_s]
        if len(points) < 2:
            return 0.0
        mean_t = sum(t for t, _ in points) / len(points)
        mean_r = sum(r for _, r in points) / len(points)
        spread = sum((t - mean_t) ** 2 for t, _ in points)
        return sum((t - mean_t) * (r - mean_r) for t, r in points) / spread if spread else 0.0

    @property
    def late_slope_per_request(self) -> float:
        return self.slope(self.duration_s / 2) / self.rate if self.rate else 0.0

    @property
    def flat(self) -> bool:
        return self.late_slope_per_request < GROWTH_LIMIT_BYTES_PER_REQUEST and self.errors == 0

    def summary(self) -> str:
        mib = 1024 * 1024
        rss = self.rss
        return (
            f"{duration(self.duration_s)} at {self.concurrency} paced streams, {self.requests:,} requests, "
            f"{self.errors} failed; RSS start {rss[0] / mib:.1f}, end {rss[-1] / mib:.1f}, max {max(rss) / mib:.1f} "
            f"MiB; second-half slope {self.slope(self.duration_s / 2) * 60 / mib:+.2f} MiB/min "
            f"({self.late_slope_per_request:+.1f} B/request)"
        )


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def run_soak(
    duration_s: float, concurrency: int, config_text: str, clients: int, command: str, output: Path | None
) -> SoakFigures:
    body = json.dumps(
        {"model": "bench", "messages": [{"role": "user", "content": "Soak."}], "stream": True, "fake": PACED}
    ).encode()
    # Bounded in count as well as time: no more than the pace allows, with room to spare.
    request_cap = int(concurrency * duration_s / 0.3) + concurrency
    loadgen = LoadGenerator(clients)
    try:
        with tempfile.TemporaryDirectory(prefix="soak-") as scratch, procs.fake_provider(Path(scratch)) as fake:
            text = config_text.replace("{fake_base_url}", fake.base_url)
            with procs.gateway(text, "gateway", Path(scratch)) as gateway:
                run = loadgen.prepare(gateway.chat_url, body, concurrency, request_cap, duration_s, ramp_s=0.36)
                samples = [(0.0, procs.rss_bytes(gateway.pid))]
                started = time.monotonic()
                run.go()
                while not run.wait(started + len(samples) * SAMPLE_EVERY_S - time.monotonic()):
                    samples.append((time.monotonic() - started, procs.rss_bytes(gateway.pid)))
                    print(
                        f"soak {samples[-1][0]:6.0f} s: gateway RSS {samples[-1][1] / 1024 / 1024:.1f} MiB", flush=True
                    )
                samples.append((time.monotonic() - started, procs.rss_bytes(gateway.pid)))
    finally:
        loadgen.close()
    outcome = run.outcome
    figures = SoakFigures(
        date=utc_minute(),
        machine=procs.machine(),
        command=command,
        duration_s=outcome.wall_s,
        concurrency=concurrency,
        requests=outcome.ok,
        errors=outcome.errors,
        error_kinds=outcome.error_kinds,
        rate=outcome.rate,
        ttft_p50_ms=quantile(outcome.ttft_s, 0.5) * 1000,
        ttft_p99_ms=quantile(outcome.ttft_s, 0.99) * 1000,
        e2e_p50_ms=quantile(outcome.e2e_s, 0.5) * 1000,
        e2e_p99_ms=quantile(outcome.e2e_s, 0.99) * 1000,
        samples=samples,
    )
    output = output or RESULTS / "overhead-soak.md"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render(figures))
    data = asdict(figures) | {"summary": figures.summary(), "flat": figures.flat}
    output.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"\n{figures.summary()}\nwritten to {output}")
    return figures


def render(f: SoakFigures) -> str:
    mib = 1024 * 1024
    lines = [
        "# Gateway soak (issue 5)",
        "",
        f"Measured {f.date} on {f.machine}.",
        "",
        f"Command: `{f.command}`. Paced streams (TTFT 50 ms, 100 tokens/s, 32 tokens) through the gateway",
        f"(`benchmarks/gateway.bench.toml`: stats in memory, metrics and access log on) at {f.concurrency}",
        "concurrent streams, closed loop, for the duration; the gateway's RSS read every "
        f"{SAMPLE_EVERY_S:g} s. The client, the fake and the gateway share the machine's 2 cores.",
        "",
        f"**{f.summary()}**. No growth: **{'yes' if f.flat else 'no'}** (second-half slope under "
        f"{GROWTH_LIMIT_BYTES_PER_REQUEST:g} bytes per request served, and no failed request).",
        "",
        f"Throughput {f.rate:.0f} req/s; TTFT p50 / p99 {f.ttft_p50_ms:.1f} / {f.ttft_p99_ms:.1f} ms; "
        f"end-to-end p50 / p99 {f.e2e_p50_ms:.1f} / {f.e2e_p99_ms:.1f} ms (client-observed).",
        "",
        f"Slope over the whole run {f.slope() * 60 / mib:+.2f} MiB/min; over the second half "
        f"{f.slope(f.duration_s / 2) * 60 / mib:+.2f} MiB/min (past the 300 s stats window when the soak "
        "lasts 10 minutes: the histograms it keeps are then all allocated).",
        "",
    ]
    if f.errors:
        lines += [f"Failures: {f.error_kinds}", ""]
    lines += table(["t (s)", "RSS MiB"], [[f"{t:.0f}", f"{rss / mib:.1f}"] for t, rss in f.samples])
    return "\n".join(lines) + "\n"
