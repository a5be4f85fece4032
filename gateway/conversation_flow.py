"""Stateful Responses through the gateway: a follow-up expanded before routing, an answer captured after it.

When the gateway keeps a conversation (``gateway.conversations``; an answer by translation, or any
answer under ``[responses] state = "gateway"``), two steps surround the request:

- before routing, ``expand`` turns a request naming ``previous_response_id`` into one with the whole
  ``input`` (the previous request's input, its output, then the new input) and no
  ``previous_response_id``: every deployment can serve it, natively or translated, and none need hold
  anything;
- after the answer went to the client, ``ResponseCapture`` reads the final response from the bytes
  the client received (the ``response.completed`` or ``response.incomplete`` event of a stream, or the
  whole body), whatever produced them, and stores its input and output under its id.

``store: false`` takes neither step: the client sends the whole input, and nothing is kept.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Message, Send

from gateway.config import DeploymentConfig
from gateway.conversations import ConversationStore, StoredResponse
from gateway.responses_config import ResponsesConfig

_ENDS = (b'"response.completed"', b'"response.incomplete"')
"""The events that end a stream holding the whole response: both are stored answers at OpenAI (an incomplete one,
cut by ``max_output_tokens`` or a filter, can be retrieved and continued)."""
_KEPT = ("completed", "incomplete")


def input_items(body: dict[str, Any]) -> list[Any]:
    """A Responses request's ``input`` as a list of items (a bare string is one user message)."""
    value = body.get("input")
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    return list(value) if isinstance(value, list) else []


def expand(body: dict[str, Any], previous: StoredResponse) -> dict[str, Any]:
    """``body`` continuing ``previous``, with its whole conversation as ``input`` and no ``previous_response_id``.

    The earlier items go without their ``id``: the follow-up may reach a Responses provider that never made them
    (the gateway's own ``msg_…`` of a translated answer, another provider's), and OpenAI looks up an input item's
    id and refuses one it does not hold ("Item with id '…' not found"). Their ``call_id``s, which link a call to
    its output, stay; the new input goes as the client sent it."""
    expanded = {k: v for k, v in body.items() if k != "previous_response_id"}
    earlier = [_without_id(item) for item in (*previous.input, *previous.output)]
    expanded["input"] = [*earlier, *input_items(body)]
    return expanded


def _without_id(item: Any) -> Any:
    return {k: v for k, v in item.items() if k != "id"} if isinstance(item, dict) and "id" in item else item


def wants_storing(body: dict[str, Any]) -> bool:
    """``store`` is true, or absent (the Responses API's default)."""
    return body.get("store") is not False


def gateway_keeps(config: ResponsesConfig, deployment: DeploymentConfig) -> bool:
    """Whether the gateway keeps this deployment's answers: it does not speak Responses, or the config says so."""
    return config.state == "gateway" or "responses" not in deployment.apis


class ResponseCapture:
    """Watches what a Responses reply sends the client, to store the answer once it is complete. Per request."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status = 200
        self._parts: list[bytes] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self._parts.append(message.get("body", b""))
        await self._send(message)

    def response(self, streamed: bool) -> dict[str, Any] | None:
        """The final response object the client received (completed or incomplete); None if it did not end."""
        if self.status != 200:
            return None
        raw = b"".join(self._parts)
        if not streamed:
            return _object(raw)
        at = max(raw.rfind(end) for end in _ENDS)
        if at < 0:
            return None
        start = raw.rfind(b"\ndata:", 0, at)
        end = raw.find(b"\n", at)
        line = raw[start + len(b"\ndata:") : end if end >= 0 else len(raw)]
        event = _object(line)
        found = event.get("response") if event is not None else None
        return found if isinstance(found, dict) else None

    def store(
        self, store: ConversationStore, body: dict[str, Any], model: str, scope: str, streamed: bool, ttl_s: float
    ) -> str | None:
        """Keep the answer under its id, with the input it answered; returns the id (None: nothing kept).

        A ``completed`` or ``incomplete`` answer is kept, as OpenAI keeps both; a failed or cut one is not."""
        response = self.response(streamed)
        if response is None or response.get("status") not in _KEPT or not isinstance(response.get("id"), str):
            return None
        output = response.get("output")
        stored = StoredResponse(
            model, scope, input_items(body), list(output) if isinstance(output, list) else [], response
        )
        store.put(response["id"], stored, ttl_s)
        return str(response["id"])


def _object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


__all__ = ["ResponseCapture", "expand", "gateway_keeps", "input_items", "wants_storing"]
