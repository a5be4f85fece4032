"""Anthropic's Messages API in the neutral shape: a request read here, written in ``messages_write``
(answers: ``messages_reply``); both are reached from this module.

Reading refuses what other APIs cannot carry: documents, search results, server tools (web search,
code execution, bash, computer use), MCP servers, containers, context-management edits other than
clearing old thinking. ``STOPS`` and ``STOP_OF`` map Anthropic's stop reasons to the neutral ones and back.
"""

from __future__ import annotations

from typing import Any

from gateway.translate import sealed
from gateway.translate.common import (
    as_dict,
    as_list,
    as_str,
    dump_json,
    opt_int,
    opt_number,
    opt_str,
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
    StopReason,
    Text,
    Tool,
    ToolCall,
    ToolChoice,
    ToolResult,
    Turn,
    Untranslatable,
)

# Writing lives in messages_write.py; re-exported so that both halves are reached from here.
from gateway.translate.messages_write import DEFAULT_MAX_TOKENS as DEFAULT_MAX_TOKENS
from gateway.translate.messages_write import TARGET as TARGET
from gateway.translate.messages_write import tool_id as tool_id
from gateway.translate.messages_write import write_block as write_block
from gateway.translate.messages_write import write_request as write_request

_KNOWN = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "output_format",
        "output_config",
        "context_management",
        "cache_control",
    }
)
"""``cache_control`` at the top (automatic caching: Anthropic marks the request's last cacheable block) is a cache hint,
as a block's own mark is: read and left out, since the targets read from here (chat, Responses) cache prefixes without
marks."""
STOPS: dict[str, StopReason] = {
    "end_turn": "end",
    "max_tokens": "length",
    "tool_use": "tool",
    "stop_sequence": "stop_sequence",
    "refusal": "filter",
    "pause_turn": "end",
    "model_context_window_exceeded": "length",
}
STOP_OF: dict[StopReason, str] = {
    "end": "end_turn",
    "length": "max_tokens",
    "tool": "tool_use",
    "stop_sequence": "stop_sequence",
    "filter": "refusal",
}


# -- request: Messages → neutral -------------------------------------------------------------


def read_request(body: dict[str, Any], builtin_tools: BuiltinTools = "refuse") -> Conversation:
    """The request in the neutral shape; a server tool is refused, or with ``builtin_tools="omit"`` left out and
    named in ``omitted_tools`` (a ``tool_choice`` naming it is still refused)."""
    if body.get("inference_geo") is not None:
        where = body["inference_geo"]
        raise Untranslatable("inference_geo", "other", f"inference_geo {where!r} pins where the model runs")
    refuse_unknown(body, _KNOWN, "other")
    if body.get("cache_control") is not None:
        as_dict(body["cache_control"], "cache_control")
    _context_management(body.get("context_management"))
    conversation = Conversation(turns=[], stream=body.get("stream") is True)
    system = body.get("system")
    if isinstance(system, str):
        if system:
            conversation.system.append(Instruction(system))
    elif system is not None:
        conversation.system_plain = False
        for index, raw in enumerate(as_list(system, "system")):
            block = as_dict(raw, f"system[{index}]")
            if block.get("type") != "text":
                raise Untranslatable(f"system[{index}].type", "other", f"a {block.get('type')!r} system block")
            conversation.system.append(Instruction(as_str(block.get("text"), "text"), cache=block.get("cache_control")))
    for index, raw in enumerate(as_list(body.get("messages"), "messages")):
        path = f"messages[{index}]"
        message = as_dict(raw, path)
        role = message.get("role")
        content = message.get("content")
        if role == "system":
            _read_system_message(conversation, content, path)
            continue
        if role not in ("user", "assistant"):
            raise Untranslatable(f"{path}.role", "other", f"role {role!r}")
        if isinstance(content, str):
            conversation.turns.append(Turn(role, [Text(content)], plain=True))
            continue
        parts = [read_block(b, f"{path}.content[{i}]") for i, b in enumerate(as_list(content, f"{path}.content"))]
        conversation.turns.append(Turn(role, [p for p in parts if p is not None]))
    conversation.max_tokens = opt_int(body.get("max_tokens"), "max_tokens")
    conversation.temperature = opt_number(body.get("temperature"), "temperature")
    conversation.top_p = opt_number(body.get("top_p"), "top_p")
    conversation.top_k = opt_int(body.get("top_k"), "top_k")
    stops = body.get("stop_sequences")
    if stops is not None:
        conversation.stop = [as_str(s, "stop_sequences[]") for s in as_list(stops, "stop_sequences")]
    metadata = body.get("metadata")
    if metadata is not None:
        meta = as_dict(metadata, "metadata")
        refuse_unknown(meta, frozenset({"user_id"}), "other", "metadata.")
        conversation.user = opt_str(meta.get("user_id"), "metadata.user_id")
    for index, raw in enumerate(as_list(body.get("tools") or [], "tools")):
        tool = as_dict(raw, f"tools[{index}]")
        if tool.get("type") not in (None, "custom") and builtin_tools == "omit":
            conversation.omitted_tools.append(str(tool.get("name") or tool.get("type")))
        else:
            conversation.tools.append(_read_tool(tool, index))
    choice = body.get("tool_choice")
    if choice is not None:
        spec = as_dict(choice, "tool_choice")
        kind = spec.get("type")
        modes = {"auto": "auto", "any": "required", "none": "none", "tool": "tool"}
        if not isinstance(kind, str) or kind not in modes:
            raise Untranslatable("tool_choice.type", "other", f"tool choice {kind!r}")
        name = opt_str(spec.get("name"), "tool_choice.name") if kind == "tool" else None
        if name in conversation.omitted_tools or (
            kind == "any" and conversation.omitted_tools and not conversation.tools
        ):
            raise Untranslatable("tool_choice", "other", "it forces a server tool, which is omitted")
        conversation.tool_choice = ToolChoice(modes[kind], name)  # type: ignore[arg-type]
        disabled = spec.get("disable_parallel_tool_use")
        if disabled is not None:
            conversation.parallel_tool_calls = not disabled
    thinking = body.get("thinking")
    if thinking is not None:
        spec = as_dict(thinking, "thinking")
        # ``display`` says how Anthropic shows its thinking (in full or summarised, or omitted but for the
        # signature), not what the model answers: read as absent.
        refuse_unknown(spec, frozenset({"type", "budget_tokens", "display"}), "other", "thinking.")
        kind = spec.get("type")
        if kind == "enabled":
            budget = opt_int(spec.get("budget_tokens"), "thinking.budget_tokens")
            conversation.reasoning = ReasoningAsk(budget_tokens=budget)
        elif kind == "disabled":
            conversation.reasoning = ReasoningAsk(enabled=False)
        elif kind == "adaptive":
            conversation.reasoning = ReasoningAsk(adaptive=True)
        else:
            raise Untranslatable("thinking.type", "other", f"thinking {kind!r}")
    output = body.get("output_format")
    if output is not None:
        conversation.output = _read_output_format(output, "output_format")
    _read_output_config(body.get("output_config"), conversation)
    return conversation


def _read_system_message(conversation: Conversation, content: Any, path: str) -> None:
    """A ``role: "system"`` message in ``messages`` (Claude Code's ``mid-conversation-system`` beta): an instruction
    where the conversation has not begun, else a turn that keeps its role (``Turn.instruction``), written as each
    target takes instructions after the first turn."""
    if isinstance(content, str):
        text = content
    else:
        texts = []
        for index, raw in enumerate(as_list(content, f"{path}.content")):
            block = as_dict(raw, f"{path}.content[{index}]")
            if block.get("type") != "text":
                raise Untranslatable(f"{path}.content[{index}].type", "other", f"a {block.get('type')!r} system block")
            texts.append(as_str(block.get("text"), f"{path}.content[{index}].text"))
        text = "".join(texts)
    if conversation.turns:
        conversation.turns.append(Turn("user", [Text(text)], plain=True, instruction="system"))
    else:
        conversation.system.append(Instruction(text))


def _read_output_format(value: Any, path: str) -> OutputFormat:
    spec = as_dict(value, path)
    if spec.get("type") != "json_schema":
        raise Untranslatable(f"{path}.type", "other", f"output format {spec.get('type')!r}")
    return OutputFormat("json_schema", None, as_dict(spec.get("schema"), f"{path}.schema"))


_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
"""``output_config.effort`` as OpenAI's ``reasoning_effort`` spells it: the two levels above ``high``
(Anthropic's ``xhigh`` and ``max``) have no OpenAI name and are asked as ``high`` (approximated)."""


def _read_output_config(value: Any, conversation: Conversation) -> None:
    """``output_config`` (what Claude Code sends on every call): its effort is the reasoning effort asked of a
    chat or Responses target, and its ``format`` the structured output, as ``output_format`` is."""
    if value is None:
        return
    spec = as_dict(value, "output_config")
    refuse_unknown(spec, frozenset({"effort", "format"}), "other", "output_config.")
    effort = opt_str(spec.get("effort"), "output_config.effort")
    if effort is not None:
        if effort not in _EFFORTS:
            raise Untranslatable("output_config.effort", "other", f"effort {effort!r}")
        ask = conversation.reasoning if conversation.reasoning is not None else ReasoningAsk()
        ask.effort = _EFFORTS[effort]
        conversation.reasoning = ask
    if spec.get("format") is not None:
        conversation.output = _read_output_format(spec["format"], "output_config.format")


def _context_management(value: Any) -> None:
    """Claude Code asks to clear old thinking (``clear_thinking_*``): a target that keeps no past reasoning in its
    context has nothing to clear, so that edit needs no carrying. Any other edit (clearing tool results) changes
    what the model reads: refused."""
    if value is None:
        return
    spec = as_dict(value, "context_management")
    refuse_unknown(spec, frozenset({"edits"}), "other", "context_management.")
    for index, raw in enumerate(as_list(spec.get("edits") or [], "context_management.edits")):
        kind = as_dict(raw, f"context_management.edits[{index}]").get("type")
        if not isinstance(kind, str) or not kind.startswith("clear_thinking_"):
            raise Untranslatable(f"context_management.edits[{index}].type", "other", f"the edit {kind!r}")


def read_block(raw: Any, path: str) -> Part | None:
    block = as_dict(raw, path)
    kind = block.get("type")
    cache = block.get("cache_control")
    if kind == "text":
        return Text(as_str(block.get("text"), f"{path}.text"), cache)
    if kind == "image":
        image = _read_image(block, path)
        image.cache = cache
        return image
    if kind == "document":
        document = _read_document(block, path)
        document.cache = cache
        return document
    if kind == "tool_use":
        arguments = dump_json(block.get("input") if block.get("input") is not None else {})
        return ToolCall(
            as_str(block.get("id"), f"{path}.id"), as_str(block.get("name"), f"{path}.name"), arguments, cache
        )
    if kind == "tool_result":
        content = block.get("content")
        call_id = as_str(block.get("tool_use_id"), f"{path}.tool_use_id")
        is_error = block.get("is_error") is True
        if content is None or isinstance(content, str):
            return ToolResult(call_id, [Text(content or "")], is_error, True, cache)
        blocks: list[Text | Image | Document] = []
        for index, item in enumerate(as_list(content, f"{path}.content")):
            part = read_block(item, f"{path}.content[{index}]")
            if not isinstance(part, Text | Image | Document):
                raise Untranslatable(
                    f"{path}.content[{index}].type", "other", "only text, images and documents in a tool result"
                )
            blocks.append(part)
        return ToolResult(call_id, blocks, is_error, False, cache)
    if kind == "thinking":
        # An empty signature: the gateway wrote the block from another API's reasoning (readable text only).
        signature = opt_str(block.get("signature"), f"{path}.signature") or None
        text = as_str(block.get("thinking"), f"{path}.thinking")
        return Reasoning(text, signature, maker="messages" if signature is not None else None)
    if kind == "redacted_thinking":
        return sealed.read_held(as_str(block.get("data"), f"{path}.data"), "messages")
    raise Untranslatable(f"{path}.type", "other", f"a {kind!r} block")


def _read_image(block: dict[str, Any], path: str) -> Image:
    source = as_dict(block.get("source"), f"{path}.source")
    kind = source.get("type")
    if kind == "base64":
        return Image(
            data=as_str(source.get("data"), f"{path}.source.data"),
            media_type=as_str(source.get("media_type"), f"{path}.source.media_type"),
        )
    if kind == "url":
        return Image(url=as_str(source.get("url"), f"{path}.source.url"))
    raise Untranslatable(f"{path}.source.type", "other", f"an image source {kind!r}")


def _read_document(block: dict[str, Any], path: str) -> Document:
    """A ``document`` block of a PDF's bytes or URL; a plain-text or content source, a ``context`` and citations have
    no place in the other APIs' file parts."""
    refuse_unknown(block, frozenset({"type", "source", "title", "cache_control", "citations"}), "other", path + ".")
    citations = block.get("citations")
    if citations is not None and as_dict(citations, f"{path}.citations").get("enabled") is True:
        raise Untranslatable(f"{path}.citations", "other", "citations of a document")
    source = as_dict(block.get("source"), f"{path}.source")
    kind = source.get("type")
    title = opt_str(block.get("title"), f"{path}.title")
    if kind == "base64":
        media_type = as_str(source.get("media_type"), f"{path}.source.media_type")
        return Document(data=as_str(source.get("data"), f"{path}.source.data"), media_type=media_type, filename=title)
    if kind == "url":
        return Document(url=as_str(source.get("url"), f"{path}.source.url"), filename=title)
    raise Untranslatable(f"{path}.source.type", "other", f"a document source {kind!r}")


def _read_tool(raw: Any, index: int) -> Tool:
    path = f"tools[{index}]"
    tool = as_dict(raw, path)
    if tool.get("type") not in (None, "custom"):
        raise Untranslatable(f"{path}.type", "other", f"the server tool {tool.get('type')!r}")
    # ``eager_input_streaming`` asks for a call's input as it is made, without buffering: how it is streamed, not
    # what it is; read as absent.
    known = {"type", "name", "description", "input_schema", "cache_control", "strict", "eager_input_streaming"}
    refuse_unknown(tool, frozenset(known), "other", path + ".")
    schema = tool.get("input_schema")
    return Tool(
        as_str(tool.get("name"), f"{path}.name"),
        opt_str(tool.get("description"), f"{path}.description"),
        as_dict(schema, f"{path}.input_schema") if schema is not None else None,
        tool.get("strict") if isinstance(tool.get("strict"), bool) else None,
        tool.get("cache_control"),
    )
