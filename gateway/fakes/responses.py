"""The fake's OpenAI Responses API: ``POST /v1/responses`` whole and streamed, and its stored responses.

The stream is the event sequence OpenAI sends (``response.created``, ``response.in_progress``, a
reasoning item when asked, the message item with its content part and ``response.output_text.delta``
events, or a ``function_call`` item with ``response.function_call_arguments.delta``, the closings,
then ``response.completed``), each with its ``sequence_number``. An answer cut by
``max_output_tokens`` ends with ``response.incomplete``, as OpenAI's does. Responses are stored
(unless ``store: false``): ``GET``/``DELETE /v1/responses/{id}``, ``…/input_items`` and ``…/cancel``
answer for them, and ``previous_response_id`` must name one of them (else 400
``previous_response_not_found``, as OpenAI answers).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from starlette.types import Send

from gateway.fakes.asgi import Disconnect, send_error, send_json, sse
from gateway.fakes.behavior import FakeBehavior, FakeHost, answer_words
from gateway.fakes.cache import CURRENT
from gateway.fakes.chat import answer_plan, prompt_tokens
from gateway.fakes.ids import tool_call_id
from gateway.fakes.pacing import play
from gateway.fakes.quality import answer_of, args_tail
from gateway.fakes.reasoning import ENCRYPTED
from gateway.fakes.tiers import served

_ids = itertools.count(1)
LIMITS = ("max_output_tokens",)


def _input_items(body: dict[str, Any]) -> list[Any]:
    value = body.get("input")
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    return list(value) if isinstance(value, list) else []


class ResponseBuilder:
    """One response's object as it grows: what ``response.created`` opens and the terminal event closes."""

    def __init__(self, host: FakeHost, body: dict[str, Any], behavior: FakeBehavior, model: str) -> None:
        self.host = host
        self.body = body
        self.behavior = behavior
        number = next(_ids)
        self.id = f"resp_{host.name}_{number}"
        self.message_id = f"msg_{host.name}_{number}"
        self.call_id = f"fc_{host.name}_{number}"
        self.tool_call_id = tool_call_id(body, "call_") if behavior.tool_call else ""
        self.reasoning_id = f"rs_{host.name}_{number}"
        self.model = model
        self.created_at = int(time.time())
        self.text = ""
        self.reasoning = ""
        _, self.length, finish = answer_plan(body, behavior, "/responses", LIMITS)
        self.cut = finish == "length"

    def output(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if self.reasoning:
            summary = [{"type": "summary_text", "text": self.reasoning}]
            item = {"id": self.reasoning_id, "type": "reasoning", "summary": summary}
            include = self.body.get("include")
            if (
                self.behavior.opaque_reasoning
                and isinstance(include, list)
                and "reasoning.encrypted_content" in include
            ):
                item["encrypted_content"] = ENCRYPTED
            items.append(item)
        if self.behavior.tool_call:
            items.append(
                {
                    "id": self.call_id,
                    "type": "function_call",
                    "call_id": self.tool_call_id,
                    "name": self.behavior.tool_name,
                    "arguments": self.behavior.tool_args_head + self.text + args_tail(self.behavior),
                    "status": "completed",
                }
            )
        else:
            content = [{"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}]
            message = {"id": self.message_id, "type": "message", "status": "completed", "role": "assistant"}
            items.append({**message, "content": content})
        return items

    def obj(self, status: str, *, final: bool) -> dict[str, Any]:
        use = CURRENT.get()
        prompt = use.prompt_tokens if use is not None else prompt_tokens(self.body)
        usage = None
        if final:
            usage = {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": use.cached_tokens if use is not None else 0},
                "output_tokens": self.length + self.behavior.reasoning_tokens,
                "output_tokens_details": {"reasoning_tokens": self.behavior.reasoning_tokens},
                "total_tokens": prompt + self.length + self.behavior.reasoning_tokens,
            }
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": self.body.get("instructions"),
            "max_output_tokens": self.body.get("max_output_tokens"),
            "model": self.model,
            "output": self.output() if final else [],
            "parallel_tool_calls": True,
            "previous_response_id": self.body.get("previous_response_id"),
            "store": self.body.get("store", True) is not False,
            "temperature": self.body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": self.body.get("tools", []),
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": usage,
            "metadata": {},
            **served(self.body, anthropic=False),
        }

    def store(self, response: dict[str, Any]) -> None:
        if self.body.get("store", True) is not False:
            self.host.state.responses[self.id] = response
            self.host.state.response_inputs[self.id] = _input_items(self.body)


class ResponsesScript:
    """The Responses API's typed events, numbered."""

    def __init__(self, builder: ResponseBuilder) -> None:
        self.r = builder
        self.sequence = itertools.count()

    def _event(self, kind: str, **fields: Any) -> bytes:
        return sse(kind, {"type": kind, **fields, "sequence_number": next(self.sequence)})

    def opening(self) -> bytes:
        created = self.r.obj("in_progress", final=False)
        return self._event("response.created", response=created) + self._event("response.in_progress", response=created)

    def reasoning(self, word: str, index: int) -> bytes:
        head = b""
        if index == 0:
            item = {"id": self.r.reasoning_id, "type": "reasoning", "summary": []}
            head = self._event("response.output_item.added", output_index=0, item=item)
            head += self._event(
                "response.reasoning_summary_part.added",
                item_id=self.r.reasoning_id,
                output_index=0,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
        self.r.reasoning += word
        return head + self._event(
            "response.reasoning_summary_text.delta",
            item_id=self.r.reasoning_id,
            output_index=0,
            summary_index=0,
            delta=word,
        )

    @property
    def _index(self) -> int:
        return 1 if self.r.behavior.reasoning_tokens else 0

    def prelude(self) -> bytes:
        out = b""
        if self.r.behavior.reasoning_tokens:
            item = self.r.output()[0]
            out += self._event("response.output_item.done", output_index=0, item=item)
        if self.r.behavior.tool_call:
            item = {
                "id": self.r.call_id,
                "type": "function_call",
                "call_id": self.r.tool_call_id,
                "name": self.r.behavior.tool_name,
                "arguments": "",
                "status": "in_progress",
            }
            return out + self._event("response.output_item.added", output_index=self._index, item=item)
        item = {"id": self.r.message_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        out += self._event("response.output_item.added", output_index=self._index, item=item)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return out + self._event(
            "response.content_part.added",
            item_id=self.r.message_id,
            output_index=self._index,
            content_index=0,
            part=part,
        )

    def piece(self, text: str, first: bool) -> bytes:
        self.r.text += text
        if self.r.behavior.tool_call:
            delta = (self.r.behavior.tool_args_head if first else "") + text
            return self._event(
                "response.function_call_arguments.delta", item_id=self.r.call_id, output_index=self._index, delta=delta
            )
        return self._event(
            "response.output_text.delta",
            item_id=self.r.message_id,
            output_index=self._index,
            content_index=0,
            delta=text,
            logprobs=[],
        )

    def finish(self) -> bytes:
        item = self.r.output()[-1]
        if self.r.behavior.tool_call:
            tail = args_tail(self.r.behavior)
            done = b""
            if tail:
                done = self._event(
                    "response.function_call_arguments.delta",
                    item_id=self.r.call_id,
                    output_index=self._index,
                    delta=tail,
                )
            done += self._event(
                "response.function_call_arguments.done",
                item_id=self.r.call_id,
                output_index=self._index,
                arguments=item["arguments"],
            )
            return done + self._event("response.output_item.done", output_index=self._index, item=item)
        out = self._event(
            "response.output_text.done",
            item_id=self.r.message_id,
            output_index=self._index,
            content_index=0,
            text=self.r.text,
            logprobs=[],
        )
        out += self._event(
            "response.content_part.done",
            item_id=self.r.message_id,
            output_index=self._index,
            content_index=0,
            part=item["content"][0],
        )
        return out + self._event("response.output_item.done", output_index=self._index, item=item)

    def end(self, ending: bool) -> bytes:
        if not ending:
            return b""
        status = "incomplete" if self.r.cut else "completed"
        response = self.r.obj(status, final=True)
        self.r.store(response)
        return self._event(f"response.{status}", response=response)

    def error_event(self) -> bytes:
        message = f"fake {self.r.host.name}: error mid-stream"
        return self._event("error", code=self.r.behavior.error_code or "server_error", message=message, param=None)

    def fail_event(self) -> bytes:
        response = self.r.obj("failed", final=True)
        response["error"] = {"code": "server_error", "message": f"fake {self.r.host.name}: the response failed"}
        return self._event("response.failed", response=response)


def unknown_previous(host: FakeHost, body: dict[str, Any]) -> str | None:
    """The ``previous_response_id`` this server never created, if the body names one."""
    previous = body.get("previous_response_id")
    return previous if isinstance(previous, str) and previous not in host.state.responses else None


async def create(
    host: FakeHost, send: Send, body: dict[str, Any], behavior: FakeBehavior, model: str, disconnect: Disconnect
) -> None:
    previous = unknown_previous(host, body)
    if previous is not None:
        message = f"Previous response with id '{previous}' not found."
        await send_error(send, 400, message, "invalid_request_error", "previous_response_not_found")
        return
    builder = ResponseBuilder(host, body, behavior, model)
    skip, length, _ = answer_plan(body, behavior, "/responses", LIMITS)
    words = answer_of(behavior, skip, length)
    if body.get("stream") is True:
        await play(host, send, ResponsesScript(builder), words, behavior, disconnect)
        return
    tps = host.jittered(behavior.tokens_per_s, behavior.tps_jitter)
    delay = host.jittered(behavior.ttft_s, behavior.ttft_jitter) + (length / tps if tps > 0 else 0.0)
    if await disconnect.sleep(delay):
        host.state.cancelled += 1
        return
    builder.text = "".join(words)
    builder.reasoning = "".join(answer_words(0, behavior.reasoning_tokens))
    response = builder.obj("incomplete" if builder.cut else "completed", final=True)
    builder.store(response)
    host.state.completed += 1
    await send_json(send, 200, response)


async def stored(host: FakeHost, send: Send, method: str, path: str) -> None:
    """``GET``/``DELETE /v1/responses/{id}``, ``GET …/input_items``, ``POST …/cancel``."""
    parts = path.split("/responses/", 1)[1].split("/")
    response_id = parts[0]
    response = host.state.responses.get(response_id)
    if response is None:
        message = f"No response found with id '{response_id}'."
        await send_error(send, 404, message, "invalid_request_error", "not_found")
        return
    action = parts[1] if len(parts) > 1 else ""
    if action == "input_items" and method == "GET":
        items = host.state.response_inputs.get(response_id, [])
        data = [{"id": f"in_{i}", **item} if isinstance(item, dict) else item for i, item in enumerate(items)]
        await send_json(send, 200, {"object": "list", "data": data, "has_more": False})
    elif action == "cancel" and method == "POST":
        await send_json(send, 200, response)
    elif not action and method == "DELETE":
        del host.state.responses[response_id]
        await send_json(send, 200, {"id": response_id, "object": "response.deleted", "deleted": True})
    elif not action and method == "GET":
        await send_json(send, 200, response)
    else:
        await send_error(send, 404, f"no route {method} {path}", "invalid_request_error")
