"""The error shapes each client API defines, as assertions, and a stream's events as (name, data).

Why: a gateway's error must be the one its client's SDK parses (OpenAI's ``{"error": {...}}``, Anthropic's
``{"type": "error", "error": {...}}``, each API's error event once a stream has begun); the fault matrix
(``tests/test_fault_shapes.py``) checks every answer with these, and any test of an error may.
"""

from __future__ import annotations

from typing import Any

ANTHROPIC_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "billing_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "timeout_error",
        "api_error",
        "overloaded_error",
    }
)
"""Anthropic's error types (its API reference's ``ErrorType``, and ``request_too_large`` of its errors page)."""


def assert_openai_shape(body: Any, *, relayed: bool = False) -> None:
    """OpenAI's error object; ``relayed``: a provider's own error event, passed on as it came (the gateway never
    rewrites an event it only relays), which may leave out ``param``."""
    assert isinstance(body, dict) and list(body) == ["error"], body
    error = body["error"]
    assert {"message", "type", "code"} | (set() if relayed else {"param"}) <= set(error), error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    assert error.get("param") is None or isinstance(error["param"], str), error
    assert error["code"] is None or isinstance(error["code"], str), error


def assert_anthropic_shape(body: Any, error_type: str) -> None:
    """Anthropic's error body (``request_id`` allowed beside it, as its API adds), of type ``error_type``."""
    assert isinstance(body, dict) and body.get("type") == "error", body
    assert set(body) <= {"type", "error", "request_id"}, body
    error = body["error"]
    assert set(error) == {"type", "message"}, error
    assert error["type"] in ANTHROPIC_TYPES, error
    assert error["type"] == error_type, error
    assert isinstance(error["message"], str) and error["message"], error


def sse_events(body: bytes) -> list[tuple[str | None, str]]:
    """A stream's events as (event name, data), comments and keep-alives left out."""
    events: list[tuple[str | None, str]] = []
    for block in body.decode().replace("\r\n", "\n").split("\n\n"):
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            events.append((name, "\n".join(data)))
    return events
