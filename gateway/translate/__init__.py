"""Translation between the Chat Completions, Responses and Messages APIs: any API in, any provider out.

Each API is read into a neutral shape and written from it (``gateway.translate.ir``): requests
(``translate_request``), whole answers (``translate_reply``), streams (``gateway.translate.stream``) and
errors (``translate_error``). What a target cannot carry is refused before anything is sent
(``Untranslatable``, a 400 naming the field), so that the router can prefer a deployment that takes the
request natively (``gateway.routing.apis``). Every function here is pure; the field table is in
``docs/translation.md``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.dialects.messages import anthropic_error
from gateway.errors import InvalidRequest, describe_error_body
from gateway.translate import (
    chat,
    chat_reply,
    messages,
    messages_reply,
    openai_shared,
    responses,
    responses_reply,
    tiers,
)
from gateway.translate.ir import (
    BUILTIN_TOOLS,
    TRANSLATABLE,
    Api,
    BuiltinTools,
    Conversation,
    Reply,
    Untranslatable,
    Usage,
    as_api,
)
from gateway.translate.tiers import MESSAGES_TIERS, OPENAI_TIERS

TITLES: dict[Api, str] = {"chat": "Chat Completions", "messages": "Messages", "responses": "Responses"}
CLIENT_FIELDS: dict[Api, dict[str, str]] = {
    "messages": {"stop": "stop_sequences", "file_url": "messages[].content[].source.url"},
    "responses": {"response_format": "text.format", "file_url": "input[].content[].file_url"},
}
"""The writers refuse a field by its Chat Completions name (the neutral shape keeps chat's names): per client API,
what that field is called in the request the client sent, so that the refusal names what it can find and change."""


NO_EFFECT: dict[Api, dict[str, tuple[Any, ...]]] = {
    "chat": {
        "logprobs": (False,),
        "top_logprobs": (0,),
        "frequency_penalty": (0,),
        "presence_penalty": (0,),
        "logit_bias": ({},),
        "modalities": (["text"],),
        "functions": ([],),
        "metadata": ({},),
        "verbosity": ("medium",),
    },
    "responses": {"top_logprobs": (0,), "background": (False,)},
    "messages": {"inference_geo": ("global",)},
}
"""Per API, field values that ask for nothing beyond the API's default (some clients, LangChain.js's among them,
send ``frequency_penalty: 0`` and the like on every call): read as absent, not refused as untranslatable.
Anthropic's ``inference_geo: "global"`` is its default, inference anywhere; any other value pins where the model
runs, a constraint no deployment of another API is known to meet, and is refused."""

SERVING: dict[Api, dict[str, tuple[Any, ...]]] = {
    "chat": {"service_tier": OPENAI_TIERS},
    "responses": {"service_tier": OPENAI_TIERS},
    "messages": {"service_tier": MESSAGES_TIERS, "speed": ("standard", "fast")},
}
"""Per API, the fields that ask how a provider serves the model, never what it answers, and their known values:
OpenAI's processing tiers (Codex's fast mode asks ``priority``), Anthropic's capacity tier and fast mode's ``speed``
(the same weights, faster output). They are taken out of what a translated request asks (``asked``) and the tier is
carried where the target names it (``gateway.translate.tiers``, whose ``ASKED`` table maps them):

- chat ↔ Responses: the same value (the same tiers, the same names).
- chat / Responses → Messages: ``auto`` → ``auto``, ``default`` → ``standard_only``; ``flex``, ``scale``,
  ``priority``, ``fast``, ``ultrafast`` are left out (Anthropic's priority capacity is the account's, asked only
  through ``auto``).
- Messages → chat / Responses: ``auto`` → ``auto``, ``standard_only`` → ``default``.

Messages' ``speed`` is left out elsewhere (no other API has it). What is left out is read as absent: the deployment
serves the request at its own default tier, the answer meaning the same. A value none of the APIs documents may ask
something else and is still refused. The tier an answer was served at comes back in the client's own field
(``tiers.SERVED``: chat and Responses ``service_tier``, Messages ``usage.service_tier``; ``standard`` ↔ ``default``,
``priority`` ↔ ``priority``)."""


def asked(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    """The fields of a request that ask something of a translated deployment: without nulls (the APIs read a null
    field as one not sent), the values in ``NO_EFFECT`` and the serving asks in ``SERVING``."""
    defaults, serving = NO_EFFECT[api], SERVING[api]
    return {
        k: v
        for k, v in body.items()
        if v is not None
        and not (k in defaults and _same(v, defaults[k]))
        and not (k in serving and _same(v, serving[k]))
    }


def _same(value: Any, defaults: tuple[Any, ...]) -> bool:
    # ``0 == False`` in Python, not in JSON: a boolean matches only a boolean (``0.0`` matches ``0``).
    return any(value == d and isinstance(value, bool) == isinstance(d, bool) for d in defaults)


def read_request(api: Api, body: dict[str, Any], builtin_tools: BuiltinTools = "refuse") -> Conversation:
    tier = tiers.read_asked(api, body)
    body, verbosity, retention = openai_shared.take(api, asked(api, body))
    if api == "chat":
        conversation = chat.read_request(body)  # chat has no built-in tools
    elif api == "messages":
        conversation = messages.read_request(body, builtin_tools)
    else:
        conversation = responses.read_request(body, builtin_tools)
    conversation.service_tier, conversation.verbosity, conversation.prompt_cache_retention = tier, verbosity, retention
    return conversation


def write_request(api: Api, conversation: Conversation, model: str, *, stream_usage: bool = True) -> dict[str, Any]:
    if api == "chat":
        body = chat.write_request(conversation, model, stream_usage=stream_usage)
    elif api == "messages":
        body = messages.write_request(conversation, model)
    else:
        body = responses.write_request(conversation, model)
    tier = tiers.write_asked(api, conversation.service_tier)
    if tier is not None:
        body["service_tier"] = tier
    openai_shared.write(api, conversation, body)
    return body


@dataclass(frozen=True, slots=True)
class Translation:
    body: dict[str, Any]
    """The request in the target API."""
    omitted_tools: tuple[str, ...] = ()
    """Built-in tools left out of it (``builtin_tools = "omit"``): the client is told (``x-gateway-omitted-tools``)."""


def translate(
    body: dict[str, Any],
    source: Api,
    target: Api,
    model: str,
    *,
    stream_usage: bool = True,
    builtin_tools: BuiltinTools = "refuse",
) -> Translation:
    """The ``target`` API's request for a ``source`` API's ``body``; ``Untranslatable`` names what it cannot carry.
    Built-in tools the target cannot run are refused, or with ``builtin_tools="omit"`` left out and named."""
    try:
        conversation = read_request(source, body, builtin_tools)
        written = write_request(target, conversation, model, stream_usage=stream_usage)
    except Untranslatable as exc:
        field_path = CLIENT_FIELDS.get(source, {}).get(exc.field_path, exc.field_path)
        raise Untranslatable(field_path, TITLES[target], exc.why) from None
    return Translation(written, tuple(conversation.omitted_tools))


def translate_request(
    body: dict[str, Any], source: Api, target: Api, model: str, *, stream_usage: bool = True
) -> dict[str, Any]:
    """``translate``'s body, every built-in tool refused."""
    return translate(body, source, target, model, stream_usage=stream_usage).body


def new_id(api: Api) -> str:
    """A fresh id for an answer made by translation, in the client API's spelling (never in a request body)."""
    prefix = {"chat": "chatcmpl-", "messages": "msg_", "responses": "resp_"}[api]
    return prefix + uuid.uuid4().hex


def client_stops(api: Api, request: dict[str, Any]) -> tuple[str, ...]:
    """The stop sequences a client's request asked for (Messages' ``stop_sequences``, chat's ``stop``; Responses
    has none), each a string: the ones an upstream's answer may say it stopped at."""
    stops = request.get("stop_sequences" if api == "messages" else "stop") if api != "responses" else None
    listed = [stops] if isinstance(stops, str) else stops if isinstance(stops, list) else []
    return tuple(s for s in listed if isinstance(s, str))


def read_reply(api: Api, body: dict[str, Any], stops: tuple[str, ...] = ()) -> Reply:
    if api == "chat":
        return chat_reply.read_reply(body, stops)
    if api == "messages":
        return messages_reply.read_reply(body)
    return responses_reply.read_reply(body)


def translate_reply(
    raw: bytes, source: Api, target: Api, request: dict[str, Any], model: str, count: Callable[[], Usage] | None = None
) -> tuple[bytes, bool]:
    """A whole upstream answer in ``source``'s shape, rewritten in ``target``'s (the client's), and whether it could
    be: an answer that is no JSON object, an error body, or one whose fields hold what ``source`` never allows
    there (``read_reply`` refuses it) becomes a 502 error in ``target``'s shape, since it is the provider's
    answer, not the client's request, that is wrong. An answer without usage gets ``count``'s, the gateway's own
    (``gateway.relay.prompt_count.counted_usage``), never in place of the provider's."""
    try:
        body = json.loads(raw)
    except ValueError:
        return translate_error(raw, 502, target), False
    if not isinstance(body, dict):
        return translate_error(raw, 502, target), False
    if "error" in body and body.get("error") is not None and not body.get("choices") and not body.get("output"):
        return translate_error(raw, 502, target), False
    if source == "responses" and body.get("status") == "failed":
        # A failed response is no answer, whatever output it holds: read as one, it became a "stop" with the
        # output so far.
        error = body.get("error") or {"message": "the response failed", "code": "response_failed"}
        return translate_error(json.dumps({"error": error}).encode(), 502, target), False
    try:
        reply = read_reply(source, body, client_stops(target, request))
    except InvalidRequest as error:
        message = f"the provider's answer could not be read as the {source} API: {error.message}"
        return unreadable_error(message, target), False
    if reply.usage is None and count is not None:
        reply.usage = count()
    served = tiers.read_served(source, body)
    # A Messages client is shown its own model name (``ProxyRequest.shown_model``), the others the upstream's id.
    shown = model if target == "messages" else reply.model or model
    out: dict[str, Any]
    if target == "chat":
        out = chat_reply.write_reply(reply, shown)
        out["id"] = new_id("chat")
    elif target == "messages":
        out = messages_reply.write_reply(reply, shown, new_id("messages"))
    else:
        out = responses_reply.write_reply(reply, shown, new_id("responses"), request)
    tiers.write_served(target, out, served)
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode(), True


def unreadable_error(message: str, target: Api) -> bytes:
    """A 502's body in the client API's shape, for an upstream answer the gateway could not read."""
    if target == "messages":
        return anthropic_error(502, message)
    error = {"error": {"message": message, "type": "upstream_error", "param": None, "code": "upstream_unreadable"}}
    return json.dumps(error, ensure_ascii=False, separators=(",", ":")).encode()


def translate_error(raw: bytes, status: int, target: Api, code_if_none: str | None = None) -> bytes:
    """An upstream's error body (any API's shape) in the client API's shape, its message and status kept; an OpenAI
    shape gets ``code_if_none`` where the upstream gave no code (Anthropic's errors have none) or only a number
    (llama.cpp's and vLLM's ``"code": 400``, the HTTP status again, where OpenAI's codes are words)."""
    message, code = describe_error_body(raw)
    if code is None or code.isdigit():
        code = code_if_none
    if target == "messages":
        return anthropic_error(status, message)
    kind = "invalid_request_error" if 400 <= status < 500 else "upstream_error"
    error = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return json.dumps(error, ensure_ascii=False, separators=(",", ":")).encode()


__all__ = [
    "BUILTIN_TOOLS",
    "TITLES",
    "TRANSLATABLE",
    "Api",
    "BuiltinTools",
    "Translation",
    "Untranslatable",
    "as_api",
    "client_stops",
    "new_id",
    "translate",
    "translate_error",
    "translate_reply",
    "translate_request",
]
