"""A stream's progress as the relay's meter reports it to the router (``gateway.types.StreamProgress``), and a
stream read on its own thread while a test changes the gateway under it."""

from __future__ import annotations

import threading

import httpx


class Stream:
    """Bytes received so far; a test sets them as the stream would have delivered them."""

    def __init__(self, api: str = "chat") -> None:
        self.received_bytes = 0
        self.api = api


def stream_in_background(url: str, model: str) -> tuple[threading.Thread, dict[str, str]]:
    """A streamed chat request for ``model`` to the gateway at ``url``, on its own thread, started: the thread, and
    what it will have read once joined (``provider``: the reply's ``x-gateway-provider``; ``body``: the stream)."""
    result: dict[str, str] = {}

    def stream() -> None:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with httpx.Client(base_url=url, timeout=10) as http:
            with http.stream("POST", "/v1/chat/completions", json=body) as response:
                result["provider"] = response.headers["x-gateway-provider"]
                result["body"] = response.read().decode()

    thread = threading.Thread(target=stream)
    thread.start()
    return thread, result
