"""``GET /dashboard``: the live leaderboard as a page, under the same access rule as
``GET /v1/gateway/stats``.

Access: a client key when keys are configured (with none, loopback clients only, unless the
config allows everyone). A browser cannot add an ``Authorization`` header to a page it opens,
so the page also takes the key once as ``/dashboard?key=…``: a valid key is answered with a
redirect to the bare ``/dashboard`` that keeps the key in an HttpOnly, SameSite=Strict session
cookie scoped to this path. The key so leaves the address bar, the history and the page's
refreshes after one hop, and page scripts cannot read it. Header keys work too (curl, tools).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from gateway.admission.auth import presented_key
from gateway.dashboard.page import render_page
from gateway.dashboard.text import esc
from gateway.dashboard.view import DashboardView, RoutingChoice, model_boards
from gateway.dashboard.why import WhyView, why_view
from gateway.errors import AuthenticationFailed, GatewayError
from gateway.leaderboard import leaderboard
from gateway.routing.explain import policy_summary
from gateway.runtime import GatewayRuntime, runtime_of

KEY_COOKIE = "gateway_dashboard_key"


def routing_choices(runtime: GatewayRuntime) -> dict[str, RoutingChoice]:
    """Where each model's next request goes first: the router's current top candidate."""
    return routing_views(runtime)[0]


def routing_views(runtime: GatewayRuntime) -> tuple[dict[str, RoutingChoice], dict[str, WhyView]]:
    """Each model's next deployment and why: the router's own ranking (``rank``).

    It is the ranking behind ``GET /v1/gateway/routes``, for a typical request (500 prompt
    tokens, the model's observed answer length); a request's own size and overrides may change it.
    """
    choices, why = {}, {}
    for model in runtime.config.models:
        ranking = runtime.router.rank(model)
        if not ranking.rows:
            continue
        top, policy = ranking.rows[0], ranking.policy
        if policy.ranking == "fixed":
            basis = "config order"
        elif not top.known:
            basis = "measuring"
        else:
            basis = "best score"
        detail = f"Policy {policy.name}: {policy_summary(policy)}. Every number: GET /v1/gateway/routes."
        choices[model.name] = RoutingChoice(top.deployment.name, basis, detail)
        why[model.name] = why_view(ranking)
    return choices, why


async def dashboard_view(runtime: GatewayRuntime, base_url: str) -> DashboardView:
    snapshot = runtime.stats.snapshot()
    rows = leaderboard(snapshot, runtime.config.models, runtime.in_flight)
    choices, why = routing_views(runtime)
    history = await runtime.stats.history([(row.model, row.deployment) for row in rows])
    return DashboardView(
        boards=model_boards(rows, runtime.config.models, choices, why, history, now=snapshot.taken_at or time.time()),
        window_s=runtime.config.stats.window_s,
        taken_at=snapshot.taken_at,
        backend=runtime.config.stats.backend,
        health=runtime.stats.health(),
        base_url=base_url,
        keys_required=runtime.access.ring.enabled,
    )


async def dashboard(request: Request) -> Response:
    runtime = runtime_of(request.scope)
    query_key = request.query_params.get("key")
    try:
        if query_key is not None:
            runtime.access.authenticate(_with_key(request.scope, query_key))
            return _remember(request, runtime, query_key)
        runtime.access.authenticate(_with_cookie_key(request))
    except GatewayError as exc:
        return _refused(exc)
    nonce = secrets.token_urlsafe(16)
    page = render_page(await dashboard_view(runtime, str(request.base_url)), nonce=nonce)
    return HTMLResponse(page, headers=_headers(nonce))


async def root(request: Request) -> Response:
    """``GET /``: a person who opens the gateway's address in a browser lands on the dashboard."""
    query = request.url.query
    return RedirectResponse("/dashboard" + (f"?{query}" if query else ""), status_code=307)


def _with_key(scope: Mapping[str, Any], key: str) -> dict[str, Any]:
    """What ``authenticate`` reads of a request (its client and headers), carrying ``key`` as a bearer token."""
    return {"client": scope.get("client"), "headers": [(b"authorization", b"Bearer " + key.encode("utf-8"))]}


def _with_cookie_key(request: Request) -> Mapping[str, Any]:
    """The request as is when it carries a key in a header; else with the key from the session cookie."""
    cookie = request.cookies.get(KEY_COOKIE)
    if cookie is None or presented_key(request.scope["headers"]) is not None:
        return request.scope
    return _with_key(request.scope, unquote(cookie))


def _remember(request: Request, runtime: GatewayRuntime, key: str) -> Response:
    response = RedirectResponse(request.url.path, status_code=303, headers={"cache-control": "no-store"})
    response.headers["referrer-policy"] = "no-referrer"
    if runtime.access.ring.enabled:
        response.set_cookie(
            KEY_COOKIE,
            quote(key, safe=""),
            path=request.url.path,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
    return response


def _headers(nonce: str) -> dict[str, str]:
    # The policy allows only this response's own script: even a name that slipped past
    # escaping could not run code. Inline styles are allowed (bars are sized by style="").
    policy = (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; img-src data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return {
        "content-security-policy": policy,
        "cache-control": "no-store",
        "referrer-policy": "no-referrer",
        "x-content-type-options": "nosniff",
    }


def _refused(error: GatewayError) -> Response:
    title, hint = "The dashboard is not available to this client", ""
    if isinstance(error, AuthenticationFailed):
        title = "The dashboard needs a client key"
        hint = (
            "<p>Open <code>/dashboard?key=&lt;your client key&gt;</code> once: the gateway checks the key, keeps it "
            "in a cookie for this browser session and takes it out of the address bar.</p>"
        )
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>gateway · dashboard</title>'
        '<link rel="icon" href="data:,"><style>body{font:15px/1.55 system-ui,sans-serif;max-width:640px;'
        "margin:12vh auto;padding:0 24px;color:#111827}code{background:#eef0f3;padding:1px 5px;border-radius:4px}"
        f"</style></head><body><h1>{title}</h1>"
        f"<p>{esc(error.message)}</p>{hint}</body></html>"
    )
    return HTMLResponse(body, status_code=error.status_code, headers=_headers(secrets.token_urlsafe(16)))
