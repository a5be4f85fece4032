"""The fake's OpenAI chat completions, completions and embeddings: whole bodies and ``choices`` streams."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import re
import struct
import time
from typing import Any

from starlette.types import Send

from gateway.fakes.asgi import Disconnect, send_json
from gateway.fakes.behavior import FakeBehavior, FakeHost, answer_word, answer_words
from gateway.fakes.cache import CURRENT
from gateway.fakes.ids import tool_call_id
from gateway.fakes.pacing import play
from gateway.fakes.quality import TRUNCATED_SHARE, answer_of, args_tail
from gateway.fakes.reasoning import gemini_signed
from gateway.fakes.tiers import served


def prompt_tokens(body: dict[str, Any]) -> int:
    return max(1, len(json.dumps(body.get("messages", body.get("input", body.get("prompt", ""))))) // 4)


def chat_usage(body: dict[str, Any], completion_tokens: int) -> dict[str, Any]:
    """The ``usage`` of a chat or completion answer: with the cached part when the prompt cache judged it."""
    use = CURRENT.get()
    if use is not None:
        return use.chat_usage(completion_tokens)
    prompt = prompt_tokens(body)
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens, "total_tokens": prompt + completion_tokens}


def prefill_words(body: dict[str, Any], path: str) -> int:
    """Answer words already given: a chat's last assistant message, or the end of a completion's prompt.

    A chat prefill is taken to be the answer's beginning whatever it says (its words are
    counted). A prompt is continued only where it ends with the answer's first words, so that
    ordinary prompts are answered from the start.
    """
    if path.endswith(("/chat/completions", "/messages")):
        messages = body.get("messages")
        if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
            last = messages[-1]
            if last.get("role") == "assistant" and isinstance(last.get("content"), str):
                return len(last["content"].split())
        return 0
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        return 0
    words = prompt.split()
    if not words or prompt[-1].isspace():
        return 0
    final = words[-1]
    # Only lengths whose last answer word is the prompt's last word can match: few to try.
    for count in range(len(words), 0, -1):
        if answer_word(count - 1) == final and prompt.endswith("".join(answer_words(0, count))):
            return count
    return 0


def answer_plan(
    body: dict[str, Any],
    behavior: FakeBehavior,
    path: str,
    limit_fields: tuple[str, ...] = ("max_completion_tokens", "max_tokens"),
) -> tuple[int, int, str]:
    """Where the answer starts (words given as a prefill), how many words follow, and why it ends.

    The whole answer is ``output_tokens`` words; a prefill that already holds its first words
    is continued after them, and the request's token limit bounds only the words generated now,
    as a real model's does.
    """
    skip = prefill_words(body, path)
    remaining = max(0, behavior.output_tokens - skip)
    if behavior.fault == "empty":
        return skip, 0, "stop"
    limit = next((body[f] for f in limit_fields if body.get(f) is not None), None)
    if behavior.fault == "truncate":
        said = min(remaining, limit) if isinstance(limit, int) and limit > 0 else remaining
        return skip, max(1, said // TRUNCATED_SHARE), "length"
    if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < remaining:
        return skip, limit, "length"
    return skip, remaining, "stop"


def _echoed(body: dict[str, Any], path: str) -> str:
    """What a completion with ``echo: true`` repeats before its answer, as OpenAI's and vLLM's do: the prompt (one
    given as token ids, decoded by ``decoded``)."""
    prompt = body.get("prompt")
    if path.endswith("/chat/completions") or body.get("echo") is not True:
        return ""
    ids = _ids(prompt)
    if ids is not None:
        return "".join(decoded(ids))
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    return prompt if isinstance(prompt, str) else ""


def decoded(ids: list[int]) -> list[str]:
    """The fake's tokenizer: token id ``n`` is the text `` t<n>``."""
    return [f" t{n}" for n in ids]


def _ids(prompt: object) -> list[int] | None:
    """A prompt of token ids (or a list of one such prompt), or None."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(type(n) is int for n in prompt):
        return prompt
    return None


def _logprobs(body: dict[str, Any], tokens: list[str]) -> dict[str, Any] | None:
    """A completions choice's ``logprobs`` for its ``tokens`` when the request asked for them (its ``logprobs``, a
    number of alternatives), as OpenAI lists them; None when it did not ask."""
    asked = body.get("logprobs")
    if type(asked) is not int:
        return None
    return {"tokens": tokens, "token_logprobs": [-0.5] * len(tokens), "top_logprobs": None}


def _n(body: dict[str, Any]) -> int:
    n = body.get("n", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 16 else 1


def _tool_call(behavior: FakeBehavior, text: str, call_id: str) -> dict[str, Any]:
    arguments = behavior.tool_args_head + text + args_tail(behavior)
    call = {"id": call_id, "type": "function", "function": {"name": behavior.tool_name, "arguments": arguments}}
    return {**call, **gemini_signed()} if behavior.opaque_reasoning else call


def _piece(chat: bool, text: str, behavior: FakeBehavior, *, first: bool, call_id: str = "") -> dict[str, Any]:
    if not chat:
        return {"index": 0, "text": text, "finish_reason": None}
    if behavior.tool_call:
        call: dict[str, Any] = {
            "index": 0,
            "function": {"arguments": (behavior.tool_args_head if first else "") + text},
        }
        if first:
            call.update(id=call_id, type="function")
            call["function"]["name"] = behavior.tool_name
            if behavior.opaque_reasoning:
                call.update(gemini_signed())  # on the delta that carries the call, as Gemini streams it
        return {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}
    return {"index": 0, "delta": {"content": text}, "finish_reason": None}


async def complete(
    host: FakeHost,
    send: Send,
    body: dict[str, Any],
    behavior: FakeBehavior,
    model: str,
    path: str,
    disconnect: Disconnect,
) -> None:
    skip, length, finish = answer_plan(body, behavior, path)
    text = "".join(answer_of(behavior, skip, length))
    tps = host.jittered(behavior.tokens_per_s, behavior.tps_jitter)
    delay = host.jittered(behavior.ttft_s, behavior.ttft_jitter) + (length / tps if tps > 0 else 0.0)
    if await disconnect.sleep(delay):
        host.state.cancelled += 1
        return
    usage = chat_usage(body, length)
    created = int(time.time())
    choice: dict[str, Any]
    if path.endswith("/chat/completions"):
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if behavior.tool_call:
            call = _tool_call(behavior, text, tool_call_id(body, "call_"))
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls" if finish != "length" else finish
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": _echoed(body, path) + text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    choices = [dict(choice, index=i) for i in range(_n(body))]
    payload = {"id": f"fake-{host.state.requests}", "object": obj, "created": created, "model": model}
    payload.update(served(body, anthropic=False), choices=choices, usage=usage)
    host.state.completed += 1
    await send_json(send, 200, payload)


async def embeddings(host: FakeHost, send: Send, body: dict[str, Any], behavior: FakeBehavior, model: str) -> None:
    inputs = body.get("input")
    items = inputs if isinstance(inputs, list) else [inputs]
    if behavior.ttft_s > 0:
        await asyncio.sleep(host.jittered(behavior.ttft_s, behavior.ttft_jitter))
    data = []
    for index, item in enumerate(items):
        vector = [((hash(str(item)) >> (i % 32)) % 1000) / 1000.0 for i in range(behavior.embedding_dim)]
        embedding: Any = vector
        if body.get("encoding_format") == "base64":
            embedding = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(max(1, len(str(item)) // 4) for item in items)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    host.state.completed += 1
    await send_json(send, 200, {"object": "list", "data": data, "model": model, "usage": usage})


class ChatScript:
    """``choices`` chunks: a role chunk first, content (or tool-call) deltas, a finish, usage, ``[DONE]``."""

    def __init__(self, host: FakeHost, body: dict[str, Any], behavior: FakeBehavior, model: str, path: str) -> None:
        self.chat = path.endswith("/chat/completions")
        self.body = body
        self.behavior = behavior
        self.name = host.name
        self.call_id = tool_call_id(body, "call_") if behavior.tool_call and self.chat else ""
        _, self.length, self.finish_reason = answer_plan(body, behavior, path)
        self.head: dict[str, Any] = {
            "id": f"fake-{host.state.requests}",
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": int(time.time()),
            "model": model,
            **served(body, anthropic=False),
        }

    def _event(self, choice: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps({**self.head, "choices": [choice]}).encode() + b"\n\n"

    def opening(self) -> bytes:
        if not self.chat:
            echoed = _echoed(self.body, "/completions")  # the prompt, at once (usage counts only what follows)
            if not echoed:
                return b""
            ids = _ids(self.body.get("prompt"))
            tokens = decoded(ids) if ids is not None else [echoed]
            return self._event(
                {"index": 0, "text": echoed, "logprobs": _logprobs(self.body, tokens), "finish_reason": None}
            )
        # The role chunk carries no output: TTFT is not over until the first content.
        return self._event({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})

    def reasoning(self, word: str, index: int) -> bytes:
        return self._event({"index": 0, "delta": {"reasoning_content": word}, "finish_reason": None})

    def prelude(self) -> bytes:
        return b""

    def piece(self, text: str, first: bool) -> bytes:
        piece = _piece(self.chat, text, self.behavior, first=first, call_id=self.call_id)
        if not self.chat and "logprobs" in self.body:
            piece["logprobs"] = _logprobs(self.body, re.findall(r"\s*\S+\s*", text) or [text])
        return self._event(piece)

    def finish(self) -> bytes:
        calls = self.behavior.tool_call and self.chat
        reason = "tool_calls" if calls and self.finish_reason != "length" else self.finish_reason
        closing = b""
        tail = args_tail(self.behavior)
        if calls and tail:
            closing = self._event(
                _piece(self.chat, tail, dataclasses.replace(self.behavior, tool_args_head=""), first=False)
            )
        done: dict[str, Any] = {"index": 0, "finish_reason": reason}
        if self.chat:
            done["delta"] = {}
        else:
            done["text"] = ""
        return closing + self._event(done)

    def end(self, ending: bool) -> bytes:
        tail = b""
        options = self.body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            usage = chat_usage(self.body, self.length)
            tail += b"data: " + json.dumps({**self.head, "choices": [], "usage": usage}).encode() + b"\n\n"
        if ending:
            tail += b"data: [DONE]\n\n"
        return tail

    def error_event(self) -> bytes:
        message = f"fake {self.name}: error mid-stream"
        error = {"error": {"message": message, "type": "server_error", "code": self.behavior.error_code}}
        return b"data: " + json.dumps(error).encode() + b"\n\n"

    def fail_event(self) -> bytes:
        return self.error_event()


async def stream(
    host: FakeHost,
    send: Send,
    body: dict[str, Any],
    behavior: FakeBehavior,
    model: str,
    path: str,
    disconnect: Disconnect,
) -> None:
    skip, length, _ = answer_plan(body, behavior, path)
    await play(
        host,
        send,
        ChatScript(host, body, behavior, model, path),
        answer_of(behavior, skip, length),
        behavior,
        disconnect,
    )
