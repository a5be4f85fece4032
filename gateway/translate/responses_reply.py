"""A whole Responses answer in the neutral shape, and back: output items, status and usage, and the
``response`` object a translated answer (whole, or a stream's lifecycle events) is written as."""

from __future__ import annotations

import time
from typing import Any

from gateway.dialects.base import listed
from gateway.translate import freeform, sealed, tool_search
from gateway.translate.common import (
    count,
)
from gateway.translate.ir import (
    Api,
    Part,
    Reasoning,
    Reply,
    StopReason,
    Text,
    ToolCall,
    Usage,
)
from gateway.translate.namespaces import split
from gateway.translate.responses import read_content, read_texts


def read_usage(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    details = usage.get("input_tokens_details")
    out_details = usage.get("output_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    reasoning = out_details.get("reasoning_tokens") if isinstance(out_details, dict) else None
    return Usage(
        count(usage.get("input_tokens")),
        count(usage.get("output_tokens")),
        cached if isinstance(cached, int) else 0,
        reasoning_tokens=reasoning if isinstance(reasoning, int) else None,
    )


def write_usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def read_reply(body: dict[str, Any]) -> Reply:
    parts: list[Part] = []
    calls = False
    for raw in listed(body.get("output")):
        if not isinstance(raw, dict):
            continue
        kind = raw.get("type")
        if kind == "message":
            parts.extend(read_content(raw.get("content") or [], "output[].content"))
        elif kind == "function_call":
            calls = True
            parts.append(ToolCall(str(raw.get("call_id") or ""), str(raw.get("name") or ""), str(raw.get("arguments"))))
        elif kind == "reasoning":
            summary = "".join(read_texts(raw.get("summary") or [], "summary"))
            content = "".join(read_texts(raw.get("content") or [], "content"))
            encrypted = raw.get("encrypted_content") if isinstance(raw.get("encrypted_content"), str) else None
            maker: Api | None = "responses" if encrypted is not None else None
            parts.append(
                Reasoning(content or summary, encrypted=encrypted, summary=not content and bool(summary), maker=maker)
            )
    return Reply(
        id=str(body.get("id") or ""),
        model=str(body.get("model") or ""),
        parts=parts,
        stop=stop_of(body.get("status"), body.get("incomplete_details"), calls),
        usage=read_usage(body.get("usage")),
        created=count(body.get("created_at")) or int(time.time()),
    )


def stop_of(status: Any, details: Any, calls: bool) -> StopReason:
    if status == "incomplete":
        reason = details.get("reason") if isinstance(details, dict) else None
        return "filter" if reason == "content_filter" else "length"
    return "tool" if calls else "end"


def incomplete_of(stop: StopReason) -> dict[str, Any] | None:
    if stop == "length":
        return {"reason": "max_output_tokens"}
    if stop == "filter":
        return {"reason": "content_filter"}
    return None


def output_item(part: Part, item_id: str, request: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """One answer part as a Responses output item (finished); a call to a flattened namespaced function of the
    client's ``request`` is written with its ``namespace`` and own name."""
    if isinstance(part, Text):
        content = [{"type": "output_text", "text": part.text, "annotations": [], "logprobs": []}]
        return {"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": content}
    if isinstance(part, ToolCall):
        return function_call(item_id, "completed", part.id, part.name, part.arguments, request or {})
    if isinstance(part, Reasoning):
        item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": []}
        if part.text:
            item["content"] = [{"type": "reasoning_text", "text": part.text}]
        # Another maker's opaque reasoning only to a client that asked for reasoning it can send back.
        kept = part.maker == "responses" or (request is not None and sealed.wanted(request))
        opaque = sealed.held(part, "responses") if kept else None
        if opaque is not None:
            item["encrypted_content"] = opaque
        elif not part.text:
            return None  # nothing the client could read or send back
        return item
    return None


def response_object(
    request: dict[str, Any],
    response_id: str,
    model: str,
    created: int,
    status: str,
    output: list[dict[str, Any]],
    usage: Usage | None,
    stop: StopReason = "end",
) -> dict[str, Any]:
    """The Responses ``response`` object, echoing the client's request as OpenAI's does."""
    text = request.get("text") if isinstance(request.get("text"), dict) else {"format": {"type": "text"}}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": incomplete_of(stop) if status == "incomplete" else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": model,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True) is not False,
        "previous_response_id": None,
        "reasoning": request.get("reasoning") if isinstance(request.get("reasoning"), dict) else None,
        "store": request.get("store", True) is not False,
        "temperature": request.get("temperature", 1.0),
        "text": text,
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools", []),
        "top_p": request.get("top_p", 1.0),
        "truncation": request.get("truncation", "disabled"),
        "usage": write_usage(usage) if usage is not None else None,
        "user": request.get("user"),
        "metadata": request.get("metadata") or {},
    }


def function_call(
    item_id: str, status: str, call_id: str, name: str, arguments: str, request: dict[str, Any]
) -> dict[str, Any]:
    """A ``function_call`` item; ``name`` as the upstream called it, unflattened if it is a namespaced function; a
    call of a custom tool the client offered is its ``custom_tool_call`` (``gateway.translate.freeform``), and one of
    its own tool search its ``tool_search_call`` (``gateway.translate.tool_search``)."""
    if name == tool_search.NAME and tool_search.offered(request):
        return tool_search.call_item(item_id, status, call_id, arguments)
    if name in freeform.custom_names(request):
        return freeform.call_item(item_id, status, call_id, name, arguments)
    own, namespace = split(name, request)
    item = {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": own}
    if namespace is not None:
        item["namespace"] = namespace
    item["arguments"] = arguments
    return item


def write_reply(reply: Reply, model: str, response_id: str, request: dict[str, Any]) -> dict[str, Any]:
    suffix = response_id.removeprefix("resp_")
    output = []
    for index, part in enumerate(_merged(reply.parts)):
        prefix = {Text: "msg", ToolCall: "fc", Reasoning: "rs"}.get(type(part), "item")
        item = output_item(part, f"{prefix}_{suffix}_{index}", request)
        if item is not None:
            output.append(item)
    status = "incomplete" if reply.stop in ("length", "filter") else "completed"
    if status == "incomplete" and output and output[-1]["type"] == "message":
        output[-1]["status"] = "incomplete"  # the message the limit or the filter cut, as OpenAI marks it
    return response_object(
        request, response_id, model, reply.created or int(time.time()), status, output, reply.usage, reply.stop
    )


def _merged(parts: list[Part]) -> list[Part]:
    """Consecutive texts as one (one message item holds the answer's text)."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, Text) and out and isinstance(out[-1], Text):
            out[-1] = Text(out[-1].text + part.text)
        else:
            out.append(part)
    return out
