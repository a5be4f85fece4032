"""What a request asks of its answer, read once from its body: the tools it declares, the JSON it wants.

Each API says it its own way:

- chat: ``tools`` (``{"type": "function", "function": {"name", "parameters"}}``) or the legacy
  ``functions``; ``tool_choice: "none"``; ``response_format`` ``json_object`` or ``json_schema``
  (``{"json_schema": {"schema": ...}}``); ``max_completion_tokens`` / ``max_tokens``;
- completions: ``max_tokens`` (16 when absent: the API's own default), ``response_format`` where a host reads it;
- Responses: ``tools`` (``{"type": "function", "name", "parameters"}``), ``text.format`` ``json_object`` /
  ``json_schema`` (``{"schema": ...}``), ``max_output_tokens``;
- Messages: ``tools`` (``{"name", "input_schema"}``), ``tool_choice: {"type": "none"}``,
  ``output_config.format`` (or the beta's ``output_format``) ``json_schema`` (``{"schema": ...}``), ``max_tokens``.

The result is an ``Expectation``: the request's kind (tools, JSON, plain), which the router keeps
validity by, and what the verdict checks the answer against.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.samples import Endpoint, RequestKind

COMPLETIONS_DEFAULT_MAX_TOKENS = 16
"""OpenAI's completions API stops at 16 tokens when a request sets no ``max_tokens``."""


@dataclass(frozen=True, slots=True)
class Expectation:
    """What one request asks of its answer. Usage::

    expects = expectation_of("chat", body)
    expects.kind                       # "tools", "json" or "plain": validity is kept per kind
    judge(reading, expects)            # gateway.quality.verdict
    """

    kind: RequestKind = "plain"
    tools: Mapping[str, object] = field(default_factory=dict)
    """Declared tools by name, each with its parameters' schema (``{}``: any object)."""
    json_mode: bool = False
    """The answer must be JSON (a ``json_object`` or ``json_schema`` response format)."""
    schema: object = None
    """The response format's schema, when it names one."""
    max_tokens: int | None = None
    """The request's own output limit (None: it set none)."""
    tool_stop: bool = True
    """The API states a tool-call stop reason of its own (chat, Messages; the Responses API does not)."""
    judged: bool = True
    """Whether answers to it get a verdict at all (embeddings do not)."""


PLAIN = Expectation()
NOT_JUDGED = Expectation(judged=False)


_CHAT_ASKS = frozenset(("tools", "functions", "response_format", "max_completion_tokens", "max_tokens"))
"""The chat fields ``expectation_of`` reads an expectation from (``tool_choice`` matters only beside tools)."""


def _limit(body: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _listed(value: object) -> list[Any]:
    """A list as sent, or nothing: a malformed ``tools`` is the provider's to refuse, not the verdict's to read."""
    return value if isinstance(value, list) else []


def _chat_tools(body: Mapping[str, Any]) -> dict[str, object]:
    tools: dict[str, object] = {}
    for tool in _listed(body.get("tools")):
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            tools[function["name"]] = function.get("parameters") or {}
    for function in _listed(body.get("functions")):
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            tools[function["name"]] = function.get("parameters") or {}
    return tools


def _named_tools(body: Mapping[str, Any], schema_key: str) -> dict[str, object]:
    """Responses (``parameters``) and Messages (``input_schema``) tools: the name and schema at the top."""
    tools: dict[str, object] = {}
    for tool in _listed(body.get("tools")):
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            tools[tool["name"]] = tool.get(schema_key) or {}
    return tools


def _format(spec: object, nested: str | None) -> tuple[bool, object]:
    """(JSON mode?, schema) of a response format: ``json_object``, or ``json_schema`` with its schema (``nested``:
    chat's ``{"json_schema": {"schema": ...}}``; else the schema sits beside the type)."""
    if not isinstance(spec, dict):
        return False, None
    kind = spec.get("type")
    if kind == "json_object":
        return True, None
    if kind == "json_schema":
        holder = spec.get(nested) if nested is not None else spec
        return True, holder.get("schema") if isinstance(holder, dict) else None
    return False, None


def _kind(tools: Mapping[str, object], choice_none: bool, json_mode: bool) -> RequestKind:
    if tools and not choice_none:
        return "tools"
    return "json" if json_mode else "plain"


def expectation_of(endpoint: Endpoint, body: Mapping[str, Any]) -> Expectation:
    """What a request of this API with this body asks of its answer (cheap: a few key lookups)."""
    if endpoint == "embeddings":
        return NOT_JUDGED
    if endpoint == "chat" and body.keys().isdisjoint(_CHAT_ASKS):
        # Nothing that makes an answer tools, JSON or bounded: what the reading below comes to, shared.
        return PLAIN
    if endpoint in ("chat", "completions"):
        tools = _chat_tools(body) if endpoint == "chat" else {}
        json_mode, schema = _format(body.get("response_format"), "json_schema")
        limit = _limit(body, "max_completion_tokens", "max_tokens")
        if endpoint == "completions" and limit is None and body.get("max_tokens") is None:
            limit = COMPLETIONS_DEFAULT_MAX_TOKENS
        choice_none = body.get("tool_choice") == "none" or body.get("function_call") == "none"
        return Expectation(_kind(tools, choice_none, json_mode), tools, json_mode, schema, limit)
    if endpoint == "responses":
        tools = _named_tools(body, "parameters")
        text = body.get("text")
        json_mode, schema = _format(text.get("format") if isinstance(text, dict) else None, None)
        choice_none = body.get("tool_choice") == "none"
        limit = _limit(body, "max_output_tokens")
        return Expectation(_kind(tools, choice_none, json_mode), tools, json_mode, schema, limit, tool_stop=False)
    tools = _named_tools(body, "input_schema")
    choice = body.get("tool_choice")
    choice_none = isinstance(choice, dict) and choice.get("type") == "none"
    config = body.get("output_config")
    spec = config.get("format") if isinstance(config, dict) else None
    json_mode, schema = _format(body.get("output_format") if spec is None else spec, None)
    return Expectation(_kind(tools, choice_none, json_mode), tools, json_mode, schema, _limit(body, "max_tokens"))
