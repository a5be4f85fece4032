"""Captures real answers for the validity tests: ``python -m tests.quality_capture fake|llama OUT.json [BASE_URL]``.

Why: the verdicts (``gateway.quality``) are tested on answers as servers really send them, bytes
and all, not on hand-written events. ``fake`` starts the project's fake provider and asks it for
each API's answers with each quality fault forced (``fault`` in the request's ``fake`` field);
``llama`` asks a running llama.cpp server (``tests.llama_server``) the same questions unforced.
Each case is stored with its request body, so the test replays it through the meter and judges it
against what that request asked.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx

from gateway.fakes import FakeBehavior, FakeProvider
from tests.support.servers import ServerThread

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}
QUESTION = "What is the weather in Paris? Use the tool."
PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


def _tools(api: str) -> list[dict[str, Any]]:
    if api == "chat":
        return [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    if api == "responses":
        return [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
    return [{"name": "get_weather", "input_schema": WEATHER}]


def _body(api: str, prompt: str, max_tokens: int, stream: bool, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "stream": stream, "temperature": 0, **extra}
    if api == "responses":
        body.update(input=prompt, max_output_tokens=max_tokens)
    else:
        body.update(messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens)
    return body


def cases(source: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, api, body) of every capture."""
    found: list[tuple[str, str, dict[str, Any]]] = []
    for api in ("chat", "responses", "messages"):
        for stream in (True, False):
            mode = "stream" if stream else "body"
            found.append((f"{api}-{mode}-plain", api, _body(api, "Write about the sea.", 64, stream)))
            found.append((f"{api}-{mode}-tools", api, _body(api, QUESTION, 64, stream, tools=_tools(api))))
            if source == "fake":
                for fault, extra in (
                    ("invalid_tool_json", {"tools": _tools(api)}),
                    ("empty", {}),
                    ("repeat", {}),
                    ("truncate", {}),
                ):
                    fake = {"fault": fault, "output_tokens": 64}
                    body = _body(api, "Write about the sea.", 96, stream, fake=fake, **extra)
                    found.append((f"{api}-{mode}-{fault}", api, body))
        if api == "chat":
            json_format = {"type": "json_object"}
            found.append(
                (
                    f"chat-json-{source}",
                    api,
                    _body(api, "Reply with a JSON object.", 200, False, response_format=json_format),
                )
            )
    return found


def capture(source: str, base_url: str) -> list[dict[str, Any]]:
    captured = []
    with httpx.Client(base_url=base_url, timeout=120) as client:
        for name, api, body in cases(source):
            if source == "llama":
                body = dict(body, model="gemma-3-270m")
            try:
                response = client.post(PATHS[api], json=body)
            except httpx.RemoteProtocolError:
                response = client.post(PATHS[api], json=body)  # a kept-alive connection the server had closed
            captured.append(
                {"name": name, "api": api, "request": body, "status": response.status_code, "raw": response.text}
            )
    return captured


def main() -> None:
    source, out = sys.argv[1], Path(sys.argv[2])
    if source == "fake":
        server = ServerThread(FakeProvider("fake", FakeBehavior(seed=7))).start()
        try:
            captured = capture(source, server.url + "/v1")
        finally:
            server.stop()
    else:
        captured = capture(source, sys.argv[3])
    out.write_text(json.dumps(captured, indent=1) + "\n")
    print(f"{len(captured)} answers to {out}")


if __name__ == "__main__":
    main()
