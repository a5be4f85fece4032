"""Every fault a user can hit, on every client API, answered in that API's own error shape.

A matrix of client API × fault over real HTTP on loopback, driven by the real SDKs (``openai`` for
chat, completions, embeddings and Responses; ``anthropic`` for Messages), streamed and whole, against
one gateway run as ``gateway serve`` runs it (behind its connection guard) with client auth on, a
spent-budget key, tight ``[limits]`` and one fake provider. Each cell checks the status, the body's
shape (OpenAI's ``{"error": {message, type, param, code}}``, with ``param`` naming the client's own
field; Anthropic's ``{"type": "error", "error": {type, message}}`` with its retry hints; or, once a
stream has begun, the API's own error event), the exact exception class the SDK raises, ``Retry-After``
on what may be retried, that no provider key shows in the body, the headers or the gateway's logs
(every provider error quotes the key it got), that nothing crashed (no error logged) or leaked (no
request left in flight at the gateway or the provider), and that the same API's next request is served.

Faults that reach a provider run twice where the client's API can be translated: on a provider that
speaks it, and on one that speaks another (``TRANSLATED``). Each such cell has a model and a provider
entry of its own (all on one fake server), so that the cool-down, circuit or slot one cell leaves
behind never decides another's answer. Faults no SDK can commit (a body that stops, a head that never
ends) are sent on raw sockets, and their answers read by the SDKs' own error readers.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Iterator
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
from gateway.connections import ConnectionLimits, guarded_protocol
from gateway.fakes import FakeProvider
from gateway.runtime import runtime_of
from gateway.samples import SampleLog
from tests.support.error_shapes import assert_anthropic_shape, assert_openai_shape, sse_events
from tests.support.servers import ServerThread, stop_all
from tests.support.wait import wait_until
from tests.support.wire import Exchange, Spoil, WireTransport

PROVIDER_KEY = "sk-prov-SECRETMARK-good-0123456789"
WRONG_PROVIDER_KEY = "sk-prov-SECRETMARK-wrong-9876543210"
MARKER = "SECRETMARK"
CLIENT_KEY = "sk-client-matrix"
SPENT_KEY = "sk-client-spent"
NARROW_KEY = "sk-client-narrow"
RPM_KEY = "sk-client-rpm-"
ONE_AT_A_TIME_KEY = "sk-client-one-at-a-time"
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
    "model-not-allowed",
    "key-rate-limited",
    "key-in-flight",
    "too-deep",
    "too-many-messages",
    "too-many-choices",
    "over-token-ceiling",
    "headers-too-large",
)
ONLY_ON: dict[str, frozenset[str]] = {
    "too-many-messages": frozenset({"chat", "responses", "messages"}),
    "too-many-choices": frozenset({"chat", "completions"}),
    "over-token-ceiling": frozenset({"chat", "completions", "responses", "messages"}),
}
"""Faults that only some APIs can commit (the others have no such field)."""
LIMITS = {"max_json_depth": 16, "max_messages": 4, "max_n": 2, "max_tokens": 4096, "max_header_bytes": 8192}
BODY_TIMEOUT_S = 0.5
UPSTREAM_FAULTS = (
    "upstream-400",
    "upstream-401",
    "upstream-429",
    "upstream-500",
    "upstream-503",
    "upstream-529",
    "upstream-504",
    "upstream-408",
    "first-token-timeout",
    "queue-full",
)
STREAM_FAULTS = ("broken-stream", "stalled-stream", "error-event", "keepalive-then-timeout")
"""Faults after a stream's 200 went out: the stream ends with the API's own error event."""
TRANSLATED = {"chat": "messages", "responses": "chat", "messages": "chat"}
"""The API a provider speaks in a cell's translated variant: the client's faults must still come in the client's."""


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
    "model-not-allowed": Expect(403, openai.PermissionDeniedError, anthropic.PermissionDeniedError, "permission_error"),
    "key-rate-limited": Expect(429, openai.RateLimitError, anthropic.RateLimitError, "rate_limit_error", True),
    "key-in-flight": Expect(429, openai.RateLimitError, anthropic.RateLimitError, "rate_limit_error", True),
    "too-deep": Expect(400, openai.BadRequestError, anthropic.BadRequestError, "invalid_request_error"),
    "too-many-messages": Expect(400, openai.BadRequestError, anthropic.BadRequestError, "invalid_request_error"),
    "too-many-choices": Expect(400, openai.BadRequestError, anthropic.BadRequestError, "invalid_request_error"),
    "over-token-ceiling": Expect(400, openai.BadRequestError, anthropic.BadRequestError, "invalid_request_error"),
    "headers-too-large": Expect(
        431, openai.APIStatusError, anthropic.RequestHeaderFieldsTooLargeError, "invalid_request_error"
    ),
    "slow-body": Expect(408, openai.APIStatusError, anthropic.RequestTimeoutError, "invalid_request_error"),
    "endless-head": Expect(
        431, openai.APIStatusError, anthropic.RequestHeaderFieldsTooLargeError, "invalid_request_error"
    ),
    "upstream-400": Expect(400, openai.BadRequestError, anthropic.BadRequestError, "invalid_request_error"),
    "upstream-500": Expect(502, openai.InternalServerError, anthropic.InternalServerError, "api_error"),
    "upstream-503": Expect(
        503, openai.InternalServerError, anthropic.ServiceUnavailableError, "overloaded_error", True
    ),
    "upstream-429": Expect(429, openai.RateLimitError, anthropic.RateLimitError, "rate_limit_error", True),
    "upstream-401": Expect(502, openai.InternalServerError, anthropic.InternalServerError, "api_error"),
    # Anthropic's "overloaded": unavailable for now, as a 503 is, whichever API the client speaks.
    "upstream-529": Expect(503, openai.InternalServerError, anthropic.ServiceUnavailableError, "overloaded_error"),
    "first-token-timeout": Expect(504, openai.InternalServerError, anthropic.GatewayTimeoutError, "timeout_error"),
    # A provider's (or its own gateway's) timeout is the gateway's timeout: 504, retried as a 503 is, with its wait.
    "upstream-504": Expect(504, openai.InternalServerError, anthropic.GatewayTimeoutError, "timeout_error", True),
    "upstream-408": Expect(504, openai.InternalServerError, anthropic.GatewayTimeoutError, "timeout_error"),
    "queue-full": Expect(429, openai.RateLimitError, anthropic.RateLimitError, "rate_limit_error", True),
}
SPECIAL: dict[tuple[str, str], Expect] = {
    # As OpenAI's Responses API answers an unknown model (and Codex stops re-sending only on a 400).
    ("responses", "unknown-model"): Expect(400, openai.BadRequestError, anthropic.BadRequestError, "")
}
"""Cells whose API answers a fault unlike the others."""
TOKEN_FIELD = {
    "chat": "max_tokens",
    "completions": "max_tokens",
    "responses": "max_output_tokens",
    "messages": "max_tokens",
}
CONVERSATION_FIELD = {"chat": "messages", "responses": "input", "messages": "messages"}
MISSING_FIELD = {
    "chat": "messages",
    "completions": "prompt",
    "embeddings": "input",
    "responses": "model",
    "messages": "messages",
}
FAKE_OF: dict[str, dict[str, Any]] = {
    # Each quoting the key it got, as some providers do: the leak check must find nothing of it.
    "upstream-400": {"status": 400, "error_code": "context_length_exceeded", "echo_key": True},
    "upstream-500": {"status": 500, "echo_key": True},
    "upstream-503": {"status": 503, "retry_after": "3", "echo_key": True},
    "upstream-529": {"status": 529, "echo_key": True},
    "upstream-504": {"status": 504, "retry_after": "4", "echo_key": True},
    "upstream-408": {"status": 408, "echo_key": True},
    "upstream-429": {"status": 429, "retry_after": "7", "echo_key": True},
    "first-token-timeout": {"ttft_s": 5.0},
    "broken-stream": {"drop_after": 2, "output_tokens": 16},
    "stalled-stream": {"stall_after": 2, "stall_s": 30.0, "output_tokens": 16},
    "error-event": {"error_event_after": 2, "output_tokens": 16},
    "keepalive-then-timeout": {"ttft_s": 5.0},
}
POLICY_OF = {
    "first-token-timeout": "short",
    "stalled-stream": "short",
    "queue-full": "queue",
    "keepalive-then-timeout": "keepalive",
}


def api_of(call: str) -> str:
    return call.removesuffix("-stream")


def streamed(call: str) -> bool:
    return call.endswith("-stream")


def model_of(call: str, fault: str, via: str | None) -> str:
    return f"m-{call}-{fault}" + (f"-via-{via}" if via else "")


def cells() -> Iterator[Any]:
    """(call, fault, via): ``via`` names the provider's API when the client's is translated to it."""
    for call in CALLS:
        for fault in REQUEST_FAULTS:
            if api_of(call) in ONLY_ON.get(fault, frozenset(CALLS)):
                yield pytest.param(call, fault, None, id=f"{call}-{fault}")
        for fault in (*UPSTREAM_FAULTS, *(STREAM_FAULTS if streamed(call) else ())):
            for via in (None, TRANSLATED.get(api_of(call))) if api_of(call) in TRANSLATED else (None,):
                yield pytest.param(call, fault, via, id=model_of(call, fault, via).removeprefix("m-"))


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
    app: Any
    fake: FakeProvider
    logs: LogLines
    transports: dict[str, Any]
    """One sending transport per HTTP module (``httpx`` for OpenAI's SDK, ``httpx2`` for Anthropic's), shared."""

    def wire(
        self,
        call: str,
        *,
        spoil: Spoil | None = None,
        drop_headers: tuple[str, ...] = (),
        add_headers: dict[str, str] | None = None,
    ) -> WireTransport:
        module = httpx2 if api_of(call) == "messages" else httpx
        inner = self.transports[module.__name__]
        return WireTransport(module, spoil=spoil, drop_headers=drop_headers, add_headers=add_headers, inner=inner)


def matrix_config(fake_url: str, keys_file: Path) -> dict[str, Any]:
    every_api = ["chat", "completions", "embeddings", "responses", "messages"]

    def provider(name: str, key_env: str, concurrency: int, apis: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "base_url": fake_url,
            "api_key_env": key_env,
            "apis": apis,
            "max_concurrency": concurrency,
        }

    def model(name: str, policy: str = "test") -> dict[str, Any]:
        deployment = {"provider": name, "model": "fake-model", "price_in": 1.0, "price_out": 2.0}
        return {"name": name, "policy": policy, "deployments": [deployment]}

    providers = [provider("m", "PROVIDER_KEY", 256, every_api), provider("other", "PROVIDER_KEY", 256, every_api)]
    models = [model("m"), model("other")]
    for cell in cells():
        call, fault, via = cell.values
        if fault in REQUEST_FAULTS:
            continue
        name = model_of(call, fault, via)
        key_env = "WRONG_PROVIDER_KEY" if fault == "upstream-401" else "PROVIDER_KEY"
        providers.append(provider(name, key_env, 1 if fault == "queue-full" else 256, [via] if via else every_api))
        models.append(model(name, POLICY_OF.get(fault, "test")))
    base = {"extends": "fixed-order", "first_token_timeout_s": 10.0, "idle_timeout_s": 10.0}
    base["retries_per_deployment"] = 0  # one answer per cell: the status table is under test, not the retries
    return {
        "server": {"max_body_bytes": MAX_BODY, "body_timeout_s": BODY_TIMEOUT_S},
        "limits": LIMITS,
        "auth": {"api_keys_env": "GATEWAY_API_KEYS", "api_keys_file": str(keys_file)},
        "providers": providers,
        "models": models,
        "policies": {
            "test": base,
            # A whole answer's first byte is its end: its silence is the idle deadline's, a stream's the first token's.
            "short": {**base, "first_token_timeout_s": 0.3, "idle_timeout_s": 0.3},
            "queue": {**base, "queue_max_length": 0, "queue_timeout_s": 0.0},
            # The 200 and a keep-alive go out before the first token is late: its timeout is in-band.
            "keepalive": {**base, "first_byte_keepalive_s": 0.05, "first_token_timeout_s": 0.5},
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
    keys = [f'[[keys]]\nname = "spent"\nkey = "{SPENT_KEY}"\nbudget_usd = 0.000000001\n']
    keys.append(f'[[keys]]\nname = "narrow"\nkey = "{NARROW_KEY}"\nmodels = ["m"]\n')
    for call in CALLS:  # one request a minute, each call's own: the first passes, the next is refused
        keys.append(f'[[keys]]\nname = "rpm-{call}"\nkey = "{RPM_KEY}{call}"\nrequests_per_minute = 1\n')
    keys.append(f'[[keys]]\nname = "one-at-a-time"\nkey = "{ONE_AT_A_TIME_KEY}"\nmax_in_flight = 1\n')
    keys_file.write_text("\n".join(keys))
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
        app = create_app(config, AppOptions(environ=environ, sinks=[SampleLog()]))
        gateway = ServerThread(app)
        gateway.server.config.http = guarded_protocol(ConnectionLimits.from_config(config))  # as `gateway serve`
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
            yield Matrix(gateway, app, fake, logs, transports)
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
    # In a header, not the body: a translated request refuses a field its provider's API has no place for.
    headers = {"x-fake-behavior": json.dumps(fake)} if fake else {}
    api = api_of(call)
    result: Any
    if api == "messages":
        with anthropic_client(matrix, wire, key) as client:
            messages: Any = [{"role": "user", "content": "hi"}]
            result = client.messages.create(
                model=model, max_tokens=8, messages=messages, stream=stream, extra_headers=headers
            )
            return list(result) if stream else result
    with openai_client(matrix, wire, key) as sdk:
        if api == "chat":
            chat: Any = [{"role": "user", "content": "hi"}]
            result = sdk.chat.completions.create(
                model=model, messages=chat, max_tokens=8, stream=stream, extra_headers=headers
            )
        elif api == "completions":
            result = sdk.completions.create(
                model=model, prompt="hi", max_tokens=8, stream=stream, extra_headers=headers
            )
        elif api == "embeddings":
            result = sdk.embeddings.create(model=model, input="hi", extra_headers=headers)
        else:
            result = sdk.responses.create(model=model, input="hi", stream=stream, extra_headers=headers)
        return list(result) if stream else result


def spoiler(call: str, fault: str) -> Spoil | None:
    """How ``fault`` rewrites the SDK's request body, if it does."""
    if fault == "malformed-json":
        return lambda body: body[: len(body) // 2]
    if fault == "not-an-object":
        return lambda body: b"[" + body + b"]"
    if fault == "oversized":
        return lambda body: body + b" " * MAX_BODY
    api = api_of(call)
    if fault == "missing-field":
        return _edited(lambda body: {k: v for k, v in body.items() if k != MISSING_FIELD[api]})
    if fault == "too-deep":
        deep: Any = "x"
        for _ in range(LIMITS["max_json_depth"] + 1):
            deep = [deep]
        return _edited(lambda body: {**body, "metadata": {"deep": deep}})
    if fault == "too-many-messages":
        field = CONVERSATION_FIELD[api]
        turns = [{"role": role, "content": "hi"} for role in ("user", "assistant") * LIMITS["max_messages"]] + [
            {"role": "user", "content": "hi"}
        ]
        return _edited(lambda body: {**body, field: turns})
    if fault == "too-many-choices":
        return _edited(lambda body: {**body, "n": LIMITS["max_n"] + 1})
    if fault == "over-token-ceiling":
        return _edited(lambda body: {**body, TOKEN_FIELD[api]: LIMITS["max_tokens"] + 1})
    return None


def _edited(edit: Callable[[dict[str, Any]], dict[str, Any]]) -> Spoil:
    return lambda body: json.dumps(edit(json.loads(body))).encode()


# -- What each cell checks --------------------------------------------------------------------------------------


def param_of(call: str, fault: str) -> str | None:
    """The request field an OpenAI-shaped error must name (``param``) for ``fault``, where it names one."""
    api = api_of(call)
    return {
        "unknown-model": "model",
        "missing-field": MISSING_FIELD[api],
        "too-many-messages": CONVERSATION_FIELD.get(api),
        "too-many-choices": "n",
        "over-token-ceiling": TOKEN_FIELD.get(api),
    }.get(fault)


def assert_error_answer(call: str, exchange: Exchange, expect: Expect, param: str | None = None) -> None:
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
        if param is not None:
            assert exchange.json()["error"]["param"] == param, exchange.json()
    if expect.retry_after:
        assert float(exchange.headers["retry-after"]) > 0, exchange.headers


def assert_no_secret(matrix: Matrix, wire: WireTransport) -> None:
    for exchange in wire.exchanges:
        assert MARKER.encode() not in exchange.body, exchange.body[:500]
        assert not [item for item in exchange.headers.items() if MARKER in "".join(item)], exchange.headers
    leaked = [line for line in matrix.logs.lines if MARKER in line]
    assert not leaked, leaked[:3]


def assert_nothing_crashed_or_leaked(matrix: Matrix, logged_before: int) -> None:
    """No error logged since ``logged_before`` (an exception that escaped is logged as one), and nothing held: no
    request still counted in flight at the gateway, no upstream request still open at the provider."""
    errors = [line for line in matrix.logs.lines[logged_before:] if " ERROR " in line or " CRITICAL " in line]
    assert not errors, errors[:3]
    in_flight = runtime_of({"app": matrix.app}).access.state.in_flight
    wait_until(lambda: in_flight.total == 0, what="the gateway's requests in flight back to 0")
    wait_until(lambda: matrix.fake.state.in_flight == 0, what="the provider's requests in flight back to 0")


def assert_still_serving(matrix: Matrix, call: str) -> None:
    wire = matrix.wire(call)
    answer = send(matrix, call, "m", {}, wire, CLIENT_KEY)
    assert wire.last.status == 200, wire.last.body[:500]
    assert answer


def sdk_error(call: str, expect: Expect) -> type[openai.APIStatusError | anthropic.APIStatusError]:
    return expect.anthropic_error if api_of(call) == "messages" else expect.openai_error


# -- The matrix -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "fault", "via"), list(cells()))
def test_a_fault_comes_back_in_the_client_apis_own_shape(
    matrix: Matrix, call: str, fault: str, via: str | None
) -> None:
    logged_before = len(matrix.logs.lines)
    big = {"x-padding": "x" * LIMITS["max_header_bytes"]} if fault == "headers-too-large" else None
    wire = matrix.wire(call, spoil=spoiler(call, fault), drop_headers=_dropped(fault), add_headers=big)
    key = {
        "wrong-key": "sk-client-wrong",
        "budget-spent": SPENT_KEY,
        "model-not-allowed": NARROW_KEY,
        "key-rate-limited": RPM_KEY + call,
        "key-in-flight": ONE_AT_A_TIME_KEY,
    }.get(fault, CLIENT_KEY)
    model = {"unknown-model": "no-such-model", "model-not-allowed": "other"}.get(fault, "m")
    if fault == "key-rate-limited":  # the minute's one request
        assert send(matrix, call, model, {}, matrix.wire(call), key)
    if fault in (*UPSTREAM_FAULTS, *STREAM_FAULTS):
        model = model_of(call, fault, via)
    if fault in STREAM_FAULTS:
        check_in_band_error(matrix, call, model, FAKE_OF[fault], wire, relayed=fault == "error-event" and via is None)
    else:
        expect = SPECIAL.get((api_of(call), fault), EXPECTED[fault])
        held = fault in ("queue-full", "key-in-flight")
        with holding_the_only_slot(matrix, model, key if fault == "key-in-flight" else CLIENT_KEY, enabled=held):
            with pytest.raises(sdk_error(call, expect)) as raised:
                send(matrix, call, model, FAKE_OF.get(fault, {}), wire, key)
        assert type(raised.value) is sdk_error(call, expect), raised.value
        assert raised.value.status_code == expect.status
        assert_error_answer(call, wire.last, expect, param_of(call, fault))
    assert_no_secret(matrix, wire)
    assert_nothing_crashed_or_leaked(matrix, logged_before)
    assert_still_serving(matrix, call)


def _dropped(fault: str) -> tuple[str, ...]:
    return ("authorization", "x-api-key") if fault == "missing-key" else ()


def check_in_band_error(
    matrix: Matrix, call: str, model: str, fake: dict[str, Any], wire: WireTransport, *, relayed: bool
) -> None:
    """A stream that failed after its 200 went out: its last event is the API's own error event, which the SDK
    raises (chat, completions, Messages) or hands over as the stream's last event (Responses)."""
    api = api_of(call)
    if api == "messages":
        with pytest.raises(anthropic.APIStatusError) as raised:
            send(matrix, call, model, fake, wire, CLIENT_KEY)
        assert type(raised.value) is anthropic.APIStatusError, raised.value
        events = sse_events(wire.last.body)
        assert events[-1][0] == "error", events[-3:]
        error = json.loads(events[-1][1])
        assert_anthropic_shape(error, error.get("error", {}).get("type"))
    elif api == "responses":
        received = send(matrix, call, model, fake, wire, CLIENT_KEY)
        assert received[-1].type in ("response.failed", "error"), received[-1]
        typed: list[tuple[str | None, Any]] = [(name, json.loads(data)) for name, data in sse_events(wire.last.body)]
        last_name, last = typed[-1]
        assert last_name == last["type"] and last_name in ("response.failed", "error"), typed[-3:]
        numbers = [event["sequence_number"] for _, event in typed]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
        if last_name == "error":
            assert isinstance(last["message"], str) and last["message"] and "code" in last, last
        else:
            failure = last["response"]["error"]
            assert last["response"]["status"] == "failed" and failure["message"] and failure["code"], last
    else:
        with pytest.raises(openai.APIError) as cut:
            send(matrix, call, model, fake, wire, CLIENT_KEY)
        assert type(cut.value) is openai.APIError, cut.value
        chunks = [data for _, data in sse_events(wire.last.body) if data != "[DONE]"]
        assert_openai_shape(json.loads(chunks[-1]), relayed=relayed)
    assert wire.last.status == 200
    assert wire.last.headers["content-type"].startswith("text/event-stream")


class holding_the_only_slot:
    """With ``enabled``: a streamed request of ``key`` that waits for its first token holds a slot (``model``'s only
    one, or the key's only request in flight) on a raw socket, closed on leaving: the gateway must then give the slot
    back, and the provider see the hang-up."""

    def __init__(self, matrix: Matrix, model: str, key: str, *, enabled: bool) -> None:
        self.matrix = matrix
        self.model = model
        self.key = key
        self.enabled = enabled
        self.sock: socket.socket | None = None

    def __enter__(self) -> None:
        if not self.enabled:
            return
        fake = self.matrix.fake
        before = fake.state.requests
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": "hold"}], "stream": True})
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {self.key}\r\n"
            f'x-fake-behavior: {{"ttft_s": 30}}\r\ncontent-type: application/json\r\n'
            f"content-length: {len(body)}\r\n\r\n"
        )
        self.sock = socket.create_connection(("127.0.0.1", self.matrix.gateway.port), timeout=TIMEOUT)
        try:
            self.sock.sendall((head + body).encode())
            wait_until(lambda: fake.state.requests > before, what="the slot's holder reaching the provider")
        except BaseException:
            self.sock.close()
            raise

    def __exit__(self, *exc: object) -> None:
        if self.sock is None:
            return
        state = self.matrix.fake.state
        cancelled = state.cancelled
        self.sock.close()
        # Other cells' circuits are probed on the same fake meanwhile, some of them on deployments that hang, so the
        # in-flight count says nothing about this one request; the provider counting a hang-up does: the holder is the
        # only request of this cell that reaches it and waits.
        wait_until(lambda: state.cancelled > cancelled, what="the provider seeing the holder's hang-up")


PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "embeddings": "/v1/embeddings",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
}
BODIES: dict[str, dict[str, Any]] = {
    "chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "completions": {"model": "m", "prompt": "hi"},
    "embeddings": {"model": "m", "input": "hi"},
    "responses": {"model": "m", "input": "hi"},
    "messages": {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
}


@pytest.mark.parametrize("fault", ["slow-body", "endless-head"])
@pytest.mark.parametrize("api", list(PATHS))
def test_a_request_cut_at_the_connection_is_answered_in_the_client_apis_own_shape(
    matrix: Matrix, api: str, fault: str
) -> None:
    """Faults the connection guard answers before the app sees a request (as ``gateway serve`` runs it): half a body
    then silence (408 past ``[server] body_timeout_s``), a head that grows past ``[limits] max_header_bytes`` and
    never ends (431). No SDK can send these; the raw answer is handed to the SDK's own reader of error responses,
    which names the exception."""
    logged_before = len(matrix.logs.lines)
    body = json.dumps(BODIES[api]).encode()
    head = (
        f"POST {PATHS[api]} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {CLIENT_KEY}\r\ncontent-length: {len(body)}\r\n"
    ).encode()
    sent = head + b"\r\n" + body[: len(body) // 2]
    if fault == "endless-head":
        sent = head + b"x-padding: " + b"x" * LIMITS["max_header_bytes"]
    with socket.create_connection(("127.0.0.1", matrix.gateway.port), timeout=TIMEOUT) as sock:
        sock.sendall(sent)
        answer = b""
        while chunk := sock.recv(65536):  # the gateway closes after its answer
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    raw_headers, _, content = rest.partition(b"\r\n\r\n")
    headers = dict(line.decode("latin-1").lower().split(": ", 1) for line in raw_headers.split(b"\r\n"))
    exchange = Exchange({}, body, int(status_line.split()[1]), headers, content)
    expect = EXPECTED[fault]
    call = api
    assert_error_answer(call, exchange, expect)
    module: Any = httpx2 if api == "messages" else httpx
    response = module.Response(
        exchange.status, headers=headers, content=content, request=module.Request("POST", matrix.gateway.url)
    )
    if api == "messages":
        with anthropic.Anthropic(base_url=matrix.gateway.url, api_key=CLIENT_KEY) as claude:
            error: Exception = claude._make_status_error_from_response(response)
    else:
        with openai.OpenAI(base_url=matrix.gateway.url, api_key=CLIENT_KEY) as sdk:
            error = sdk._make_status_error_from_response(response)
    assert type(error) is sdk_error(call, expect), error
    assert_no_secret(matrix, WireTransport(httpx))
    assert_nothing_crashed_or_leaked(matrix, logged_before)
    assert_still_serving(matrix, call)
