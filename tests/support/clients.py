"""The clients of the end-to-end tests, and how their answers are compared.

Why: every end-to-end test builds the same OpenAI SDK clients (no retries, so that a test sees
the gateway's own answer) and compares responses without their per-request ids and timestamps.
"""

from __future__ import annotations

import json
from typing import Any

import openai

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
VOLATILE = ("id", "created")


def sdk(base_url: str, api_key: str = "client-key", timeout: float = 10.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout)


def async_sdk(base_url: str, api_key: str = "client-key", timeout: float = 10.0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout)


def stable(response: Any) -> Any:
    """A response (SDK object or JSON text) as plain data, without the fields that differ per request."""
    if hasattr(response, "model_dump"):
        response = response.model_dump(mode="json", warnings=False)
    elif isinstance(response, bytes | str):
        response = json.loads(response)
    return _without_volatile(response)


def _without_volatile(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _without_volatile(v) for k, v in data.items() if k not in VOLATILE}
    if isinstance(data, list):
        return [_without_volatile(v) for v in data]
    return data
