"""Calls beside inference: relayed to one deployment as they are, and not measured.

- The Responses API's id-addressed calls (``GET``/``DELETE /v1/responses/{id}``, ``GET
  …/input_items``, ``POST …/cancel``) go to the deployment that created the response
  (``gateway.response_owners``); an id the gateway never bound is a 404, never a guess. A
  successful ``DELETE`` forgets the binding.
- ``POST /v1/messages/count_tokens`` goes to the first Messages deployment of the model's plan that
  answers (the next one on a connection error or a 5xx).

They produce no answer to time, so they leave no ``Sample``: the stats hold inference only. Their
bodies are relayed whole (a ``GET ...?stream=true`` of a background response arrives at its end).
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response

from gateway.api import error_response, parse_json_body
from gateway.bindings import Unavailable
from gateway.config import DeploymentConfig, ModelConfig, serving
from gateway.dialects import Dialect, dialect_for
from gateway.errors import (
    GatewayError,
    InvalidRequest,
    ModelNotFound,
    NoCapacity,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    UpstreamError,
    clip,
)
from gateway.routing import RouteRequest
from gateway.routing.apis import no_deployment_for
from gateway.runtime import GatewayRuntime, runtime_of
from gateway.upstream import AttemptTimeouts, forwardable_headers

_RESPONSES = dialect_for("responses")
_MESSAGES = dialect_for("messages")
_PASSED_HEADERS = ("content-type", "retry-after", "x-request-id")


def _timeouts(runtime: GatewayRuntime, model: ModelConfig) -> AttemptTimeouts:
    policy = runtime.config.policy_for(model)
    return AttemptTimeouts(
        connect_s=policy.connect_timeout_s, read_s=policy.idle_timeout_s, total_s=policy.total_timeout_s
    )


async def _relay(
    runtime: GatewayRuntime,
    request: Request,
    model: ModelConfig,
    deployment: DeploymentConfig,
    path: str,
    body: bytes | None,
    dialect: Dialect,
) -> tuple[int, Response]:
    client = runtime.upstreams[deployment.provider]
    headers = forwardable_headers(request.scope["headers"])
    upstream = await client.request(request.method, path, body, _timeouts(runtime, model), headers, dialect.api)
    async with upstream:
        content = client.redact(await upstream.read_all())
    passed = {k: v for k, v in upstream.headers.items() if k.lower() in _PASSED_HEADERS}
    passed["x-gateway-provider"] = deployment.provider
    passed["x-gateway-deployment"] = deployment.name
    return upstream.status, Response(content, status_code=upstream.status, headers=passed)


async def response_call(request: Request) -> Response:
    """``GET``/``DELETE /v1/responses/{id}``, ``GET …/input_items``, ``POST …/cancel``: to the response's owner."""
    runtime = runtime_of(request.scope)
    runtime.requests.enter()
    try:
        return await _response_call(runtime, request)
    except GatewayError as exc:
        return error_response(exc, dialect=_RESPONSES)
    finally:
        runtime.requests.leave()


async def _response_call(runtime: GatewayRuntime, request: Request) -> Response:
    key = runtime.access.authenticate(request.scope)
    response_id: str = request.path_params["response_id"]
    owner = await runtime.owners.owner(response_id)
    if isinstance(owner, Unavailable):
        raise NoCapacity(
            f"cannot tell which deployment holds response '{response_id}' now: the binding store is unreachable",
            code="binding_store_unavailable",
            headers={"retry-after": "1"},
        )
    if owner is None:
        raise NotFound(
            f"no response '{response_id}' is known to this gateway (not created through it, or its binding expired)",
            code="response_not_found",
        )
    if not key.allows(owner.model):
        raise PermissionDenied(f"this API key may not use model '{owner.model}'", code="model_not_allowed")
    model = runtime.config.model(owner.model)
    deployment = next((d for d in serving(model, "responses") if d.name == owner.deployment), None) if model else None
    if model is None or deployment is None:
        raise NotFound(
            f"response '{response_id}' is held by deployment '{owner.deployment}' of model '{owner.model}', "
            "which this gateway no longer serves over the Responses API",
            code="response_owner_gone",
        )
    path = request.url.path.removeprefix("/v1")
    if request.url.query:
        path += "?" + request.url.query
    body = await request.body() if request.method == "POST" else None
    status, response = await _relay(runtime, request, model, deployment, path, body or None, _RESPONSES)
    if request.method == "DELETE" and status < 300:
        runtime.owners.forget(response_id)
    return response


async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: to a Messages deployment of the model, errors in Anthropic's shape."""
    runtime = runtime_of(request.scope)
    runtime.requests.enter()
    try:
        return await _count_tokens(runtime, request)
    except GatewayError as exc:
        return error_response(exc, dialect=_MESSAGES)
    finally:
        runtime.requests.leave()


async def _count_tokens(runtime: GatewayRuntime, request: Request) -> Response:
    key = runtime.access.authenticate(request.scope)
    raw = await request.body()
    limit = runtime.config.server.max_body_bytes
    if len(raw) > limit:
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
    body = parse_json_body(raw)
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("'model' is required and must be a non-empty string", param="model")
    model = runtime.config.model(name)
    if model is None:
        raise ModelNotFound(f"model '{clip(name)}' does not exist", param="model")
    if not serving(model, "messages"):
        raise no_deployment_for(model, "messages")
    if not key.allows(model.name):
        raise PermissionDenied(f"this API key may not use model '{model.name}'", code="model_not_allowed")
    plan = runtime.router.plan(RouteRequest(model, "messages", stream=False, prompt_tokens=len(raw) // 4, max_tokens=1))
    last: UpstreamError | None = None
    for candidate in plan.candidates[: plan.policy.max_attempts]:
        sent = dict(body, model=candidate.deployment.model)
        try:
            status, response = await _relay(
                runtime,
                request,
                model,
                candidate.deployment,
                "/messages/count_tokens",
                json.dumps(sent).encode(),
                _MESSAGES,
            )
        except UpstreamError as exc:
            last = exc
            continue
        if status < 500:
            return response
        last = UpstreamError(f"{candidate.provider.name}: upstream returned {status}", provider=candidate.provider.name)
    raise last or NoCapacity("no deployment could count the tokens")
