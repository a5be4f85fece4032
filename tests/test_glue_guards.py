"""The request glue's guard: a reply's ``x-gateway-omitted-tools`` is looked for only when the request has omissions.

``_respond`` asks ``omitted_tools(request, winner)`` only when ``request.omitted_tools`` (the built-in tools left out
of each translation, from ``eligible``) holds any: with none, the answer is ``()`` whatever the winner. Random
models (native and translated deployments, ``refuse`` and ``omit``) and bodies with and without built-in tools.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from gateway.errors import InvalidRequest
from gateway.relay import outbound
from gateway.samples import Endpoint
from tests.support.random_models import random_model

_APIS = [["chat"], ["messages"], ["responses"], ["chat", "messages"], ["completions", "chat"]]
_ALL: list[Endpoint] = ["chat", "completions", "responses", "messages"]
_TOOLS: list[dict[str, Any]] = [
    {},
    {"tools": [{"type": "web_search"}]},
    {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
    {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
]


def _body(endpoint: Endpoint, tools: dict[str, Any]) -> dict[str, Any]:
    if endpoint == "responses":
        return {"model": "m", "input": "hi", **tools}
    if endpoint == "completions":
        return {"model": "m", "prompt": "hi"}
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **tools}
    return {**body, "max_tokens": 16} if endpoint == "messages" else body


def test_no_omission_on_the_request_means_none_for_any_winner() -> None:
    rng = random.Random(41)
    with_omissions = without = 0
    for _ in range(120):
        model = random_model(rng, _APIS, translate_share=0.8, most=4)
        for endpoint in _ALL:
            for tools in _TOOLS:
                try:
                    able = outbound.eligible(model, endpoint, _body(endpoint, tools))
                except InvalidRequest:  # a body its translation refuses: the client's 400, no reply
                    continue
                request: Any = SimpleNamespace(endpoint=endpoint, omitted_tools=able.omitted_tools)
                for deployment in able.model.deployments:
                    named = outbound.omitted_tools(request, deployment)
                    if request.omitted_tools:
                        with_omissions += bool(named)
                    else:
                        without += 1
                        assert named == ()
    assert with_omissions > 10 and without > 400
