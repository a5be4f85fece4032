"""Prometheus itself, for the tests: ``promtool check metrics`` on a scrape, and a real server
scraping a gateway so that the shipped dashboard's queries are evaluated as Grafana would.

Why the real thing: a parser of our own would accept whatever we wrote. Prometheus rejects
labels it reserves (``quantile`` outside a summary), and only its query engine says that a
panel's query returns data. Debian's ``prometheus`` package brings both binaries
(``make test`` installs it when ``promtool`` is missing); if they are missing the test fails and
says so.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

INSTALL_HINT = (
    "{name} is not installed or not on PATH; the metrics tests need it. Install Debian's package: "
    "`apt-get install -y prometheus` (tests/install-deps, which `make test` runs, does this when it is missing)."
)
SCRAPE_INTERVAL_S = 0.5
START_TIMEOUT_S = 30.0


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise AssertionError(INSTALL_HINT.format(name=name))
    return found


def check_metrics(text: str) -> subprocess.CompletedProcess[str]:
    """``promtool check metrics`` over ``text`` (the Prometheus text format); exit 0 when it is clean."""
    return subprocess.run(
        [binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrometheusServer:
    """A running Prometheus scraping one target every ``SCRAPE_INTERVAL_S``; query it with ``query``.

    Its first scrape comes about 5 s after start-up: Prometheus's target discovery hands over
    new targets at most every 5 s, a fixed delay no flag shortens.
    """

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result vector (a scalar result comes back as one unlabelled sample), now or ``at``."""
        params: dict[str, str | float] = {"query": expr}
        if at is not None:
            params["time"] = at
        response = httpx.get(self.url + "/api/v1/query", params=params, timeout=10)
        body = response.json()
        assert response.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
        data = body["data"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's ``label_values(match, label)`` lists."""
        response = httpx.get(f"{self.url}/api/v1/label/{label}/values", params={"match[]": match}, timeout=10)
        values: list[str] = response.json()["data"]
        return values

    def healthy_since(self, window: str, scrapes: int) -> float | None:
        """The time of the latest scrape stored, if the ``window`` up to it held at least ``scrapes`` scrapes, every
        one successful; queries evaluated at this time see only successful scrapes, and always will.

        A scrape that fails (a busy machine, the target slower than the timeout, which is the interval) marks every
        series stale at once. It is stored only when it ends, dated when it started: a moment taken from the clock
        (the query's own evaluation time) can fall inside a scrape still running, whose staleness markers arrive
        later and empty every instant selector there, while ``rate()`` still has data. Prometheus scrapes a target
        one scrape after another, so nothing dated up to its latest stored scrape can change any more.
        """
        latest = self.query("timestamp(up)")
        if not latest:
            return None
        at = float(latest[0]["value"][1])
        found = self.query(f"count_over_time(up[{window}]) >= {scrapes} and min_over_time(up[{window}]) == 1", at=at)
        return at if found else None


@contextlib.contextmanager
def prometheus_scraping(target: str) -> Iterator[PrometheusServer]:
    """Prometheus on a free loopback port, scraping ``target`` (``host:port``) at ``/metrics``."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="prometheus-") as folder:
        config = Path(folder) / "prometheus.yml"
        config.write_text(
            json.dumps(  # JSON is YAML
                {
                    "global": {"scrape_interval": f"{int(SCRAPE_INTERVAL_S * 1000)}ms"},
                    "scrape_configs": [{"job_name": "gateway", "static_configs": [{"targets": [target]}]}],
                }
            )
        )
        command = [
            binary("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={folder}/data",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        log = Path(folder) / "prometheus.log"
        with log.open("w") as stderr:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        server = PrometheusServer(f"http://127.0.0.1:{port}")
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _ready(server.url):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"prometheus did not start: {log.read_text()[-2000:]}")
                time.sleep(0.05)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/-/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
