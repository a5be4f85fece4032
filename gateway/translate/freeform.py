"""Responses ``custom`` tools (freeform input), carried to APIs that have only JSON-schema functions.

Codex offers ``apply_patch`` as a custom tool: the model writes the patch as free text (``format``: plain text, or
text following a Lark or regex grammar) and its call comes back as a ``custom_tool_call`` item holding ``input``, a
string. Chat and Messages have only functions whose arguments are a JSON object, so a custom tool goes to them as a
function taking one string, ``input``, its description saying what the text must be (the grammar is given, not
enforced: no chat provider constrains a tool call's text by one). A call of it comes back as the
``custom_tool_call`` the client offered, its ``input`` the string; a ``custom_tool_call`` in the history goes out as
that function's call (``{"input": ...}``, compact: the same bytes every turn) and its output as the tool's result.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.translate.common import as_dict, as_str, opt_str
from gateway.translate.ir import Tool, Untranslatable
from gateway.translate.tool_search import offered_tools

ARGUMENT = "input"


def custom_names(request: dict[str, Any]) -> frozenset[str]:
    """The names of the custom tools a Responses request offers (its own, and those a tool search loaded)."""
    tools = offered_tools(request)
    return frozenset(
        name
        for t in tools
        if isinstance(t, dict) and t.get("type") == "custom" and isinstance(name := t.get("name"), str)
    )


def read_tool(tool: dict[str, Any], path: str) -> Tool:
    """A custom tool as a function of one string argument, ``input``; its format said in the description."""
    name = as_str(tool.get("name"), f"{path}.name")
    about = opt_str(tool.get("description"), f"{path}.description")
    spec = as_dict(tool.get("format") or {"type": "text"}, f"{path}.format")
    kind = spec.get("type")
    if kind == "text":
        shape = "Free text."
    elif kind == "grammar":
        syntax = as_str(spec.get("syntax"), f"{path}.format.syntax")
        definition = as_str(spec.get("definition"), f"{path}.format.definition")
        shape = f"Free text (not JSON) matching this {syntax} grammar:\n{definition}"
    else:
        raise Untranslatable(f"{path}.format.type", "other", f"a custom tool's format {kind!r}")
    parameters = {
        "type": "object",
        "properties": {ARGUMENT: {"type": "string", "description": f"The tool's whole input. {shape}"}},
        "required": [ARGUMENT],
        "additionalProperties": False,
    }
    return Tool(name, about, parameters)


def arguments_of(text: str) -> str:
    """A custom tool call's ``input`` as the function call's arguments."""
    return json.dumps({ARGUMENT: text}, ensure_ascii=False, separators=(",", ":"))


def input_of(arguments: str) -> str:
    """The ``input`` of a call the model made of a custom tool's function (its arguments as they came when they are
    not the one-string object asked for)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(ARGUMENT), str):
        return str(value[ARGUMENT])
    return arguments


def call_item(item_id: str, status: str, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """The ``custom_tool_call`` output item of a call of a custom tool."""
    return {
        "id": item_id,
        "type": "custom_tool_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "input": input_of(arguments),
    }


__all__ = ["ARGUMENT", "arguments_of", "call_item", "custom_names", "input_of", "read_tool"]
