"""Calls beside inference: relayed to one deployment as they are, and not measured.

- The Responses API's id-addressed calls (``GET``/``DELETE /v1/responses/{id}``, ``GET
  …/input_items``, ``POST …/cancel``) go to the deployment that created the response
  (``gateway.sessions.response_owners``); an id the gateway never bound is a 404, never a guess. A
  successful ``DELETE`` forgets the binding. A provider's 401 or 403 (its refusal of the gateway's key) is a 502
  naming the deployment (``gateway.errors.refused_credentials``), never relayed as the client's own.
- A response the gateway keeps itself (``gateway.conversations``: by translation, or under
  ``[responses] state = "gateway"``) is answered from its store: the response, its input items (the
  whole conversation it answered, in OpenAI's item shape: ``gateway.input_item_pages``), its deletion; such a
  response was never a background one: it cannot be cancelled, nor retrieved with ``stream=true`` (a 400).
- ``POST /v1/messages/count_tokens`` goes to the first Messages deployment of the model's plan that
  answers (the next one on a connection error, a 5xx, a 401 or 403 refusing the gateway's key, or a 404: many
  Anthropic-compatible hosts have no such endpoint), with the client's query (``?beta=true``) kept. When none
  counts it, the gateway counts the prompt itself with its pinned tokenizer (``gateway.token_estimate``), says so
  in the ``x-gateway-count: estimated`` header, and logs it; so it does for a model without Messages
  deployments (served over another API by translation).

They produce no answer to time, so they leave no ``Sample``: the stats hold inference only. Their
bodies are relayed whole (a ``GET ...?stream=true`` of a background response arrives at its end).
"""

from __future__ import annotations

import json
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.api import error_response, parse_json_body
from gateway.config import DeploymentConfig, ModelConfig, serving
from gateway.conversations import StoredResponse
from gateway.dialects import Dialect, dialect_for
from gateway.errors import (
    CREDENTIALS_REFUSED,
    GatewayError,
    InvalidRequest,
    ModelNotFound,
    NoCapacity,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    UpstreamError,
    UpstreamUnavailable,
    clip,
    refused_credentials,
)
from gateway.input_item_pages import input_item_page
from gateway.request_body import decoded_body
from gateway.routing import Candidate, RouteRequest
from gateway.runtime import GatewayRuntime, runtime_of
from gateway.sessions.bindings import Unavailable
from gateway.token_estimate import estimate_input_tokens
from gateway.upstream import AttemptTimeouts, forwardable_headers, redirect_words

logger = logging.getLogger("gateway")

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
    if 300 <= upstream.status < 400:  # relayed, the client would get a redirect without its location
        name = deployment.provider
        words = redirect_words(upstream.headers)
        raise UpstreamUnavailable(f"{name}: upstream returned {upstream.status}: {words}", provider=name)
    if upstream.status in CREDENTIALS_REFUSED:  # relayed, the client would read that its own key is wrong
        name = deployment.provider
        words = refused_credentials(deployment.name, upstream.status)
        raise UpstreamError(f"{name}: {words}", provider=name, status=upstream.status)
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
    kept = await runtime.conversations.get(response_id)
    if isinstance(kept, Unavailable):
        raise NoCapacity(
            f"cannot read response '{response_id}' now: the conversation store is unreachable",
            code="conversation_store_unavailable",
            headers={"retry-after": "1"},
        )
    if kept is not None and kept.scope == key.key_id:
        return _kept_call(runtime, request, response_id, kept)
    owner = await runtime.owners.owner(response_id)
    if isinstance(owner, Unavailable):
        raise NoCapacity(
            f"cannot tell which deployment holds response '{response_id}' now: the binding store is unreachable",
            code="binding_store_unavailable",
            headers={"retry-after": "1"},
        )
    if owner is None:
        raise NotFound(
            f"no response '{response_id}' is known to this gateway (not created through it, not stored: sent with "
            "'store: false' or cut before its end, or expired)",
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
    body = await _body(request, runtime.config.server.max_body_bytes) if request.method == "POST" else None
    status, response = await _relay(runtime, request, model, deployment, path, body or None, _RESPONSES)
    if request.method == "DELETE" and status < 300:
        runtime.owners.forget(response_id)
    return response


def _counters(runtime: GatewayRuntime, model: ModelConfig, size: int) -> tuple[Candidate, ...]:
    """The Messages deployments to ask, in routing order; none when the model has none or none can take it now
    (the gateway then counts itself: a model served over another API by translation is counted too)."""
    if not serving(model, "messages"):
        return ()
    try:
        plan = runtime.router.plan(RouteRequest(model, "messages", stream=False, prompt_tokens=size // 4, max_tokens=1))
    except GatewayError as exc:
        logger.info("count_tokens for model %s: no deployment to ask (%s)", model.name, exc.message)
        return ()
    return plan.candidates[: plan.policy.max_attempts]


def _kept_call(runtime: GatewayRuntime, request: Request, response_id: str, kept: StoredResponse) -> Response:
    """A response the gateway keeps itself (``gateway.conversations``), answered from its store."""
    action = request.url.path.rstrip("/").rsplit("/", 1)[-1]
    if request.method == "DELETE":
        runtime.conversations.delete(response_id)
        runtime.owners.forget(response_id)
        return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})
    if action == "input_items":
        return JSONResponse(input_item_page(kept.input, request.query_params))
    if action == "cancel":
        raise InvalidRequest(
            "only a background response can be cancelled; this one has completed", code="not_cancellable"
        )
    if request.query_params.get("stream", "").lower() == "true":
        # Only a background response streams again (the SDK's ``retrieve(..., stream=True)``); the gateway keeps
        # none. Its JSON body would reach an SDK reading events as a stream of none, with no error.
        raise InvalidRequest(
            f"response '{response_id}' was not created with 'background: true', so it cannot be streamed; "
            "retrieve it without 'stream'",
            param="stream",
            code="not_streamable",
        )
    return JSONResponse(kept.response)


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
    raw = await _body(request, runtime.config.server.max_body_bytes)
    body = parse_json_body(raw)
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("'model' is required and must be a non-empty string", param="model")
    model = runtime.config.model(name)
    if model is None:
        raise ModelNotFound(f"model '{clip(name)}' does not exist", param="model")
    if not key.allows(model.name):
        raise PermissionDenied(f"this API key may not use model '{model.name}'", code="model_not_allowed")
    path = "/messages/count_tokens" + (f"?{request.url.query}" if request.url.query else "")
    missing: list[str] = []  # deployments without the endpoint (404): many Anthropic-compatible hosts lack it
    failed: list[str] = []
    for candidate in _counters(runtime, model, len(raw)):
        sent = dict(body, model=candidate.deployment.model)
        try:
            status, response = await _relay(
                runtime, request, model, candidate.deployment, path, json.dumps(sent).encode(), _MESSAGES
            )
        except UpstreamError as exc:
            failed.append(f"{candidate.name}: {exc.message}")
            continue
        if status == 404:
            missing.append(candidate.name)
            continue
        if status < 500:
            return response
        failed.append(f"{candidate.name}: upstream returned {status}")
    logger.info(
        "count_tokens for model %s counted with the pinned tokenizer: no deployment counted it "
        "(no endpoint: %s; failed: %s)",
        model.name,
        ", ".join(missing) or "none",
        "; ".join(failed) or "none",
    )
    counted = estimate_input_tokens(body, runtime.counter)
    return JSONResponse({"input_tokens": counted}, headers={"x-gateway-count": "estimated"})


async def _body(request: Request, limit: int) -> bytes:
    """The request's body, refused past ``limit`` bytes, decompressed as an inference request's is (the header
    that named its coding is not forwarded: the provider gets plain bytes)."""
    raw = await request.body()
    if len(raw) > limit:
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
    return decoded_body(raw, request.headers.get("content-encoding", "").encode("latin-1"), limit)
