"""The fake as a coding agent's model: one tool round trip, in each API, for the real agent CLIs.

Why: Claude Code and Codex are tested through the gateway against the fake; a round trip (the model
calls the CLI's shell tool, the CLI runs it and sends the result back, the model answers) is what
agent traffic is made of. With ``FakeBehavior.agent`` on, each request is steered by its own body:

- the last turn is the user's and the request offers a shell tool this module knows (Claude Code's
  ``Bash``, Codex's ``exec_command``, ``shell_command``): answer with a call of it, running
  ``agent_command`` (or, with ``agent_read`` set, a call of the file viewer, reading that file; with
  ``agent_patch``, a call of ``apply_patch`` applying that patch; with ``agent_search``, a call of Codex's
  ``tool_search`` searching for that);
- the last turn is a tool's result: answer with text quoting it (``ran it: <result>``), which shows the
  command really ran;
- anything else: the usual answer.

System turns (Claude Code sends ``role: system`` messages mid-conversation) do not count as the last
turn. The steering only sets ``tool_call``, ``tool_name`` and ``reply`` on the request's behaviour:
the API modules stream it as any other answer.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from gateway.fakes.behavior import FakeBehavior

SHELL_TOOLS: dict[str, str] = {"Bash": "command", "exec_command": "cmd", "shell_command": "command"}
"""The shell tools the fake knows to call, each with the argument that takes the command line."""
READ_TOOLS: dict[str, str] = {"Read": "file_path", "view_image": "path"}
"""The file viewers it knows (``FakeBehavior.agent_read``), each with the argument that takes the path."""
PATCH_TOOLS: dict[str, str] = {"apply_patch": "input"}
"""The patch tools it knows (``FakeBehavior.agent_patch``), each with the argument that takes the patch."""
SEARCH_TOOLS: dict[str, str] = {"tool_search": "query"}
"""The tool searches it knows (``FakeBehavior.agent_search``), each with the argument that takes the query."""
RESULT_PREFIX = "ran it:"


def steer(body: dict[str, Any], path: str, behavior: FakeBehavior) -> FakeBehavior:
    """The behaviour for this request of an agent's conversation (unchanged unless ``behavior.agent``)."""
    if not behavior.agent:
        return behavior
    last = _last_turn(body, path)
    if last is None:
        return behavior
    kind, value = last
    if kind == "result":
        return dataclasses.replace(behavior, tool_call=False, reply=f"{RESULT_PREFIX} {value.strip()}")
    tools, value = SHELL_TOOLS, behavior.agent_command
    if behavior.agent_search:
        tools, value = SEARCH_TOOLS, behavior.agent_search
    elif behavior.agent_patch:
        tools, value = PATCH_TOOLS, behavior.agent_patch
    elif behavior.agent_read:
        tools, value = READ_TOOLS, behavior.agent_read
    tool = next((name for name in _offered(body) if name in tools), None)
    if tool is None:
        return behavior
    arguments = json.dumps({tools[tool]: value})
    return dataclasses.replace(behavior, tool_call=True, tool_name=tool, reply=arguments)


def _offered(body: dict[str, Any]) -> list[str]:
    """The names of the function tools a request offers, in any of the three APIs' shapes."""
    names: list[str] = []
    for tool in body.get("tools") or ():
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str):
            names.append(name)
    return names


def _last_turn(body: dict[str, Any], path: str) -> tuple[str, str] | None:
    """("user", "") or ("result", the tool's output) for the conversation's last turn; None for anything else."""
    if path.endswith("/responses"):
        items = body.get("input")
        if isinstance(items, str):
            return "user", ""
        turns = [i for i in items or () if isinstance(i, dict) and i.get("role") not in ("system", "developer")]
        if not turns:
            return None
        item = turns[-1]
        if item.get("type") == "function_call_output":
            return "result", _text(item.get("output"))
        return ("user", "") if item.get("role") == "user" else None
    messages = [m for m in body.get("messages") or () if isinstance(m, dict) and m.get("role") != "system"]
    if not messages:
        return None
    message = messages[-1]
    if message.get("role") == "user" and len(messages) > 1 and messages[-2].get("role") == "tool":
        message = messages[-2]  # chat: a tool's images come in a user message after its own (no image in a tool's)
    if message.get("role") == "tool":  # chat
        return "result", _text(message.get("content"))
    if message.get("role") != "user":
        return None
    content = message.get("content")
    results = (
        [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if isinstance(content, list)
        else []
    )
    if results:  # Messages
        return "result", _text(results[-1].get("content"))
    return "user", ""


def _text(content: object) -> str:
    """The text of a tool result: a string, or parts with ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


__all__ = ["PATCH_TOOLS", "READ_TOOLS", "RESULT_PREFIX", "SEARCH_TOOLS", "SHELL_TOOLS", "steer"]
