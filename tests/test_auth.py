"""Client keys, per-key models, the admin key and the loopback-only rule, unit and over HTTP."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.admission.access import AccessControl, AccessState
from gateway.admission.auth import AdminKey, KeyLimits, KeyRing, exposure_notice, is_loopback, load_keys, presented_key
from gateway.admission.ratelimit import InMemoryRateLimiter
from gateway.admission.spending import Budget
from gateway.app import AppOptions, create_app
from gateway.config import AuthConfig, ConfigError, LimitsConfig, load_config, parse_config
from gateway.errors import PermissionDenied
from gateway.runtime import require_admin
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway, GatewayServers

KEY_A = "sk-gw-team-a-0123456789abcdef"
KEY_B = "sk-gw-team-b-fedcba9876543210"
ENV_KEY = "sk-gw-env-key-1111111111111111"
ADMIN = "sk-gw-admin-2222222222222222"


def _keys_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "keys.toml"
    path.write_text(text)
    return path


KEYS_TOML = f"""
[[keys]]
name = "team-a"
key = "{KEY_A}"
models = ["a"]
requests_per_minute = 5
max_in_flight = 2

[[keys]]
name = "team-b"
key_sha256 = "{hashlib.sha256(KEY_B.encode()).hexdigest().upper()}"
"""


def _ring(tmp_path: Path, environ: dict[str, str], limits: LimitsConfig | None = None) -> KeyRing:
    auth = AuthConfig(api_keys_file=str(_keys_file(tmp_path, KEYS_TOML)))
    return KeyRing.from_config(auth, limits or LimitsConfig(), ["a", "b"], environ)


def test_keys_from_env_and_file(tmp_path: Path) -> None:
    ring = _ring(tmp_path, {"GATEWAY_API_KEYS": f" {ENV_KEY} , ,other-key "}, LimitsConfig(tokens_per_minute_per_key=9))
    assert ring.enabled and len(ring.keys) == 4
    team_a = ring.authenticate(KEY_A)
    assert team_a is not None and team_a.name == "team-a"
    assert team_a.models == frozenset({"a"}) and team_a.allows("a") and not team_a.allows("b")
    # Limits the file leaves out come from [limits].
    assert team_a.limits == KeyLimits(requests_per_minute=5, tokens_per_minute=9, max_in_flight=2)
    team_b = ring.authenticate(KEY_B)
    assert team_b is not None and team_b.name == "team-b" and team_b.models is None
    env_key = ring.authenticate(ENV_KEY)
    assert env_key is not None and env_key.allows("b") and env_key.name == env_key.key_id
    assert ring.authenticate("other-key") is not None
    for wrong in ("", None, KEY_A + "x", KEY_A[:-1], "Bearer " + KEY_A):
        assert ring.authenticate(wrong) is None
    assert ring.describe() == "4 client keys (2 from $GATEWAY_API_KEYS, 2 from keys.toml)"
    # Only digests are held; nothing a key object shows contains the key.
    for key in ring.keys:
        assert KEY_A not in repr(key) and ENV_KEY not in repr(key) and KEY_A not in key.key_id


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[keys]]\nname = "x"\n', "keys.toml: keys[0]: expected exactly one of key or key_sha256"),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\nkey_sha256 = "00"\n', "expected exactly one of key or key_sha256"),
        ('[[keys]]\nname = "x"\nkey_sha256 = "abc"\n', "keys[0].key_sha256: expected 64 hexadecimal digits"),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\nmodels = ["zz"]\n', 'keys[0].models: unknown model "zz"'),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\nrpm = 3\n', "keys[0].rpm: unknown key"),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\nrequests_per_minute = -1\n', "expected an integer >= 0"),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\n[[keys]]\nname = "x"\nkey = "k2"\n', 'duplicate key name "x"'),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\n[[keys]]\nname = "y"\nkey = "{KEY_A}"\n', "already configured"),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A} "\n', "keys[0].key: must not contain commas"),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}\n', "keys.toml: invalid TOML"),
        (f'keys = "{KEY_A}"\n', "keys.toml: keys: expected an array of tables"),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\nbudget_usd = 0\n', "keys[0].budget_usd: expected a number > 0"),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\nbudget_usd = "5"\n', "keys[0].budget_usd: expected a number"),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\nbudget_usd = 5\nbudget_window = "year"\n', "keys[0].budget_window"),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\nbudget_window = "day"\n', "only applies with budget_usd"),
        (f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\nteam = "a{{b}}"\n', 'keys[0].team: must not contain "{"'),
        ('[[teams]]\nname = "t"\n', "keys.toml: teams[0].budget_usd: expected a budget in USD"),
        ('[[teams]]\nname = "t"\nbudget_usd = 1\n[[teams]]\nname = "t"\nbudget_usd = 2\n', 'duplicate team name "t"'),
        ('[[teams]]\nname = "t"\nbudget_usd = 1\nwindow = "day"\n', "teams[0].window: unknown key"),
    ],
)
def test_key_file_errors_name_the_place_never_the_key(tmp_path: Path, text: str, message: str) -> None:
    auth = AuthConfig(api_keys_file=str(_keys_file(tmp_path, text)))
    with pytest.raises(ConfigError) as caught:
        KeyRing.from_config(auth, LimitsConfig(), ["a"], {})
    assert message in str(caught.value)
    assert KEY_A not in str(caught.value)


def test_budgets_and_teams_from_the_keys_file(tmp_path: Path) -> None:
    text = (
        f'[[teams]]\nname = "search"\nbudget_usd = 500\nbudget_window = "week"\n\n'
        f'[[keys]]\nname = "x"\nkey = "{KEY_A}"\nteam = "search"\nbudget_usd = 2.5\nbudget_window = "day"\n\n'
        f'[[keys]]\nname = "y"\nkey = "{KEY_B}"\nbudget_usd = 10\n'
    )
    auth = AuthConfig(api_keys_file=str(_keys_file(tmp_path, text)))
    ring = KeyRing.from_config(auth, LimitsConfig(), ["a"], {})
    x, y = ring.authenticate(KEY_A), ring.authenticate(KEY_B)
    assert x is not None and x.team == "search" and x.budget == Budget(2.5, "day")
    assert y is not None and y.team is None and y.budget == Budget(10.0, "month"), "a month unless told"
    assert ring.teams == {"search": Budget(500.0, "week")}


def test_missing_keys_file_and_duplicates_across_sources(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read keys file"):
        KeyRing.from_config(AuthConfig(api_keys_file=str(tmp_path / "nope.toml")), LimitsConfig(), [], {})
    with pytest.raises(ConfigError) as caught:
        _ring(tmp_path, {"GATEWAY_API_KEYS": KEY_A})
    assert "keys.toml: keys[0]: the same client key is already configured at $GATEWAY_API_KEYS (key 1)" in str(
        caught.value
    )
    assert KEY_A not in str(caught.value)


def test_admin_key(tmp_path: Path) -> None:
    ring = _ring(tmp_path, {})
    admin = AdminKey.from_config(AuthConfig(), {"GATEWAY_ADMIN_KEY": f" {ADMIN} "}, ring)
    assert admin.configured and admin.matches(ADMIN) and not admin.matches(KEY_A) and not admin.matches(None)
    assert ADMIN not in repr(admin)
    assert not AdminKey.from_config(AuthConfig(), {}, ring).configured
    with pytest.raises(ConfigError, match="admin key must differ from every client key") as caught:
        AdminKey.from_config(AuthConfig(), {"GATEWAY_ADMIN_KEY": KEY_A}, ring)
    assert KEY_A not in str(caught.value)


def test_presented_key() -> None:
    assert presented_key([(b"authorization", b"Bearer  abc ")]) == "abc"
    assert presented_key([(b"authorization", b"bearer abc")]) == "abc"
    assert presented_key([(b"api-key", b"xyz")]) == "xyz"
    assert presented_key([(b"authorization", b"Basic Zm9v"), (b"api-key", b"xyz")]) == "xyz"
    assert presented_key([(b"authorization", b"Basic Zm9v")]) is None
    assert presented_key([(b"authorization", b"Bearer ")]) is None
    assert presented_key([]) is None


def test_is_loopback() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST", "::ffff:127.0.0.1"):
        assert is_loopback(host), host
    for other in ("0.0.0.0", "::", "10.0.0.1", "192.168.1.1", "example.com", "", None, "::ffff:10.0.0.1"):
        assert not is_loopback(other), other


def test_exposure_notice(tmp_path: Path) -> None:
    none = KeyRing([])
    level, text = exposure_notice("127.0.0.1", none, AdminKey(), AuthConfig())
    assert level == logging.WARNING and "only loopback clients" in text and "$GATEWAY_API_KEYS" in text
    with pytest.raises(ConfigError, match="allow_unauthenticated"):
        exposure_notice("0.0.0.0", none, AdminKey(), AuthConfig())
    level, text = exposure_notice("0.0.0.0", none, AdminKey(), AuthConfig(allow_unauthenticated=True))
    assert level == logging.WARNING and "anyone may call" in text
    ring = _ring(tmp_path, {})
    level, text = exposure_notice("0.0.0.0", ring, AdminKey(), AuthConfig())
    assert level == logging.INFO and text.startswith("client auth on: 2 client keys")


def test_relative_keys_file_is_read_beside_the_config(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    _keys_file(tmp_path / "conf", KEYS_TOML)
    config_path = tmp_path / "conf" / "gateway.toml"
    config_path.write_text(
        '[auth]\napi_keys_file = "keys.toml"\n'
        '[[providers]]\nname = "p"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[models]]\nname = "a"\n[[models.deployments]]\nprovider = "p"\nmodel = "up"\n'
        '[[models]]\nname = "b"\n[[models.deployments]]\nprovider = "p"\nmodel = "up"\n'
    )
    config = load_config(config_path)
    assert config.auth.api_keys_file == str(tmp_path / "conf" / "keys.toml")
    ring, _ = load_keys(config, {})
    assert len(ring.keys) == 2


def _scope(client: str, key: str | None = None) -> dict[str, object]:
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    return {"type": "http", "client": (client, 5000), "headers": headers}


def test_without_keys_only_loopback_clients_are_served() -> None:
    state = AccessState(InMemoryRateLimiter())
    closed = AccessControl(KeyRing([]), AdminKey(), AuthConfig(), LimitsConfig(), state)
    assert closed.authenticate(_scope("127.0.0.1")).name == "anonymous"
    assert closed.authenticate(_scope("::1", "whatever")).name == "anonymous"
    with pytest.raises(PermissionDenied, match="loopback clients only"):
        closed.authenticate(_scope("10.1.2.3"))
    opened = AccessControl(KeyRing([]), AdminKey(), AuthConfig(allow_unauthenticated=True), LimitsConfig(), state)
    assert opened.authenticate(_scope("10.1.2.3")).name == "anonymous"
    # With no admin key, admin endpoints are open to loopback only, and only while client auth is off.
    closed.require_admin(_scope("127.0.0.1"))
    with pytest.raises(PermissionDenied, match="admin endpoints are disabled"):
        opened.require_admin(_scope("10.1.2.3"))


# -- over HTTP -------------------------------------------------------------------------------


@pytest.fixture
def keyed_gateway(tmp_path: Path, fakes: Fakes) -> Iterator[Callable[..., Gateway]]:
    """Starts a gateway with models "a" and "b", the keys file above and a probe route behind ``require_admin``."""
    servers = GatewayServers()

    async def probe(request: Request) -> Response:
        require_admin(request)
        return JSONResponse({"admin": True})

    def start(environ: dict[str, str], *, with_file: bool = True) -> Gateway:
        fake = fakes.start("p")
        config = parse_config(
            {
                "providers": [{"name": "p", "base_url": fake.base_url}],
                "models": [{"name": m, "deployments": [{"provider": "p", "model": "up"}]} for m in ("a", "b")],
                "auth": {"api_keys_file": str(_keys_file(tmp_path, KEYS_TOML))} if with_file else {},
            },
            source="test.toml",
        )
        app = create_app(config, AppOptions(environ=environ))
        app.router.routes.append(Route("/admin-probe", probe, methods=["POST"]))
        return servers.serve(app)

    yield start
    servers.stop()


def _client(gateway: Gateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)


def _error(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, object] = body["error"]
    return error


def test_client_keys_and_models_over_http(keyed_gateway: Callable[..., Gateway]) -> None:
    gateway = keyed_gateway({"GATEWAY_API_KEYS": ENV_KEY})
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    with (
        _client(gateway, KEY_A) as team_a,
        _client(gateway, KEY_B) as team_b,
        _client(gateway, ENV_KEY) as env_key,
        _client(gateway, "sk-wrong") as wrong,
    ):
        assert team_a.chat.completions.create(model="a", messages=messages).choices[0].message.content
        assert env_key.chat.completions.create(model="b", messages=messages).choices

        with pytest.raises(openai.AuthenticationError) as denied:
            wrong.chat.completions.create(model="a", messages=messages)
        assert denied.value.status_code == 401 and denied.value.code == "invalid_api_key"
        assert "sk-wrong" not in denied.value.response.text

        with pytest.raises(openai.PermissionDeniedError) as forbidden:
            team_a.chat.completions.create(model="b", messages=messages)
        assert forbidden.value.status_code == 403
        assert forbidden.value.type == "permission_error" and forbidden.value.param == "model"

        # A key sees only its models, in the list and in a 404's hint.
        assert [m.id for m in team_a.models.list()] == ["a"]
        assert [m.id for m in team_b.models.list()] == ["a", "b"]
        with pytest.raises(openai.NotFoundError) as missing:
            team_a.chat.completions.create(model="c", messages=messages)
        assert "(known: a)" in missing.value.message

    with httpx.Client(base_url=gateway.url) as http:
        for headers in ({}, {"authorization": "Basic " + KEY_A}, {"authorization": "Bearer"}):
            response = http.post("/v1/chat/completions", json={"model": "a", "messages": messages}, headers=headers)
            assert response.status_code == 401
            assert _error(response)["type"] == "authentication_error"
            assert "missing API key" in str(_error(response)["message"])
        response = http.get("/v1/models", headers={"authorization": "Bearer nope"})
        assert response.status_code == 401 and _error(response)["code"] == "invalid_api_key"
        response = http.post(
            "/v1/chat/completions", json={"model": "a", "messages": messages}, headers={"api-key": KEY_B}
        )
        assert response.status_code == 200


def test_require_admin_over_http(keyed_gateway: Callable[..., Gateway]) -> None:
    gateway = keyed_gateway({"GATEWAY_ADMIN_KEY": ADMIN})
    with httpx.Client(base_url=gateway.url) as http:
        assert http.post("/admin-probe", headers={"authorization": f"Bearer {ADMIN}"}).json() == {"admin": True}
        response = http.post("/admin-probe", headers={"authorization": f"Bearer {KEY_A}"})
        assert response.status_code == 403 and _error(response)["type"] == "permission_error"
        for headers in ({}, {"authorization": "Bearer sk-not-admin"}):
            response = http.post("/admin-probe", headers=headers)
            assert response.status_code == 401 and _error(response)["type"] == "authentication_error"
            assert "sk-not-admin" not in response.text

    without_admin = keyed_gateway({})
    response = httpx.post(without_admin.url + "/admin-probe", headers={"authorization": f"Bearer {KEY_A}"})
    assert response.status_code == 403 and "no admin key is configured" in str(_error(response)["message"])

    # No keys at all: the loopback dev mode, where the admin endpoints are open to loopback clients.
    open_gateway = keyed_gateway({}, with_file=False)
    assert httpx.post(open_gateway.url + "/admin-probe").json() == {"admin": True}
    with _client(open_gateway, "anything") as client:
        assert client.chat.completions.create(model="b", messages=[{"role": "user", "content": "hi"}]).choices


def test_serve_refuses_a_public_host_without_keys(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[server]\nhost = "0.0.0.0"\n'
        '[[providers]]\nname = "p"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[models]]\nname = "m"\n[[models.deployments]]\nprovider = "p"\nmodel = "up"\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1
    assert "refusing to serve on non-loopback host 0.0.0.0 without client keys" in result.stderr
    assert "allow_unauthenticated = true" in result.stderr


def test_the_example_keys_file_is_valid() -> None:
    example = Path(__file__).resolve().parents[1] / "keys.example.toml"
    ring = KeyRing.from_config(AuthConfig(api_keys_file=str(example)), LimitsConfig(), ["llama-3.3-70b"], {})
    search = ring.authenticate("sk-gw-example-team-search")
    assert search is not None and search.name == "team-search" and search.limits.max_in_flight == 32
    assert search.team == "search" and search.budget == Budget(25.0, "day")
    assert ring.teams == {"search": Budget(500.0, "month")}
