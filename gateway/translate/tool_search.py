"""Responses ``tool_search`` run by the client, carried to APIs that have only functions.

Codex offers its GPT-5 models a ``tool_search`` tool with ``execution: "client"``: the model calls it (a
``tool_search_call`` item whose ``arguments`` is a JSON object, ``{"query": ..., "limit": ...}``), Codex searches its
deferred tools (MCP servers' and apps') and answers with a ``tool_search_output`` item whose ``tools`` (functions,
namespaces, custom tools) the model may call from then on. Run by the client, it is a function like any other:

- the tool goes to chat and Messages as a function named ``tool_search`` taking its ``parameters``;
- a ``tool_search_call`` in the history goes out as that function's call (its arguments as compact JSON, the same
  bytes every turn), a ``tool_search_output`` as its result: the names of the tools it loaded, which join the
  request's own tools (``offered_tools``; flattened as any of them: ``gateway.translate.namespaces``) so that the
  model can call them, as it could natively;
- a call of it comes back as the ``tool_search_call`` the client offered (``call_item``).

One run by OpenAI (``execution: "server"``, the default: it searches the request's ``defer_loading`` tools itself)
is a built-in tool no other API runs: refused, or left out with ``builtin_tools = "omit"``.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.translate.common import as_dict, opt_str
from gateway.translate.ir import Tool, Untranslatable

NAME = "tool_search"
"""The function a client-run tool search becomes (the name the Responses API gives the tool's calls)."""
TYPES = frozenset({"tool_search_call", "tool_search_output"})


def is_client_run(tool: Any) -> bool:
    """Whether ``tool`` (a Responses tool) is a tool search the client runs itself."""
    return isinstance(tool, dict) and tool.get("type") == NAME and tool.get("execution") == "client"


def offered(request: dict[str, Any]) -> bool:
    """Whether a Responses request offers a client-run tool search (so that a call of ``NAME`` is one)."""
    tools = request.get("tools")
    return isinstance(tools, list) and any(is_client_run(t) for t in tools)


def offered_tools(request: dict[str, Any]) -> list[Any]:
    """The request's ``tools`` and after them, in order, those its ``tool_search_output`` items loaded: every tool
    the model may call at this point of the conversation."""
    tools = request.get("tools")
    out = list(tools) if isinstance(tools, list) else []
    items = request.get("input")
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and item.get("type") == "tool_search_output" and isinstance(item.get("tools"), list):
            out.extend(item["tools"])
    return out


def read_tool(tool: dict[str, Any], path: str, taken: set[Any]) -> Tool:
    """A client-run tool search as the function ``NAME``, its parameters as offered."""
    if NAME in taken:
        raise Untranslatable(f"{path}.type", "other", f"a function is already named {NAME!r}")
    parameters = tool.get("parameters")
    return Tool(
        NAME,
        opt_str(tool.get("description"), f"{path}.description"),
        as_dict(parameters, f"{path}.parameters") if parameters is not None else None,
    )


def check_client_run(item: dict[str, Any], path: str) -> None:
    """A tool search item of the history must be the client's (one OpenAI ran has no result another API can read)."""
    if item.get("execution", "client") != "client":
        raise Untranslatable(f"{path}.execution", "other", f"a {item.get('type')!r} item run by OpenAI")


def call_arguments(item: dict[str, Any]) -> str:
    """A ``tool_search_call`` item's ``arguments`` (an object) as the function call's JSON text."""
    arguments = item.get("arguments")
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False, separators=(",", ":"))


def output_text(names: list[str]) -> str:
    """What the model reads as a search's result: the tools it loaded, by the names it calls them."""
    if not names:
        return "No tools were found."
    return "Tools loaded, now callable: " + ", ".join(names)


def call_item(item_id: str, status: str, call_id: str, arguments: str) -> dict[str, Any]:
    """The ``tool_search_call`` item of a call of the tool search: ``arguments`` as the JSON object the model wrote
    (text that is none is passed on as it is: the client answers it as a malformed call)."""
    try:
        parsed: Any = json.loads(arguments) if arguments else {}
    except ValueError:
        parsed = arguments
    return {
        "id": item_id,
        "type": "tool_search_call",
        "status": status,
        "call_id": call_id,
        "execution": "client",
        "arguments": parsed,
    }


__all__ = [
    "NAME",
    "TYPES",
    "call_arguments",
    "call_item",
    "check_client_run",
    "is_client_run",
    "offered",
    "offered_tools",
    "output_text",
    "read_tool",
]
