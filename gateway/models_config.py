"""The ``[[providers]]`` and ``[[models]]`` tables: which upstream serves which model, under which id, at what price.

Also the one cost formula (``token_cost_usd``) every part that prices tokens uses. A model's
deployments are checked against the providers and policies already parsed (``gateway.config``
parses those first and passes them in).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from gateway.policies import DEFAULT_POLICY, PolicyConfig
from gateway.samples import DEFAULT_APIS, ENDPOINTS, Endpoint
from gateway.toml_reader import TableReader
from gateway.translate.ir import BUILTIN_TOOLS, BuiltinTools

PrefillFormat = Literal["plain", "prefix", "vllm"]
PREFILL_FORMATS: tuple[PrefillFormat, ...] = ("plain", "prefix", "vllm")

DEFAULT_KEEPALIVE_S = 4.0
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")
"""An HTTP header name (RFC 9110's token), lower-cased."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CREDENTIAL_NAME = re.compile(
    r"(?:^|[-_.])(?:api_?key|key|token|secret|password|passwd|sig|signature|code|auth|authorization|credentials?)s?$"
)
"""A query parameter or header name that carries a credential (``key``, ``api-key``, ``subscription-key``,
``access_token``, Azure's ``sig`` and ``code``, ``x-goog-api-key``), lower-cased: a value the config file would
hold in plain text, and that no redaction covers (only keys from the environment are masked)."""


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
    api_key_header: str = "authorization"
    """The header the key goes in: ``authorization`` (as ``Bearer <key>``), or another name that carries the key
    as it is (``api-key`` for Azure OpenAI). The Messages API's own ``x-api-key`` is used for it regardless."""
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
    answers. A request whose estimated prompt does not fit skips it (``gateway.routing.health``)."""
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
        _check_url(table, f"base_urls.{name}", url)
        urls.append((api, url.rstrip("/")))
    return tuple(urls)


def under(base_url: str, path: str) -> str:
    """``path`` (which may carry a query of its own) under ``base_url``, whose query, if any, follows it:
    ``…/deployments/d?api-version=v`` and ``/chat/completions`` give ``…/deployments/d/chat/completions?api-version=v``
    (Azure OpenAI's form). Works alike on a whole URL and on its path and query alone."""
    return joined(*split_base(base_url), path)


def split_base(base_url: str) -> tuple[str, str]:
    """``base_url`` without its trailing slash, and its query ("" if none): what ``joined`` puts a path between."""
    base, _, query = base_url.partition("?")
    return base.rstrip("/"), query


def joined(base: str, query: str, path: str) -> str:
    """``under`` of a base URL already split (``split_base``): once per base URL, then a join per request."""
    if not query:
        return base + path
    return f"{base}{path}{'&' if '?' in path else '?'}{query}"


def key_header(header: str, key: str) -> tuple[str, str]:
    """The header that carries a provider's key (``ProviderConfig.api_key_header``) and its value: ``Bearer <key>``
    in ``authorization``, the key as it is in any other."""
    return header, f"Bearer {key}" if header == "authorization" else key


def parse_provider(table: TableReader) -> ProviderConfig:
    provider = ProviderConfig(
        name=_name(table, "name"),
        base_url=table.text("base_url").rstrip("/"),
        api_key_env=table.text("api_key_env", None),
        api_key_header=table.text("api_key_header", "authorization").lower(),
        max_concurrency=table.integer("max_concurrency", None, minimum=1),
        headers=table.str_table("headers"),
        keepalive_s=table.number("keepalive_s", DEFAULT_KEEPALIVE_S, positive=True),
        apis=_apis(table, DEFAULT_APIS),
        base_urls=_base_urls(table),
        stream_usage=table.flag("stream_usage", True),
    )
    _check_url(table, "base_url", provider.base_url)
    if not _HEADER_NAME.fullmatch(provider.api_key_header):
        raise table.error("api_key_header", f'expected an HTTP header name, got "{provider.api_key_header}"')
    for name, _ in provider.headers:
        lowered = name.lower()
        if lowered in ("authorization", "api-key", "x-api-key", provider.api_key_header) or _CREDENTIAL_NAME.search(
            lowered
        ):
            raise table.error(f"headers.{name}", "secrets must come from the environment (use api_key_env)")
    table.finish()
    return provider


def _name(table: TableReader, key: str, default: str | None = None) -> str:
    """A provider, model or deployment name: any text but control characters. A name is sent in response headers
    (``x-gateway-provider``, ``x-gateway-deployment``), where a line break makes the server drop every answer."""
    name = table.text(key) if default is None else table.text(key, default)
    if _CONTROL.search(name):
        raise table.error(key, f"must not contain control characters (line breaks, tabs), got {name!r}")
    return name


def _check_url(table: TableReader, key: str, url: str) -> None:
    """An http(s) URL with no credential in it: a key in a URL is echoed by providers' errors and written to logs,
    and only keys from the environment are redacted. Errors never repeat the URL's userinfo or query."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        raise table.error(key, "must not contain credentials (name them with api_key_env)")
    for pair in parts.query.split("&"):
        param = pair.partition("=")[0].lower()
        if param and _CREDENTIAL_NAME.search(param):
            raise table.error(
                key,
                f'must not carry a credential in its query ("{param}"): name it with api_key_env, '
                "and the header it goes in with api_key_header",
            )
    if parts.scheme not in ("http", "https") or not parts.netloc:
        shown = parts._replace(query="", fragment="").geturl()
        raise table.error(key, f'expected an http:// or https:// URL, got "{shown}"')


def parse_deployment(
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
        name=_name(table, "name", provider),
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


def parse_model(
    table: TableReader, providers: Mapping[str, ProviderConfig], policies: Mapping[str, PolicyConfig]
) -> ModelConfig:
    name = _name(table, "name")
    policy = table.text("policy", DEFAULT_POLICY)
    if policy not in policies:
        raise table.error("policy", f'unknown policy "{policy}" (known: {", ".join(policies)})')
    translate = table.flag("translate", True)
    builtin_tools = table.choice("builtin_tools", BUILTIN_TOOLS, "refuse")
    deployment_tables = table.tables("deployments", required=True)
    if not deployment_tables:
        raise table.error("deployments", "expected at least one deployment")
    deployments = tuple(parse_deployment(t, providers, translate, builtin_tools) for t in deployment_tables)
    names = [d.name for d in deployments]
    for index, deployment in enumerate(deployments):
        if names.index(deployment.name) != index:
            raise deployment_tables[index].error(
                "name", f'duplicate deployment name "{deployment.name}" (set a distinct name)'
            )
    table.finish()
    return ModelConfig(name=name, deployments=deployments, policy=policy)
