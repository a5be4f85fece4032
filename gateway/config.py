"""The TOML config, parsed into frozen, typed objects and validated in full at load time.

Loading is the cheap, pure first phase: ``load_config(path)`` reads and validates, and does no
I/O beyond reading the file. Secrets are named by environment variable only and resolved at
start-up by ``resolve_secrets``. Every error names the file, the key path and what was
expected, e.g.::

    config.toml: models[2].deployments[0].provider: unknown provider "grok" (known: groq, together)

Unknown keys are errors: a typo must never be silently ignored. Usage::

    config = load_config("config.toml")
    secrets = resolve_secrets(config, os.environ)
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Each section lives in its own module (its dataclasses and its parser); every config type is
# re-exported here, where callers have always imported them from.
from gateway.access_config import AuthConfig as AuthConfig
from gateway.access_config import LimitsConfig as LimitsConfig
from gateway.access_config import parse_auth, parse_limits
from gateway.canary_config import CanaryConfig as CanaryConfig
from gateway.canary_config import parse_canary
from gateway.models_config import DEFAULT_KEEPALIVE_S as DEFAULT_KEEPALIVE_S
from gateway.models_config import PREFILL_FORMATS as PREFILL_FORMATS
from gateway.models_config import DeploymentConfig as DeploymentConfig
from gateway.models_config import ModelConfig as ModelConfig
from gateway.models_config import PrefillFormat as PrefillFormat
from gateway.models_config import ProviderConfig as ProviderConfig
from gateway.models_config import parse_model, parse_provider
from gateway.models_config import serving as serving
from gateway.models_config import token_cost_usd as token_cost_usd
from gateway.policies import BUILTIN_POLICIES as BUILTIN_POLICIES
from gateway.policies import DEFAULT_POLICY as DEFAULT_POLICY
from gateway.policies import PolicyConfig as PolicyConfig
from gateway.policies import parse_policy
from gateway.responses_config import ResponsesConfig as ResponsesConfig
from gateway.responses_config import parse_responses
from gateway.server_config import MetricsConfig as MetricsConfig
from gateway.server_config import ServerConfig as ServerConfig
from gateway.server_config import Workers as Workers
from gateway.server_config import parse_metrics, parse_server
from gateway.stats_config import REDIS_MODES as REDIS_MODES
from gateway.stats_config import STATS_BACKENDS as STATS_BACKENDS
from gateway.stats_config import RedisMode as RedisMode
from gateway.stats_config import StatsBackend as StatsBackend
from gateway.stats_config import StatsConfig as StatsConfig
from gateway.stats_config import parse_stats, resolve_stats_files
from gateway.stats_config import split_address as split_address
from gateway.toml_reader import ConfigError as ConfigError
from gateway.toml_reader import TableReader as TableReader


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """The whole validated config. ``source`` is the file it came from, for messages."""

    providers: tuple[ProviderConfig, ...]
    models: tuple[ModelConfig, ...]
    server: ServerConfig = field(default_factory=ServerConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    responses: ResponsesConfig = field(default_factory=ResponsesConfig)
    policies: Mapping[str, PolicyConfig] = field(default_factory=lambda: dict(BUILTIN_POLICIES))
    source: str = "<config>"
    canary: CanaryConfig | None = None
    """Scheduled task checks per deployment (``[canary]``); None: none."""

    def provider(self, name: str) -> ProviderConfig:
        for provider in self.providers:
            if provider.name == name:
                return provider
        raise KeyError(name)

    def model(self, name: str) -> ModelConfig | None:
        for model in self.models:
            if model.name == name:
                return model
        return None

    def policy_for(self, model: ModelConfig) -> PolicyConfig:
        return self.policies[model.policy]


def parse_config(data: Mapping[str, Any], source: str = "<config>") -> GatewayConfig:
    """Validate an already-parsed TOML document. Raises ``ConfigError`` on the first problem."""
    root = TableReader(data, "", source)
    server = parse_server(root.table("server"))
    stats = parse_stats(root.table("stats"))
    auth = parse_auth(root.table("auth"))
    limits = parse_limits(root.table("limits"))
    metrics = parse_metrics(root.table("metrics"))
    responses = parse_responses(root.table("responses"))
    canary = parse_canary(root.table("canary")) if root.has("canary") else None

    policies: dict[str, PolicyConfig] = dict(BUILTIN_POLICIES)
    policy_root = root.table("policies")
    for name in policy_root.names():
        policies[name] = parse_policy(name, policy_root.table(name), policies)
    policy_root.finish()

    provider_tables = root.tables("providers")
    providers: dict[str, ProviderConfig] = {}
    for table in provider_tables:
        provider = parse_provider(table)
        if provider.name in providers:
            raise table.error("name", f'duplicate provider name "{provider.name}"')
        providers[provider.name] = provider

    model_tables = root.tables("models")
    models: dict[str, ModelConfig] = {}
    for table in model_tables:
        model = parse_model(table, providers, policies)
        if model.name in models:
            raise table.error("name", f'duplicate model name "{model.name}"')
        models[model.name] = model
    if not models:
        raise root.error("models", "expected at least one [[models]] entry")
    root.finish()
    return GatewayConfig(
        providers=tuple(providers.values()),
        models=tuple(models.values()),
        server=server,
        stats=stats,
        auth=auth,
        limits=limits,
        metrics=metrics,
        responses=responses,
        policies=policies,
        source=source,
        canary=canary,
    )


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate a TOML config file."""
    path = Path(path)
    config = parse_config(read_toml(path), source=path.name)
    keys_file = config.auth.api_keys_file
    if keys_file is not None and not Path(keys_file).is_absolute():
        # Relative to the config file, so that the pair can be moved together.
        auth = dataclasses.replace(config.auth, api_keys_file=str(path.parent / keys_file))
        config = dataclasses.replace(config, auth=auth)
    return dataclasses.replace(config, stats=resolve_stats_files(config.stats, path.parent))


def read_toml(path: Path) -> dict[str, Any]:
    """A config file's TOML, not yet validated; ``ConfigError`` in one line if it cannot be read or parsed."""
    source = path.name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        # A ValueError, not an OSError: uncaught, a reload with a mis-saved file would answer 500.
        raise ConfigError(f"{source}: not UTF-8 text (at byte offset {exc.start})") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}") from exc
    except RecursionError as exc:
        # tomllib reads nested arrays and inline tables by recursion: thousands of "[" overflow it.
        raise ConfigError(f"{source}: invalid TOML: arrays or tables nested too deeply") from exc
    return data


def resolve_secrets(config: GatewayConfig, environ: Mapping[str, str]) -> dict[str, str | None]:
    """Each provider's key from the environment. A named but unset variable is an error.

    The returned mapping is the only place keys live; it is never logged or rendered.
    """
    keys: dict[str, str | None] = {}
    missing: list[str] = []
    for index, provider in enumerate(config.providers):
        if provider.api_key_env is None:
            keys[provider.name] = None
            continue
        value = environ.get(provider.api_key_env, "").strip()
        if not value:
            missing.append(
                f"providers[{index}].api_key_env: environment variable {provider.api_key_env} is not set "
                f'(expected the API key of provider "{provider.name}")'
            )
        keys[provider.name] = value or None
    if missing:
        raise ConfigError(f"{config.source}: " + "; ".join(missing))
    return keys


def resolve_metrics_key(config: GatewayConfig, environ: Mapping[str, str]) -> str | None:
    """The key ``GET /metrics`` needs (``[server] metrics_key_env``); a named but unset variable is an error."""
    name = config.server.metrics_key_env
    if name is None:
        return None
    value = environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"{config.source}: server.metrics_key_env: environment variable {name} is not set")
    return value
