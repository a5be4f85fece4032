"""No secret ever leaves the gateway: real traffic with recognisable fake keys, every output searched.

Provider, client and admin keys each carry a marker. The traffic covers success (streamed and
not), an upstream 401 and 400 that echo the provider key back (in the body and a header),
connection refused, a timeout, fallback across failing providers, and bad client and admin
keys. Searched: every log record at DEBUG from every logger (formatted, with tracebacks), every
response's status line, headers and body, the gateway's own endpoints (``/metrics`` and
``/v1/gateway/stats`` when they exist), the upstream requests (no client key reaches a
provider), and ``gateway check`` output.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import httpx
import openai
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.app import AppOptions, create_app
from gateway.config import parse_config
from gateway.fakes import FakeBehavior
from gateway.fakes.asgi import lifespan
from gateway.runtime import require_admin
from gateway.samples import SampleLog
from tests.support.fakes import Fakes
from tests.support.servers import ServerThread

PROVIDER_KEY = "sk-prov-LEAKPROV-7f3a9c0d11e2"
CLIENT_KEY = "sk-gw-client-LEAKCLIENT-1b2c3d4e"
ADMIN_KEY = "sk-gw-admin-LEAKADMIN-9d8e7f6a"
BAD_KEY = "sk-gw-bad-LEAKBAD-00ff00ff"
MARKERS = ("LEAKPROV", "LEAKCLIENT", "LEAKADMIN", "LEAKBAD")
SECRETS = (PROVIDER_KEY, CLIENT_KEY, ADMIN_KEY, BAD_KEY, *MARKERS)
NOISY_LOGGERS = (
    "",
    "gateway",
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "aiohttp",
    "asyncio",
    "starlette",
    "redis",
)


class EchoProvider:
    """An upstream that rejects every request and echoes the credentials it got, as some providers do."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.seen: list[dict[str, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.seen.append(headers)
        while (await receive()).get("more_body"):
            pass
        auth = headers.get("authorization", "")
        message = f"Incorrect API key provided: {auth}. You sent {json.dumps(headers)}"
        body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}})
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [(b"content-type", b"application/json"), (b"x-echo-key", auth.encode())],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})


class Capture(logging.Handler):
    """Keeps every record, formatted with its traceback, plus its raw message and arguments."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(self.format(record))
        self.texts.append(repr(record.msg) + repr(record.args) + repr(record.__dict__.get("extra")))


@pytest.fixture
def capture() -> Iterator[Capture]:
    handler = Capture()
    previous = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG)
    # uvicorn's loggers do not propagate to the root: listen on them directly too.
    for name in ("", "uvicorn", "uvicorn.access"):
        logging.getLogger(name).addHandler(handler)
    yield handler
    for name in ("", "uvicorn", "uvicorn.access"):
        logging.getLogger(name).removeHandler(handler)
    for name, level in previous.items():
        logging.getLogger(name).setLevel(level)


def _config_data(good: str, echo401: str, echo400: str, slow: str) -> dict[str, Any]:

    def provider(name: str, url: str) -> dict[str, Any]:
        return {"name": name, "base_url": url, "api_key_env": "CANARY_PROVIDER_KEY"}

    def model(name: str, *providers: str) -> dict[str, Any]:
        return {"name": name, "policy": "quick", "deployments": [{"provider": p, "model": "up"} for p in providers]}

    return {
        "providers": [
            provider("good", good),
            provider("echo401", echo401),
            provider("echo400", echo400),
            provider("down", "http://127.0.0.1:9/v1"),
            provider("slow", slow),
        ],
        "models": [
            model("ok", "good"),
            model("echo401", "echo401"),
            model("echo400", "echo400"),
            model("down", "down"),
            model("slow", "slow"),
            model("mixed", "echo401", "down", "slow", "good"),
        ],
        "policies": {
            "quick": {
                "extends": "fixed-order",
                "failure_threshold": 1000,  # every request walks through every failing provider
                "max_attempts": 4,
                "first_token_timeout_s": 0.3,
                "idle_timeout_s": 0.3,
                "total_timeout_s": 10,
            }
        },
        "auth": {"api_keys_env": "CANARY_CLIENT_KEYS", "admin_key_env": "CANARY_ADMIN_KEY"},
    }


ENVIRON = {"CANARY_PROVIDER_KEY": PROVIDER_KEY, "CANARY_CLIENT_KEYS": CLIENT_KEY, "CANARY_ADMIN_KEY": ADMIN_KEY}


class _Response(Protocol):
    """What is read of a response: httpx's, or the openai SDK's own httpx fork's."""

    @property
    def status_code(self) -> int: ...

    @property
    def reason_phrase(self) -> str: ...

    @property
    def headers(self) -> Any: ...

    @property
    def text(self) -> str: ...


def _dump_head(response: _Response) -> str:
    return f"{response.status_code} {response.reason_phrase}\n{response.headers.multi_items()}\n"


def _dump(response: _Response) -> str:
    return _dump_head(response) + response.text


def test_no_secret_leaks_anywhere(
    fakes: Fakes, capture: Capture, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    echo401, echo400 = EchoProvider(401), EchoProvider(400)
    servers = [ServerThread(echo401).start(), ServerThread(echo400).start()]
    slow = fakes.start("slow", FakeBehavior(hang_s=30))
    good = fakes.start("good", api_key=PROVIDER_KEY)
    data = _config_data(good.base_url, servers[0].url + "/v1", servers[1].url + "/v1", slow.base_url)
    config = parse_config(data, source="canary.toml")

    async def probe(request: Request) -> Response:
        require_admin(request)
        return JSONResponse({"admin": True})

    app = create_app(config, AppOptions(environ=ENVIRON, sinks=[SampleLog()]))
    app.router.routes.append(Route("/admin-probe", probe, methods=["POST"]))
    gateway = ServerThread(app)
    for name in NOISY_LOGGERS:  # uvicorn.Config just reset its own loggers' levels
        logging.getLogger(name).setLevel(logging.DEBUG)
    gateway.start()
    servers.append(gateway)

    outputs: list[str] = []
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
    try:
        with openai.OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0) as client:
            for model in ("ok", "echo401", "echo400", "down", "slow", "mixed"):
                for stream in (False, True):
                    raw = client.chat.completions.with_raw_response.create
                    try:
                        response = raw(model=model, messages=messages, stream=stream)
                        if stream:
                            outputs.append(repr(list(response.parse())) + _dump_head(response.http_response))
                        else:
                            outputs.append(_dump(response.http_response))
                    except openai.APIStatusError as exc:
                        outputs.append(_dump(exc.response) + repr(exc) + str(exc.body))
            outputs.append(repr(client.models.list()))
        for key in (BAD_KEY, ADMIN_KEY, "sk-nothing"):
            with openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0) as bad:
                with pytest.raises(openai.AuthenticationError) as denied:
                    bad.chat.completions.create(model="ok", messages=messages)
                outputs.append(_dump(denied.value.response) + repr(denied.value))

        with httpx.Client(base_url=gateway.url) as http:
            body = {"model": "ok", "messages": messages}
            for headers in (
                {"api-key": BAD_KEY},
                {"authorization": f"Basic {BAD_KEY}"},
                {"authorization": f"Bearer {CLIENT_KEY}", "x-extra": BAD_KEY},
            ):
                outputs.append(_dump(http.post("/v1/chat/completions", json=body, headers=headers)))
            for key in (BAD_KEY, CLIENT_KEY, ADMIN_KEY):
                outputs.append(_dump(http.post("/admin-probe", headers={"authorization": f"Bearer {key}"})))
            auth = {"authorization": f"Bearer {ADMIN_KEY}"}
            for path in (
                "/healthz",
                "/readyz",
                "/metrics",
                "/v1/gateway/stats",
                "/v1/gateway/routes",
                "/v1/models",
                "/dashboard",
            ):
                outputs.append(_dump(http.get(path, headers=auth)))
    finally:
        for server in reversed(servers):
            server.stop()

    # The providers got their own key (the echoing ones were redacted above), never a client's credentials.
    # (A custom header such as x-extra is the client's to send on: end-to-end headers are relayed.)
    upstream = echo401.seen + echo400.seen + [r.headers for r in good.app.state.recorded]
    assert len(upstream) >= 9  # echo401 is asked once per model: its 401 opens its circuit at once
    for headers in upstream:
        assert headers["authorization"] == f"Bearer {PROVIDER_KEY}" and "api-key" not in headers
        assert CLIENT_KEY not in json.dumps(headers)

    check = subprocess.run(
        [sys.executable, "-m", "gateway", "check", "-c", _write_config(tmp_path, data)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **ENVIRON},
    )
    assert check.returncode == 0, check.stderr
    assert "auth: 1 client key (1 from $CANARY_CLIENT_KEYS); admin key $CANARY_ADMIN_KEY set" in check.stdout
    outputs.append(check.stdout + check.stderr)

    logs = capture.texts + [caplog.text] + [r.getMessage() for r in caplog.records]
    assert any("ok" in line for line in outputs) and len(logs) > 3
    for where, texts in (("logs", logs), ("responses", outputs)):
        for text in texts:
            for secret in SECRETS:
                assert secret not in text, f"{secret} leaked in {where}: {text[:500]}"
    # Every path was taken: success, the echoed key (redacted), refused connection, timeout, bad keys.
    statuses = {text.split(" ", 1)[0] for text in outputs}
    assert {"200", "400", "401", "403", "502", "503", "504"} <= statuses, statuses  # 503: a circuit open, and why
    assert any("the provider refused the gateway's credentials (upstream returned 401)" in text for text in outputs)
    assert any("Incorrect API key provided: Bearer ***" in text for text in outputs if text.startswith("400"))


def _write_config(tmp_path: Path, data: dict[str, Any]) -> str:
    """The providers, models and auth above as a TOML file, for ``gateway check`` (JSON strings are TOML strings)."""
    lines = ["[auth]", 'api_keys_env = "CANARY_CLIENT_KEYS"', 'admin_key_env = "CANARY_ADMIN_KEY"']
    for provider in data["providers"]:
        lines += ["[[providers]]"] + [f"{k} = {json.dumps(v)}" for k, v in provider.items()]
    for model in data["models"]:
        lines += ["[[models]]", f"name = {json.dumps(model['name'])}"]
        for deployment in model["deployments"]:
            lines += ["[[models.deployments]]"] + [f"{k} = {json.dumps(v)}" for k, v in deployment.items()]
    path = tmp_path / "canary.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)
