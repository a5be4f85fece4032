"""An upstream that answers each request with the exact bytes a test scripted, and records what it was sent.

Why: the fake provider answers in the shapes the project's own writers produce; some providers' answers
differ in ways their API allows or tolerates (Gemini's OpenAI-compatible stream leaves ``index`` out of its
tool-call deltas and ends a tool call with ``finish_reason: "stop"``; OpenAI's Responses API returns
``encrypted_content`` only when asked). A test that checks what an SDK client gets from such an answer,
translated, scripts that answer here byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.config import gateway_config
from tests.support.gateway import Gateway
from tests.support.servers import ServerThread


class ScriptedUpstream:
    """A loopback server answering every POST with the reply last scripted; ``bodies`` holds what it was sent.

    Usage: ``up = ScriptedUpstream("chat"); test_servers.append(up.server.start())``, then ``up.answer_json(...)``
    or ``up.answer_sse(...)`` before each request; ``base_url`` is what a config's provider points at.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.bodies: list[dict[str, Any]] = []
        self._reply = (200, b"{}", "application/json")
        self._refusal: tuple[Callable[[dict[str, Any]], bool], int, bytes] | None = None

        async def handle(request: Request) -> Response:
            body = await request.body()
            self.bodies.append(json.loads(body) if body else {})
            status, data, content_type = self._reply
            if self._refusal is not None and self._refusal[0](self.bodies[-1]):
                status, data, content_type = self._refusal[1], self._refusal[2], "application/json"
            return Response(data, status_code=status, media_type=content_type)

        self.server = ServerThread(Starlette(routes=[Route("/{path:path}", handle, methods=["POST"])]))
        self.base_url = self.server.url + "/v1"

    def answer_json(self, data: Any, status: int = 200) -> None:
        self._reply = (status, json.dumps(data).encode(), "application/json")

    def answer_sse(self, events: Sequence[tuple[str | None, Any]]) -> None:
        """A stream of ``(event name or None, data)``; data is JSON-encoded unless it is a string (``[DONE]``)."""
        out = b""
        for name, data in events:
            if name is not None:
                out += f"event: {name}\n".encode()
            out += b"data: " + (data if isinstance(data, str) else json.dumps(data)).encode() + b"\n\n"
        self._reply = (200, out, "text/event-stream")

    def refuse(self, when: Callable[[dict[str, Any]], bool], status: int, data: Any) -> None:
        """Answer a request whose body ``when`` holds true of with this error instead (a provider that refuses what
        it does not know, as Mistral does)."""
        self._refusal = (when, status, json.dumps(data).encode())

    def refuse_field(self, name: str, status: int, data: Any) -> None:
        """``refuse`` a request whose body holds the top-level field ``name``."""
        self.refuse(lambda body: name in body, status, data)

    @property
    def last(self) -> dict[str, Any]:
        """The last request body it was sent."""
        return self.bodies[-1]


def scripted_behind_gateway(
    test_servers: list[ServerThread], start_gateway: Callable[..., Gateway], name: str, api: str
) -> tuple[ScriptedUpstream, Gateway]:
    """A scripted upstream ``name`` that speaks only ``api`` (a client of another API reaches it by translation),
    started, behind a gateway of its own."""
    upstream = ScriptedUpstream(name)
    test_servers.append(upstream.server.start())
    return upstream, start_gateway(gateway_config([upstream], provider_options={name: {"apis": [api]}}))
