"""A reload (POST /v1/gateway/reload, or SIGHUP to ``gateway serve``) while the gateway serves: 24 streams open on
the deployments a new config changes and removes, and new requests arriving all the while. Every open stream
finishes byte for byte on the config it started with, no request that could be served fails, the in-flight gauge
and the access log count each request once, and a broken config sent in the middle of it all is refused in words
(the file, the key path, what was expected) while the old one keeps serving."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.accesslog import ACCESS_LOGGER
from gateway.fakes import FakeBehavior
from gateway.fakes.behavior import answer_words
from tests.redis_server import free_port
from tests.support.access import access_lines
from tests.support.fakes import Fakes, FakeServer
from tests.support.wait import wait_until
from tests.test_reload import Serve
from tests.test_reload import serve as serve  # the fixture: a gateway on a config file, reloadable

STREAMS = 24
TOKENS = 40
TIME_LIMIT_S = 30.0


def _config(deployments: list[tuple[FakeServer, str]], providers: list[FakeServer]) -> str:
    listed = "".join(f'[[providers]]\nname = "{p.name}"\nbase_url = "{p.base_url}"\n\n' for p in providers)
    deployed = "".join(f'  [[models.deployments]]\n  provider = "{p.name}"\n  model = "{m}"\n' for p, m in deployments)
    return f'[stats]\nwindow_s = 60\nslice_s = 1\n\n{listed}[[models]]\nname = "m"\npolicy = "fixed-order"\n{deployed}'


class Requests:
    """Non-streamed requests for ``m`` on ``threads`` threads until ``stop``: each answer's status and request id."""

    def __init__(self, url: str, threads: int = 4) -> None:
        self.url = url
        self.answers: list[tuple[int, str]] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        deadline = time.monotonic() + TIME_LIMIT_S
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "fake": {"tokens_per_s": 0}}
        with httpx.Client(base_url=self.url, timeout=10) as http:
            for _ in range(2_000):
                if self.stop.is_set() or time.monotonic() > deadline:
                    return
                try:
                    answer = http.post("/v1/chat/completions", json=body)
                except httpx.HTTPError as exc:
                    with self.lock:
                        self.errors.append(exc)
                    continue
                with self.lock:
                    self.answers.append((answer.status_code, answer.headers.get("x-request-id", "")))

    def __enter__(self) -> Requests:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(15)


def _open_stream(url: str, only: str, results: list[tuple[str, str, str]]) -> threading.Thread:
    def run() -> None:
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "provider": {"only": [only]},
        }
        with httpx.Client(base_url=url, timeout=15) as http:
            with http.stream("POST", "/v1/chat/completions", json=body) as response:
                text = response.read().decode()
                results.append((response.headers["x-gateway-provider"], response.headers["x-request-id"], text))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _content(stream: str) -> tuple[int, str]:
    """How many content chunks a chat stream carried, and their text joined."""
    chunks = [
        json.loads(line[6:])["choices"][0]["delta"].get("content")
        for line in stream.splitlines()
        if line.startswith("data: {")
    ]
    said = [c for c in chunks if c]
    return len(said), "".join(said)


def _inflight(url: str) -> dict[str, float]:
    prefix = 'gateway_inflight_requests{provider="'
    lines = [line for line in httpx.get(url + "/metrics").text.splitlines() if line.startswith(prefix)]
    return {line[len(prefix) :].split('"')[0]: float(line.rsplit(" ", 1)[1]) for line in lines}


@dataclass
class Run:
    """What one reload under load saw: each stream's provider, request id and text; the other requests' answers."""

    streams: list[tuple[str, str, str]]
    requests: Requests


def _under_load(
    url: str,
    fakes: tuple[FakeServer, FakeServer, FakeServer],
    path: Path,
    reload: Callable[[], None],
    refused: Callable[[], str],
) -> Run:
    """24 streams open on a and b, requests all the while; the config swapped (a changed, c added, b removed) with
    ``reload``, then a broken one sent with ``refused`` (which returns what the gateway said of it)."""
    a, b, c = fakes
    results: list[tuple[str, str, str]] = []
    streams = [_open_stream(url, "ab"[i % 2], results) for i in range(STREAMS)]
    wait_until(
        lambda: a.app.state.open_streams + b.app.state.open_streams == STREAMS, timeout=10, what="the streams open"
    )
    assert _inflight(url) == {"a": STREAMS / 2, "b": STREAMS / 2}
    with Requests(url) as requests:
        wait_until(lambda: len(requests.answers) > 10, timeout=10, what="requests before the reload")
        path.write_text(_config([(a, "a-upstream-v2"), (c, "c-upstream")], [a, c]))
        reload()
        assert results == []  # the swap came while every stream was mid-answer
        before = len(requests.answers)
        wait_until(lambda: len(requests.answers) > before + 10, timeout=10, what="requests after the reload")

        path.write_text(_broken(a, c))
        message = refused()
        assert path.name in message and "models[0].deployments[1].provider" in message, message
        assert 'unknown provider "grok"' in message and "known: a, c" in message, message
        before = len(requests.answers)
        wait_until(lambda: len(requests.answers) > before + 10, timeout=10, what="requests after the refusal")

        for thread in streams:
            thread.join(TIME_LIMIT_S)
        assert not any(thread.is_alive() for thread in streams)

    assert requests.errors == []
    assert {status for status, _ in requests.answers} == {200}
    expected = "".join(answer_words(0, TOKENS))
    assert len(results) == STREAMS
    for _, _, text in results:
        assert _content(text) == (TOKENS, expected)
        assert text.rstrip().endswith("data: [DONE]")
    assert sorted(p for p, _, _ in results) == ["a"] * (STREAMS // 2) + ["b"] * (STREAMS // 2)
    # The upstream model each was sent: the streams their old config's, the requests after the swap the new one's.
    assert {r.body["model"] for r in b.app.state.recorded if r.body} == {"b-upstream"}
    assert {r.body["model"] for r in c.app.state.recorded if r.body} <= {"c-upstream"}
    assert {r.body["model"] for r in a.app.state.recorded if r.body} == {"a-upstream", "a-upstream-v2"}
    ids = [request_id for _, request_id, _ in results] + [request_id for _, request_id in requests.answers]
    assert len(set(ids)) == len(ids)
    return Run(results, requests)


def _ids(run: Run) -> list[str]:
    return sorted(
        [request_id for _, request_id, _ in run.streams] + [request_id for _, request_id in run.requests.answers]
    )


def _paced(fakes: Fakes) -> tuple[FakeServer, FakeServer, FakeServer]:
    paced = FakeBehavior(ttft_s=0.05, tokens_per_s=8, output_tokens=TOKENS)  # 5 s a stream
    return fakes.start("a", paced), fakes.start("b", paced), fakes.start("c", paced)


def test_a_reload_under_load_loses_no_stream_and_counts_each_request_once(
    fakes: Fakes, serve: Serve, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    a, b, c = upstreams = _paced(fakes)
    served = serve(_config([(a, "a-upstream"), (b, "b-upstream")], [a, b]))
    old = served.runtime

    def reload() -> None:
        assert served.reload().status_code == 200
        assert served.runtime is not old

    def refused() -> str:
        answer = served.reload()
        assert answer.status_code == 400
        message: str = answer.json()["error"]["message"]
        return message

    run = _under_load(served.server.url, upstreams, tmp_path / "gateway.toml", reload, refused)
    wait_until(lambda: old.requests.count == 0, what="the old runtime's requests done")
    lines = access_lines(caplog, count=len(_ids(run)))
    assert sorted(line["request_id"] for line in lines) == _ids(run)
    assert all(line["status"] == 200 for line in lines)
    wait_until(lambda: set(_inflight(served.server.url).values()) <= {0.0}, what="the in-flight gauge back to 0")
    assert set(_inflight(served.server.url)) == {"a", "c"}  # b's gauge drained, then gone


def test_sighup_under_load_to_gateway_serve_loses_no_stream(fakes: Fakes, tmp_path: Path) -> None:
    """The same, against ``gateway serve`` as its own process, reloaded by SIGHUP: the access log is its stdout."""
    a, b, c = upstreams = _paced(fakes)
    path = tmp_path / "gateway.toml"
    path.write_text(_config([(a, "a-upstream"), (b, "b-upstream")], [a, b]))
    port = free_port()
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "-c", str(path), "--port", str(port), "--log-level", "info"],
            stdout=stdout,
            stderr=stderr,
        )
    url = f"http://127.0.0.1:{port}"

    def said(words: str) -> int:
        return err.read_text(errors="replace").count(words)

    def reload() -> None:
        process.send_signal(signal.SIGHUP)
        wait_until(lambda: said("config reloaded from") == 1, timeout=10, what="the reload said in the log")

    def refused() -> str:
        process.send_signal(signal.SIGHUP)
        wait_until(lambda: said("config reload refused") == 1, timeout=10, what="the refusal said in the log")
        (line,) = [line for line in err.read_text().splitlines() if "config reload refused" in line]
        return line

    try:
        wait_until(lambda: _ready(url), timeout=20, what="the gateway up")
        run = _under_load(url, upstreams, path, reload, refused)
        wait_until(lambda: set(_inflight(url).values()) <= {0.0}, what="the in-flight gauge back to 0")
        assert set(_inflight(url)) == {"a", "c"}
    finally:
        process.terminate()
        process.wait(15)
    lines = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
    assert sorted(line["request_id"] for line in lines) == _ids(run)
    assert all(line["status"] == 200 and line["outcome"] == "ok" for line in lines)
    assert "Traceback" not in err.read_text()


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=0.5).status_code == 200
    except httpx.TransportError:
        return False


def _broken(a: FakeServer, c: FakeServer) -> str:
    return _config([(a, "a-upstream-v2"), (c, "c-upstream")], [a, c]).replace('provider = "c"', 'provider = "grok"')
