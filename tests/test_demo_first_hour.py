"""A newcomer's first minutes with ``gateway demo``, as a subprocess: the banner's bench through the gateway ends
well under 30 s and splits its results by the provider the router chose; stderr says a lasting state once. (That the
traffic's long answers move to a fast streamer within about 30 s is seen by hand, not here: how soon depends on the
host's load, and the wait would be most of a minute of the suite.)"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from pathlib import Path

from gateway.demo import DEMO_MODELS
from gateway.fakes.profiles import DEMO_PROFILES
from tests.test_demo import READY, DemoProcess, _try_it, demo_process

__all__ = ["demo_process"]  # the fixture, used by name

WATCHED = DEMO_MODELS[0][0]
QUICK_STARTER = min(DEMO_PROFILES, key=lambda p: p.figures.ttft_p50_s).name
FAST_STREAMERS = {
    p.name for p in DEMO_PROFILES if p.figures.tps_p50 >= 2 * min(q.figures.tps_p50 for q in DEMO_PROFILES)
}


def test_the_banners_bench_is_quick_and_a_lasting_state_is_said_once(
    demo_process: list[DemoProcess],
) -> None:
    assert QUICK_STARTER == "nimble" and QUICK_STARTER not in FAST_STREAMERS and "fading" in FAST_STREAMERS
    demo = DemoProcess("--degrade-after", "-1", "--duration", "150")  # the default traffic, as `make demo` runs it
    demo_process.append(demo)
    demo.wait_for(READY)
    (bench,) = [c for c in _try_it(demo.lines) if " bench --url " in c]
    started = time.monotonic()
    done = subprocess.run(shlex.split(bench), cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert took < 30, took
    by_provider = done.stdout.split("by the provider that served each request")[1]
    served = {m[1]: int(m[2]) for m in re.finditer(rf"gateway/{re.escape(WATCHED)} via (\w+) .* (\d+)\n", by_provider)}
    assert sum(served.values()) == 8 and set(served) <= {p.name for p in DEMO_PROFILES}, done.stdout

    assert demo.stop() == 0
    # A lasting state is said once, and once more when it ends: the flaky provider's limit at its floor.
    for model, _, _ in DEMO_MODELS:
        floors = [line for line in demo.errors if f"of model {model}: concurrency limit backed off" in line]
        recovered = [line for line in demo.errors if f"of model {model}: concurrency limit recovered" in line]
        assert len(recovered) <= len(floors) <= len(recovered) + 1, demo.errors
    assert not [line for line in demo.errors if "Traceback" in line], demo.errors
