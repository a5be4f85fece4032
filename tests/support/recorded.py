"""One deployment of the fake that speaks one API and records what it was sent: for the tests of what a translation
writes upstream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai

from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]


def deployment(fakes: Fakes, start_gateway: StartGateway, api: str) -> tuple[openai.OpenAI, FakeServer]:
    """An OpenAI client of a gateway whose one deployment speaks only ``api``, and that deployment's fake."""
    fake = fakes.start("a", FakeBehavior(output_tokens=3), record=True)
    gateway = start_gateway(gateway_config([fake], provider_options={"a": {"apis": [api]}}))
    return openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10), fake


def sent(fake: FakeServer) -> dict[str, Any]:
    """The body the fake was sent last."""
    body = fake.app.state.recorded[-1].body
    assert body is not None
    return body
