"""Every fault a user can hit, on every client API, answered in that API's own error shape.

A matrix of client API × fault over real HTTP on loopback, driven by the real SDKs (``openai`` for
chat, completions, embeddings and Responses; ``anthropic`` for Messages), streamed and whole. Each
cell checks the status, the body's shape (OpenAI's ``{"error": {message, type, param, code}}``,
Anthropic's ``{"type": "error", "error": {type, message}}``, or, once a stream has begun, the API's
own error event), the exception the SDK raises, ``Retry-After`` on what may be retried, that no
provider key shows in the body, the headers or the gateway's logs, and that the gateway answers the
same API's next good request.

One gateway serves the whole module. Each cell whose fault reaches a provider has a model and a
provider entry of its own (all on one fake server), so that the cool-down, circuit or slot one cell
leaves behind never decides another's answer.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from gateway.access_lines import ACCESS_LOGGER
from gateway.app import AppOptions, create_app
from gateway.config import parse_config
from gateway.fakes import FakeProvider
from gateway.samples import SampleLog
from tests.support.servers import ServerThread, stop_all
from tests.support.wait import wait_until
from tests.support.wire import Exchange, Spoil, WireTransport

PROVIDER_KEY = "sk-prov-SECRETMARK-good-0123456789"
WRONG_PROVIDER_KEY = "sk-prov-SECRETMARK-wrong-9876543210"
MARKER = "SECRETMARK"
CLIENT_KEY = "sk-client-matrix"
SPENT_KEY = "sk-client-spent"
MAX_BODY = 64 * 1024
TIMEOUT = 10.0

CALLS = (
    "chat",
    "chat-stream",
    "completions",
    "completions-stream",
    "embeddings",
    "responses",
    "responses-stream",
    "messages",
    "messages-stream",
)
REQUEST_FAULTS = (
    "malformed-json",
    "not-an-object",
    "unknown-model",
    "missing-field",
    "oversized",
    "wrong-key",
    "missing-key",
    "budget-spent",
)
UPSTREAM_FAULTS = ("upstream-500", "upstream-429", "upstream-401", "first-token-timeout", "queue-full")
STREAM_FAULTS = ("broken-stream",)
ANTHROPIC_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "billing_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "timeout_error",
        "api_error",
        "overloaded_error",
    }
)


@dataclass(frozen=True, slots=True)
class Expect:
    """What a fault must come back as: status, each SDK's exception class, Anthropic's error type."""

    status: int
    openai_error: type[openai.APIStatusError]
    anthropic_error: type[anthropic.APIStatusError]
    anthropic_type: str
    retry_after: bool = False


EXPECTED: dict[str, Expect] = {
    "malformed-json": Expect(400, openai.BadRequestError, anthropic.BadRequestError, "invalid_request_error"),
    "not-an-object": Expect(400, openai.BadRequestError, anthropic.BadRequestError, "invalid_request_error"),
    "unknown-model": Expect(404, openai.NotFoundError, anthropic.NotFoundError, "not_found_error"),
    "missing-field": Expect(400, openai.BadRequestError, anthropic.BadRequestError, "invalid_request_error"),
    "oversized": Expect(413, openai.APIStatusError, anthropic.ContentTooLargeError, "request_too_large"),
    "wrong-key": Expect(401, openai.AuthenticationError, anthropic.AuthenticationError, "authentication_error"),
    "missing-key": Expect(401, openai.AuthenticationError, anthropic.AuthenticationError, "authentication_error"),
    "budget-spent": Expect(402, openai.APIStatusError, anthropic.PaymentRequiredError, "billing_error"),
    "upstream-500": Expect(502, openai.InternalServerError, anthropic.InternalServerError, "api_error"),
    "upstream-429": Expect(429, openai.RateLimitError, anthropic.RateLimitError, "rate_limit_error", True),
    "upstream-401": Expect(502, openai.InternalServerError, anthropic.InternalServerError, "api_error"),
    "first-token-timeout": Expect(504, openai.InternalServerError, anthropic.GatewayTimeoutError, "timeout_error"),
    "queue-full": Expect(429, openai.RateLimitError, anthropic.RateLimitError, "rate_limit_error", True),
}
SPECIAL: dict[tuple[str, str], Expect] = {
    # As OpenAI's Responses API answers an unknown model (and Codex stops re-sending only on a 400).
    ("responses", "unknown-model"): Expect(400, openai.BadRequestError, anthropic.BadRequestError, "")
}
"""Cells whose API answers a fault unlike the others."""
MISSING_FIELD = {
    "chat": "messages",
    "completions": "prompt",
    "embeddings": "input",
    "responses": "model",
    "messages": "messages",
}
FAKE_OF: dict[str, dict[str, Any]] = {
    "upstream-500": {"status": 500},
    "upstream-429": {"status": 429, "retry_after": "7"},
    "first-token-timeout": {"ttft_s": 5.0},
    "broken-stream": {"drop_after": 2, "output_tokens": 16},
}


def api_of(call: str) -> str:
    return call.removesuffix("-stream")


def streamed(call: str) -> bool:
    return call.endswith("-stream")


def model_of(call: str, fault: str) -> str:
    return f"m-{call}-{fault}"


def cells() -> Iterator[tuple[str, str]]:
    for call in CALLS:
        for fault in (*REQUEST_FAULTS, *UPSTREAM_FAULTS, *(STREAM_FAULTS if streamed(call) else ())):
            yield call, fault


# -- The gateway ------------------------------------------------------------------------------------------------


class LogLines(logging.Handler):
    """Every log record of the module's run, formatted (tracebacks included)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        self.lines.append(repr(record.msg) + repr(record.args) + repr(record.__dict__))


@dataclass(slots=True)
class Matrix:
    gateway: ServerThread
    fake: FakeProvider
    logs: LogLines
    transports: dict[str, Any]
    """One sending transport per HTTP module (``httpx`` for OpenAI's SDK, ``httpx2`` for Anthropic's), shared."""

    def wire(self, call: str, *, spoil: Spoil | None = None, drop_headers: tuple[str, ...] = ()) -> WireTransport:
        module = httpx2 if api_of(call) == "messages" else httpx
        return WireTransport(module, spoil=spoil, drop_headers=drop_headers, inner=self.transports[module.__name__])


def matrix_config(fake_url: str, keys_file: Path) -> dict[str, Any]:
    apis = ["chat", "completions", "embeddings", "responses", "messages"]

    def provider(name: str, key_env: str = "PROVIDER_KEY", concurrency: int = 256) -> dict[str, Any]:
        return {
            "name": name,
            "base_url": fake_url,
            "api_key_env": key_env,
            "apis": apis,
            "max_concurrency": concurrency,
        }

    def model(name: str, provider: str, policy: str = "test") -> dict[str, Any]:
        deployment = {"provider": provider, "model": "fake-model", "price_in": 1.0, "price_out": 2.0}
        return {"name": name, "policy": policy, "deployments": [deployment]}

    providers = [provider("ok")]
    models = [model("m", "ok")]
    for call in CALLS:
        for fault in (*UPSTREAM_FAULTS, *STREAM_FAULTS):
            name = model_of(call, fault)
            key_env = "WRONG_PROVIDER_KEY" if fault == "upstream-401" else "PROVIDER_KEY"
            providers.append(provider(name, key_env, 1 if fault == "queue-full" else 256))
            policy = {"first-token-timeout": "short", "queue-full": "queue"}.get(fault, "test")
            models.append(model(name, name, policy))
    base = {"extends": "fixed-order", "first_token_timeout_s": 10.0, "idle_timeout_s": 10.0}
    base["retries_per_deployment"] = 0  # one answer per cell: the status table is under test, not the retries
    return {
        "server": {"max_body_bytes": MAX_BODY},
        "auth": {"api_keys_env": "GATEWAY_API_KEYS", "api_keys_file": str(keys_file)},
        "providers": providers,
        "models": models,
        "policies": {
            "test": base,
            # A whole answer's first byte is its end: its silence is the idle deadline's, a stream's the first token's.
            "short": {**base, "first_token_timeout_s": 0.3, "idle_timeout_s": 0.3},
            "queue": {**base, "queue_max_length": 0, "queue_timeout_s": 0.0},
        },
    }


NOISY_LOGGERS = ("", "gateway", "uvicorn", "uvicorn.error", "uvicorn.access", "starlette", "asyncio", ACCESS_LOGGER)
CLIENT_LOGGERS = ("openai", "anthropic", "httpx", "httpx2", "httpcore", "httpcore2")
"""The test's own clients: their chatter is not the gateway's log, and slows every cell."""
LISTENED = ("", "uvicorn", "uvicorn.access", ACCESS_LOGGER)
"""Where records are heard: the root, and the loggers that do not propagate to it (uvicorn's, maybe the access log)."""


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    keys_file = tmp_path_factory.mktemp("keys") / "keys.toml"
    keys_file.write_text(f'[[keys]]\nname = "spent"\nkey = "{SPENT_KEY}"\nbudget_usd = 0.000000001\n')
    fake = FakeProvider("up", api_key=PROVIDER_KEY)
    fake_server = ServerThread(fake).start()
    servers = [fake_server]
    logs = LogLines()
    levels = {name: logging.getLogger(name).level for name in (*NOISY_LOGGERS, *CLIENT_LOGGERS)}
    try:
        config = parse_config(matrix_config(fake_server.url + "/v1", keys_file), source="matrix.toml")
        environ = {
            "GATEWAY_API_KEYS": CLIENT_KEY,
            "PROVIDER_KEY": PROVIDER_KEY,
            "WRONG_PROVIDER_KEY": WRONG_PROVIDER_KEY,
        }
        gateway = ServerThread(create_app(config, AppOptions(environ=environ, sinks=[SampleLog()])))
        servers.append(gateway)
        for name in NOISY_LOGGERS:  # after uvicorn.Config, which resets its own loggers' levels
            logging.getLogger(name).setLevel(logging.DEBUG)
        for name in CLIENT_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        for name in LISTENED:
            logging.getLogger(name).addHandler(logs)
        gateway.start()
        transports: dict[str, Any] = {"httpx": httpx.HTTPTransport(), "httpx2": httpx2.HTTPTransport()}
        try:
            yield Matrix(gateway, fake, logs, transports)
        finally:
            for transport in transports.values():
                transport.close()
    finally:
        stop_all(servers[::-1])
        for name in LISTENED:
            logging.getLogger(name).removeHandler(logs)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


# -- The clients ------------------------------------------------------------------------------------------------


def openai_client(matrix: Matrix, wire: WireTransport, key: str) -> openai.OpenAI:
    http = wire.client(TIMEOUT)
    return openai.OpenAI(base_url=matrix.gateway.url + "/v1", api_key=key, max_retries=0, http_client=http)


def anthropic_client(matrix: Matrix, wire: WireTransport, key: str) -> anthropic.Anthropic:
    http = wire.client(TIMEOUT)
    return anthropic.Anthropic(base_url=matrix.gateway.url, api_key=key, max_retries=0, http_client=http)


def send(matrix: Matrix, call: str, model: str, fake: dict[str, Any], wire: WireTransport, key: str) -> Any:
    """One request of ``call``'s API through its SDK; a stream is read to its end (its events returned)."""
    stream = streamed(call)
    extra = {"fake": fake}
    api = api_of(call)
    result: Any
    if api == "messages":
        with anthropic_client(matrix, wire, key) as client:
            messages: Any = [{"role": "user", "content": "hi"}]
            result = client.messages.create(
                model=model, max_tokens=8, messages=messages, stream=stream, extra_body=extra
            )
            return list(result) if stream else result
    with openai_client(matrix, wire, key) as sdk:
        if api == "chat":
            chat: Any = [{"role": "user", "content": "hi"}]
            result = sdk.chat.completions.create(
                model=model, messages=chat, max_tokens=8, stream=stream, extra_body=extra
            )
        elif api == "completions":
            result = sdk.completions.create(model=model, prompt="hi", max_tokens=8, stream=stream, extra_body=extra)
        elif api == "embeddings":
            result = sdk.embeddings.create(model=model, input="hi", extra_body=extra)
        else:
            result = sdk.responses.create(model=model, input="hi", stream=stream, extra_body=extra)
        return list(result) if stream else result


def spoiler(call: str, fault: str) -> Spoil | None:
    """How ``fault`` rewrites the SDK's request body, if it does."""
    if fault == "malformed-json":
        return lambda body: body[: len(body) // 2]
    if fault == "not-an-object":
        return lambda body: b"[" + body + b"]"
    if fault == "oversized":
        return lambda body: body + b" " * MAX_BODY
    if fault == "missing-field":
        field = MISSING_FIELD[api_of(call)]
        return lambda body: json.dumps({k: v for k, v in json.loads(body).items() if k != field}).encode()
    return None


# -- What each cell checks --------------------------------------------------------------------------------------


def assert_openai_shape(body: Any) -> None:
    assert isinstance(body, dict) and list(body) == ["error"], body
    error = body["error"]
    assert {"message", "type", "param", "code"} <= set(error), error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    assert error["param"] is None or isinstance(error["param"], str), error
    assert error["code"] is None or isinstance(error["code"], str), error


def assert_anthropic_shape(body: Any, error_type: str) -> None:
    assert isinstance(body, dict) and body.get("type") == "error", body
    assert set(body) <= {"type", "error", "request_id"}, body
    error = body["error"]
    assert set(error) == {"type", "message"}, error
    assert error["type"] in ANTHROPIC_TYPES, error
    assert error["type"] == error_type, error
    assert isinstance(error["message"], str) and error["message"], error


def assert_error_answer(call: str, exchange: Exchange, expect: Expect) -> None:
    assert exchange.status == expect.status, (exchange.status, exchange.body[:500])
    assert exchange.headers.get("content-type", "").startswith("application/json"), exchange.headers
    if api_of(call) == "messages":
        assert_anthropic_shape(exchange.json(), expect.anthropic_type)
        assert exchange.headers.get("request-id"), exchange.headers
        retryable = expect.status in (408, 409, 429) or expect.status >= 500
        assert exchange.headers.get("x-should-retry") == ("true" if retryable else "false"), exchange.headers
    else:
        assert_openai_shape(exchange.json())
        assert exchange.headers.get("x-request-id"), exchange.headers
    if expect.retry_after:
        assert float(exchange.headers["retry-after"]) > 0, exchange.headers


def assert_no_secret(matrix: Matrix, wire: WireTransport) -> None:
    for exchange in wire.exchanges:
        assert MARKER.encode() not in exchange.body, exchange.body[:500]
        assert not [item for item in exchange.headers.items() if MARKER in "".join(item)], exchange.headers
    leaked = [line for line in matrix.logs.lines if MARKER in line]
    assert not leaked, leaked[:3]


def assert_still_serving(matrix: Matrix, call: str) -> None:
    wire = matrix.wire(call)
    answer = send(matrix, call, "m", {}, wire, CLIENT_KEY)
    assert wire.last.status == 200, wire.last.body[:500]
    assert answer


def sdk_error(call: str, expect: Expect) -> type[openai.APIStatusError | anthropic.APIStatusError]:
    return expect.anthropic_error if api_of(call) == "messages" else expect.openai_error


# -- The matrix -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "fault"), list(cells()))
def test_a_fault_comes_back_in_the_client_apis_own_shape(matrix: Matrix, call: str, fault: str) -> None:
    wire = matrix.wire(call, spoil=spoiler(call, fault), drop_headers=_dropped(fault))
    key = {"wrong-key": "sk-client-wrong", "budget-spent": SPENT_KEY}.get(fault, CLIENT_KEY)
    model = "no-such-model" if fault == "unknown-model" else "m"
    if fault in (*UPSTREAM_FAULTS, *STREAM_FAULTS):
        model = model_of(call, fault)
    if fault == "broken-stream":
        check_broken_stream(matrix, call, model, wire)
    else:
        expect = SPECIAL.get((api_of(call), fault), EXPECTED[fault])
        with holding_the_only_slot(matrix, model, enabled=fault == "queue-full"):
            with pytest.raises(sdk_error(call, expect)) as raised:
                send(matrix, call, model, FAKE_OF.get(fault, {}), wire, key)
        assert type(raised.value) is sdk_error(call, expect), raised.value
        assert raised.value.status_code == expect.status
        assert_error_answer(call, wire.last, expect)
    assert_no_secret(matrix, wire)
    assert_still_serving(matrix, call)


def _dropped(fault: str) -> tuple[str, ...]:
    return ("authorization", "x-api-key") if fault == "missing-key" else ()


def check_broken_stream(matrix: Matrix, call: str, model: str, wire: WireTransport) -> None:
    """A stream cut after its first bytes: a 200 whose last event is the API's own error event."""
    api = api_of(call)
    if api == "messages":
        with pytest.raises(anthropic.APIStatusError) as raised:
            send(matrix, call, model, FAKE_OF["broken-stream"], wire, CLIENT_KEY)
        assert type(raised.value) is anthropic.APIStatusError, raised.value
        events = _sse(wire.last.body)
        assert events[-1][0] == "error", events[-3:]
        assert_anthropic_shape(json.loads(events[-1][1]), "api_error")
    elif api == "responses":
        received = send(matrix, call, model, FAKE_OF["broken-stream"], wire, CLIENT_KEY)
        assert received[-1].type in ("response.failed", "error"), received[-1]
        events = _sse(wire.last.body)
        name, data = events[-1]
        event = json.loads(data)
        assert name == event["type"] and name in ("response.failed", "error"), events[-3:]
        if name == "error":
            assert isinstance(event["message"], str) and event["message"] and "code" in event, event
        else:
            error = event["response"]["error"]
            assert event["response"]["status"] == "failed" and error["message"] and error["code"], event
    else:
        with pytest.raises(openai.APIError) as cut:
            send(matrix, call, model, FAKE_OF["broken-stream"], wire, CLIENT_KEY)
        assert type(cut.value) is openai.APIError, cut.value
        chunks = [data for _, data in _sse(wire.last.body) if data != "[DONE]"]
        assert_openai_shape(json.loads(chunks[-1]))
    assert wire.last.status == 200
    assert wire.last.headers["content-type"].startswith("text/event-stream")


def _sse(body: bytes) -> list[tuple[str | None, str]]:
    """A stream's events as (event name, data), comments and keep-alives left out."""
    events: list[tuple[str | None, str]] = []
    for block in body.decode().replace("\r\n", "\n").split("\n\n"):
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            events.append((name, "\n".join(data)))
    return events


class holding_the_only_slot:
    """With ``enabled``: a streamed request that waits for its first token holds ``model``'s only slot (a raw
    socket, closed on leaving: the gateway must then give the slot back, and the provider see the hang-up)."""

    def __init__(self, matrix: Matrix, model: str, *, enabled: bool) -> None:
        self.matrix = matrix
        self.model = model
        self.enabled = enabled
        self.sock: socket.socket | None = None

    def __enter__(self) -> None:
        if not self.enabled:
            return
        fake = self.matrix.fake
        before = fake.state.requests
        body = json.dumps(
            {
                "model": self.model,
                "messages": [{"role": "user", "content": "hold"}],
                "stream": True,
                "fake": {"ttft_s": 30},
            }
        ).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {CLIENT_KEY}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()
        self.sock = socket.create_connection(("127.0.0.1", self.matrix.gateway.port), timeout=TIMEOUT)
        self.sock.sendall(head + body)
        wait_until(lambda: fake.state.requests > before, what="the slot's holder reaching the provider")

    def __exit__(self, *exc: object) -> None:
        if self.sock is None:
            return
        in_flight = self.matrix.fake.state.in_flight
        self.sock.close()
        wait_until(lambda: self.matrix.fake.state.in_flight < in_flight, what="the holder's upstream closed")
