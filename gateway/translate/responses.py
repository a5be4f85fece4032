"""OpenAI's Responses API in the neutral shape: a request read here, written in ``responses_write``
(answers: ``responses_reply``); both are reached from this module.

Reading refuses the built-in tools (web search, file search, computer use, code interpreter, image
generation, MCP, shell) unless the operator chose to omit them (``builtin_tools``), files, item
references, ``previous_response_id`` (the gateway expands it into the full input before translating),
background mode and stored prompts. ``include`` asks for what a translated answer may lack:
``reasoning.encrypted_content`` comes back absent (no other provider makes one), which Codex accepts.
``namespace`` tools are flattened (``gateway.translate.namespaces``); a ``tool_search`` the client runs is a function,
and the tools its outputs loaded join the request's (``gateway.translate.tool_search``).
"""

from __future__ import annotations

from typing import Any, Literal

from gateway.translate import freeform, tool_search
from gateway.translate.common import (
    add_result,
    as_dict,
    as_list,
    as_str,
    document_from,
    image_from_url,
    opt_bool,
    opt_int,
    opt_number,
    opt_str,
    part_texts,
    read_function,
    read_function_choice,
    read_json_schema,
    refuse_unknown,
)
from gateway.translate.ir import (
    BuiltinTools,
    Conversation,
    Document,
    Image,
    Instruction,
    OutputFormat,
    Part,
    Reasoning,
    ReasoningAsk,
    Text,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    Turn,
    Untranslatable,
)
from gateway.translate.namespaces import flat_choice, flat_name, flat_names, flat_of_bare, function_names

# Writing lives in responses_write.py; re-exported so that both halves are reached from here.
from gateway.translate.responses_write import TARGET as TARGET
from gateway.translate.responses_write import write_request as write_request
from gateway.translate.sealed import read_held

_KNOWN = frozenset(
    {
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "reasoning",
        "store",
        "stream",
        "include",
        "metadata",
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "truncation",
        "stream_options",
        "client_metadata",
    }
)
"""``client_metadata`` (Codex's session, thread and turn ids) is read by nobody but OpenAI's logs: dropped, as it
has no effect on the answer (docs/translation.md)."""
_INCLUDES = frozenset({"reasoning.encrypted_content"})


# -- request: Responses → neutral ------------------------------------------------------------


def read_request(body: dict[str, Any], builtin_tools: BuiltinTools = "refuse") -> Conversation:
    """The request in the neutral shape; a built-in tool is refused, or with ``builtin_tools="omit"`` left out
    and named in ``omitted_tools``. Namespaced functions become flat ones (``gateway.translate.namespaces``)."""
    refuse_unknown(body, _KNOWN, "other")
    if body.get("truncation") not in (None, "disabled"):
        raise Untranslatable("truncation", "other", f"truncation {body.get('truncation')!r}")
    for index, value in enumerate(as_list(body.get("include") or [], "include")):
        if not isinstance(value, str) or value not in _INCLUDES:
            raise Untranslatable(f"include[{index}]", "other", f"{value!r}")
    conversation = Conversation(turns=[], stream=body.get("stream") is True)
    instructions = opt_str(body.get("instructions"), "instructions")
    if instructions:
        conversation.system.append(Instruction(instructions))
    tools = as_list(body.get("tools") or [], "tools")
    offered = tool_search.offered_tools(body)
    flat = flat_names(offered)
    taken = function_names(tools)
    for index, raw in enumerate(tools):
        tool = as_dict(raw, f"tools[{index}]")
        if tool_search.is_client_run(tool):
            conversation.tools.append(tool_search.read_tool(tool, f"tools[{index}]", taken))
        elif tool.get("type") not in ("function", "namespace", "custom") and builtin_tools == "omit":
            conversation.omitted_tools.append(str(tool.get("type")))
        else:
            conversation.tools.extend(_read_offered(tool, f"tools[{index}]", flat))
    items = body.get("input")
    if isinstance(items, str):
        conversation.turns.append(Turn("user", [Text(items)], plain=True))
    else:
        _read_items(conversation, as_list(items if items is not None else [], "input"), flat, tools)
    conversation.max_tokens = opt_int(body.get("max_output_tokens"), "max_output_tokens")
    conversation.temperature = opt_number(body.get("temperature"), "temperature")
    conversation.top_p = opt_number(body.get("top_p"), "top_p")
    conversation.tool_choice = read_function_choice(flat_choice(body.get("tool_choice"), flat, offered), nested=False)
    choice = conversation.tool_choice
    forced = choice.name if choice is not None and choice.mode == "tool" else None
    if choice is not None and forced is not None and all(t.name != forced for t in conversation.tools):
        # A forced function named as the model calls it within its namespace: the one flat function of that name.
        choice.name = flat_of_bare(forced, flat) or forced
    if conversation.omitted_tools and not conversation.tools and _forces_a_tool(conversation.tool_choice):
        raise Untranslatable("tool_choice", "other", "it requires a tool, and the only ones offered are omitted")
    conversation.parallel_tool_calls = opt_bool(body.get("parallel_tool_calls"), "parallel_tool_calls")
    text = body.get("text")
    if text is not None:
        spec = as_dict(text, "text")
        refuse_unknown(spec, frozenset({"format", "verbosity"}), "other", "text.")
        if spec.get("format") is not None:
            conversation.output = _read_format(as_dict(spec["format"], "text.format"))
    reasoning = body.get("reasoning")
    if reasoning is not None:
        spec = as_dict(reasoning, "reasoning")
        refuse_unknown(spec, frozenset({"effort", "summary", "generate_summary"}), "other", "reasoning.")
        effort = opt_str(spec.get("effort"), "reasoning.effort")
        summary = opt_str(spec.get("summary", spec.get("generate_summary")), "reasoning.summary")
        conversation.reasoning = ReasoningAsk(effort=effort, enabled=effort != "none", summary=summary)
    metadata = body.get("metadata")
    conversation.metadata = as_dict(metadata, "metadata") if metadata is not None else None
    conversation.user = opt_str(body.get("user"), "user") or opt_str(body.get("safety_identifier"), "safety_identifier")
    conversation.prompt_cache_key = opt_str(body.get("prompt_cache_key"), "prompt_cache_key")
    return conversation


def _turn(conversation: Conversation, role: str) -> Turn:
    """The last turn if it is ``role``'s (an assistant's text, reasoning and calls are one turn), else a new one."""
    last = conversation.turns[-1] if conversation.turns else None
    if last is not None and last.role == role and not last.plain:
        return last
    turn = Turn("assistant" if role == "assistant" else "user", [])
    conversation.turns.append(turn)
    return turn


def _forces_a_tool(choice: ToolChoice | None) -> bool:
    return choice is not None and choice.mode in ("required", "tool")


def _read_items(
    conversation: Conversation, items: list[Any], flat: dict[tuple[str, str], str], tools: list[Any]
) -> None:
    for index, raw in enumerate(items):
        path = f"input[{index}]"
        item = as_dict(raw, path)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            content = item.get("content")
            if role in ("system", "developer"):
                text = content if isinstance(content, str) else "".join(read_texts(content, f"{path}.content"))
                instruction: Literal["system", "developer"] = "developer" if role == "developer" else "system"
                if conversation.turns:
                    turn = Turn("user", [Text(text)], plain=True, instruction=instruction)
                    conversation.turns.append(turn)
                else:
                    conversation.system.append(Instruction(text, instruction))
            elif role in ("user", "assistant"):
                if isinstance(content, str):
                    conversation.turns.append(Turn(role, [Text(content)], plain=True))
                else:
                    parts = read_content(content, f"{path}.content")
                    if role == "assistant":
                        _turn(conversation, "assistant").parts.extend(parts)
                    else:
                        conversation.turns.append(Turn("user", parts))
            else:
                raise Untranslatable(f"{path}.role", "other", f"role {role!r}")
        elif kind == "function_call":
            name = as_str(item.get("name"), f"{path}.name")
            namespace = opt_str(item.get("namespace"), f"{path}.namespace")
            if namespace is not None:
                # A call of a namespace the request no longer offers: its flat name as it was made then.
                name = flat.get((namespace, name)) or flat_name(
                    namespace, name, function_names(tools) | set(flat.values())
                )
            call = ToolCall(
                as_str(item.get("call_id"), f"{path}.call_id"), name, as_str(item.get("arguments"), f"{path}.arguments")
            )
            _turn(conversation, "assistant").parts.append(call)
        elif kind == "custom_tool_call":
            text = as_str(item.get("input"), f"{path}.input")
            call = ToolCall(
                as_str(item.get("call_id"), f"{path}.call_id"),
                as_str(item.get("name"), f"{path}.name"),
                freeform.arguments_of(text),
            )
            _turn(conversation, "assistant").parts.append(call)
        elif kind == "tool_search_call":
            tool_search.check_client_run(item, path)
            call_id = as_str(item.get("call_id"), f"{path}.call_id")
            call = ToolCall(call_id, tool_search.NAME, tool_search.call_arguments(item))
            _turn(conversation, "assistant").parts.append(call)
        elif kind in ("function_call_output", "custom_tool_call_output", "tool_search_output"):
            output = item.get("output")
            call_id = as_str(item.get("call_id"), f"{path}.call_id")
            if kind == "tool_search_output":
                tool_search.check_client_run(item, path)
                result = ToolResult(call_id, [Text(tool_search.output_text(_load(conversation, item, path, flat)))])
            elif isinstance(output, str):
                result = ToolResult(call_id, [Text(output)])
            else:
                blocks = [p for p in read_content(output, f"{path}.output") if isinstance(p, Text | Image | Document)]
                result = ToolResult(call_id, blocks, plain=False)
            add_result(conversation, result)
        elif kind == "reasoning":
            summary = "".join(read_texts(item.get("summary") or [], f"{path}.summary"))
            content = "".join(read_texts(item.get("content") or [], f"{path}.content"))
            encrypted = opt_str(item.get("encrypted_content"), f"{path}.encrypted_content")
            # The provider's own opaque reasoning, or another maker's that the gateway sealed for the client.
            reasoning = read_held(encrypted, "responses") if encrypted is not None else Reasoning("")
            if reasoning.signature is None:  # a signed block's text is the one its signature signs
                reasoning.text, reasoning.summary = content or summary, not content and bool(summary)
            _turn(conversation, "assistant").parts.append(reasoning)
        else:
            raise Untranslatable(f"{path}.type", "other", f"a {kind!r} item")


def read_texts(content: Any, path: str) -> list[str]:
    return part_texts(content, path, ("input_text", "output_text", "summary_text", "reasoning_text", "text"))


def read_content(content: Any, path: str) -> list[Part]:
    parts: list[Part] = []
    for index, raw in enumerate(as_list(content, path)):
        where = f"{path}[{index}]"
        part = as_dict(raw, where)
        kind = part.get("type")
        if kind in ("input_text", "output_text"):
            parts.append(Text(as_str(part.get("text"), f"{where}.text")))
        elif kind == "refusal":
            parts.append(Text(as_str(part.get("refusal"), f"{where}.refusal")))
        elif kind == "input_image":
            if part.get("image_url") is None:
                raise Untranslatable(f"{where}.file_id", "other", "an image by file id")
            url = as_str(part.get("image_url"), f"{where}.image_url")
            detail = opt_str(part.get("detail"), f"{where}.detail")
            parts.append(image_from_url(url, None if detail == "auto" else detail))
        elif kind == "input_file":
            parts.append(document_from(part.get("file_data"), part.get("file_url"), part.get("filename"), where))
        else:
            raise Untranslatable(f"{where}.type", "other", f"a {kind!r} part")
    return parts


def _read_offered(tool: dict[str, Any], path: str, flat: dict[tuple[str, str], str]) -> list[Tool]:
    """An offered tool (the request's own, or one a tool search loaded) as the flat tools it becomes."""
    if tool.get("type") == "namespace":
        return _read_namespace(tool, path, flat)
    if tool.get("type") == "custom":
        return [freeform.read_tool(tool, path)]
    return [_read_tool(tool, 0, path)]


def _load(conversation: Conversation, item: dict[str, Any], path: str, flat: dict[tuple[str, str], str]) -> list[str]:
    """The tools a ``tool_search_output`` item loaded, added to the conversation's (once each: a later search may
    find a tool again): the names the model calls them by."""
    names = []
    have = {t.name for t in conversation.tools}
    for index, raw in enumerate(as_list(item.get("tools") or [], f"{path}.tools")):
        for tool in _read_offered(as_dict(raw, f"{path}.tools[{index}]"), f"{path}.tools[{index}]", flat):
            names.append(tool.name)
            if tool.name not in have:
                have.add(tool.name)
                conversation.tools.append(tool)
    return names


def _read_namespace(tool: dict[str, Any], path: str, flat: dict[tuple[str, str], str]) -> list[Tool]:
    """A namespace's functions as flat tools; the namespace's description leads each function's own."""
    namespace = as_str(tool.get("name"), f"{path}.name")
    about = opt_str(tool.get("description"), f"{path}.description")
    out = []
    for inner, raw in enumerate(as_list(tool.get("tools") or [], f"{path}.tools")):
        function = _read_tool(raw, inner, f"{path}.tools[{inner}]")
        function.name = flat[(namespace, function.name)]
        if about:
            function.description = f"{about}\n\n{function.description}" if function.description else about
        out.append(function)
    return out


def _read_tool(raw: Any, index: int, path: str = "") -> Tool:
    path = path or f"tools[{index}]"
    tool = as_dict(raw, path)
    if tool.get("type") != "function":
        why = f"the built-in tool {tool.get('type')!r}"
        if tool.get("type") == tool_search.NAME:
            why += ' run by OpenAI (one the client runs, "execution": "client", is carried)'
        raise Untranslatable(f"{path}.type", "other", why)
    return read_function(tool, path)


def _read_format(spec: dict[str, Any]) -> OutputFormat:
    kind = spec.get("type")
    if kind in ("text", "json_object"):
        return OutputFormat(kind)
    if kind != "json_schema":
        raise Untranslatable("text.format.type", "other", f"format {kind!r}")
    return read_json_schema(spec, "text.format")
