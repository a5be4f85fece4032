"""The read-only endpoints (Starlette handlers): the model list, one model, health, readiness, metrics and
the stats leaderboard."""

from __future__ import annotations

import asyncio
import hmac

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.admission.auth import presented_key
from gateway.errors import AuthenticationFailed, ModelNotFound, clip
from gateway.leaderboard import leaderboard, leaderboard_json
from gateway.metrics.series import Metrics
from gateway.runtime import runtime_of


def _model(name: str, anthropic: bool) -> dict[str, object]:
    """One model as the client's API lists it: Anthropic's when the client sends ``anthropic-version`` (its SDK
    and Claude Code always do), else OpenAI's."""
    if anthropic:
        return {"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}
    return {"id": name, "object": "model", "created": 0, "owned_by": "gateway"}


async def list_models(request: Request) -> Response:
    runtime = runtime_of(request.scope)
    key = runtime.access.authenticate(request.scope)
    names = runtime.access.visible_models(key, [m.name for m in runtime.config.models])
    anthropic = "anthropic-version" in request.headers
    data = [_model(name, anthropic) for name in names]
    if anthropic:
        first, last = (names[0], names[-1]) if names else (None, None)
        return JSONResponse({"data": data, "has_more": False, "first_id": first, "last_id": last})
    return JSONResponse({"object": "list", "data": data})


async def retrieve_model(request: Request) -> Response:
    """``GET /v1/models/{id}``: one model of ``/v1/models`` (the SDKs' ``models.retrieve``), else 404."""
    runtime = runtime_of(request.scope)
    key = runtime.access.authenticate(request.scope)
    wanted = request.path_params["model_id"]
    if wanted in runtime.access.visible_models(key, [m.name for m in runtime.config.models]):
        return JSONResponse(_model(wanted, "anthropic-version" in request.headers))
    raise ModelNotFound(f"model '{clip(wanted)}' does not exist", param="model", code="model_not_found")


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    """``GET /metrics``: Prometheus text (or OpenMetrics, if the scraper asks for it)."""
    registry: Metrics = request.app.state.metrics
    runtime = runtime_of(request.scope)
    if runtime.metrics_key is not None:
        presented = presented_key(request.scope["headers"])
        if presented is None or not hmac.compare_digest(presented.encode(), runtime.metrics_key.encode()):
            error = AuthenticationFailed("/metrics needs the metrics key (send 'Authorization: Bearer <key>')")
            return Response(error.to_json(), status_code=401, media_type="application/json")
    runtime.observe_gauges(registry)
    await runtime.access.observe_budgets(registry.spend)
    # Rendering takes milliseconds with many series: off the loop, so streams keep flowing.
    body, content_type = await asyncio.to_thread(registry.render, request.headers.get("accept"))
    return Response(body, headers={"content-type": content_type})


async def readyz(request: Request) -> Response:
    runtime = runtime_of(request.scope)
    reasons = runtime.degraded_reasons()
    return JSONResponse({"status": "degraded" if reasons else "ready", "reasons": reasons})


async def gateway_stats(request: Request) -> Response:
    """``GET /v1/gateway/stats``: the live leaderboard, per model and deployment, over the window."""
    runtime = runtime_of(request.scope)
    runtime.access.authenticate(request.scope)
    snapshot = runtime.stats.snapshot()
    rows = leaderboard(snapshot, runtime.config.models, runtime.in_flight)
    body = leaderboard_json(
        rows,
        window_s=runtime.config.stats.window_s,
        taken_at=snapshot.taken_at,
        backend=runtime.config.stats.backend,
        health=runtime.stats.health(),
    )
    return JSONResponse(body)
