"""Under ``gateway serve --workers N``, a reload takes the gauges of the providers and models it removed off the
host's scrape, as it does in one process (``tests/test_reload_metrics.py``): the multiprocess files cannot forget
a series, so a removed provider's open circuit stayed in every scrape for as long as the workers lived."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import httpx

from gateway.fakes import FakeBehavior
from tests.support.fakes import Fakes, FakeServer
from tests.test_workers import Supervised, by_worker, series
from tests.test_workers import supervised as supervised  # the fixture: python -m gateway serve with 2 workers


def _config(a: FakeServer, b: FakeServer | None) -> str:
    """Model ``m`` on a, ``gone`` on b (with ``b`` only); b's circuit opens at its first failure."""
    text = (
        "[server]\nworkers = 2\n\n[policies.fixed-order]\nfailure_threshold = 1\n\n"
        f'[[providers]]\nname = "a"\nbase_url = "{a.base_url}"\nmax_concurrency = 7\n\n'
    )
    if b is not None:
        text += f'[[providers]]\nname = "b"\nbase_url = "{b.base_url}"\nmax_concurrency = 9\n\n'
    text += '[[models]]\nname = "m"\npolicy = "fixed-order"\n  [[models.deployments]]\n  provider = "a"\n'
    text += '  model = "a-upstream"\n'
    if b is not None:
        text += '\n[[models]]\nname = "gone"\npolicy = "fixed-order"\n  [[models.deployments]]\n  provider = "b"\n'
        text += '  model = "b-upstream"\n'
    return text


def _gauges_of_b(page: str) -> list[str]:
    """The gauge lines (``# TYPE`` says which families are gauges) that name provider b or model ``gone``."""
    gauges = {line.split()[2] for line in page.splitlines() if line.startswith("# TYPE ") and line.endswith(" gauge")}
    return [
        line
        for line in page.splitlines()
        if not line.startswith("#")
        and line.split("{", 1)[0] in gauges
        and ('provider="b"' in line or 'model="gone"' in line)
    ]


def test_a_reload_takes_the_removed_providers_gauges_off_every_workers_scrape(
    supervised: Callable[..., Supervised], fakes: Fakes, tmp_path: Path
) -> None:
    a, b = fakes.start("a"), fakes.start("b", FakeBehavior(status=500))
    config = tmp_path / "gateway.toml"
    config.write_text(_config(a, b))
    gateway = supervised(config)
    body = {"model": "gone", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=10).status_code >= 500
    before = by_worker(gateway, "/metrics", lambda r: r.status_code == 200, "a scrape of each worker")
    for page in before.values():
        assert series(page, "gateway_circuit_state")[(("provider", "b"), ("state", "open"))] == 1
        assert series(page, "gateway_provider_max_concurrency")[(("provider", "b"),)] == 2 * 9
    config.write_text(_config(a, None))
    gateway.process.send_signal(signal.SIGHUP)
    by_worker(
        gateway,
        "/v1/models",
        lambda r: [m["id"] for m in r.json()["data"]] == ["m"],
        "both workers to serve the reloaded config",
    )
    after = by_worker(gateway, "/metrics", lambda r: r.status_code == 200, "a scrape of each worker")
    for page in after.values():
        assert _gauges_of_b(page) == []
        # What remains keeps its values; the counters of what went stay.
        assert series(page, "gateway_provider_max_concurrency") == {(("provider", "a"),): 2 * 7}
        assert series(page, "gateway_circuit_state")[(("provider", "a"), ("state", "closed"))] == 1
        upstream = series(page, "gateway_upstream_requests_total")
        assert sum(v for labels, v in upstream.items() if ("provider", "b") in labels) >= 1
