"""OpenAI's Chat Completions API in the neutral shape: a request read and written (whole answers: ``chat_reply``).

Reading refuses what the neutral shape cannot hold (``n`` > 1, logprobs, penalties, audio, files by id, legacy
``functions``): each names its field. Writing follows what open-weights servers (vLLM, llama.cpp, SGLang) accept:
one leading ``system`` message (several instructions are joined, a developer's included), reasoning as the
assistant's ``reasoning_content``, and ``cache_control`` left out (no chat provider caches explicitly).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from gateway.dialects.base import StopReason as SharedStop
from gateway.dialects.chat_events import chat_stop
from gateway.translate.chat_assistant import assistant_message as assistant_message
from gateway.translate.chat_assistant import read_assistant as read_assistant
from gateway.translate.common import (
    add_result,
    as_dict,
    as_list,
    as_str,
    bad,
    document_from,
    document_name,
    document_url,
    image_from_url,
    image_url,
    opt_bool,
    opt_int,
    opt_number,
    opt_str,
    part_texts,
    read_function,
    read_function_choice,
    read_json_schema,
    refuse_unknown,
    write_function_choice,
    write_json_schema,
    write_openai_labels,
    write_tool,
)
from gateway.translate.ir import (
    Conversation,
    Document,
    Image,
    Instruction,
    OutputFormat,
    Part,
    ReasoningAsk,
    StopReason,
    Text,
    Tool,
    ToolResult,
    Turn,
    Untranslatable,
    system_text,
)

TARGET = "Chat Completions"
IMAGES_FOLLOW = "[the images this tool returned follow in the next user message]"
"""A tool message's note where its result held images (chat's tool messages hold text only) ..."""
FILES_FOLLOW = "[the files this tool returned follow in the next user message]"
"""... and where it held documents (a PDF a file reader returned), images or not."""
_KNOWN = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop",
        "response_format",
        "user",
        "safety_identifier",
        "metadata",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning_effort",
        "prompt_cache_key",
        "n",
        "store",
    }
)
STOPS: dict[SharedStop, StopReason] = {
    "stop": "end",
    "length": "length",
    "tool": "tool",
    "filter": "filter",
    "other": "end",
}
"""The meter's stop reasons (``chat_events.CHAT_STOPS``: every host's ``finish_reason``) as the neutral ones."""
FINISH_OF: dict[StopReason, str] = {
    "end": "stop",
    "stop_sequence": "stop",
    "length": "length",
    "tool": "tool_calls",
    "filter": "content_filter",
}


def stop_of(finish: str, calls: bool) -> StopReason:
    """A ``finish_reason`` as a stop reason: an answer that made tool calls and ended with ``stop`` (Gemini's
    OpenAI-compatible API ends them so) stopped for its calls, as the client must be told to run them."""
    stop = STOPS[chat_stop(finish) or "other"]
    return "tool" if calls and stop == "end" else stop


def matched_stop(choice: dict[str, Any], stops: Sequence[str]) -> str | None:
    """The client's stop sequence that ended a choice, if the provider says which: vLLM and SGLang put the matched
    stop string in the choice's ``stop_reason`` (an int there is a stop token's id, null is neither). Only one of
    the client's own ``stops`` counts: the client is told of no sequence it did not ask for."""
    matched = choice.get("stop_reason")
    return matched if isinstance(matched, str) and matched in stops else None


# -- request: chat → neutral -----------------------------------------------------------------


def read_request(body: dict[str, Any]) -> Conversation:
    """A chat request in the neutral shape; ``Untranslatable`` names the first field that has no place there."""
    refuse_unknown(body, _KNOWN, "other")
    n = body.get("n")
    if n not in (None, 1):
        raise Untranslatable("n", "other", "only one choice can be asked of another API")
    conversation = Conversation(turns=[], stream=body.get("stream") is True)
    leading = True
    for index, raw in enumerate(as_list(body.get("messages"), "messages")):
        path = f"messages[{index}]"
        message = as_dict(raw, path)
        role = message.get("role")
        if role in ("system", "developer"):
            instruction: Literal["system", "developer"] = "developer" if role == "developer" else "system"
            if leading:
                conversation.system.extend(_instructions(message.get("content"), instruction, f"{path}.content"))
            else:
                text = _joined_text(message.get("content"), f"{path}.content")
                conversation.turns.append(Turn("user", [Text(text)], plain=True, instruction=instruction))
            continue
        leading = False
        if role == "user":
            parts, plain = _user_content(message.get("content"), f"{path}.content")
            conversation.turns.append(Turn("user", parts, plain, opt_str(message.get("name"), f"{path}.name")))
        elif role == "assistant":
            conversation.turns.append(read_assistant(message, path))
        elif role == "tool":
            call_id = as_str(message.get("tool_call_id"), f"{path}.tool_call_id")
            content, plain = _user_content(message.get("content"), f"{path}.content")
            blocks = [p for p in content if isinstance(p, Text | Image | Document)]
            result = ToolResult(call_id, blocks, plain=plain)
            add_result(conversation, result)
        else:
            raise Untranslatable(f"{path}.role", "other", f"role {role!r}")
    conversation.max_tokens = opt_int(body.get("max_completion_tokens"), "max_completion_tokens")
    if conversation.max_tokens is None:
        conversation.max_tokens = opt_int(body.get("max_tokens"), "max_tokens")
    conversation.temperature = opt_number(body.get("temperature"), "temperature")
    conversation.top_p = opt_number(body.get("top_p"), "top_p")
    conversation.top_k = opt_int(body.get("top_k"), "top_k")
    stop = body.get("stop")
    if isinstance(stop, str):
        conversation.stop, conversation.stop_plain = [stop], True
    elif stop is not None:
        conversation.stop = [as_str(s, "stop[]") for s in as_list(stop, "stop")]
    conversation.output = _read_format(body.get("response_format"))
    conversation.user = opt_str(body.get("user"), "user") or opt_str(body.get("safety_identifier"), "safety_identifier")
    metadata = body.get("metadata")
    conversation.metadata = as_dict(metadata, "metadata") if metadata is not None else None
    conversation.tools = [_read_tool(t, i) for i, t in enumerate(as_list(body.get("tools") or [], "tools"))]
    conversation.tool_choice = read_function_choice(body.get("tool_choice"), nested=True)
    conversation.parallel_tool_calls = opt_bool(body.get("parallel_tool_calls"), "parallel_tool_calls")
    effort = opt_str(body.get("reasoning_effort"), "reasoning_effort")
    if effort is not None:
        conversation.reasoning = ReasoningAsk(effort=effort, enabled=effort != "none")
    conversation.prompt_cache_key = opt_str(body.get("prompt_cache_key"), "prompt_cache_key")
    return conversation


def _instructions(content: Any, role: Literal["system", "developer"], path: str) -> list[Instruction]:
    """A leading system or developer message: one instruction, cut after each part that carries a ``cache_control``
    mark (which OpenRouter's and LiteLLM's users put there for an Anthropic provider), so that the mark stays where
    the client put it: on the whole text, a mark before text that changes every turn would never hit."""
    if isinstance(content, str):
        return [Instruction(content, role)]
    out: list[Instruction] = []
    texts: list[str] = []
    for index, raw in enumerate(as_list(content, path)):
        part = as_dict(raw, f"{path}[{index}]")
        if part.get("type") != "text":
            raise Untranslatable(f"{path}[{index}].type", "other", f"a {part.get('type')!r} part here")
        texts.append(as_str(part.get("text"), f"{path}[{index}].text"))
        cache = part.get("cache_control")
        if cache is not None:
            out.append(Instruction("".join(texts), role, cache, glued=bool(out)))
            texts = []
    if texts or not out:
        out.append(Instruction("".join(texts), role, glued=bool(out)))
    return out


def _joined_text(content: Any, path: str) -> str:
    return content if isinstance(content, str) else "".join(part_texts(content, path, ("text",)))


def _user_content(content: Any, path: str) -> tuple[list[Part], bool]:
    if isinstance(content, str):
        return [Text(content)], True
    if content is None:
        return [], False
    parts: list[Part] = []
    for index, raw in enumerate(as_list(content, path)):
        where = f"{path}[{index}]"
        part = as_dict(raw, where)
        kind = part.get("type")
        cache = part.get("cache_control")
        if kind == "text":
            parts.append(Text(as_str(part.get("text"), f"{where}.text"), cache))
        elif kind == "image_url":
            image = as_dict(part.get("image_url"), f"{where}.image_url")
            url = as_str(image.get("url"), f"{where}.image_url.url")
            read = image_from_url(url, opt_str(image.get("detail"), f"{where}.image_url.detail"))
            read.cache = cache
            parts.append(read)
        elif kind == "file":
            spec = as_dict(part.get("file"), f"{where}.file")
            document = document_from(spec.get("file_data"), None, spec.get("filename"), f"{where}.file")
            document.cache = cache
            parts.append(document)
        else:
            raise Untranslatable(f"{where}.type", "other", f"a {kind!r} content part")
    return parts, False


def _read_tool(raw: Any, index: int) -> Tool:
    path = f"tools[{index}]"
    tool = as_dict(raw, path)
    if tool.get("type") != "function":
        raise Untranslatable(f"{path}.type", "other", f"a {tool.get('type')!r} tool")
    where = f"{path}.function"
    return read_function(as_dict(tool.get("function"), where), where, tool.get("cache_control"))


def _read_format(value: Any) -> OutputFormat | None:
    if value is None:
        return None
    spec = as_dict(value, "response_format")
    kind = spec.get("type")
    if kind in ("text", "json_object"):
        return OutputFormat(kind)
    if kind != "json_schema":
        raise bad("response_format.type", "text, json_object or json_schema")
    path = "response_format.json_schema"
    return read_json_schema(as_dict(spec.get("json_schema"), path), path)


# -- request: neutral → chat -----------------------------------------------------------------


def write_request(conversation: Conversation, model: str, *, stream_usage: bool = True) -> dict[str, Any]:
    """The chat request for ``conversation``: keys in one fixed order, so each turn's prefix is byte-identical."""
    body: dict[str, Any] = {"model": model, "messages": _messages(conversation)}
    if conversation.tools:
        body["tools"] = [_tool(t) for t in conversation.tools]
    choice = conversation.tool_choice  # without tools, OpenAI refuses either (only a forced call keeps its 400)
    if choice is not None and (conversation.tools or choice.mode in ("required", "tool")):
        body["tool_choice"] = write_function_choice(choice, nested=True)
    if conversation.parallel_tool_calls is not None and conversation.tools:
        body["parallel_tool_calls"] = conversation.parallel_tool_calls
    if conversation.max_tokens is not None:
        body["max_tokens"] = conversation.max_tokens
    for name in ("temperature", "top_p", "top_k"):
        value = getattr(conversation, name)
        if value is not None:
            body[name] = value
    if conversation.stop is not None:
        body["stop"] = conversation.stop[0] if conversation.stop_plain else conversation.stop
    output = conversation.output
    if output is not None:
        body["response_format"] = _format(output)
    reasoning = conversation.reasoning
    if reasoning is not None:
        body["reasoning_effort"] = reasoning.openai_effort("none")
    write_openai_labels(conversation, body)
    if conversation.stream:
        body["stream"] = True
        if stream_usage:
            body["stream_options"] = {"include_usage": True}
    return body


def _messages(conversation: Conversation) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if conversation.system:
        messages.append({"role": "system", "content": system_text(conversation.system)})
    for turn in conversation.turns:
        if turn.role == "assistant":
            messages.append(assistant_message(turn))
            continue
        shown: list[Part] = []  # the images and files of the turn's tool results, which a tool message cannot hold
        rest: list[Part] = []
        for part in turn.parts:
            if isinstance(part, ToolResult):
                messages.append({"role": "tool", "tool_call_id": part.call_id, "content": _result_content(part)})
                apart = [p for p in part.content if isinstance(p, Image | Document)]
                if apart:
                    noun = "Images" if all(isinstance(p, Image) for p in apart) else "Files"
                    shown += [Text(f"{noun} returned by tool call {part.call_id}:"), *apart]
            else:
                rest.append(part)
        rest = shown + rest
        if rest or not turn.parts:
            message: dict[str, Any] = {"role": "user", "content": _user_parts(rest, turn.plain and not shown)}
            if turn.name is not None:
                message["name"] = turn.name
            messages.append(message)
    return messages


def _result_content(result: ToolResult) -> str:
    """A tool message's text. Chat's tool messages hold text only: a result's images (Claude Code's ``Read`` of a
    picture, Codex's ``view_image``) and documents go in a user message right after the turn's tool messages, which
    this says."""
    # Blocks on lines of their own, as a chat server joins a content array's text parts for its template (an MCP
    # tool's result is often several text blocks: glued together, their words would run into each other).
    text = "\n".join(p.text for p in result.content if isinstance(p, Text))
    if any(isinstance(p, Image | Document) for p in result.content):
        note = FILES_FOLLOW if any(isinstance(p, Document) for p in result.content) else IMAGES_FOLLOW
        text = f"{text}\n{note}" if text else note
    # Chat has no error flag on a tool result: the model reads it in the text.
    return f"Error: {text}" if result.is_error else text


def _user_parts(parts: list[Part], plain: bool) -> str | list[dict[str, Any]]:
    if plain and len(parts) == 1 and isinstance(parts[0], Text):
        return parts[0].text
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, Text):
            out.append({"type": "text", "text": part.text})
        elif isinstance(part, Image):
            image: dict[str, Any] = {"url": image_url(part)}
            if part.detail is not None:
                image["detail"] = part.detail
            out.append({"type": "image_url", "image_url": image})
        elif isinstance(part, Document):
            if part.url is not None:
                raise Untranslatable("file_url", TARGET, "a document by URL (a chat file part holds its bytes only)")
            out.append({"type": "file", "file": {"filename": document_name(part), "file_data": document_url(part)}})
    return out


def _tool(tool: Tool) -> dict[str, Any]:
    return {"type": "function", "function": write_tool(tool)}


def _format(output: OutputFormat) -> dict[str, Any]:
    if output.kind != "json_schema":
        return {"type": output.kind}
    return {"type": "json_schema", "json_schema": write_json_schema(output)}
