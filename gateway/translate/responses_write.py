"""A request in the neutral shape written as OpenAI's Responses API (reading it: ``gateway.translate.responses``).

What the Responses API cannot carry is refused before anything is sent (``Untranslatable``): stop
sequences, ``top_k``, a participant's name. Reasoning goes back only as a Responses provider's own
opaque item (``Reasoning.maker``), which a request that asks reasoning asks for (``include``); the request
is written with ``store: false`` (the gateway keeps conversations itself).
"""

from __future__ import annotations

from typing import Any

from gateway.translate.common import (
    document_name,
    document_url,
    image_url,
    write_function_choice,
    write_json_schema,
    write_openai_labels,
    write_tool,
)
from gateway.translate.ir import (
    Conversation,
    Document,
    Image,
    OutputFormat,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    Turn,
    Untranslatable,
    system_text,
)

TARGET = "Responses"
LEAST_OUTPUT_TOKENS = 16
"""The least ``max_output_tokens`` the Responses API takes (OpenAI answers a lower one with a 400): a lower limit, such
as the ``max_tokens: 1`` with which Claude Code and Claude Desktop probe that a model answers, is asked as this one."""


# -- request: neutral → Responses ------------------------------------------------------------


def write_request(conversation: Conversation, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if conversation.system:
        body["instructions"] = system_text(conversation.system)
    if any(turn.name is not None for turn in conversation.turns):
        raise Untranslatable("messages[].name", TARGET, "a participant's name")
    body["input"] = [item for turn in conversation.turns for item in _items(turn)]
    if conversation.tools:
        body["tools"] = [_tool(t) for t in conversation.tools]
    choice = conversation.tool_choice
    if choice is not None:
        body["tool_choice"] = write_function_choice(choice, nested=False)
    if conversation.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = conversation.parallel_tool_calls
    if conversation.max_tokens is not None:
        body["max_output_tokens"] = max(conversation.max_tokens, LEAST_OUTPUT_TOKENS)
    if conversation.top_k is not None:
        raise Untranslatable("top_k", TARGET)
    if conversation.stop is not None:
        raise Untranslatable("stop", TARGET, "the Responses API has no stop sequences")
    for name in ("temperature", "top_p"):
        value = getattr(conversation, name)
        if value is not None:
            body[name] = value
    if conversation.output is not None:
        body["text"] = {"format": _format(conversation.output)}
    reasoning = conversation.reasoning
    if reasoning is not None:
        spec: dict[str, Any] = {"effort": reasoning.openai_effort("minimal")}
        if reasoning.summary is not None:
            spec["summary"] = reasoning.summary
        body["reasoning"] = spec
        # With ``store: false`` the reasoning is kept only as the answer's opaque items: asked for, they go back to
        # the provider next turn (a Messages client holds them as ``redacted_thinking``).
        body["include"] = ["reasoning.encrypted_content"]
    write_openai_labels(conversation, body)
    body["store"] = False
    if conversation.stream:
        body["stream"] = True
    return body


def _items(turn: Turn) -> list[dict[str, Any]]:
    if turn.plain and len(turn.parts) == 1 and isinstance(turn.parts[0], Text):
        return [{"role": turn.instruction or turn.role, "content": turn.parts[0].text}]
    items: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []

    def flush() -> None:
        if content:
            items.append({"role": turn.role, "content": list(content)})
            content.clear()

    text_type = "output_text" if turn.role == "assistant" else "input_text"
    for part in turn.parts:
        if isinstance(part, Text):
            content.append({"type": text_type, "text": part.text})
        elif isinstance(part, Image):
            image: dict[str, Any] = {"type": "input_image", "image_url": image_url(part)}
            image["detail"] = part.detail or "auto"
            content.append(image)
        elif isinstance(part, Document):
            content.append(_input_part(part))
        elif isinstance(part, ToolCall):
            flush()
            items.append({"type": "function_call", "call_id": part.id, "name": part.name, "arguments": part.arguments})
        elif isinstance(part, ToolResult):
            flush()
            items.append({"type": "function_call_output", "call_id": part.call_id, "output": _output(part)})
        elif part.opaque_for("responses"):
            # Only opaque reasoning a Responses provider made can go back to one (OpenAI refuses any other); plain
            # text has no place.
            flush()
            summary = [{"type": "summary_text", "text": part.text}] if part.text and part.summary else []
            items.append({"type": "reasoning", "summary": summary, "encrypted_content": part.encrypted})
    flush()
    return items


def _output(result: ToolResult) -> str | list[dict[str, Any]]:
    """A ``function_call_output``'s output: one string, or input parts where the result held blocks or images. The
    Responses API has no error flag on a tool's output: the model reads a failure in the text, as chat's does, whichever
    form the output takes (a failed call read as a success would change what the model does next)."""
    error = "Error: " if result.is_error else ""
    if result.plain and all(isinstance(p, Text) for p in result.content):
        return error + "".join(p.text for p in result.content if isinstance(p, Text))
    parts = [_input_part(p) for p in result.content]
    if not error:
        return parts
    if parts and parts[0]["type"] == "input_text":
        return [{"type": "input_text", "text": error + parts[0]["text"]}, *parts[1:]]
    return [{"type": "input_text", "text": error.rstrip()}, *parts]


def _input_part(part: Text | Image | Document) -> dict[str, Any]:
    if isinstance(part, Text):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, Document):
        inline = {"filename": document_name(part), "file_data": document_url(part)}
        return {"type": "input_file", **(inline if part.url is None else {"file_url": part.url})}
    return {"type": "input_image", "image_url": image_url(part), "detail": part.detail or "auto"}


def _tool(tool: Tool) -> dict[str, Any]:
    # ``strict`` said always here: false where the tool does not say.
    return {"type": "function", **write_tool(tool), "strict": tool.strict if tool.strict is not None else False}


def _format(output: OutputFormat) -> dict[str, Any]:
    if output.kind != "json_schema":
        return {"type": output.kind}
    return {"type": "json_schema", **write_json_schema(output)}
