"""A whole chat completion in the neutral shape, and back: the answer's message, finish reason and usage."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gateway.translate.chat import FINISH_OF, assistant_message, matched_stop, read_assistant, stop_of
from gateway.translate.common import (
    count,
    obj,
)
from gateway.translate.ir import (
    Reply,
    ToolCall,
    Turn,
    Usage,
)


def read_usage(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens")  # DeepSeek's spelling
    completion = usage.get("completion_tokens_details")
    reasoning = completion.get("reasoning_tokens") if isinstance(completion, dict) else None
    return Usage(
        input_tokens=prompt if isinstance(prompt, int) else 0,
        output_tokens=count(usage.get("completion_tokens")),
        cached_tokens=cached if isinstance(cached, int) else 0,
        reasoning_tokens=reasoning if isinstance(reasoning, int) else None,
    )


def usage_in(holder: dict[str, Any]) -> Usage | None:
    """The usage a chat body or chunk reports: its ``usage``, else Groq's ``x_groq.usage`` (the same counts, which
    Groq sends on its last chunk whether or not the standard usage chunk was asked for)."""
    usage = read_usage(holder.get("usage"))
    groq = holder.get("x_groq")
    if usage is None and isinstance(groq, dict):
        usage = read_usage(groq.get("usage"))
    return usage


def write_usage(usage: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }
    if usage.reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return out


def read_reply(body: dict[str, Any], stops: Sequence[str] = ()) -> Reply:
    """A whole chat answer; ``stops`` are the client's stop sequences, one of which the answer may say it matched."""
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    turn = read_assistant(obj(choice.get("message")), "choices[0].message")
    stop = stop_of(str(choice.get("finish_reason")), any(isinstance(p, ToolCall) for p in turn.parts))
    matched = matched_stop(choice, stops) if stop == "end" else None
    return Reply(
        id=str(body.get("id") or ""),
        model=str(body.get("model") or ""),
        parts=turn.parts,
        stop="stop_sequence" if matched is not None else stop,
        stop_sequence=matched,
        usage=usage_in(body),
        created=count(body.get("created")) or int(time.time()),
    )


def write_reply(reply: Reply, model: str) -> dict[str, Any]:
    turn = Turn("assistant", reply.parts)
    message = assistant_message(turn)
    message.pop("name", None)
    body: dict[str, Any] = {
        "id": "chatcmpl-" + reply.id.removeprefix("chatcmpl-"),
        "object": "chat.completion",
        "created": reply.created or int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": FINISH_OF[reply.stop]}],
    }
    if reply.usage is not None:
        body["usage"] = write_usage(reply.usage)
    return body
