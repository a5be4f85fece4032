"""Hot reload: POST /v1/gateway/reload and SIGHUP swap the config atomically, refuse a bad one,
and let requests in flight finish on the runtime they started with."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from gateway.app import AppOptions, create_app
from gateway.config import load_config
from gateway.fakes import FakeBehavior
from gateway.runtime import GatewayRuntime, runtime_of
from tests.support.fakes import Fakes, FakeServer
from tests.support.servers import ServerThread
from tests.support.streams import stream_in_background
from tests.support.wait import wait_until

ADMIN = "reload-admin-key"


def config_text(a: FakeServer, b: FakeServer, *, first: str = "a", policy: str = "fixed-order", extra: str = "") -> str:
    order = [a, b] if first == "a" else [b, a]
    deployments = "".join(
        f'  [[models.deployments]]\n  provider = "{p.name}"\n  model = "{p.name}-upstream"\n' for p in order
    )
    return (
        f"[stats]\nwindow_s = 60\nslice_s = 1\n\n"
        f'[[providers]]\nname = "a"\nbase_url = "{a.base_url}"\n\n'
        f'[[providers]]\nname = "b"\nbase_url = "{b.base_url}"\n\n'
        f'[[models]]\nname = "m"\npolicy = "{policy}"\n{deployments}\n{extra}'
    )


class Served:
    def __init__(self, path: Path, environ: dict[str, str]) -> None:
        self.app = create_app(load_config(path), AppOptions(environ=environ, config_path=str(path)))
        self.server = ServerThread(self.app).start()
        self.http = httpx.Client(base_url=self.server.url, timeout=10)

    @property
    def runtime(self) -> GatewayRuntime:
        return runtime_of({"app": self.app})

    def chat(self) -> httpx.Response:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        return self.http.post("/v1/chat/completions", json=body)

    def reload(self, key: str | None = ADMIN) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        return self.http.post("/v1/gateway/reload", headers=headers)

    def stop(self) -> None:
        self.http.close()
        self.server.stop()


Serve = Callable[..., Served]


@pytest.fixture
def serve(fakes: Fakes, tmp_path: Path) -> Iterator[Serve]:
    started: list[Served] = []

    def start(text: str, environ: dict[str, str] | None = None) -> Served:
        path = tmp_path / "gateway.toml"
        path.write_text(text)
        served = Served(path, {"GATEWAY_ADMIN_KEY": ADMIN} if environ is None else environ)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


def test_reload_needs_the_admin_key(fakes: Fakes, serve: Serve) -> None:
    a, b = fakes.start("a"), fakes.start("b")
    served = serve(config_text(a, b))
    assert served.reload(key=None).status_code == 401
    wrong = served.reload(key="nope")
    assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
    both = serve(config_text(a, b), environ={"GATEWAY_ADMIN_KEY": ADMIN, "GATEWAY_API_KEYS": "client-key"})
    assert both.reload(key="client-key").status_code == 403  # a client key is not the admin key
    closed = serve(config_text(a, b), environ={"GATEWAY_API_KEYS": "client-key"})
    refused = closed.reload(key="client-key")
    assert refused.status_code == 403
    assert "admin endpoints are disabled: no admin key is configured" in refused.json()["error"]["message"]


def test_a_valid_config_is_swapped_in_and_stats_are_kept(fakes: Fakes, serve: Serve, tmp_path: Path) -> None:
    a, b = fakes.start("a"), fakes.start("b")
    served = serve(config_text(a, b, first="a"))
    assert served.chat().headers["x-gateway-provider"] == "a"
    before = served.runtime
    (tmp_path / "gateway.toml").write_text(config_text(a, b, first="b"))
    reply = served.reload()
    assert reply.status_code == 200, reply.text
    assert reply.json()["status"] == "reloaded" and reply.json()["reloads"] == 1
    assert served.runtime is not before
    assert served.runtime.stats is before.stats
    assert served.runtime.router.state is before.router.state
    assert served.chat().headers["x-gateway-provider"] == "b"
    snapshot = served.runtime.stats.snapshot()
    summary = snapshot.get("m", "a")
    assert summary is not None and summary.attempts == 1  # measured before the reload, still there


def test_an_invalid_config_is_refused_and_the_old_one_keeps_serving(fakes: Fakes, serve: Serve, tmp_path: Path) -> None:
    a, b = fakes.start("a"), fakes.start("b")
    served = serve(config_text(a, b))
    before = served.runtime
    path = tmp_path / "gateway.toml"
    path.write_text(config_text(a, b, policy="nope"))
    reply = served.reload()
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "invalid_config"
    assert 'gateway.toml: models[0].policy: unknown policy "nope"' in error["message"]
    assert served.runtime is before
    assert served.chat().status_code == 200
    path.write_text(config_text(a, b).replace("window_s = 60", "window_s = 30"))
    reply = served.reload()
    assert reply.status_code == 400 and "changing [stats] needs a restart" in reply.json()["error"]["message"]
    path.write_text("this is [not toml")
    assert served.reload().status_code == 400
    assert served.runtime is before


def test_a_file_that_is_not_utf8_is_refused_in_words(fakes: Fakes, serve: Serve, tmp_path: Path) -> None:
    # A config or keys file saved in Latin-1 (or half-written as binary): a 400 naming the file, not a 500.
    a, b = fakes.start("a"), fakes.start("b")
    served = serve(config_text(a, b))
    before = served.runtime
    path = tmp_path / "gateway.toml"
    path.write_bytes(config_text(a, b).encode() + b"# caf\xe9\n")
    reply = served.reload()
    assert reply.status_code == 400, reply.text
    assert "gateway.toml: not UTF-8 text" in reply.json()["error"]["message"]
    (tmp_path / "keys.toml").write_bytes(b'[[keys]]\nname = "caf\xe9"\nkey = "sk-1"\n')
    path.write_text(config_text(a, b, extra='[auth]\napi_keys_file = "keys.toml"\n'))
    reply = served.reload()
    assert reply.status_code == 400, reply.text
    assert "keys.toml: not UTF-8 text" in reply.json()["error"]["message"]
    assert served.runtime is before and served.chat().status_code == 200


def test_settings_fixed_at_start_are_refused_not_ignored(fakes: Fakes, serve: Serve, tmp_path: Path) -> None:
    # The listener's deadlines, cap and trusted proxies are set when the socket opens: a reload that changed them
    # and answered "reloaded" would leave the operator believing, say, that a proxy is no longer trusted.
    a, b = fakes.start("a"), fakes.start("b")
    served = serve(config_text(a, b))
    before = served.runtime
    path = tmp_path / "gateway.toml"
    for setting in ('trusted_proxies = ["10.0.0.1"]', "max_connections = 5", "keepalive_timeout_s = 9", "workers = 2"):
        path.write_text(f"[server]\n{setting}\n\n" + config_text(a, b))
        reply = served.reload()
        assert reply.status_code == 400, (setting, reply.text)
        name = setting.split(" ")[0]
        assert f"changing server.{name} needs a restart" in reply.json()["error"]["message"]
        assert served.runtime is before
    path.write_text("[canary]\ninterval_s = 600\n\n" + config_text(a, b))  # its task starts with the process
    reply = served.reload()
    assert reply.status_code == 400 and "adding [canary] needs a restart" in reply.json()["error"]["message"]
    path.write_text("[server]\nmax_body_bytes = 1000\n\n" + config_text(a, b))  # read per request: applied
    assert served.reload().status_code == 200
    assert served.runtime.config.server.max_body_bytes == 1000


def test_requests_in_flight_finish_on_their_runtime(fakes: Fakes, serve: Serve, tmp_path: Path) -> None:
    a = fakes.start("a", FakeBehavior(ttft_s=0.01, tokens_per_s=20, output_tokens=12))
    b = fakes.start("b")
    served = serve(config_text(a, b, first="a"))
    old = served.runtime
    thread, result = stream_in_background(served.server.url, "m")
    wait_until(lambda: old.requests.count == 1 and a.app.state.open_streams == 1)
    (tmp_path / "gateway.toml").write_text(config_text(a, b, first="b"))
    assert served.reload().status_code == 200
    assert served.chat().headers["x-gateway-provider"] == "b"  # new requests: the new config
    client = old.upstreams.clients["a"]
    assert not client.closed  # the old runtime's pools stay open for the stream in flight
    thread.join(10)
    assert result["provider"] == "a" and result["body"].rstrip().endswith("data: [DONE]")
    wait_until(lambda: client.closed)  # ... and close once it is done
    assert old.requests.count == 0


def test_sighup_reloads_a_running_gateway(fakes: Fakes, tmp_path: Path) -> None:
    a, b = fakes.start("a"), fakes.start("b")
    path = tmp_path / "gateway.toml"
    path.write_text(config_text(a, b, first="a"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ)
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "-c", str(path), "--port", str(port), "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(url), timeout=15)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(url + "/v1/chat/completions", json=body).headers["x-gateway-provider"] == "a"
        path.write_text(config_text(a, b, first="b"))
        process.send_signal(signal.SIGHUP)
        wait_until(lambda: httpx.post(url + "/v1/chat/completions", json=body).headers["x-gateway-provider"] == "b")
        path.write_text("broken = [")
        process.send_signal(signal.SIGHUP)
        wait_until(lambda: b"config reload refused" in _peek(process))
        assert httpx.post(url + "/v1/chat/completions", json=body).status_code == 200
    finally:
        process.terminate()
        process.communicate(timeout=10)  # waits, and closes the pipe


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=0.5).status_code == 200
    except httpx.TransportError:
        return False


_stderr_seen: dict[int, bytes] = {}


def _peek(process: subprocess.Popen[bytes]) -> bytes:
    """What the process wrote to stderr so far (non-blocking)."""
    assert process.stderr is not None
    os.set_blocking(process.stderr.fileno(), False)
    chunk = process.stderr.read() or b""
    _stderr_seen[process.pid] = _stderr_seen.get(process.pid, b"") + chunk
    return _stderr_seen[process.pid]


def test_a_reload_forgets_the_window_learned_of_a_deployment_it_changed(
    fakes: Fakes, serve: Serve, tmp_path: Path
) -> None:
    """A window learned from a ``context_length_exceeded`` is the deployment's as configured: a reload that leaves
    it alone keeps it, one that sends it another upstream model (perhaps with a larger window) asks again."""
    a, b = fakes.start("a", FakeBehavior(context_window=8192)), fakes.start("b")
    served = serve(config_text(a, b))
    long = {"model": "m", "messages": [{"role": "user", "content": "word " * 12_000}]}  # about 15k tokens

    def attempts() -> str:
        answer = served.http.post("/v1/chat/completions", json=long)
        assert answer.status_code == 200 and answer.headers["x-gateway-provider"] == "b"
        return answer.headers["x-gateway-attempts"]

    assert (attempts(), attempts()) == ("2", "1")  # learned: a takes 8192
    (tmp_path / "gateway.toml").write_text(config_text(a, b, extra="# edited\n"))
    assert served.reload().status_code == 200
    assert attempts() == "1"
    (tmp_path / "gateway.toml").write_text(config_text(a, b).replace('"a-upstream"', '"a-upstream-32k"'))
    assert served.reload().status_code == 200
    assert (attempts(), attempts()) == ("2", "1")  # asked again, refused again, learned again
    assert a.app.state.requests == 2
