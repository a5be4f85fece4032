"""The request shapes each API defines, checked before anything is sent upstream.

A malformed request (a message with no role, role "wizard", numeric content, ``temperature: "hot"``, a
``text/plain`` body) would otherwise reach the provider, cost an attempt, and come back as the provider's
error in the provider's words, or worse, as a 5xx that counts against the provider's health. Each check
here answers 400 naming the offending param the way OpenAI does (``messages[1].role``).

The checks are types and required fields only, never ranges or enumerations a provider may extend (a
new content part type, a new tool kind): a valid request must never be refused. ``None`` passes for
every optional field, as the APIs accept ``null`` for an absent one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.errors import InvalidRequest, clip
from gateway.samples import Endpoint

_NUMBER = "a number"
_INTEGER = "an integer"
_BOOLEAN = "a boolean"
_STRING = "a string"
_OBJECT = "an object"
_ARRAY = "an array"
_STRING_OR_ARRAY = "a string or an array"
_STRING_OR_OBJECT = "a string or an object"

_COMMON: dict[str, str] = {"temperature": _NUMBER, "top_p": _NUMBER, "user": _STRING, "metadata": _OBJECT}
_FIELDS: dict[Endpoint, dict[str, str]] = {
    "chat": {
        **_COMMON,
        "presence_penalty": _NUMBER,
        "frequency_penalty": _NUMBER,
        "seed": _INTEGER,
        "logprobs": _BOOLEAN,
        "top_logprobs": _INTEGER,
        "stop": _STRING_OR_ARRAY,
        "tools": _ARRAY,
        "tool_choice": _STRING_OR_OBJECT,
        "parallel_tool_calls": _BOOLEAN,
        "response_format": _OBJECT,
        "stream_options": _OBJECT,
        "logit_bias": _OBJECT,
        "store": _BOOLEAN,
    },
    "completions": {
        **_COMMON,
        "presence_penalty": _NUMBER,
        "frequency_penalty": _NUMBER,
        "seed": _INTEGER,
        "logprobs": _INTEGER,
        "echo": _BOOLEAN,
        "suffix": _STRING,
        "stop": _STRING_OR_ARRAY,
        "logit_bias": _OBJECT,
        "stream_options": _OBJECT,
    },
    "embeddings": {"user": _STRING, "dimensions": _INTEGER, "encoding_format": _STRING},
    "responses": {
        **_COMMON,
        "instructions": _STRING_OR_ARRAY,
        "tools": _ARRAY,
        "tool_choice": _STRING_OR_OBJECT,
        "parallel_tool_calls": _BOOLEAN,
        "store": _BOOLEAN,
        "text": _OBJECT,
        "reasoning": _OBJECT,
        "previous_response_id": _STRING,
    },
    "messages": {
        **_COMMON,
        "top_k": _INTEGER,
        "stop_sequences": _ARRAY,
        "system": _STRING_OR_ARRAY,
        "tools": _ARRAY,
        "tool_choice": _OBJECT,
    },
}
_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_RESPONSES_ROLES = ("system", "developer", "user", "assistant")
_MESSAGES_ROLES = ("user", "assistant", "system")
"""Anthropic's SDK types a system message among ``messages`` too (Claude Code sends them between turns)."""
_MAY_OMIT_CONTENT = ("assistant", "function")
"""Roles whose content may be null or absent (an assistant turn that only calls tools)."""

_JSON_TYPES = (b"application/json", b"application/x-www-form-urlencoded")
"""Declared body types read as JSON. The second is what ``curl -d`` sends unless told otherwise; its body is
still parsed as JSON, and refused as such if it is not."""


_INT_OR_FLOAT = (int, float)
_STR_OR_LIST = (str, list)
_STR_OR_DICT = (str, dict)
"""``isinstance``'s tuples: ``int | float`` written in the check would build the union at each call."""


def _is(value: object, expected: str) -> bool:
    if expected == _NUMBER:
        return isinstance(value, _INT_OR_FLOAT) and not isinstance(value, bool)
    if expected == _INTEGER:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == _BOOLEAN:
        return isinstance(value, bool)
    if expected == _STRING:
        return isinstance(value, str)
    if expected == _OBJECT:
        return isinstance(value, dict)
    if expected == _ARRAY:
        return isinstance(value, list)
    if expected == _STRING_OR_ARRAY:
        return isinstance(value, _STR_OR_LIST)
    return isinstance(value, _STR_OR_DICT)  # _STRING_OR_OBJECT


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return f"the string '{clip(value, 40)}'"
    if isinstance(value, _INT_OR_FLOAT):
        return f"the number {clip(repr(value), 40)}"
    return "an array" if isinstance(value, list) else "an object"


def _refuse(param: str, expected: str, value: object) -> InvalidRequest:
    return InvalidRequest(f"'{param}' must be {expected}, got {_describe(value)}", param=param)


def check_content_type(headers: list[tuple[bytes, bytes]]) -> None:
    """A declared body type other than JSON (``text/plain``, a form, a file) is refused; no header is read as JSON."""
    for name, value in headers:
        if name != b"content-type":
            continue
        kind = value.split(b";", 1)[0].strip().lower()
        if kind in _JSON_TYPES or kind.endswith(b"+json"):
            return
        shown = clip(kind.decode("latin-1"), 80)
        raise InvalidRequest(
            f"request body must be JSON (content-type: application/json), got content-type '{shown}'",
            code="unsupported_content_type",
        )


def check_shape(body: Mapping[str, Any], endpoint: Endpoint) -> None:
    """Refuse, naming the param, a body whose fields do not have the types ``endpoint``'s API defines.

    Walks the body's own fields (a request sends a few of the API's many); a body with a field of the wrong type
    is walked again in the API's order, so that of several wrong fields the same one is named as always."""
    fields = _FIELDS[endpoint]
    for field, value in body.items():
        expected = fields.get(field)
        if expected is not None and value is not None and not _is(value, expected):
            _refuse_first(body, fields)
    if endpoint == "chat":
        _check_messages(body["messages"], "messages", _CHAT_ROLES)
    elif endpoint == "messages":
        _check_messages(body["messages"], "messages", _MESSAGES_ROLES)
    elif endpoint == "responses" and isinstance(body.get("input"), list):
        _check_input_items(body["input"])


def _refuse_first(body: Mapping[str, Any], fields: dict[str, str]) -> None:
    """Raise for the first field, in the API's order, whose type is wrong (``check_shape`` found one)."""
    for field, expected in fields.items():
        value = body.get(field)
        if value is not None and not _is(value, expected):
            raise _refuse(field, expected, value)


def _check_messages(messages: list[Any], name: str, roles: tuple[str, ...]) -> None:
    for index, message in enumerate(messages):
        # The usual message (an object, a known role, text content) passes without its param being written.
        if isinstance(message, dict) and message.get("role") in roles and isinstance(message.get("content"), str):
            continue
        param = f"{name}[{index}]"
        if not isinstance(message, dict):
            raise _refuse(param, _OBJECT, message)
        _check_message(message, param, roles)


def _check_message(message: Mapping[str, Any], param: str, roles: tuple[str, ...]) -> None:
    role = message.get("role")
    if role is None:
        raise InvalidRequest(f"'{param}.role' is required", param=f"{param}.role")
    if not isinstance(role, str) or role not in roles:
        shown = f"'{clip(role, 40)}'" if isinstance(role, str) else _describe(role)
        raise InvalidRequest(
            f"'{param}.role' must be one of {', '.join(repr(r) for r in roles)}, got {shown}", param=f"{param}.role"
        )
    content = message.get("content")
    if content is None:
        if role not in _MAY_OMIT_CONTENT:
            raise InvalidRequest(f"'{param}.content' is required for role '{role}'", param=f"{param}.content")
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _refuse(f"{param}.content", "a string or an array of content parts", content)
    for index, part in enumerate(content):
        part_param = f"{param}.content[{index}]"
        if not isinstance(part, dict):
            raise _refuse(part_param, "a content part object", part)
        if not isinstance(part.get("type"), str):
            raise InvalidRequest(f"'{part_param}.type' is required and must be a string", param=f"{part_param}.type")


def _check_input_items(items: list[Any]) -> None:
    """Responses input: easy messages (``role`` + ``content``) and typed items (``function_call_output``, ...).

    A typed item other than a message may carry a ``role`` of its own (Codex's ``additional_tools`` item has
    ``role: "developer"`` and ``tools``, no ``content``): only messages are checked as messages."""
    for index, item in enumerate(items):
        param = f"input[{index}]"
        if not isinstance(item, dict):
            raise _refuse(param, "an input item object", item)
        kind = item.get("type")
        if "role" in item and kind in (None, "message"):
            _check_message(item, param, _RESPONSES_ROLES)
        elif not isinstance(kind, str):
            raise InvalidRequest(f"'{param}' needs a 'role' or a 'type'", param=f"{param}.type")
