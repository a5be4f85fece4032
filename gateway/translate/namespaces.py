"""Responses ``namespace`` tools, flattened for APIs that have none, and unflattened on the way back.

A Responses ``namespace`` tool groups function tools under a name (Codex offers its sub-agent tools as the
namespace ``multi_agent_v1``); the model calls one as a ``function_call`` carrying both ``namespace`` and
``name``. Chat and Messages have flat tool lists whose names must match ``^[a-zA-Z0-9_-]{1,64}$``, so each
namespaced function becomes one flat function named ``<namespace>__<name>``. When that name is taken by a
top-level function, too long, or not made of those characters, it becomes a safe prefix of it and a digest
of the pair instead. The mapping depends only on the request's ``tools``, so it is the same every turn (the
translated prefix stays byte-identical for the provider's prompt cache), and a call coming back under a
flat name is written as the namespaced call the client offered (``split``).

An ``allowed_tools`` choice names its functions as the model calls them: a namespaced one by ``name`` and
``namespace`` (or by its name alone, when no top-level function has it and one namespace does), a whole namespace
as ``{"type": "namespace", "name": ...}``; each goes out under the flat names (``flat_choice``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from gateway.translate.ir import Untranslatable
from gateway.translate.tool_search import offered_tools

SEPARATOR = "__"
MAX_NAME = 64
_VALID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
_DIGEST = 8


def flat_names(tools: Any) -> dict[tuple[str, str], str]:
    """(namespace, function name) → the flat name each namespaced function of a Responses ``tools`` list gets."""
    if not isinstance(tools, list):
        return {}
    taken = {
        name
        for t in tools
        if isinstance(t, dict) and t.get("type") == "function" and isinstance(name := t.get("name"), str)
    }
    names: dict[tuple[str, str], str] = {}
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "namespace":
            continue
        namespace, inner = tool.get("name"), tool.get("tools")
        if not isinstance(namespace, str) or not isinstance(inner, list):
            continue
        for function in inner:
            name = function.get("name") if isinstance(function, dict) else None
            if isinstance(name, str) and (namespace, name) not in names:
                flat = flat_name(namespace, name, taken)
                names[(namespace, name)] = flat
                taken.add(flat)
    return names


def flat_name(namespace: str, name: str, taken: set[Any]) -> str:
    """The flat name of ``namespace``'s function ``name``, distinct from every name in ``taken``."""
    plain = f"{namespace}{SEPARATOR}{name}"
    if _VALID.match(plain) and plain not in taken:
        return plain
    digest = hashlib.sha256(f"{namespace}\0{name}".encode()).hexdigest()[:_DIGEST]
    flat = f"{_INVALID.sub('_', plain)[: MAX_NAME - _DIGEST - 1]}_{digest}"
    if flat in taken:
        raise Untranslatable("tools", "other", f"the namespaced function {namespace}.{name} has no free flat name")
    return flat


def split(name: str, request: dict[str, Any]) -> tuple[str, str | None]:
    """A called function's (name, namespace) as the client offered it (among its own tools, or those a tool search
    loaded): the flat name of a namespaced function unflattened, any other name as it is (namespace None)."""
    for (namespace, function), flat in flat_names(offered_tools(request)).items():
        if flat == name:
            return function, namespace
    return name, None


def function_names(tools: list[Any]) -> set[str]:
    """The names of the top-level functions among ``tools`` (a malformed tool's name, which may be anything, is
    refused where the tool itself is read): what a flattened namespaced name must not clash with."""
    names = set()
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(name := tool.get("name"), str):
            names.add(name)
    return names


def flat_choice(choice: Any, flat: dict[tuple[str, str], str], offered: list[Any]) -> Any:
    """A Responses ``tool_choice`` whose ``allowed_tools`` entries name namespaced functions, with each as the flat
    function it goes out as (``flat``: ``flat_names`` of the ``offered`` tools, whose top-level functions a bare
    name means first). Any other choice is returned as it is, at no cost."""
    if not isinstance(choice, dict) or choice.get("type") != "allowed_tools":
        return choice
    tools = choice.get("tools")
    if not isinstance(tools, list):
        return choice
    top_level = function_names(offered)
    entries: list[Any] = []
    for index, tool in enumerate(tools):
        entries.extend(_flat_entries(tool, f"tool_choice.tools[{index}]", flat, top_level))
    return {**choice, "tools": entries}


def _flat_entries(tool: Any, path: str, flat: dict[tuple[str, str], str], top_level: set[str]) -> list[Any]:
    if not isinstance(tool, dict) or not isinstance(name := tool.get("name"), str):
        return [tool]  # not a named function or namespace: read (and refused, if need be) as it is
    kind, namespace = tool.get("type"), tool.get("namespace")
    if kind == "namespace":
        names = [f for (space, _), f in flat.items() if space == name]
        if not names:
            raise Untranslatable(path, "other", f"an allowed namespace {name!r} that no namespace tool offers")
        return [{"type": "function", "name": f} for f in names]
    if kind != "function":
        return [tool]
    if isinstance(namespace, str):
        found = flat.get((namespace, name))
        if found is None:
            raise Untranslatable(path, "other", f"an allowed function {namespace}.{name} that no namespace offers")
        return [{"type": "function", "name": found}]
    found = flat_of_bare(name, flat) if name not in top_level else None
    return [{"type": "function", "name": found}] if found is not None else [tool]


def flat_of_bare(name: str, flat: dict[tuple[str, str], str]) -> str | None:
    """A function named as the model calls it within its namespace (without the namespace): the flat name of the one
    namespaced function of that name; None where no namespace, or more than one, has it."""
    matches = [f for (_, function), f in flat.items() if function == name]
    return matches[0] if len(matches) == 1 else None
