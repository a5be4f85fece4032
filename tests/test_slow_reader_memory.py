"""A client that reads a long stream slowly, against ``gateway serve`` as its own process: the gateway holds no
more of the upstream's answer than the sockets' buffers and its flow-control marks (the relay waits on each send,
the upstream connection stops being read), so its memory stays flat while tens of megabytes wait upstream; the
request's total deadline ends the stream and closes the upstream; other clients are served meanwhile."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from gateway.fakes import FakeBehavior
from tests.redis_server import free_port
from tests.support.fakes import Fakes, FakeServer
from tests.support.wait import wait_until

pytestmark = pytest.mark.timeout(90)

ANSWER_TOKENS = 400_000
"""About 60 MB of chat stream events: far more than any buffer on the way."""
DEADLINE_S = 6.0
READ_BYTES = 8 * 1024
READ_EVERY_S = 0.01
"""The slow client's pace: about 0.8 MB/s, so it reads a few MB before the deadline."""
RSS_BOUND_MB = 12.0
"""For one slow stream; an unbounded relay would hold its whole answer (60 MB) instead."""
RSS_PER_STALLED_MB = 2.5
"""Per stalled stream: what it may hold is the upstream connection's high-water mark (256 KiB), a read waiting to be
sent (as much again) and the transport's own buffer, plus the allocator's slack."""


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


class Served(NamedTuple):
    url: str
    pid: int
    fake: FakeServer
    stderr: Path
    """What the process logged."""


@pytest.fixture
def gateway_process(fakes: Fakes, tmp_path: Path) -> Iterator[Served]:
    """``gateway serve`` on a free port: model ``m`` on a fake provider with a very long answer, ``q`` on a quick one
    (the other clients': the long one's circuit may open when its answers outlast the deadline, a provider's fault)."""
    fake = fakes.start("long", FakeBehavior(output_tokens=ANSWER_TOKENS), record=False)
    quick = fakes.start("quick", FakeBehavior(output_tokens=8), record=False)  # the other clients' (model "q")
    port = free_port()
    path = tmp_path / "gateway.toml"
    deployment = '  [[models.deployments]]\n  provider = "{}"\n  model = "up"\n\n'
    path.write_text(
        f'[[providers]]\nname = "long"\nbase_url = "{fake.base_url}"\n\n'
        f'[[providers]]\nname = "quick"\nbase_url = "{quick.base_url}"\n\n'
        f'[[models]]\nname = "m"\npolicy = "slow-ok"\n{deployment.format("long")}'
        f'[[models]]\nname = "q"\npolicy = "slow-ok"\n{deployment.format("quick")}'
        f'[policies.slow-ok]\nextends = "fixed-order"\ntotal_timeout_s = {DEADLINE_S}\n'
    )
    err = tmp_path / "stderr"
    with err.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "-c", str(path), "--port", str(port), "--log-level", "warning"],
            env=dict(os.environ),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(url), timeout=20, what="the gateway up")
        yield Served(url, process.pid, fake, err)
    finally:
        process.terminate()
        process.wait(10)


def _counted(url: str, outcome: str) -> float:
    """``gateway_upstream_requests_total`` of the long provider's attempts that ended with ``outcome``."""
    series = f'gateway_upstream_requests_total{{model="m",outcome="{outcome}",provider="long"}} '
    lines = [line for line in httpx.get(url + "/metrics").text.splitlines() if line.startswith(series)]
    return float(lines[0].rsplit(" ", 1)[1]) if lines else 0.0


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=0.5).status_code == 200
    except httpx.TransportError:
        return False


def _slow_request(url: str, body: dict[str, object]) -> socket.socket:
    port = int(url.rsplit(":", 1)[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.connect(("127.0.0.1", port))
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(payload)}\r\n\r\n"
    ).encode()
    sock.sendall(head + payload)
    return sock


def test_a_slow_reader_of_a_long_stream_costs_bounded_memory_and_is_cut_at_the_deadline(
    gateway_process: Served,
) -> None:
    url, pid, fake, stderr = gateway_process
    body: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    warm = {**body, "max_tokens": 20_000}  # the imports, the tokenizer, the pools: in memory before the baseline
    with httpx.Client(base_url=url, timeout=30) as http:
        for _ in range(2):
            assert http.post("/v1/chat/completions", json=warm).text.rstrip().endswith("data: [DONE]")
    baseline = _rss_mb(pid)

    sock = _slow_request(url, body)
    wait_until(lambda: fake.app.state.open_streams == 1, what="the long stream under way")
    received = 0
    after_close = 0
    reset = False
    tail = b""
    peak = baseline
    others: list[float] = []
    upstream_closed: float | None = None
    started = time.monotonic()
    with sock, httpx.Client(base_url=url, timeout=10) as http:
        sock.settimeout(DEADLINE_S + 10)
        for reads in range(int((DEADLINE_S + 10) / READ_EVERY_S)):
            try:
                chunk = sock.recv(READ_BYTES)
            except ConnectionResetError:
                reset = True
                break
            if not chunk:
                break
            received += len(chunk)
            tail = (tail + chunk)[-4096:]
            if upstream_closed is not None:
                after_close += len(chunk)
                continue  # what is left is in the kernel's buffers: read it at once
            if reads % 50 == 0:
                peak = max(peak, _rss_mb(pid))
            if fake.app.state.open_streams == 0:
                upstream_closed = time.monotonic() - started
            if reads % 100 == 50:  # another client, served meanwhile
                t0 = time.monotonic()
                short = http.post("/v1/chat/completions", json={**body, "model": "q", "stream": False})
                assert short.status_code == 200
                others.append(time.monotonic() - t0)
            time.sleep(READ_EVERY_S)  # the client's pace, not a wait for anything
        else:
            raise AssertionError("the stream was never ended")

    if upstream_closed is None:  # the reset came before a read saw the upstream closed: it closed with the cut
        wait_until(lambda: fake.app.state.open_streams == 0, what="the upstream closed")
        upstream_closed = time.monotonic() - started
    assert others and max(others) < 2.0, others
    # Cut at the deadline (plus the relay's grace), long before the whole answer could have been read ...
    assert upstream_closed is not None and DEADLINE_S - 0.5 < upstream_closed < DEADLINE_S + 3, upstream_closed
    assert received < 30 * 1024 * 1024, received
    # ... and nothing written after it but what the kernel's socket buffers already held (at most 4 MB on loopback),
    # then the connection reset: a send blocked at the deadline cannot be followed by an error event, and what the
    # kernel still held for a client that may never read it is dropped. uvicorn takes it as the client's hang-up.
    assert after_close <= 4 * 1024 * 1024 + 64 * 1024, after_close
    assert reset and b"[DONE]" not in tail, (tail[-100:], stderr.read_text())
    logged = stderr.read_text()
    assert "stopped reading" in logged and "without completing response" not in logged, logged
    assert peak - baseline < RSS_BOUND_MB, (baseline, peak)


STALLED = 10


def test_ten_clients_that_stop_reading_cost_bounded_memory_and_are_all_cut_at_the_deadline(
    gateway_process: Served,
) -> None:
    url, pid, fake, stderr = gateway_process
    body: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.Client(base_url=url, timeout=30) as http:
        for _ in range(2):  # warm, as above
            assert http.post("/v1/chat/completions", json={**body, "max_tokens": 20_000}).text.endswith("[DONE]\n\n")
        baseline = _rss_mb(pid)
        stalled: list[socket.socket] = []
        try:
            for _ in range(STALLED):  # one at a time: each answer under way before the next is asked
                stalled.append(sock := _slow_request(url, body))
                head = sock.recv(1024)
                assert head.startswith(b"HTTP/1.1 200"), head  # then never another read
            wait_until(lambda: fake.app.state.open_streams == STALLED, what="every stream under way")
            started = time.monotonic()
            peak, served = baseline, 0
            for _ in range(int((DEADLINE_S + 5) / 0.1)):
                if fake.app.state.open_streams == 0:
                    break
                peak = max(peak, _rss_mb(pid))
                short = http.post("/v1/chat/completions", json={**body, "model": "q", "stream": False})
                assert short.status_code == 200 and short.elapsed.total_seconds() < 2.0, (short.status_code, short.text)
                served += 1
                time.sleep(0.1)  # the pace of the other client's requests, not a wait for anything
            closed_after = time.monotonic() - started
        finally:
            for sock in stalled:
                sock.close()
    assert fake.app.state.open_streams == 0, "the upstream streams were never closed"

    # Each attempt recorded once: cancelled (cut in a blocked send), or cut waiting on the provider, when it is slower
    # than the deadline allows (this machine's fake, shared by ten streams, may be): ``deadline`` if its last output
    # was recent, else ``timeout``.
    def ended() -> float:
        return sum(_counted(url, outcome) for outcome in ("client_cancelled", "timeout", "deadline"))

    wait_until(lambda: ended() == STALLED, what="each stalled attempt recorded once")
    assert closed_after < DEADLINE_S + 3, closed_after
    assert served >= 10
    assert peak - baseline < RSS_PER_STALLED_MB * STALLED, (baseline, peak)
    assert "Traceback" not in stderr.read_text()
