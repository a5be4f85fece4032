"""Small helpers shared by the end-to-end tests.

Why: every end-to-end test builds the same OpenAI SDK clients (no retries, so that a test sees
the gateway's own answer), waits for a condition on another thread with a bounded deadline
instead of sleeping, and compares responses without their per-request ids and timestamps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import openai

from gateway.samples import Sample

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
VOLATILE = ("id", "created")


def sdk(base_url: str, api_key: str = "client-key", timeout: float = 10.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout)


def async_sdk(base_url: str, api_key: str = "client-key", timeout: float = 10.0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout)


def wait_until(condition: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(0.005)


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


def samples_settled(samples: list[Sample], count: int) -> Callable[[], bool]:
    return lambda: len(samples) >= count
