"""The gateway's routing endpoints: the live ranking of every model, and config reload.

``GET /v1/gateway/routes`` shows, per model, the order a request would try its deployments
in right now and every number behind that order (admin key: it reveals the configuration). Query
parameters shape the hypothetical request: ``model``, ``prompt_tokens`` (default 500),
``max_tokens`` (default: the model's observed answer length), ``endpoint``.

With ``request_id``, it answers instead with the routing trace of that request, if it asked
for one (``x-gateway-trace: 1``) in the last ten minutes on this replica: for the admin key, or
the client key that sent the request (a stream's header leaves before its attempts end).

``GET /v1/gateway/spend`` (admin key): cost and attempts per key, team, model, provider and
deployment over the current day, week or month (``window``, default ``month``), summed over what
``by`` leaves out (``by=key,model``), and every budget's limit, spent, reserved and reset time.

``POST /v1/gateway/reload`` (admin key) re-reads the config file and swaps it in; an
invalid config answers 400 with the error, any other failure 500 with it in words (never a traceback),
and in both cases the old config keeps serving. Under ``gateway
serve --workers N`` the worker that answers then has its supervisor reload every worker.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.admission.auth import presented_key
from gateway.admission.spending import BUDGET_WINDOWS
from gateway.admission.spending.report import budget_json, grouped_rows, parse_by, spend_document
from gateway.admission.spending.store import SpendStoreDown
from gateway.api import error_response
from gateway.config import ModelConfig
from gateway.errors import BudgetUnavailable, GatewayError, InvalidRequest, ModelNotFound, NotFound, clip
from gateway.metrics.series import WORKER_ENV
from gateway.reload import REFUSALS, ReloadFailed, reloader_of
from gateway.request_body import PLANNED_TOKENS_BOUND
from gateway.routing.affinity import decide
from gateway.routing.explain import ranking_json
from gateway.routing.overrides import NO_PREFERENCES
from gateway.routing.plan import SessionRoute
from gateway.runtime import GatewayRuntime, require_admin, runtime_of
from gateway.samples import ENDPOINTS, Endpoint

_ENDPOINTS: tuple[Endpoint, ...] = ENDPOINTS


def _positive_int(request: Request, name: str, default: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= PLANNED_TOKENS_BOUND:
        raise InvalidRequest(
            f"'{name}' must be a positive integer up to {PLANNED_TOKENS_BOUND}, got {clip(raw)!r}", param=name
        )
    return value


async def routes(request: Request) -> Response:
    request_id = request.query_params.get("request_id")
    if request_id is not None:
        return _trace(request, request_id)
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
                raise ModelNotFound(f"model '{clip(wanted)}' does not exist", param="model")
        bound = request.query_params.get("session_deployment")
        cached = _positive_int(request, "cached_tokens", None)
        rankings = []
        for model in models:
            ranking = ranking_json(
                runtime.router.rank(model, endpoint=endpoint, prompt_tokens=prompt_tokens, max_tokens=max_tokens)
            )
            if bound is not None:
                ranking["session"] = _session_ranking(
                    runtime, model, bound, cached, endpoint, prompt_tokens, max_tokens
                )
            rankings.append(ranking)
    except GatewayError as exc:
        return error_response(exc)
    return JSONResponse({"object": "list", "data": rankings})


def _session_ranking(
    runtime: GatewayRuntime,
    model: ModelConfig,
    bound: str,
    cached: int | None,
    endpoint: Endpoint,
    prompt_tokens: int,
    max_tokens: int | None,
) -> dict[str, Any]:
    """The same request as a turn of a session bound to ``bound`` (its previous prompt of ``cached`` tokens
    cached there): the binding, the ranking and the decision (stay or move). The ranking counts the cached prompt
    as the plan of such a turn does, so its order is the one that turn would take."""
    if all(d.name != bound for d in model.deployments):
        raise InvalidRequest(f"model '{model.name}' has no deployment '{bound}'", param="session_deployment")
    policy = runtime.config.policy_for(model)
    affinity = policy.affinity if policy.affinity != "off" else "auto"
    session = SessionRoute("explain", "header", affinity, "bound", bound, cached or prompt_tokens)
    ranking = runtime.router.rank(
        model, endpoint=endpoint, prompt_tokens=prompt_tokens, max_tokens=max_tokens, session=session
    )
    available = [r for r in ranking.rows if r.available]
    decision = decide(session, ranking.rows, available[0], NO_PREFERENCES) if available else None
    return {
        "binding": {"deployment": bound, "cached_tokens": session.prompt_tokens, "affinity": affinity},
        "decision": decision.header if decision is not None else "no deployment available",
        "deployments": ranking_json(ranking)["deployments"],
    }


def _trace(request: Request, request_id: str) -> Response:
    runtime = runtime_of(request.scope)
    access = runtime.access
    presented = presented_key(request.scope["headers"])
    caller = access.ring.authenticate(presented) if access.ring.enabled else access.anonymous
    if not access.admin.matches(presented) and caller is None:
        access.require_admin(request.scope)  # raises: neither the admin key nor a client key
    found = runtime.traces.get(request_id)
    if found is None or (not access.admin.matches(presented) and (caller is None or caller.key_id != found[0])):
        # Another key's trace is as unknown as a forgotten one: ids are not to be probed.
        return error_response(NotFound(f"no routing trace for request '{clip(request_id)}' on this replica"))
    return JSONResponse(found[1])


async def spend(request: Request) -> Response:
    require_admin(request)
    runtime = runtime_of(request.scope)
    access = runtime.access
    window_name = request.query_params.get("window", "month")
    window = next((w for w in BUDGET_WINDOWS if w == window_name), None)
    if window is None:
        return error_response(InvalidRequest(f"'window' must be one of {', '.join(BUDGET_WINDOWS)}", param="window"))
    try:
        by = parse_by(request.query_params.get("by"))
    except ValueError as exc:
        return error_response(InvalidRequest(str(exc), param="by"))
    spenders = access.spenders()
    ledger = access.state.spend
    try:
        period, rows = await ledger.rows(window, [s.tag for s in spenders])
        balances = await ledger.balances(spenders)
    except SpendStoreDown as exc:
        return error_response(BudgetUnavailable(f"spend cannot be read right now: {exc}"))
    names = {s.key_id: s.key_name for s in spenders}
    teams = {s.key_id: s.team for s in spenders}
    document = spend_document(
        period,
        grouped_rows(rows, names, by),
        [budget_json(b, teams) for b in balances],
        runtime.config.stats.backend,
        ledger.store.degraded_reason(),
    )
    return JSONResponse(document)


async def reload_config(request: Request) -> Response:
    require_admin(request)
    reloader = reloader_of(request.scope)
    try:
        new = await reloader.reload()
    except REFUSALS as exc:
        return error_response(
            InvalidRequest(f"config not reloaded, the previous one keeps serving: {exc}", code="invalid_config")
        )
    except ReloadFailed as exc:
        failed = GatewayError(f"config not reloaded, the previous one keeps serving: {exc}", code="reload_failed")
        return error_response(failed)
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
