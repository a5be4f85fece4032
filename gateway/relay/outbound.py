"""The upstream request, built from the client's: the one seam where a body changes on its way out.

To a deployment that speaks the request's own API, the body goes untouched but for ``model`` (the
deployment's upstream id). To one reached by translation (``gateway.routing.apis``), it goes in the
deployment's API (``gateway.translate``): translated once per target API, when the request is admitted
(``eligible``: what a target cannot carry makes that deployment ineligible for this request, and only
when none is left is the request refused, naming the field), and sent with the deployment's ``model``.
A deployment that allows it (``builtin_tools = "omit"``) is sent the request without the built-in tools
it cannot run, when no deployment can take the request whole; the client is told which were left out.

The one addition to a native body is the usage chunk of chat and completions streams: when the
provider allows it (``stream_usage``, on by default) and the client did not ask, the gateway asks for
it (``stream_options.include_usage``), so that the answer's cost is known; the forwarder then keeps
that chunk from the client, which did not ask for it (``gateway.relay.forward``). A translated chat
stream always asks for it (when allowed): the client's own API reports usage at the end. A provider that refuses
the field is sent the request again without it, and never the field again (``cured``); so is one that refuses
another provider's tool call ids, with the ids renamed (``gateway.relay.tool_ids``). A chat request, native or
translated, to a deployment known to need thought signatures (Gemini's: one whose answers carried them) gets
Google's placeholder on the current turn's tool calls that have none
(``gateway.translate.chat_assistant.with_placeholders``): the gateway routes a conversation between providers, and
a call another one made is unsigned. The one removal
is of reasoning the native provider did not make, which it would refuse: from Messages bodies the ``thinking``
blocks without a signature that the gateway made from another API's reasoning and the ``redacted_thinking`` blocks
holding another maker's sealed reasoning, from Responses bodies the reasoning items holding sealed reasoning
(``gateway.translate.sealed``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Container
from dataclasses import dataclass
from typing import Any, Protocol, cast

import msgspec

from gateway.config import DeploymentConfig, ModelConfig, ProviderConfig
from gateway.relay.attempt import ClientFault
from gateway.relay.request import ProxyRequest
from gateway.relay.tool_ids import short_tool_ids
from gateway.relay.unknown_fields import DROPPABLE, MESSAGE_REASONING, refused_fields, without_refused
from gateway.routing import Candidate
from gateway.routing.apis import API_PATHS, translated_to, upstream_api
from gateway.samples import Endpoint
from gateway.translate import Api, Untranslatable, as_api, sealed, translate
from gateway.translate.chat_assistant import with_placeholders
from gateway.upstream import UpstreamClient


def client_asked_usage(request: ProxyRequest) -> bool:
    options = request.body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def injects_usage(request: ProxyRequest, provider: ProviderConfig) -> bool:
    """Whether the gateway adds ``stream_options.include_usage`` to this request for this provider."""
    return (
        request.stream
        and request.endpoint in ("chat", "completions")
        and provider.stream_usage
        and not client_asked_usage(request)
    )


_REFUSAL_BYTES = 16384
"""A refusal longer than this is not searched: a validation error naming a field is short."""


def cured(request: ProxyRequest, fault: ClientFault, client: UpstreamClient, api: Endpoint) -> bool:
    """Whether ``fault`` refuses what the gateway itself wrote and can change, new for this provider: then it is
    learned (``UpstreamClient``) and the caller sends the request again (to ``api``), written as learned. Not the
    client's fault, and no other deployment is needed: a field the gateway wrote that the provider does not know
    (``gateway.relay.unknown_fields``: the usage ask, Mistral's 422 ``extra_forbidden``), tool call ids not of nine
    letters and digits (Mistral's, ``gateway.relay.tool_ids``). One already learned is relayed as any other."""
    if fault.status not in (400, 422) or len(fault.body) > _REFUSAL_BYTES:
        return False
    ours = (DROPPABLE | {MESSAGE_REASONING}) if api != request.endpoint else {"stream_options"} - request.body.keys()
    new = (refused_fields(fault.body) & ours) - client.refused_fields
    client.refused_fields.update(new)
    if not new and not client.short_tool_ids and b"Tool call id" in fault.body and b"length of 9" in fault.body:
        client.short_tool_ids = True
        return True
    return bool(new)


@dataclass(frozen=True, slots=True)
class Eligible:
    """The deployments that can take a request, what it is sent to each in, and why the others cannot."""

    model: ModelConfig
    translations: dict[str, dict[str, Any]]
    """The body per translation (``translation_key``)."""
    omitted_tools: dict[str, tuple[str, ...]]
    """Per translation, the built-in tools left out of it (only where the deployment allows ``omit``)."""
    refusal: Untranslatable | None
    """What made a deployment ineligible (the client's 400 when none is left)."""


def translation_key(target: Api, deployment: DeploymentConfig) -> str:
    """Which of a request's translations ``deployment`` is sent: one per target API and built-in tool choice."""
    return target if deployment.builtin_tools == "refuse" else f"{target}+{deployment.builtin_tools}"


def natively_served(model: ModelConfig, api: Endpoint) -> bool:
    """Whether every deployment of ``model`` (one at least) speaks ``api`` itself: then every one is reachable and
    ``eligible`` keeps them all, translating nothing, whatever the body (``native_eligible``). A plain loop: no tuple
    of the reachable, no dicts or lists, no generator per request."""
    deployments = model.deployments
    if not deployments:
        return False
    for deployment in deployments:
        if api not in deployment.apis:
            return False
    return True


def native_eligible(model: ModelConfig) -> Eligible:
    """What ``eligible`` gives for a model that ``natively_served`` the request's API: the model as it is, nothing
    translated, no tool left out, nothing refused."""
    return Eligible(model, {}, {}, None)


def eligible(model: ModelConfig, api: Endpoint, body: dict[str, Any]) -> Eligible:
    """The model's deployments that can take this request (natively, or translated), the translated bodies,
    and the refusal that made the others ineligible.

    A deployment that could take it only by leaving out a built-in tool (``builtin_tools = "omit"``) is kept
    only when none can take it whole: a native deployment (or a translation that loses nothing) is preferred.
    """
    translations: dict[str, dict[str, Any]] = {}
    omitted: dict[str, tuple[str, ...]] = {}
    refusals: dict[str, Untranslatable] = {}
    whole: list[DeploymentConfig] = []
    partial: list[DeploymentConfig] = []
    for deployment in model.deployments:
        # ``reachable`` and ``translated_to`` in one look at each deployment's APIs.
        upstream = upstream_api(deployment, api)
        if upstream is None:
            continue
        if upstream == api:
            whole.append(deployment)
            continue
        target = cast(Api, upstream)
        key = translation_key(target, deployment)
        if key not in translations and key not in refusals:
            try:
                translation = translate(body, as_api(api), target, "", builtin_tools=deployment.builtin_tools)
            except Untranslatable as exc:
                refusals[key] = exc
            else:
                translations[key] = translation.body
                if translation.omitted_tools:
                    omitted[key] = translation.omitted_tools
        if key in translations:
            (partial if key in omitted else whole).append(deployment)
    refusal = next(iter(refusals.values()), None)
    kept = whole or partial
    if len(kept) == len(model.deployments):
        return Eligible(model, translations, omitted, refusal)
    return Eligible(dataclasses.replace(model, deployments=tuple(kept)), translations, omitted, refusal)


def omitted_tools(request: ProxyRequest, deployment: DeploymentConfig) -> tuple[str, ...]:
    """The built-in tools left out of the request ``deployment`` was sent (none for a native one)."""
    target = translated_to(deployment, request.endpoint)
    return () if target is None else request.omitted_tools.get(translation_key(target, deployment), ())


def upstream_of(request: ProxyRequest, candidate: Candidate) -> Endpoint:
    """The API ``candidate`` is sent this request in (the request's own, unless it is reached by translation)."""
    return upstream_api(candidate.deployment, request.endpoint) or request.endpoint


def upstream_path(request: ProxyRequest, api: Endpoint) -> str:
    """The path below the provider's base URL: the client's (with its query) natively, the API's own translated."""
    return request.path if api == request.endpoint else API_PATHS[api]


def upstream_body(
    request: ProxyRequest, candidate: Candidate, target: Endpoint | None = None, learned: Learned | None = None
) -> bytes:
    """The body sent to ``candidate``: the client's fields untouched but for ``model`` (and the usage ask), or
    its translation to the deployment's API (``target``: ``upstream_of(request, candidate)``, if the caller has it),
    written as the candidate's provider is ``learned`` to need (``UpstreamClient``: thought signatures, and the
    refusals ``cured`` learned)."""
    learned = learned if learned is not None else NOTHING_LEARNED
    if target is None:
        target = upstream_of(request, candidate)
    if target != request.endpoint:
        body = _translated(request, candidate, as_api(target))
        without_refused(body, learned.refused_fields)
        if target == "chat" and candidate.deployment.model in learned.thought_signers:
            _sign_unsigned(body)
        _learned_ids(body, learned)
        return encode_body(body)
    body = dict(request.body)
    body["model"] = candidate.deployment.model
    if injects_usage(request, candidate.provider) and "stream_options" not in learned.refused_fields:
        options = body.get("stream_options")
        body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    _learned_ids(body, learned)
    if request.endpoint == "messages":
        _drop_foreign_thinking(body)
    elif request.endpoint == "chat" and candidate.deployment.model in learned.thought_signers:
        _sign_unsigned(body)  # the turn may hold a call another deployment made, unsigned
    encoded = encode_body(body)
    items = body.get("input")
    if request.endpoint == "responses" and _SEALED in encoded and isinstance(items, list):
        # One C search per request; the walk and a second encoding only where a sealed item may be.
        body["input"] = [item for item in items if not _sealed_reasoning(item)]
        encoded = encode_body(body)
    return encoded


class Learned(Protocol):
    """What a provider's client learned of it (``UpstreamClient``) that the body sent to it must follow."""

    @property
    def thought_signers(self) -> Container[str]: ...

    @property
    def refused_fields(self) -> Container[str]: ...

    @property
    def short_tool_ids(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class _Unlearned:
    thought_signers: frozenset[str] = frozenset()
    refused_fields: frozenset[str] = frozenset()
    short_tool_ids: bool = False


NOTHING_LEARNED = _Unlearned()


def _learned_ids(body: dict[str, Any], learned: Learned) -> None:
    messages = body.get("messages")
    if learned.short_tool_ids and isinstance(messages, list):
        body["messages"] = short_tool_ids(messages)


_SEALED = b'"' + sealed.MARK.encode()
"""The start of a JSON string holding a sealed value: one C search per request for it."""


def _sign_unsigned(body: dict[str, Any]) -> None:
    """Google's placeholder on the current turn's tool calls that have no thought signature, in a chat ``body`` for
    a deployment that refuses them unsigned; signed ones are left as they are."""
    messages = body.get("messages")
    if isinstance(messages, list):
        body["messages"] = with_placeholders(messages) or messages


def _sealed_reasoning(item: Any) -> bool:
    """A reasoning item whose ``encrypted_content`` the gateway sealed from another maker's reasoning (a Messages
    deployment's thinking, a Gemini thought signature: ``gateway.translate.sealed``): OpenAI refuses opaque
    reasoning it did not make, so a native Responses provider is sent the history without it (as a translation
    leaves out another API's)."""
    if not (isinstance(item, dict) and item.get("type") == "reasoning"):
        return False
    return sealed.is_sealed(item.get("encrypted_content"))


def _drop_foreign_thinking(body: dict[str, Any]) -> None:
    """Leave out of a Messages request the reasoning Anthropic did not make: ``thinking`` blocks without a signature
    (the gateway made them, from a chat or Responses provider's reasoning, and Anthropic checks every signature in
    the history, 400 "Invalid `signature` in `thinking` block", though it reads none of them) and
    ``redacted_thinking`` blocks holding another maker's sealed reasoning (Anthropic cannot decrypt them). Nothing
    is copied when no such block is there; the look walks the assistant turns' blocks only (~25 µs for 100 turns
    here, a quarter of encoding such a body), never the system prompt or the tools. Then ``_answerable``."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    if _any_foreign(messages):
        kept: list[Any] = []
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list) or message.get("role") != "assistant":
                kept.append(message)
                continue
            signed = [b for b in content if not _foreign_thinking(b)]
            if len(signed) == len(content):
                kept.append(message)
            elif signed:  # a turn of nothing but such reasoning goes (Anthropic joins the user turns around it)
                kept.append({**message, "content": signed})
        body["messages"] = messages = kept
    _answerable(body, messages)


def _answerable(body: dict[str, Any], messages: list[Any]) -> None:
    """With thinking on (extended or adaptive), Anthropic refuses a request whose last assistant turn calls a tool
    without opening with the thinking block the model wrote before the call ("a final `assistant` message must
    start with a thinking block"): the turn lost it above, or came from a provider that gave none. Such a request
    asks no thinking (the next turn thinks again)."""
    thinking = body.get("thinking")
    if not (isinstance(thinking, dict) and thinking.get("type") in _THINKING_ON):
        return
    last = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "assistant"), None)
    content = last.get("content") if last is not None else None
    if not isinstance(content, list) or not content:
        return
    calls = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
    opens = isinstance(content[0], dict) and content[0].get("type") in _REASONING
    if calls and not opens:
        body["thinking"] = {"type": "disabled"}


_REASONING = ("thinking", "redacted_thinking")
_THINKING_ON = ("enabled", "adaptive")
"""Extended and adaptive thinking alike refuse a tool loop whose calling turn does not open with its thinking."""


def _foreign_thinking(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if kind == "thinking":
        return not block.get("signature")
    return kind == "redacted_thinking" and sealed.is_sealed(block.get("data"))


def _any_foreign(messages: list[Any]) -> bool:
    """Plain loops, a call only per reasoning block: the look every native Messages request gets."""
    for message in messages:
        if type(message) is dict and message.get("role") == "assistant":
            content = message.get("content")
            if type(content) is list:
                for block in content:
                    if type(block) is dict and block.get("type") in _REASONING and _foreign_thinking(block):
                        return True
    return False


def encode_body(body: dict[str, Any]) -> bytes:
    """Compact JSON, UTF-8: msgspec, a fraction of ``json.dumps``'s time, the same values.

    (Floats may be spelt differently, ``1e16`` for ``1e+16``: the same number.) A lone surrogate
    ("\\ud800" in the client's JSON) has no UTF-8 form: msgspec refuses it, and ``json`` keeps it
    escaped instead.
    """
    try:
        return msgspec.json.encode(body)
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode()


def _translated(request: ProxyRequest, candidate: Candidate, target: Api) -> dict[str, Any]:
    deployment = candidate.deployment
    body = request.translations.get(translation_key(target, deployment))
    if body is None:
        # A request rebuilt on the way (a continuation): translated now, refused as any would be.
        builtin_tools = deployment.builtin_tools
        body = translate(request.body, as_api(request.endpoint), target, "", builtin_tools=builtin_tools).body
    body = dict(body)
    body["model"] = candidate.deployment.model
    if target == "chat":
        if not candidate.provider.stream_usage:
            body.pop("stream_options", None)
        if request.endpoint == "messages":
            _mark_prefill(body, candidate.deployment)
    return body


def _mark_prefill(body: dict[str, Any], deployment: DeploymentConfig) -> None:
    """A Messages request that ends with an assistant turn asks for its continuation: on chat, the deployment's
    way of saying so (``prefill_format``)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "assistant" or last.get("tool_calls"):
        return
    if deployment.prefill_format == "prefix":
        body["messages"] = [*messages[:-1], {**last, "prefix": True}]
    elif deployment.prefill_format == "vllm":
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
