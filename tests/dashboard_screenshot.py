"""Makes ``docs/dashboard.png``: the page of a real gateway whose store holds samples shaped on
published provider figures (``gateway/fakes/provider-profiles.csv``: median and floor speeds, TTFT,
prices), at a wide desktop width, and ``docs/dashboard-narrow.png`` at a phone's; and
``docs/dashboard.layout``, the digest of the files that decide the page's layout, which
``tests/test_dashboard_page.py`` compares so that a layout change without new pictures fails.

The store's half-hour history is seeded too, with a story a reader should spot on the sparklines:
``nebius`` led the GLM model's speed until twelve minutes ago, then degraded, and ``baseten`` took
the lead (the rank changes are marked).

Why seeded samples rather than traffic: every row fills at once, with realistic spreads, and
the page looks the same on every run (``gateway bench --seed-stats`` seeds a store the same
way). ``seeded_dashboard`` is what the browser test measures too. Run it from the repository's
root::

    python -m tests.dashboard_screenshot docs/dashboard.png
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from gateway.app import AppOptions, create_app
from gateway.config import parse_config
from gateway.routing import RouteRequest
from gateway.samples import Sample
from gateway.stats import InMemoryStatsStore
from tests.chromium import devtools
from tests.support.servers import ServerThread
from tests.support.wait import wait_until

Z95 = 1.645  # standard normal quantile of 0.95: a log-normal's p95 is its median × e^(1.645 σ)

# deployment: (tokens/s p50, p95 floor, TTFT p50, p95, failure share, $/1M in, out, share of traffic)
GLM = {
    "nebius": (269.3, 78.8, 1.9, 7.11, 0.01, 0.10, 0.30, 0.16),
    "baseten": (240.5, 61.6, 0.42, 1.16, 0.01, 0.13, 0.40, 0.32),
    "modal": (222.2, 84.7, 0.36, 1.09, 0.005, 0.13, 0.42, 0.22),
    "together": (151.6, 34.0, 0.80, 2.26, 0.02, 0.15, 0.45, 0.18),
    "deepinfra": (69.4, 9.0, 2.1, 6.41, 0.06, 0.08, 0.25, 0.12),
}
LLAMA = {
    "together": (89.0, 41.0, 0.446, 1.10, 0.01, 0.30, 0.38, 0.40),
    "deepinfra": (73.0, 30.0, 0.377, 0.95, 0.03, 0.23, 0.40, 0.25),
    "parasail": (72.0, 35.0, 0.414, 1.30, 0.01, 0.20, 0.38, 0.20),
    "novita": (72.0, 28.0, 0.512, 1.60, 0.02, 0.30, 0.45, 0.15),
}
MODELS = {"glm-5.3-flash": GLM, "llama-3.3-70b": LLAMA}
CACHED = {("llama-3.3-70b", "together"): (0.03, 0.8)}
"""(model, deployment): its cached-input price ($/1M) and the share of prompt tokens its answers had cached:
cheapest on a typical request thanks to its cache, though its list input price is not the lowest."""
SAMPLES_PER_MODEL = {"glm-5.3-flash": 640, "llama-3.3-70b": 380}


def _config() -> object:
    providers = sorted({p for deployments in MODELS.values() for p in deployments})
    return parse_config(
        {
            "providers": [{"name": p, "base_url": f"http://127.0.0.1:9/{p}/v1"} for p in providers],
            "models": [
                {
                    "name": model,
                    "deployments": [
                        {"provider": p, "model": model, "price_in": f[5], "price_out": f[6]}
                        | ({"price_cached_in": CACHED[(model, p)][0]} if (model, p) in CACHED else {})
                        for p, f in deployments.items()
                    ],
                }
                for model, deployments in MODELS.items()
            ],
        },
        source="screenshot.toml",
    )


def _samples(rng: random.Random, now: float) -> list[Sample]:
    samples: list[Sample] = []
    for model, deployments in MODELS.items():
        for name, (tps, floor, ttft, ttft95, fail, _, _, share) in deployments.items():
            tps_sigma = math.log(tps / floor) / Z95
            ttft_sigma = math.log(ttft95 / ttft) / Z95
            for _ in range(round(SAMPLES_PER_MODEL[model] * share)):
                started = now - rng.uniform(1, 280)
                if rng.random() < fail:
                    samples.append(Sample(model, name, name, "chat", True, "upstream_error", started, status=503))
                    continue
                first = ttft * math.exp(rng.gauss(0, ttft_sigma))
                speed = tps * math.exp(rng.gauss(0, tps_sigma))
                tokens = rng.randint(80, 256)
                cached = CACHED.get((model, name))
                samples.append(
                    Sample(
                        model,
                        name,
                        name,
                        "chat",
                        True,
                        "ok",
                        started,
                        status=200,
                        ttft_s=first,
                        first_answer_s=first,
                        tokens_per_s=speed,
                        e2e_s=first + tokens / speed,
                        output_tokens=tokens,
                        usage_prompt_tokens=500 if cached else None,
                        usage_cached_tokens=round(500 * cached[1]) if cached else None,
                        kind="plain",
                        validity="degenerate" if rng.random() < fail else "valid",
                    )  # fmt: skip
                )
    return samples


WIDE, NARROW = (1600, 1000), (390, 844)
"""A wide desktop browser, and a phone (CSS pixels)."""

ROOT = Path(__file__).resolve().parent.parent
LAYOUT_FILES = (
    "gateway/dashboard/page.css",
    "gateway/dashboard/page.py",
    "gateway/dashboard/chart.py",
    "gateway/dashboard/spark.py",
    "gateway/dashboard/why.py",
    "tests/dashboard_screenshot.py",
)
"""What decides how the page looks (its CSS, its HTML, its charts) and the data it is drawn with."""
LAYOUT_RECORD = ROOT / "docs" / "dashboard.layout"


def layout_digest() -> str:
    """sha256 over ``LAYOUT_FILES``, each path with its content (line endings as stored)."""
    digest = hashlib.sha256()
    for name in LAYOUT_FILES:
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()


# Per minute of the last half hour, GLM's deployments' (tokens/s, TTFT) factors against their profile:
# nebius leads until it degrades twelve minutes ago; modal briefly leads in between.
STORY: dict[str, list[tuple[int, float, float]]] = {
    "nebius": [(30, 1.45, 1.0), (12, 0.55, 1.8), (0, 0.55, 1.8)],
    "modal": [(30, 1.0, 1.0), (14, 1.5, 0.9), (11, 1.0, 1.0), (0, 1.0, 1.0)],
}


def _factors(name: str, minutes_ago: int) -> tuple[float, float]:
    steps = STORY.get(name, [])
    for since, tps, ttft in steps:  # the first step that began at or before this minute
        if minutes_ago <= since and not any(s < since and minutes_ago <= s for s, _, _ in steps):
            return tps, ttft
    return 1.0, 1.0


def _history(rng: random.Random, now: float) -> list[Sample]:
    """Six answers per deployment and minute over the last 30 minutes, shaped on ``MODELS`` and ``STORY``."""
    samples: list[Sample] = []
    for model, deployments in MODELS.items():
        for name, (tps, floor, ttft, ttft95, _, _, _, _) in deployments.items():
            tps_sigma = math.log(tps / floor) / Z95 / 3
            ttft_sigma = math.log(ttft95 / ttft) / Z95 / 3
            for minutes_ago in range(29, -1, -1):
                tps_factor, ttft_factor = _factors(name, minutes_ago) if model == "glm-5.3-flash" else (1.0, 1.0)
                for _ in range(6):
                    first = ttft * ttft_factor * math.exp(rng.gauss(0, ttft_sigma))
                    speed = tps * tps_factor * math.exp(rng.gauss(0, tps_sigma))
                    at = now - minutes_ago * 60 - rng.uniform(0, 50)
                    samples.append(
                        Sample(model, name, name, "chat", True, "ok", at, status=200, ttft_s=first,
                               first_answer_s=first, tokens_per_s=speed, e2e_s=first + 200 / speed, output_tokens=200)
                    )  # fmt: skip
    return samples


@contextlib.contextmanager
def seeded_dashboard() -> Iterator[str]:
    """A gateway whose stats store holds the seeded samples; yields its dashboard's URL."""
    app = create_app(_config(), AppOptions(environ={}))  # type: ignore[arg-type]
    server = ServerThread(app).start()
    try:
        runtime = app.state.runtime.current
        store = runtime.stats
        assert isinstance(store, InMemoryStatsStore)
        seeded = store.as_replica("seeded")  # another replica's answers: the router's beliefs hear them as such
        now = time.time()
        samples = _samples(random.Random(8), now)
        history = _history(random.Random(9), now)
        assert server.loop is not None

        def seed() -> None:
            for sample in samples:
                seeded.record(sample)
            # The half hour before: straight into the store's minutes (the window holds only its last 5 minutes).
            for sample in history:
                store.minutes.add(sample, sample.started_at)

        server.loop.call_soon_threadsafe(seed)
        wait_until(lambda: sum(s.samples for s in store.snapshot().summaries.values()) == len(samples))
        # A plan per model hears the other replicas' answers, as the first request would.
        heard: list[str] = []

        def hear() -> None:
            for model in runtime.config.models:
                heard.append(runtime.router.plan(RouteRequest(model, "chat", False, 500, None)).candidates[0].name)

        server.loop.call_soon_threadsafe(hear)
        wait_until(lambda: len(heard) == len(runtime.config.models))
        yield f"{server.url}/dashboard"
    finally:
        server.stop()


def main(target: Path) -> None:
    narrow = target.with_name(target.stem + "-narrow" + target.suffix)
    with seeded_dashboard() as url, devtools() as browser:
        for (width, height), path in ((WIDE, target), (NARROW, narrow)):
            browser.open(url, width, height)
            browser.screenshot(path)
            print(f"wrote {path} ({path.stat().st_size:,} bytes, {width} px wide)")
    LAYOUT_RECORD.write_text(f"sha256 {layout_digest()}\n")
    print(f"wrote {LAYOUT_RECORD} (the layout these pictures show)")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dashboard.png"))
