"""Config loading: every error names the file, the key path and what was expected."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.app import AppOptions, create_app
from gateway.config import (
    BUILTIN_POLICIES,
    AuthConfig,
    ConfigError,
    DeploymentConfig,
    GatewayConfig,
    ModelConfig,
    PolicyConfig,
    ProviderConfig,
    ServerConfig,
    StatsConfig,
    load_config,
    parse_config,
    resolve_secrets,
)

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "config.example.toml"

MINIMAL = """
[[providers]]
name = "groq"
base_url = "https://api.groq.com/openai/v1"

[[providers]]
name = "together"
base_url = "https://api.together.xyz/v1"

[[models]]
name = "llama"
  [[models.deployments]]
  provider = "groq"
  model = "llama-3.3-70b-versatile"
"""


def load_text(tmp_path: Path, text: str, name: str = "config.toml") -> GatewayConfig:
    path = tmp_path / name
    path.write_text(text)
    return load_config(path)


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, text)
    return str(info.value)


def test_minimal_config_gets_defaults(tmp_path: Path) -> None:
    config = load_text(tmp_path, MINIMAL)
    assert config.source == "config.toml"
    assert config.server == ServerConfig()
    assert config.stats == StatsConfig()
    assert config.auth == AuthConfig()
    (model,) = config.models
    assert model.policy == "balanced"
    assert config.policy_for(model) == PolicyConfig(name="balanced", hedge_tail=True)
    assert model.deployments == (DeploymentConfig(provider="groq", model="llama-3.3-70b-versatile", name="groq"),)
    assert config.model("nope") is None


FULL = """
[server]
host = "0.0.0.0"
port = 9000
max_body_bytes = 1024

[stats]
backend = "redis"
redis_url = "redis://10.0.0.1:6380/2"
window_s = 120
slice_s = 5
key_prefix = "gw"
refresh_interval_s = 0.5
tokenizer = "cl100k_base"

[auth]
api_keys_env = "MY_KEYS"
admin_key_env = "MY_ADMIN"

[[providers]]
name = "groq"
base_url = "https://api.groq.com/openai/v1/"
api_key_env = "GROQ_API_KEY"
max_concurrency = 8
headers = { "x-org" = "acme", "x-team" = "ml" }

[[providers]]
name = "local"
base_url = "http://127.0.0.1:9001/v1"

[[models]]
name = "llama"
policy = "fast"
  [[models.deployments]]
  provider = "groq"
  model = "llama-3.3-70b-versatile"
  price_in = 0.59
  price_out = 0.79
  [[models.deployments]]
  provider = "groq"
  model = "llama-3.3-70b-specdec"
  price_in = 1
  price_out = 2
  name = "groq-specdec"

[[models]]
name = "small"
  [[models.deployments]]
  provider = "local"
  model = "tiny"

[policies.fast]
max_attempts = 2
connect_timeout_s = 1
first_token_timeout_s = 2.5
idle_timeout_s = 3
total_timeout_s = 30

[policies.balanced]
max_attempts = 5
"""


def test_full_config_round_trip(tmp_path: Path) -> None:
    """Every key set to a non-default value comes back, typed, exactly as written."""
    groq = ProviderConfig(
        name="groq",
        base_url="https://api.groq.com/openai/v1",  # the trailing slash is dropped
        api_key_env="GROQ_API_KEY",
        max_concurrency=8,
        headers=(("x-org", "acme"), ("x-team", "ml")),
    )
    local = ProviderConfig(name="local", base_url="http://127.0.0.1:9001/v1")
    expected = GatewayConfig(
        providers=(groq, local),
        models=(
            ModelConfig(
                name="llama",
                policy="fast",
                deployments=(
                    DeploymentConfig("groq", "llama-3.3-70b-versatile", price_in=0.59, price_out=0.79, name="groq"),
                    DeploymentConfig("groq", "llama-3.3-70b-specdec", price_in=1.0, price_out=2.0, name="groq-specdec"),
                ),
            ),
            ModelConfig(name="small", deployments=(DeploymentConfig("local", "tiny", name="local"),)),
        ),
        server=ServerConfig(host="0.0.0.0", port=9000, max_body_bytes=1024),
        stats=StatsConfig(
            backend="redis",
            redis_url="redis://10.0.0.1:6380/2",
            window_s=120,
            slice_s=5,
            key_prefix="gw",
            refresh_interval_s=0.5,
            tokenizer="cl100k_base",
        ),
        auth=AuthConfig(api_keys_env="MY_KEYS", admin_key_env="MY_ADMIN"),
        policies={
            **BUILTIN_POLICIES,
            "balanced": PolicyConfig(name="balanced", max_attempts=5, hedge_tail=True),
            "fast": PolicyConfig(
                name="fast",
                hedge_tail=True,
                max_attempts=2,
                connect_timeout_s=1.0,
                first_token_timeout_s=2.5,
                idle_timeout_s=3.0,
                total_timeout_s=30.0,
            ),
        },
        source="config.toml",
    )
    config = load_text(tmp_path, FULL)
    assert config == expected
    assert isinstance(config.policies["fast"].connect_timeout_s, float)
    assert config.policy_for(config.models[0]).max_attempts == 2
    assert config.provider("local") is config.providers[1]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.server.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # unknown keys, at every level, name the key and what was expected
        (
            MINIMAL + "\n[server]\nprot = 1\n",
            "config.toml: server.prot: unknown key (expected one of: access_log, body_timeout_s, header_timeout_s",
        ),
        (
            "colour = 1\n" + MINIMAL,
            "config.toml: colour: unknown key (expected one of: auth, limits, metrics, models, policies,",
        ),
        (
            MINIMAL.replace('model = "llama-3.3-70b-versatile"', 'model = "x"\n  price = 1'),
            "config.toml: models[0].deployments[0].price: unknown key "
            "(expected one of: apis, builtin_tools, context_window, continue_prefill, model, name, prefill_format, "
            "price_cached_in,",
        ),
        (
            MINIMAL.replace('name = "groq"\n', 'name = "groq"\napi_key = "sk-123"\n', 1),
            "config.toml: providers[0].api_key: unknown key",
        ),
        (MINIMAL + "\n[policies.fast]\nmax_attempt = 2\n", "config.toml: policies.fast.max_attempt: unknown key"),
        # wrong types
        (MINIMAL + '\n[server]\nport = "80"\n', 'config.toml: server.port: expected an integer, got "80"'),
        (MINIMAL + "\n[server]\nport = true\n", "config.toml: server.port: expected an integer, got true"),
        (MINIMAL + "\n[server]\nport = 70000\n", "config.toml: server.port: expected a port number 0-65535, got 70000"),
        (MINIMAL + "\n[server]\nmax_body_bytes = 0\n", "config.toml: server.max_body_bytes: expected an integer >= 1"),
        (MINIMAL + "\n[stats]\nbackend = 'mysql'\n", "config.toml: stats.backend: expected one of 'memory', 'redis'"),
        (MINIMAL + "\n[stats]\nwindow_s = 25\n", "config.toml: stats.window_s: expected a multiple of slice_s (10)"),
        (MINIMAL + "\n[stats]\nredis_url = 'http://x'\n", "config.toml: stats.redis_url: expected a redis://"),
        (MINIMAL + "\n[stats]\ntokenizer = ''\n", "config.toml: stats.tokenizer: expected a non-empty string"),
        ("server = 3\n" + MINIMAL, "config.toml: server: expected a table, got 3"),
        (
            MINIMAL.replace("https://api.groq.com/openai/v1", "api.groq.com"),
            'config.toml: providers[0].base_url: expected an http:// or https:// URL, got "api.groq.com"',
        ),
        (
            MINIMAL.replace("https://api.groq.com", "https://user:sk-secret@api.groq.com"),
            "config.toml: providers[0].base_url: must not contain credentials",
        ),
        (
            MINIMAL.replace('name = "groq"\n', 'name = "groq"\nheaders = { Authorization = "Bearer x" }\n', 1),
            "config.toml: providers[0].headers.Authorization: secrets must come from the environment",
        ),
        (
            MINIMAL.replace('name = "groq"\n', 'name = "groq"\napi_key_header = "api key"\n', 1),
            'config.toml: providers[0].api_key_header: expected an HTTP header name, got "api key"',
        ),
        (
            MINIMAL.replace('name = "groq"\n', 'name = "groq"\napi_key_header = "X-Key"\nheaders = { x-key = "k" }\n'),
            "config.toml: providers[0].headers.x-key: secrets must come from the environment",
        ),
        (
            MINIMAL.replace('name = "groq"\n', 'name = "groq"\nmax_concurrency = 0\n', 1),
            "config.toml: providers[0].max_concurrency: expected an integer >= 1, got 0",
        ),
        (
            MINIMAL.replace('model = "llama-3.3-70b-versatile"', 'model = "x"\n  price_in = -1'),
            "config.toml: models[0].deployments[0].price_in: expected a number >= 0.0, got -1",
        ),
        (
            MINIMAL + "\n[policies.fast]\nfirst_token_timeout_s = 0\n",
            "config.toml: policies.fast.first_token_timeout_s: expected a number > 0, got 0",
        ),
        (MINIMAL + "\n[policies]\nfast = 1\n", "config.toml: policies.fast: expected a table, got 1"),
        ("models = [1]\n", "config.toml: models[0]: expected a table, got 1"),
        # references between tables
        (
            MINIMAL.replace('provider = "groq"', 'provider = "grok"'),
            'config.toml: models[0].deployments[0].provider: unknown provider "grok" (known: groq, together)',
        ),
        (
            MINIMAL.replace('name = "llama"\n', 'name = "llama"\npolicy = "speedy"\n'),
            'config.toml: models[0].policy: unknown policy "speedy" '
            "(known: balanced, fastest, fastest-first-token, highest-throughput, cheapest, fixed-order)",
        ),
        # duplicates
        (
            MINIMAL.replace('name = "together"', 'name = "groq"'),
            'config.toml: providers[1].name: duplicate provider name "groq"',
        ),
        (
            MINIMAL + '\n[[models]]\nname = "llama"\n  [[models.deployments]]\n  provider = "groq"\n  model = "x"\n',
            'config.toml: models[1].name: duplicate model name "llama"',
        ),
        (
            MINIMAL + '  [[models.deployments]]\n  provider = "groq"\n  model = "other"\n',
            'config.toml: models[0].deployments[1].name: duplicate deployment name "groq" (set a distinct name)',
        ),
        # missing pieces
        (MINIMAL.replace('model = "llama-3.3-70b-versatile"', ""), "models[0].deployments[0].model: missing (expected"),
        (
            MINIMAL.split("[[models]]")[0] + '[[models]]\nname = "m"\ndeployments = []\n',
            "config.toml: models[0].deployments: expected at least one deployment",
        ),
        (MINIMAL.split("[[models]]")[0], "config.toml: models: expected at least one [[models]] entry"),
        ("[server\n", "config.toml: invalid TOML: "),
    ],
)
def test_errors_name_file_key_path_and_expectation(tmp_path: Path, text: str, expected: str) -> None:
    message = error_of(tmp_path, text)
    assert expected in message
    assert message.startswith("config.toml: ")


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read config: No such file"):
        load_config(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        (
            'base_url = "https://x.example/v1?api-version=1&key=sk-LEAK"',
            'base_url: must not carry a credential in its query ("key")',
        ),
        ('base_url = "https://x.example/v1?subscription-key=sk-LEAK"', 'query ("subscription-key")'),
        ('base_url = "https://x.example/v1?access_token=sk-LEAK"', 'query ("access_token")'),
        ('base_url = "x.example/v1?key=sk-LEAK"', 'query ("key")'),
        (
            'base_url = "https://x.example/v1"\nbase_urls = { messages = "https://u:sk-LEAK@x.example" }',
            "base_urls.messages: must not contain credentials",
        ),
        ('base_url = "https://x.example/v1"\nbase_urls = { messages = "x.example/?code=sk-LEAK" }', 'query ("code")'),
        (
            'base_url = "https://x.example/v1"\nheaders = { x-goog-api-key = "sk-LEAK" }',
            "headers.x-goog-api-key: secrets must come",
        ),
        (
            'base_url = "https://x.example/v1"\nheaders = { X-Auth-Token = "sk-LEAK" }',
            "headers.X-Auth-Token: secrets must come",
        ),
    ],
)
def test_a_credential_written_into_a_provider_is_refused_and_never_repeated(
    tmp_path: Path, provider: str, expected: str
) -> None:
    # Only keys from the environment are redacted: a key in the file's URL or headers would reach logs and error
    # bodies whenever a provider echoes its request back (many do). The error (printed by `gateway check`, and in
    # a refused reload's 400) names the place, never the value.
    model = '[[models]]\nname = "m"\n  [[models.deployments]]\n  provider = "p"\n  model = "u"\n'
    text = f'[[providers]]\nname = "p"\n{provider}\n\n{model}'
    message = error_of(tmp_path, text)
    assert expected in message and "LEAK" not in message


def test_a_query_without_credentials_is_kept() -> None:
    # Azure OpenAI's api-version, and parameters that merely contain the letters "key" or "code".
    url = "https://r.openai.azure.com/openai/deployments/d?api-version=2024-10-21&monkey=1&encoding=utf8"
    config = parse_config(
        {
            "providers": [{"name": "p", "base_url": url}],
            "models": [{"name": "m", "deployments": [{"provider": "p", "model": "u"}]}],
        }
    )
    assert config.providers[0].base_url == url


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("provider", "providers[0].name: must not contain control characters"),
        ("deployment", "models[0].deployments[0].name: must not contain control characters"),
        ("model", "models[0].name: must not contain control characters"),
    ],
)
def test_a_name_with_a_line_break_is_refused(where: str, expected: str) -> None:
    # Names are sent in response headers (x-gateway-provider, x-gateway-deployment): a provider named "a\r\nb"
    # made the server drop every answer it gave (uvicorn refuses the header), the client seeing a bare disconnect.
    broken = "a\r\nx-evil: 1"
    deployment: dict[str, Any] = {"provider": broken if where == "provider" else "p", "model": "u"}
    if where == "deployment":
        deployment["name"] = broken
    data = {
        "providers": [{"name": broken if where == "provider" else "p", "base_url": "http://127.0.0.1:9/v1"}],
        "models": [{"name": broken if where == "model" else "m", "deployments": [deployment]}],
    }
    with pytest.raises(ConfigError) as refused:
        parse_config(data, source="config.toml")
    assert expected in str(refused.value)


def test_names_with_quotes_spaces_and_unicode_are_kept() -> None:
    odd = 'prov "q" \\ ü 提供 {x}='
    data = {
        "providers": [{"name": odd, "base_url": "http://127.0.0.1:9/v1"}],
        "models": [{"name": odd, "deployments": [{"provider": odd, "model": "u"}]}],
    }
    config = parse_config(data)
    assert config.providers[0].name == config.models[0].name == config.models[0].deployments[0].name == odd


def test_parse_config_uses_the_given_source_name() -> None:
    with pytest.raises(ConfigError, match=r"^inline: models: expected at least one"):
        parse_config({}, source="inline")


def test_missing_env_var_names_provider_and_variable(tmp_path: Path) -> None:
    text = MINIMAL.replace('name = "groq"\n', 'name = "groq"\napi_key_env = "GROQ_API_KEY"\n', 1)
    text = text.replace('name = "together"\n', 'name = "together"\napi_key_env = "TOGETHER_KEY"\n', 1)
    config = load_text(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        resolve_secrets(config, {"TOGETHER_KEY": "  "})
    message = str(info.value)
    assert message == (
        "config.toml: providers[0].api_key_env: environment variable GROQ_API_KEY is not set "
        '(expected the API key of provider "groq"); '
        "providers[1].api_key_env: environment variable TOGETHER_KEY is not set "
        '(expected the API key of provider "together")'
    )
    keys = resolve_secrets(config, {"GROQ_API_KEY": "sk-g", "TOGETHER_KEY": " sk-t "})
    assert keys == {"groq": "sk-g", "together": "sk-t"}


def test_create_app_refuses_a_missing_key_and_never_shows_present_ones(tmp_path: Path) -> None:
    text = MINIMAL.replace('name = "groq"\n', 'name = "groq"\napi_key_env = "GROQ_API_KEY"\n', 1)
    text = text.replace('name = "together"\n', 'name = "together"\napi_key_env = "TOGETHER_KEY"\n', 1)
    config = load_text(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        create_app(config, AppOptions(environ={"TOGETHER_KEY": "sk-very-secret"}))
    assert "GROQ_API_KEY is not set" in str(info.value)
    assert "sk-very-secret" not in str(info.value)
    assert "TOGETHER_KEY" not in str(info.value)


def test_example_config_loads() -> None:
    config = load_config(EXAMPLE)
    assert config.source == "config.example.toml"
    assert [m.name for m in config.models] == ["llama-3.3-70b", "small"]
    assert [p.base_url for p in config.providers] == ["http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1"]
    # The fake providers need no key, so the example serves with an empty environment.
    assert resolve_secrets(config, {}) == {"fast": None, "slow": None}


def test_example_config_documents_every_key() -> None:
    """Each field of each config object appears as a key (set or commented out) in the example."""
    text = EXAMPLE.read_text()
    keys = set(re.findall(r"^[#\s]*([a-z_]+)\s*=", text, flags=re.MULTILINE))
    for cls in (ServerConfig, StatsConfig, AuthConfig, ProviderConfig, DeploymentConfig, ModelConfig, PolicyConfig):
        for field in dataclasses.fields(cls):
            if field.name == "name" and cls is PolicyConfig:
                continue  # a policy's name is its table's name, [policies.<name>]
            if field.name == "deployments":
                assert "[[models.deployments]]" in text
                continue
            assert field.name in keys, f"config.example.toml does not document {cls.__name__}.{field.name}"


def test_prefill_capability_is_validated(tmp_path: Path) -> None:
    upstream = 'model = "llama-3.3-70b-versatile"'
    capable = MINIMAL.replace(upstream, upstream + '\n  continue_prefill = true\n  prefill_format = "vllm"')
    deployment = load_text(tmp_path, capable).models[0].deployments[0]
    assert (deployment.continue_prefill, deployment.prefill_format) == (True, "vllm")
    assert load_text(tmp_path, MINIMAL).models[0].deployments[0].continue_prefill is False
    message = error_of(tmp_path, MINIMAL.replace(upstream, upstream + '\n  prefill_format = "prefix"'))
    assert message == "config.toml: models[0].deployments[0].prefill_format: only applies with continue_prefill = true"
    message = error_of(tmp_path, capable.replace('prefill_format = "vllm"', 'prefill_format = "tgi"'))
    assert message.startswith("config.toml: models[0].deployments[0].prefill_format: expected one of 'plain'")
    message = error_of(tmp_path, MINIMAL.replace(upstream, upstream + '\n  continue_prefill = "yes"'))
    assert message == 'config.toml: models[0].deployments[0].continue_prefill: expected true or false, got "yes"'


def test_cached_input_is_priced_apart_when_configured() -> None:
    plain = DeploymentConfig("p", "m", price_in=1.0, price_out=4.0)
    cached = DeploymentConfig("p", "m", price_in=1.0, price_out=4.0, price_cached_in=0.1)
    # 1M prompt tokens, 600k of them cached, and 100k out.
    assert plain.cost_usd(1_000_000, 100_000, 600_000) == pytest.approx(1.4)
    assert cached.cost_usd(1_000_000, 100_000, 600_000) == pytest.approx(0.4 + 0.06 + 0.4)
    assert cached.cost_usd(1_000, 0, 5_000) == pytest.approx(0.1 * 1_000 / 1e6)  # never more cached than sent


def test_apis_default_to_the_openai_three_and_a_deployment_narrows_its_providers(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        'base_url = "https://api.groq.com/openai/v1"',
        'base_url = "https://api.groq.com/openai/v1"\napis = ["chat", "responses", "messages"]\n'
        'base_urls = { messages = "https://api.groq.com/anthropic/v1/" }\nstream_usage = false',
    )
    text += '  [[models.deployments]]\n  provider = "groq"\n  model = "x"\n  name = "groq-msg"\n  apis = ["messages"]\n'
    text += '  [[models.deployments]]\n  provider = "together"\n  model = "y"\n'
    config = load_text(tmp_path, text)
    groq, together = config.providers
    assert groq.apis == ("chat", "responses", "messages") and together.apis == ("chat", "completions", "embeddings")
    assert groq.base_url_for("messages") == "https://api.groq.com/anthropic/v1"
    assert groq.base_url_for("chat") == "https://api.groq.com/openai/v1" and not groq.stream_usage
    inherited, narrowed, default = config.models[0].deployments
    assert inherited.apis == groq.apis and narrowed.apis == ("messages",) and default.apis == together.apis


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            'apis = ["chat", "talk"]',
            "providers[0].apis[1]: expected one of 'chat', 'completions', 'embeddings', 'responses', 'messages', "
            'got "talk"',
        ),
        ("apis = []", "providers[0].apis: expected at least one API"),
        ('base_urls = { chat2 = "https://x" }', "providers[0].base_urls.chat2: unknown API"),
        (
            'base_urls = { messages = "ftp://x" }',
            "providers[0].base_urls.messages: expected an http:// or https:// URL",
        ),
    ],
)
def test_bad_apis_name_the_key(tmp_path: Path, line: str, expected: str) -> None:
    text = MINIMAL.replace(
        'base_url = "https://api.groq.com/openai/v1"', f'base_url = "https://api.groq.com/openai/v1"\n{line}'
    )
    assert expected in error_of(tmp_path, text)
