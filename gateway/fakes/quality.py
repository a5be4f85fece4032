"""The fake's answers as a request shapes them, and its quality faults: broken tool calls, empty, looping, cut.

A request that declares tools (and does not say ``tool_choice: none``) is answered with a call to
its first tool, whose JSON arguments fit the tool's schema: the answer's words go into its first
string property (at most ``TOOL_CALL_WORDS`` of them: a call ends by itself, as a model's does) and
every other required property gets a value of its type. So does a server whose
behaviour says ``tool_call`` (a ``lookup`` tool with ``{"q": ...}``, when the request declares none).

Quality faults, each a share of requests drawn from the fake's seeded generator (so a seeded fake
breaks the same requests every run), or forced per request with ``fault``:

- ``invalid_tool_json_rate``: the call's arguments lose their closing (``{"q": "the quick``);
- ``empty_rate``: no text and no call, with a plain stop;
- ``repeat_rate``: the answer loops over its first few words to its full length;
- ``truncate_rate``: the answer stops with ``length`` at an eighth of what it would have said.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from typing import Any

from gateway.fakes.behavior import FakeBehavior, answer_words

TOOL_CALL_WORDS = 12
"""At most this many words in the arguments of a call the fake makes of a declared tool."""
FAULTS = ("invalid_tool_json", "empty", "repeat", "truncate")
LOOP_WORDS = 6
"""How many words a looping answer repeats."""
TRUNCATED_SHARE = 8
"""A truncated answer says one in this many of its words."""


def declared_tool(body: dict[str, Any], path: str) -> tuple[str, object] | None:
    """The request's first declared tool (of those an ``allowed_tools`` choice allows, if it has one), as (name,
    parameters schema), whatever the API; None if none or barred."""
    choice = body.get("tool_choice")
    if choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none"):
        return None
    allowed = _allowed(choice)
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            if allowed is None or function["name"] in allowed:
                return function["name"], function.get("parameters") or {}
        elif isinstance(tool.get("name"), str) and (allowed is None or tool["name"] in allowed):
            return tool["name"], tool.get("input_schema", tool.get("parameters")) or {}
    return None


def _allowed(choice: Any) -> set[str] | None:
    """The names an ``allowed_tools`` choice allows (chat nests its list, and each name, one level deeper than
    Responses); None for any other choice."""
    if not isinstance(choice, dict) or choice.get("type") != "allowed_tools":
        return None
    spec = choice.get("allowed_tools", choice)
    tools = spec.get("tools") if isinstance(spec, dict) else None
    names = set()
    for tool in tools if isinstance(tools, list) else ():
        named = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(named, dict) and isinstance(named.get("name"), str):
            names.add(named["name"])
    return names


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties")
    return properties if isinstance(properties, dict) else {}


def _required(schema: dict[str, Any]) -> list[Any]:
    required = schema.get("required")
    return required if isinstance(required, list) else []


def placeholder(schema: object) -> Any:
    """A value of the schema's type (its first enum value if it has one)."""
    if not isinstance(schema, dict):
        return "x"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object":
        properties = _properties(schema)
        required = [k for k in _required(schema) if isinstance(k, str)]
        return {key: placeholder(properties.get(key)) for key in required}
    return {"integer": 1, "number": 1.5, "boolean": True, "array": [], "null": None}.get(str(kind), "x")


def arguments_frame(schema: object) -> tuple[str, str]:
    """The JSON text before and after the answer's words in a call's arguments: the words are the first string
    property's value (``q`` when there is none), every other required property a placeholder."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    if isinstance(schema, dict):
        properties = _properties(schema)
        required = [k for k in _required(schema) if isinstance(k, str)]
    holder = next(
        (k for k, v in properties.items() if isinstance(v, dict) and v.get("type") == "string" and "enum" not in v),
        "q",
    )
    others = {key: placeholder(properties.get(key)) for key in required if key != holder}
    head = "{" + json.dumps(holder) + ': "'
    tail = '"' + "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in others.items()) + "}"
    return head, tail


def prepared(behavior: FakeBehavior, body: dict[str, Any], path: str, rng: random.Random) -> FakeBehavior:
    """This request's behaviour: its tool call (if it asks for one) and its quality fault (drawn, or forced)."""
    changes: dict[str, Any] = {}
    # An agent's model (``gateway.fakes.agent``) has chosen its call, or its text, already.
    tool = declared_tool(body, path) if not behavior.agent else None
    if tool is not None:
        head, tail = arguments_frame(tool[1])
        changes.update(tool_call=True, tool_name=tool[0], tool_args_head=head, tool_args_tail=tail)
        # A call's arguments are a few words, as a real model's are: the call then ends by itself within the
        # client's limit, and a broken one arrives whole, to be judged (cut by the limit, it could not be).
        changes["output_tokens"] = min(behavior.output_tokens, TOOL_CALL_WORDS)
    fault = behavior.fault
    rates = behavior.invalid_tool_json_rate + behavior.empty_rate + behavior.repeat_rate + behavior.truncate_rate
    if fault is None and rates > 0:  # no draw otherwise: a fake without faults draws as it always did
        draw = rng.random()
        for name, rate in (
            ("invalid_tool_json", behavior.invalid_tool_json_rate),
            ("empty", behavior.empty_rate),
            ("repeat", behavior.repeat_rate),
            ("truncate", behavior.truncate_rate),
        ):
            if draw < rate:
                fault = name
                break
            draw -= rate
    if fault == "invalid_tool_json" and not (behavior.tool_call or tool is not None):
        fault = None  # nothing to break in a text answer
    if fault is not None:
        changes["fault"] = fault
    if fault == "empty":
        changes["tool_call"] = False
    if behavior.reply is not None:
        changes.update(output_tokens=len(reply_pieces(behavior.reply)), tool_args_head="", tool_args_tail="")
    return dataclasses.replace(behavior, **changes) if changes else behavior


def reply_pieces(reply: str) -> list[str]:
    """A set reply cut into stream pieces: each word with the space before it."""
    return re.findall(r"\s*\S+", reply) or [reply]


def answer_of(behavior: FakeBehavior, skip: int, length: int) -> list[str]:
    """The answer's words: the usual ones, or a loop over the first few (``repeat``)."""
    words = reply_pieces(behavior.reply) if behavior.reply is not None else None
    if behavior.fault == "repeat":
        loop = words[:LOOP_WORDS] if words else answer_words(skip, LOOP_WORDS)
        return [loop[i % len(loop)] for i in range(length)]
    if words is not None:
        said = words[skip : skip + length]
        if behavior.fault == "invalid_tool_json" and behavior.tool_call and said:
            said[-1] = said[-1][:-1]  # the arguments lose their last character: their closing
        return said
    return answer_words(skip, length)


def args_tail(behavior: FakeBehavior) -> str:
    """What closes a call's arguments: nothing when the fault breaks them."""
    return "" if behavior.fault == "invalid_tool_json" else behavior.tool_args_tail
