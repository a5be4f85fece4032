"""The gateway's routing endpoints: the live ranking of every model, and config reload.

``GET /v1/gateway/routes`` shows, per model, the order a request would try its deployments
in right now and every number behind that order (admin key: it reveals the configuration). Query
parameters shape the hypothetical request: ``model``, ``prompt_tokens`` (default 500),
``max_tokens`` (default: the model's observed answer length), ``endpoint``.

``POST /v1/gateway/reload`` (admin key) re-reads the config file and swaps it in; an
invalid config answers 400 with the error, and the old config keeps serving. Under ``gateway
serve --workers N`` the worker that answers then has its supervisor reload every worker.
"""

from __future__ import annotations

import os
import signal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.api import error_response
from gateway.config import ConfigError
from gateway.errors import GatewayError, InvalidRequest, ModelNotFound
from gateway.metrics import WORKER_ENV
from gateway.reload import reloader_of
from gateway.routing.explain import ranking_json
from gateway.runtime import require_admin, runtime_of
from gateway.samples import Endpoint
from gateway.tokens import TokenizerError

_ENDPOINTS: tuple[Endpoint, ...] = ("chat", "completions", "embeddings")


def _positive_int(request: Request, name: str, default: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidRequest(f"'{name}' must be a positive integer, got {raw!r}", param=name)
    return value


async def routes(request: Request) -> Response:
    require_admin(request)
    runtime = runtime_of(request.scope)
    try:
        prompt_tokens = _positive_int(request, "prompt_tokens", 500) or 500
        max_tokens = _positive_int(request, "max_tokens", None)
        endpoint_name = request.query_params.get("endpoint", "chat")
        endpoint = next((e for e in _ENDPOINTS if e == endpoint_name), None)
        if endpoint is None:
            raise InvalidRequest(f"'endpoint' must be one of {', '.join(_ENDPOINTS)}", param="endpoint")
        models = runtime.config.models
        wanted = request.query_params.get("model")
        if wanted is not None:
            models = tuple(m for m in models if m.name == wanted)
            if not models:
                raise ModelNotFound(f"model '{wanted}' does not exist", param="model")
        rankings = [
            ranking_json(
                runtime.router.rank(model, endpoint=endpoint, prompt_tokens=prompt_tokens, max_tokens=max_tokens)
            )
            for model in models
        ]
    except GatewayError as exc:
        return error_response(exc)
    return JSONResponse({"object": "list", "data": rankings})


async def reload_config(request: Request) -> Response:
    require_admin(request)
    reloader = reloader_of(request.scope)
    try:
        new = await reloader.reload()
    except (ConfigError, TokenizerError) as exc:
        return error_response(
            InvalidRequest(f"config not reloaded, the previous one keeps serving: {exc}", code="invalid_config")
        )
    if WORKER_ENV in os.environ:
        # One worker of `gateway serve --workers N`: the supervisor passes the reload on to all of them.
        os.kill(os.getppid(), signal.SIGHUP)
    return JSONResponse(
        {
            "status": "reloaded",
            "source": new.config.source,
            "reloads": reloader.reloads,
            "models": [{"name": m.name, "policy": m.policy} for m in new.config.models],
        }
    )
