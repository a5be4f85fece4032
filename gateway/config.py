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
import ipaddress
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from gateway.canary_config import CanaryConfig as CanaryConfig
from gateway.canary_config import parse_canary

# Policies live in their own module; re-exported here, where every other config type is.
from gateway.policies import BUILTIN_POLICIES as BUILTIN_POLICIES
from gateway.policies import DEFAULT_POLICY as DEFAULT_POLICY
from gateway.policies import PolicyConfig as PolicyConfig
from gateway.policies import parse_policy
from gateway.responses_config import ResponsesConfig, parse_responses
from gateway.samples import DEFAULT_APIS, ENDPOINTS, Endpoint

# So do the stats keys (the store's and Redis's, the largest table).
from gateway.stats_config import REDIS_MODES as REDIS_MODES
from gateway.stats_config import STATS_BACKENDS as STATS_BACKENDS
from gateway.stats_config import RedisMode as RedisMode
from gateway.stats_config import StatsBackend as StatsBackend
from gateway.stats_config import StatsConfig as StatsConfig
from gateway.stats_config import parse_stats, resolve_stats_files
from gateway.stats_config import split_address as split_address
from gateway.toml_reader import MISSING, describe_value
from gateway.toml_reader import ConfigError as ConfigError
from gateway.toml_reader import TableReader as TableReader
from gateway.translate.ir import BUILTIN_TOOLS, BuiltinTools

PrefillFormat = Literal["plain", "prefix", "vllm"]
PREFILL_FORMATS: tuple[PrefillFormat, ...] = ("plain", "prefix", "vllm")
Workers = int | Literal["auto"]


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 32_000_000
    """Request bodies above this are refused with 413 before they are read in full. The default is
    Anthropic's own limit (32 MB): a long agent session re-sends its whole history every turn."""
    access_log: bool = True
    """One JSON line per request on the ``gateway.access`` logger (no prompt or answer text)."""
    log_bodies: bool = False
    """Debug only: add the request body and the answer text to each access-log line."""
    shutdown_grace_s: float = 30.0
    """On SIGTERM, how long requests in flight (streams included) may run before they are cut."""
    header_timeout_s: float = 10.0
    """A client's request head must be complete this long after its first byte (or its connection opened); else
    the socket closes. ``0``: no deadline."""
    body_timeout_s: float = 30.0
    """A request's whole body must have arrived this long after its head, else 408 in the client API's shape."""
    max_connections: int = 10_000
    """Open client connections per worker process; past it a new one is answered 503 and closed."""
    keepalive_timeout_s: float = 75.0
    """How long an idle kept-alive client connection stays open. Longer than the clients' own pool expiry
    (httpx, and so the OpenAI SDK: 5 s; load balancers: 60 s), so that the server is never the side that closes a
    connection a client is just reusing: when both sides expire it at the same moment (uvicorn's default, 5 s), a
    request sent into a connection the server is closing fails with no response."""
    workers: Workers = 1
    """Worker processes serving the port, each a full replica (``gateway.workers``); ``"auto"``: one
    per core available to the process. ``gateway serve --workers N`` overrides it."""
    metrics_key_env: str | None = None
    """The environment variable holding the key ``GET /metrics`` needs (``Authorization: Bearer``); None: /metrics
    is open, and its spend and budget series carry no key or team names."""
    trusted_proxies: tuple[str, ...] = ("127.0.0.1", "::1")
    """Addresses (or networks) whose ``X-Forwarded-For`` is believed as the client's address; () believes none."""


@dataclass(frozen=True, slots=True)
class AuthConfig:
    api_keys_env: str | None = "GATEWAY_API_KEYS"
    """Names the env var holding comma-separated client keys; unset or empty means no client auth."""
    api_keys_file: str | None = None
    """A TOML file of named client keys with per-key models and limits (see ``gateway.admission.auth``).
    Relative paths are read from the config file's directory."""
    admin_key_env: str | None = "GATEWAY_ADMIN_KEY"
    allow_unauthenticated: bool = False
    """With no client keys, the gateway serves loopback clients only, unless this says otherwise."""


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Bounds on what one request, one key and the whole replica may ask for. ``0`` means no limit.

    Rates are per key and per minute, shared by every replica through Redis when
    ``[stats] backend = "redis"``; in-flight counts are per replica.
    """

    max_header_bytes: int = 32 * 1024
    """Total size of a request's header names and values (431 above it)."""
    max_json_depth: int = 64
    """Deepest nesting of arrays and objects in a request body."""
    max_messages: int = 2048
    max_n: int = 8
    """Largest ``n`` (choices per request) accepted."""
    max_tokens: int = 0
    """Ceiling on ``max_tokens`` / ``max_completion_tokens``; larger values are refused with 400."""
    max_in_flight: int = 1024
    """Requests this replica serves at once; above it, 503."""
    max_in_flight_per_key: int = 0
    """Default for keys that set no ``max_in_flight`` of their own; above it, 429."""
    requests_per_minute_per_key: int = 0
    """Default for keys that set no ``requests_per_minute`` of their own."""
    tokens_per_minute_per_key: int = 0
    """Default for keys that set no ``tokens_per_minute``: prompt estimate + ``max_tokens`` × ``n``
    at admission, corrected with the output actually produced."""


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    otel_genai: bool = False
    """Also export OpenTelemetry's GenAI client metrics (``gen_ai_client_*``) beside the ``gateway_`` ones."""


DEFAULT_KEEPALIVE_S = 4.0


def token_cost_usd(
    price_in: float,
    price_out: float,
    prompt_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
    price_cached_in: float | None = None,
) -> float:
    """The one cost formula: prices are USD per 1M tokens. Scores, samples, budgets and the bench use it.

    ``cached_tokens`` of the prompt are billed at ``price_cached_in`` (None: no discount, ``price_in``).
    """
    cached = min(max(cached_tokens, 0), prompt_tokens)
    cached_price = price_in if price_cached_in is None else price_cached_in
    return ((prompt_tokens - cached) * price_in + cached * cached_price + output_tokens * price_out) / 1e6


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """One upstream, OpenAI-compatible API. ``api_key_env`` names the variable holding its key."""

    name: str
    base_url: str
    api_key_env: str | None = None
    max_concurrency: int | None = None
    """A ceiling on requests in flight to this provider, all its models together (None: none); below it the
    gateway learns each deployment's real limit from its refusals (``gateway.routing.capacity``)."""
    headers: tuple[tuple[str, str], ...] = ()
    """Extra, non-secret headers sent with every upstream request (e.g. an org id)."""
    keepalive_s: float = DEFAULT_KEEPALIVE_S
    """How long an idle upstream connection is kept for reuse. Keep it under the provider's own idle
    timeout (5 s for uvicorn-based servers such as vLLM): a request sent on a connection the server
    is closing fails before any answer."""
    apis: tuple[Endpoint, ...] = DEFAULT_APIS
    """The APIs this provider speaks; its deployments serve these unless they name their own."""
    base_urls: tuple[tuple[Endpoint, str], ...] = ()
    """A base URL per API where it differs from ``base_url`` (e.g. a Messages endpoint under ``/anthropic``)."""
    stream_usage: bool = True
    """Ask for the usage chunk of chat and completion streams (``stream_options.include_usage``) when the
    client did not, so that cost is known; off for a provider that rejects the option. The client never
    sees a usage chunk it did not ask for."""

    def base_url_for(self, api: Endpoint) -> str:
        for name, url in self.base_urls:
            if name == api:
                return url
        return self.base_url


@dataclass(frozen=True, slots=True)
class DeploymentConfig:
    """A model served by one provider under that provider's own model id."""

    provider: str
    model: str
    """The upstream's model id, sent as ``model`` in the forwarded body."""
    price_in: float = 0.0
    """USD per 1M prompt tokens."""
    price_out: float = 0.0
    """USD per 1M output tokens."""
    price_cached_in: float | None = None
    """USD per 1M prompt tokens served from the provider's prompt cache; None: no discount (``price_in``)."""
    name: str = ""
    """Unique within the model; defaults to the provider's name."""
    continue_prefill: bool = False
    """This deployment continues an assistant prefill (a last ``assistant`` message, or for completions
    the prompt's end) rather than answering it anew: a stream that broke elsewhere after part of the
    answer reached the client may be finished here (``gateway.relay.recovery``)."""
    prefill_format: PrefillFormat = "plain"
    """How a chat prefill is marked: ``plain`` (a last assistant message, nothing more), ``prefix`` (that
    message carries ``"prefix": true``: DeepSeek, Mistral), ``vllm`` (the body carries
    ``continue_final_message: true, add_generation_prompt: false``). Completions append to the prompt."""
    apis: tuple[Endpoint, ...] = DEFAULT_APIS
    """The APIs this deployment serves (its own ``apis``, else its provider's): a request reaches only
    deployments that speak its API."""
    context_window: int | None = None
    """Tokens this deployment accepts (prompt and answer); None: learned from its ``context_length_exceeded``
    answers. A request whose estimated prompt does not fit skips it (``gateway.routing.windows``)."""
    translate: bool = True
    """Serve requests in the model's other APIs (chat, Responses, Messages) by translating them to one this
    deployment speaks (``gateway.translate``); its own ``translate``, else its model's, else true."""
    builtin_tools: BuiltinTools = "refuse"
    """A translated request offering a built-in tool this deployment's API cannot run (Responses' web search,
    Messages' server tools): ``refuse`` it naming the tool, or ``omit`` the tool and serve the rest, saying so
    (``x-gateway-omitted-tools``, the access log). Its own, else its model's, else ``refuse``."""

    def cost_usd(self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """What ``prompt_tokens`` in (``cached_tokens`` of them from the prompt cache) and ``output_tokens``
        out cost here, in USD (prices are per 1M tokens)."""
        return token_cost_usd(
            self.price_in, self.price_out, prompt_tokens, output_tokens, cached_tokens, self.price_cached_in
        )


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: str
    """What clients send as ``model``."""
    deployments: tuple[DeploymentConfig, ...]
    policy: str = DEFAULT_POLICY


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


def serving(model: ModelConfig, api: Endpoint) -> tuple[DeploymentConfig, ...]:
    """The model's deployments that speak ``api`` natively (``gateway.routing.apis.reachable`` adds translation)."""
    return tuple(d for d in model.deployments if api in d.apis)


def _apis(table: TableReader, default: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
    if not table.has("apis"):
        table.strings("apis")  # mark the key seen
        return default
    names = table.strings("apis")
    apis: list[Endpoint] = []
    for index, name in enumerate(names):
        api = next((e for e in ENDPOINTS if e == name), None)
        if api is None:
            raise table.error(f"apis[{index}]", f'expected one of {", ".join(map(repr, ENDPOINTS))}, got "{name}"')
        if api not in apis:
            apis.append(api)
    if not apis:
        raise table.error("apis", "expected at least one API")
    return tuple(apis)


def _base_urls(table: TableReader) -> tuple[tuple[Endpoint, str], ...]:
    urls: list[tuple[Endpoint, str]] = []
    for name, url in table.str_table("base_urls"):
        api = next((e for e in ENDPOINTS if e == name), None)
        if api is None:
            raise table.error(f"base_urls.{name}", f"unknown API (expected one of: {', '.join(ENDPOINTS)})")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.username or parts.password:
            raise table.error(
                f"base_urls.{name}", f'expected an http:// or https:// URL without credentials, got "{url}"'
            )
        urls.append((api, url.rstrip("/")))
    return tuple(urls)


def _parse_server(table: TableReader) -> ServerConfig:
    default = ServerConfig()
    server = ServerConfig(
        host=table.text("host", default.host),
        port=table.integer("port", default.port, minimum=0),
        max_body_bytes=table.integer("max_body_bytes", default.max_body_bytes, minimum=1),
        access_log=table.flag("access_log", default.access_log),
        log_bodies=table.flag("log_bodies", default.log_bodies),
        shutdown_grace_s=table.number("shutdown_grace_s", default.shutdown_grace_s, minimum=0.0),
        header_timeout_s=table.number("header_timeout_s", default.header_timeout_s, minimum=0.0),
        body_timeout_s=table.number("body_timeout_s", default.body_timeout_s, minimum=0.0),
        max_connections=table.integer("max_connections", default.max_connections, minimum=0),
        keepalive_timeout_s=table.number("keepalive_timeout_s", default.keepalive_timeout_s, positive=True),
        workers=_parse_workers(table),
        metrics_key_env=table.text("metrics_key_env", None),
        trusted_proxies=table.strings("trusted_proxies", default.trusted_proxies),
    )
    for address in server.trusted_proxies:
        if address != "*" and not _is_network(address):
            raise table.error("trusted_proxies", f'expected IP addresses or networks (or "*"), got "{address}"')
    if server.port > 65535:
        raise table.error("port", f"expected a port number 0-65535, got {server.port}")
    if server.log_bodies and not server.access_log:
        raise table.error("log_bodies", "needs access_log = true (bodies are written to the access log)")
    table.finish()
    return server


def _is_network(address: str) -> bool:
    try:
        ipaddress.ip_network(address, strict=False)
    except ValueError:
        return False
    return True


def resolve_metrics_key(config: GatewayConfig, environ: Mapping[str, str]) -> str | None:
    """The key ``GET /metrics`` needs (``[server] metrics_key_env``); a named but unset variable is an error."""
    name = config.server.metrics_key_env
    if name is None:
        return None
    value = environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"{config.source}: server.metrics_key_env: environment variable {name} is not set")
    return value


def _parse_workers(table: TableReader) -> Workers:
    value = table.raw("workers")
    if value is MISSING:
        return 1
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value  # checked just above: "auto" or a count
    raise table.error("workers", f'expected a number of workers >= 1 or "auto", got {describe_value(value)}')


def _parse_auth(table: TableReader) -> AuthConfig:
    default = AuthConfig()
    auth = AuthConfig(
        api_keys_env=table.text("api_keys_env", default.api_keys_env),
        api_keys_file=table.text("api_keys_file", default.api_keys_file),
        admin_key_env=table.text("admin_key_env", default.admin_key_env),
        allow_unauthenticated=table.flag("allow_unauthenticated", default.allow_unauthenticated),
    )
    table.finish()
    return auth


def _parse_limits(table: TableReader) -> LimitsConfig:
    default = LimitsConfig()
    limits = LimitsConfig(
        max_header_bytes=table.integer("max_header_bytes", default.max_header_bytes, minimum=1),
        max_json_depth=table.integer("max_json_depth", default.max_json_depth, minimum=1),
        max_messages=table.integer("max_messages", default.max_messages, minimum=0),
        max_n=table.integer("max_n", default.max_n, minimum=1),
        max_tokens=table.integer("max_tokens", default.max_tokens, minimum=0),
        max_in_flight=table.integer("max_in_flight", default.max_in_flight, minimum=0),
        max_in_flight_per_key=table.integer("max_in_flight_per_key", default.max_in_flight_per_key, minimum=0),
        requests_per_minute_per_key=table.integer(
            "requests_per_minute_per_key", default.requests_per_minute_per_key, minimum=0
        ),
        tokens_per_minute_per_key=table.integer(
            "tokens_per_minute_per_key", default.tokens_per_minute_per_key, minimum=0
        ),
    )
    table.finish()
    return limits


def _parse_metrics(table: TableReader) -> MetricsConfig:
    metrics = MetricsConfig(otel_genai=table.flag("otel_genai", MetricsConfig().otel_genai))
    table.finish()
    return metrics


def _parse_provider(table: TableReader) -> ProviderConfig:
    provider = ProviderConfig(
        name=table.text("name"),
        base_url=table.text("base_url").rstrip("/"),
        api_key_env=table.text("api_key_env", None),
        max_concurrency=table.integer("max_concurrency", None, minimum=1),
        headers=table.str_table("headers"),
        keepalive_s=table.number("keepalive_s", DEFAULT_KEEPALIVE_S, positive=True),
        apis=_apis(table, DEFAULT_APIS),
        base_urls=_base_urls(table),
        stream_usage=table.flag("stream_usage", True),
    )
    parts = urlsplit(provider.base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise table.error("base_url", f'expected an http:// or https:// URL, got "{provider.base_url}"')
    if parts.username or parts.password:
        # A key in the URL would end up in logs; keys belong in api_key_env.
        raise table.error("base_url", "must not contain credentials (name them with api_key_env)")
    for name, _ in provider.headers:
        if name.lower() in ("authorization", "api-key", "x-api-key"):
            raise table.error(f"headers.{name}", "secrets must come from the environment (use api_key_env)")
    table.finish()
    return provider


def _parse_deployment(
    table: TableReader,
    providers: Mapping[str, ProviderConfig],
    translate: bool = True,
    builtin_tools: BuiltinTools = "refuse",
) -> DeploymentConfig:
    provider = table.text("provider")
    if provider not in providers:
        known = ", ".join(providers) or "none"
        raise table.error("provider", f'unknown provider "{provider}" (known: {known})')
    deployment = DeploymentConfig(
        provider=provider,
        model=table.text("model"),
        price_in=table.number("price_in", 0.0, minimum=0.0),
        price_out=table.number("price_out", 0.0, minimum=0.0),
        price_cached_in=table.number("price_cached_in", None, minimum=0.0),
        name=table.text("name", provider),
        continue_prefill=table.flag("continue_prefill", False),
        prefill_format=table.choice("prefill_format", PREFILL_FORMATS, "plain"),
        apis=_apis(table, providers[provider].apis),
        context_window=table.integer("context_window", None, minimum=1),
        translate=table.flag("translate", translate),
        builtin_tools=table.choice("builtin_tools", BUILTIN_TOOLS, builtin_tools),
    )
    if table.has("prefill_format") and not deployment.continue_prefill:
        raise table.error("prefill_format", "only applies with continue_prefill = true")
    table.finish()
    return deployment


def _parse_model(
    table: TableReader, providers: Mapping[str, ProviderConfig], policies: Mapping[str, PolicyConfig]
) -> ModelConfig:
    name = table.text("name")
    policy = table.text("policy", DEFAULT_POLICY)
    if policy not in policies:
        raise table.error("policy", f'unknown policy "{policy}" (known: {", ".join(policies)})')
    translate = table.flag("translate", True)
    builtin_tools = table.choice("builtin_tools", BUILTIN_TOOLS, "refuse")
    deployment_tables = table.tables("deployments", required=True)
    if not deployment_tables:
        raise table.error("deployments", "expected at least one deployment")
    deployments = tuple(_parse_deployment(t, providers, translate, builtin_tools) for t in deployment_tables)
    names = [d.name for d in deployments]
    for index, deployment in enumerate(deployments):
        if names.index(deployment.name) != index:
            raise deployment_tables[index].error(
                "name", f'duplicate deployment name "{deployment.name}" (set a distinct name)'
            )
    table.finish()
    return ModelConfig(name=name, deployments=deployments, policy=policy)


def parse_config(data: Mapping[str, Any], source: str = "<config>") -> GatewayConfig:
    """Validate an already-parsed TOML document. Raises ``ConfigError`` on the first problem."""
    root = TableReader(data, "", source)
    server = _parse_server(root.table("server"))
    stats = parse_stats(root.table("stats"))
    auth = _parse_auth(root.table("auth"))
    limits = _parse_limits(root.table("limits"))
    metrics = _parse_metrics(root.table("metrics"))
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
        provider = _parse_provider(table)
        if provider.name in providers:
            raise table.error("name", f'duplicate provider name "{provider.name}"')
        providers[provider.name] = provider

    model_tables = root.tables("models")
    models: dict[str, ModelConfig] = {}
    for table in model_tables:
        model = _parse_model(table, providers, policies)
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
    source = path.name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}") from exc
    config = parse_config(data, source=source)
    keys_file = config.auth.api_keys_file
    if keys_file is not None and not Path(keys_file).is_absolute():
        # Relative to the config file, so that the pair can be moved together.
        auth = dataclasses.replace(config.auth, api_keys_file=str(path.parent / keys_file))
        config = dataclasses.replace(config, auth=auth)
    return dataclasses.replace(config, stats=resolve_stats_files(config.stats, path.parent))


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
