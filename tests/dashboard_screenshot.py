"""Makes ``docs/dashboard.png``: the page of a real gateway whose store holds samples shaped on
published provider figures (``provider-profiles.csv``: median and floor speeds, TTFT, prices).

Why seeded samples rather than traffic: today's router sends every request to a model's first
deployment, so real traffic would fill only one row per model. Seeding the store is what
``gateway bench --seed-stats`` does too. Run it from the repository's root::

    python -m tests.dashboard_screenshot docs/dashboard.png
"""

from __future__ import annotations

import math
import random
import sys
import time
from pathlib import Path

from gateway.app import AppOptions, create_app
from gateway.config import parse_config
from gateway.samples import Sample
from tests.chromium import screenshot
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
    "together": (89.0, 41.0, 0.446, 1.10, 0.01, 0.54, 0.54, 0.40),
    "deepinfra": (73.0, 30.0, 0.377, 0.95, 0.03, 0.23, 0.40, 0.25),
    "parasail": (72.0, 35.0, 0.414, 1.30, 0.01, 0.20, 0.38, 0.20),
    "novita": (72.0, 28.0, 0.512, 1.60, 0.02, 0.30, 0.45, 0.15),
}
MODELS = {"glm-5.3-flash": GLM, "llama-3.3-70b": LLAMA}
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
                    )  # fmt: skip
                )
    return samples


def main(target: Path) -> None:
    app = create_app(_config(), AppOptions(environ={}))  # type: ignore[arg-type]
    server = ServerThread(app).start()
    try:
        store = app.state.runtime.current.stats
        samples = _samples(random.Random(8), time.time())
        assert server.loop is not None
        server.loop.call_soon_threadsafe(lambda: [store.record(s) for s in samples])
        wait_until(lambda: sum(s.samples for s in store.snapshot().summaries.values()) == len(samples))
        screenshot(f"{server.url}/dashboard", target, width=1280, height=960, scale=0.75)
    finally:
        server.stop()
    print(f"wrote {target} ({target.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dashboard.png"))
