"""The inference endpoints over every API; errors in each API's shape.

The inference endpoints (chat, completions, embeddings, Responses, Messages) are plain ASGI
callables (``ProxyEndpoint``), not Starlette request handlers: they read the body with a size cap,
validate just what routing needs, and hand a ``ProxyRequest`` to the dispatcher, whose reply
writes straight to ``send``. Nothing on that path re-serialises an upstream chunk. Errors are
rendered by the endpoint's dialect: OpenAI's shape, or Anthropic's on ``/v1/messages``.

Beside it: ``request_body`` (read, parse, check), ``session_route`` (the session a request continues),
``error_responses`` (errors as answers) and ``info_api`` (the read-only endpoints, re-exported here
for ``app``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from starlette.types import Receive, Scope, Send

from gateway.accesslog import AccessRecord
from gateway.admission.access import Ticket
from gateway.admission.limits import containers_at_most, header_bytes
from gateway.client_deadlines import read_deadlines
from gateway.conversation_flow import expand
from gateway.dialects import dialect_for
from gateway.error_responses import error_response, send_error
from gateway.errors import GatewayError, HeadersTooLarge, InvalidRequest, ModelNotFound, clip, internal_error
from gateway.info_api import gateway_stats, healthz, list_models, metrics, readyz, retrieve_model
from gateway.quality import expectation_of
from gateway.relay import DisconnectWatch, ProxyRequest, RequestTrace
from gateway.relay.disconnect import abort_of
from gateway.relay.keepalive import FirstByteKeepAlive
from gateway.relay.outbound import eligible, natively_served, omitted_tools
from gateway.relay.replies import FullReply
from gateway.relay.request import proxy_request_from_fields
from gateway.request_body import ClientGone, check_types, decoded_headers, parse_json_body, read_request_body
from gateway.request_ids import new_request_id
from gateway.responses_state import capture_for, kept_conversation, previous_owner
from gateway.routing import RoutePlan, RouteRequest, inputs_of, parse_preferences
from gateway.routing.apis import no_deployment_for, reachable
from gateway.routing.overrides import resolve_model
from gateway.routing.plan import route_request_from_fields
from gateway.routing.trace import TRACE_HEADER, build_trace, header_value
from gateway.runtime import GatewayRuntime, runtime_of
from gateway.samples import Endpoint
from gateway.session_route import AFFINITY_HEADER, session_identity, session_route
from gateway.shapes import check_content_type, check_shape
from gateway.upstream import forwardable_of

OMITTED_TOOLS_HEADER = b"x-gateway-omitted-tools"
"""The built-in tools left out of a translated request (``builtin_tools = "omit"``), comma-separated."""

logger = logging.getLogger("gateway")


def _wants_trace(headers: list[tuple[bytes, bytes]]) -> bool:
    """``x-gateway-trace: 1`` (or ``true``) asks for the routing trace. A plain loop: no generator per request."""
    for name, value in headers:
        if name == b"x-gateway-trace" and value.strip().lower() in (b"1", b"true"):
            return True
    return False


class ProxyEndpoint:
    """``POST /v1/{chat/completions,completions,embeddings,responses,messages}``: route, attempt, relay."""

    def __init__(self, endpoint: Endpoint, path: str) -> None:
        self.endpoint = endpoint
        self.path = path
        self.dialect = dialect_for(endpoint)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        runtime = runtime_of(scope)
        # Read once, held to the end: a reload swaps in a new runtime, and this one closes its
        # upstream pools only when its last request has left.
        runtime.requests.enter()
        # The dispatcher's clock, so that end-to-end and the attempt times share one time base.
        clock = runtime.dispatcher.clock
        record = AccessRecord(new_request_id(), self.endpoint, clock(), clock)
        received_at, request_id = record.received_at, record.request_id
        # One coroutine from here to the reply (the intake's errors answered inline): each wait for the upstream
        # resumes through one frame fewer.
        try:
            try:
                request, route_request, ticket = await self._prepare(scope, receive, runtime, received_at, request_id)
            except ClientGone:
                return
            except GatewayError as exc:
                record.error_status = exc.status_code
                await send_error(send, exc, request_id, self.dialect)
                return
            except Exception:
                # This endpoint is reached outside Starlette's error middleware: a bug still gets a
                # clean 500 with an id to find this log line by.
                logger.exception("unexpected error reading request %s", request_id)
                error = internal_error(request_id)
                record.error_status = error.status_code
                await send_error(send, error, request_id, self.dialect)
                return
            record.request = request
            record.key_name = ticket.key.name
            record.team = ticket.key.team
            trace_wanted = route_request.explain  # ``_wants_trace`` of these headers, walked once in ``_prepare``
            try:
                await self._respond(request, route_request, runtime, scope, send, receive, record, ticket, trace_wanted)
            finally:
                ticket.release()
        finally:
            try:
                runtime.access_log.write(record)
            finally:
                # Whatever the log line does, the runtime must learn that this request left:
                # a reloaded runtime closes its pools only once its last request has.
                runtime.requests.leave()

    async def _respond(
        self,
        request: ProxyRequest,
        route_request: RouteRequest,
        runtime: GatewayRuntime,
        scope: Scope,
        send: Send,
        receive: Receive,
        record: AccessRecord,
        ticket: Ticket,
        trace_wanted: bool,
    ) -> None:
        request_id = request.request_id
        loop = asyncio.get_running_loop()  # once per request, for the watch and the keep-alive
        watch = DisconnectWatch(receive, loop, abort_of(scope))
        started = False
        plan: RoutePlan | None = None
        keeper: FirstByteKeepAlive | None = None
        try:
            try:
                plan = runtime.router.plan(route_request)
            except GatewayError as exc:
                if route_request.pinned is not None:
                    _name_pinned(exc, route_request.pinned)
                raise
            policy = plan.policy
            if ticket.spender.scopes:  # a budget to hold the worst case against (none: nothing to hold, no coroutine)
                await runtime.access.reserve_spend(
                    ticket,
                    [c.deployment for c in plan.candidates],
                    route_request.max_tokens,
                    policy.default_output_tokens,
                    request.endpoint,
                    policy.total_timeout_s,
                    length=runtime.router.forecast(route_request),
                )
            headers = [(b"x-request-id", request_id.encode())]
            if plan.affinity is not None:
                headers.append((AFFINITY_HEADER, plan.affinity.header.encode()))
            if request.stream and policy.first_byte_keepalive_s > 0:
                keeper = FirstByteKeepAlive(
                    send,
                    self.dialect,
                    policy.first_byte_keepalive_s,
                    list(headers),
                    request_id=request_id,
                    model=request.requested_model,
                )
                send = keeper.send
            if keeper is None:
                reply = await runtime.dispatcher.dispatch(request, plan)
            else:
                # The dispatcher's reply, with the stream's keep-alives going out meanwhile (inline: no coroutine).
                keeper.start(loop)
                try:
                    reply = await runtime.dispatcher.dispatch(request, plan)
                finally:
                    if not keeper.stop_waiting():  # keep-alives are being sent: wait until none is being written
                        await keeper.stop()
                    record.keepalives = keeper.sent
            record.log = reply.log
            started = True
            if keeper is not None and not keeper.started:
                # Stopped before its first keep-alive: it can no longer send one, and the reply's every chunk
                # would pass through its ``send`` for nothing.
                send, keeper = keeper.client_send, None
            # Only a request translated without some built-in tools has any to name (``request.omitted_tools``).
            if (
                request.omitted_tools
                and reply.log.winner is not None
                and (omitted := omitted_tools(request, reply.log.winner.deployment))
            ):
                headers.append((OMITTED_TOOLS_HEADER, ",".join(omitted).encode()))
            if keeper is not None and keeper.started and isinstance(reply, FullReply):
                # An upstream's whole error answer (a request fault), after the 200 went out: as an event.
                watch.disarm()
                reply.log.status = 200
                await keeper.fail_with_body(reply.status, reply.body)
                return
            # Only a Responses answer is ever kept (``capture_for``): no call for the other APIs'.
            capture = capture_for(runtime, request, reply, send) if request.endpoint == "responses" else None
            if capture is not None:
                send = capture.send
            if trace_wanted:
                winner = reply.log.winner
                trace = build_trace(
                    request_id, plan, request.trace.samples, winner.name if winner else None, final=False
                )
                runtime.traces.put(request_id, ticket.key.key_id, trace)
                headers.append((TRACE_HEADER.encode(), header_value(trace).encode()))
            await reply.send_to(send, headers, watch)
            if capture is not None:
                capture.store(
                    runtime.conversations,
                    request.body,
                    request.requested_model,
                    ticket.key.key_id,
                    request.stream,
                    runtime.config.responses.ttl_s,
                )
        except GatewayError as exc:
            watch.disarm()
            if not started and keeper is not None and keeper.started:
                # The 200 and keep-alives went out while every attempt failed: the error is the stream's end.
                record.error_status = exc.status_code
                await keeper.fail(exc.message, exc.code or "upstream_error")
            elif not started:
                record.error_status = exc.status_code
                if trace_wanted and plan is not None:
                    trace = build_trace(request_id, plan, request.trace.samples, final=True)
                    exc.headers[TRACE_HEADER] = header_value(trace)
                await send_error(send, exc, request_id, self.dialect)
        except Exception:
            watch.disarm()
            logger.exception("unexpected error serving request %s", request_id)
            if not started and keeper is not None and keeper.started:
                error = internal_error(request_id)
                record.error_status = error.status_code
                await keeper.fail(error.message, error.code or "internal_error")
            elif not started:
                error = internal_error(request_id)
                record.error_status = error.status_code
                await send_error(send, error, request_id, self.dialect)
        except BaseException:
            # The client hung up (DisconnectWatch cancelled us): the attempt has recorded itself, and the line
            # says so; there is nobody left to answer. Anything else is shutdown: re-raise.
            watch.disarm()
            if watch.disconnected and (task := asyncio.current_task()) is not None and task.uncancel() == 0:
                record.client_left = True
                return
            raise
        finally:
            if trace_wanted and plan is not None:
                trace = build_trace(request_id, plan, request.trace.samples, final=True)
                runtime.traces.put(request_id, ticket.key.key_id, trace)

    async def _prepare(
        self, scope: Scope, receive: Receive, runtime: GatewayRuntime, received_at: float, request_id: str
    ) -> tuple[ProxyRequest, RouteRequest, Ticket]:
        try:
            limit = runtime.config.limits.max_header_bytes
            size = header_bytes(scope["headers"])
            if size > limit:
                raise HeadersTooLarge(f"request headers of {size} bytes exceed the limit of {limit} bytes")
            key = runtime.access.authenticate(scope)
            check_content_type(scope["headers"])
            raw = await read_request_body(scope, receive, runtime.config.server.max_body_bytes)
        except GatewayError as exc:
            # Answered before its body was read (a 401, a 413): the rest of the body may still be trickling in,
            # and the connection would be held open while it does. The server closes it after this answer.
            exc.headers["connection"] = "close"
            raise
        body = parse_json_body(raw)
        containers: int | None = containers_at_most(raw)  # the body as parsed: no depth walk within the limit
        requested, stream, max_tokens = check_types(body, self.endpoint)
        check_shape(body, self.endpoint)
        model_name, suffix_sort, model = resolve_model(runtime.config, requested)
        if model is None:
            known = ", ".join(runtime.access.visible_models(key, [m.name for m in runtime.config.models]))
            missing = ModelNotFound(f"model '{clip(requested)}' does not exist (known: {known})", param="model")
            raise _model_error(missing, self.endpoint)
        # The usual model speaks the request's API on every deployment: reachable, and eligible whatever the body.
        native = natively_served(model, self.endpoint)
        if not native and not reachable(model, self.endpoint):
            raise _model_error(no_deployment_for(model, self.endpoint), self.endpoint)
        pinned = None
        size = len(raw)  # of the whole request as sent upstream: an expanded conversation's included
        previous_id = body.get("previous_response_id") if self.endpoint == "responses" else None
        if previous_id is not None:
            previous = await kept_conversation(runtime, model, previous_id, key.key_id)
            if previous is not None:
                body = expand(body, previous)  # the whole conversation: any deployment can continue it
                containers = None  # more than the client's text held
                size += len(previous.encode())
                previous_id = None
        preferences = parse_preferences(body.pop("provider", None), suffix_sort)
        # Deployments reached by translation that cannot carry this request leave the pool; with none left, 400. A
        # model served natively is eligible as it is (``native_eligible``): nothing translated, no ``Eligible`` made.
        translations: dict[str, dict[str, Any]] = {}
        omitted: dict[str, tuple[str, ...]] = {}
        if not native:
            able = eligible(model, self.endpoint, body)
            model, translations, omitted = able.model, able.translations, able.omitted_tools
            if not model.deployments and able.refusal is not None:
                raise able.refusal
        if previous_id is not None:
            pinned = await previous_owner(runtime, model, previous_id)
        deadlines = read_deadlines(scope["headers"])
        if deadlines.ttft_slo_s is not None and not preferences.max_ttft_s:
            # A first-token objective routes as ``provider.preferred_max_latency`` would (the body's wins).
            preferences = dataclasses.replace(preferences, max_ttft_s=((0.5, deadlines.ttft_slo_s),))
        elif deadlines.ttft_slo_s is None and preferences.max_ttft_s:
            # ... and a preferred latency bounds the wait for a slot as the objective would.
            slo = min(ceiling for _, ceiling in preferences.max_ttft_s)
            deadlines = dataclasses.replace(deadlines, ttft_slo_s=slo)
        prompt_tokens = max(1, size // 4)
        headers = decoded_headers(scope["headers"])  # once, for the session and the upstream
        expects = expectation_of(self.endpoint, body)
        policy = runtime.config.policies[model.policy]  # ``policy_for``, without its call
        session = None
        if policy.affinity != "off":
            # No coroutine for a request that continues no session.
            identity = session_identity(headers, body, size, model.name, key.key_id, policy)
            if identity is not None:
                session = await session_route(runtime, headers, identity, policy)
        # Both built with every field in order, positionally: keyword matching cost more than the building.
        request = proxy_request_from_fields(
            request_id,  # request_id
            self.endpoint,  # endpoint
            _with_query(self.path, scope),  # path
            body,  # body
            stream,  # stream
            model_name,  # requested_model
            received_at,  # received_at
            forwardable_of(headers),  # headers
            prompt_tokens,  # prompt_tokens
            RequestTrace(),  # trace
            deadlines.timeout_s,  # timeout_s
            deadlines.ttft_slo_s,  # ttft_slo_s
            session.key if session is not None else None,  # session_key
            policy.session_ttl_s,  # session_ttl_s
            translations,  # translations
            omitted,  # omitted_tools
            expects,  # expects
            False,  # probe
        )
        route_request = route_request_from_fields(
            model,  # model
            self.endpoint,  # endpoint
            stream,  # stream
            prompt_tokens,  # prompt_tokens
            max_tokens,  # max_tokens
            preferences,  # preferences
            pinned,  # pinned
            session,  # session
            expects.kind if expects.judged else None,  # kind
            key.key_id,  # client
            _wants_trace(scope["headers"]),  # explain
            inputs_of(runtime.router.state.inputs, self.endpoint, body),  # inputs (read once something was refused)
        )
        # A key's tokens per minute may hold the answer's likely length (the router's forecast) instead of max_tokens.
        length = runtime.router.forecast(route_request) if key.limits.tokens_per_minute and max_tokens else None
        # Last: from here on the caller owns the ticket and releases it.
        ticket = await runtime.access.admit(
            key, model.name, body, self.endpoint, prompt_tokens, max_tokens, length, containers
        )
        return request, route_request, ticket


def _model_error(error: ModelNotFound, endpoint: Endpoint) -> GatewayError:
    """The error for a model this endpoint cannot serve: 404, but 400 on the Responses API (Codex, its main client,
    re-sends on any status but 400 and 401: five round trips and a minute of back-off for a model it can never get;
    a 400 stops it at once). The code (``model_not_found``, ``model_not_found_for_api``) stays the same."""
    if endpoint != "responses":
        return error
    return InvalidRequest(error.message, param=error.param, code=error.code)


def _with_query(path: str, scope: Scope) -> str:
    """The upstream path with the client's query string (Anthropic's SDK sends ``/v1/messages?beta=true``)."""
    query: bytes = scope.get("query_string", b"")
    return f"{path}?{query.decode('latin-1')}" if query else path


def _name_pinned(exc: GatewayError, pinned: str) -> None:
    """The one deployment that holds the previous response cannot serve: say so (the request goes nowhere else)."""
    exc.message = (
        f"the previous response is held by deployment '{pinned}', which cannot take a request now: {exc.message}"
    )


__all__ = [
    "ProxyEndpoint",
    "parse_json_body",
    "error_response",
    "gateway_stats",
    "healthz",
    "list_models",
    "metrics",
    "readyz",
    "retrieve_model",
]
