"""Built-in tools a chat deployment cannot run: refused by default, left out when the operator opts in.

With ``builtin_tools = "omit"`` on a model or deployment, a translated request offering such a tool (Responses'
web search, Anthropic's server tools) is served without it, never silently: the answer carries
``x-gateway-omitted-tools`` and the access log names them. A ``tool_choice`` that forces an omitted tool is still
refused, and a deployment that can take the request whole (natively) is still preferred.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from gateway.accesslog import ACCESS_LOGGER
from gateway.config import ConfigError, parse_config
from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
SHELL = {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}
WEB = {"type": "web_search", "external_web_access": False}


def chat_only(fakes: Fakes, start_gateway: StartGateway, **model: Any) -> tuple[Gateway, FakeServer]:
    fake = fakes.start("a", FakeBehavior(output_tokens=3), record=True)
    config = gateway_config([fake], provider_options={"a": {"apis": ["chat"]}}, deployments={"a": model})
    return start_gateway(config), fake


def test_omitted_tools_are_left_out_and_named(
    fakes: Fakes, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    gateway, fake = chat_only(fakes, start_gateway, builtin_tools="omit")
    client = openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10)
    raw = client.responses.with_raw_response.create(model="m", input="hi", tools=[SHELL, WEB])  # type: ignore[list-item]
    client.close()
    assert raw.headers["x-gateway-omitted-tools"] == "web_search"
    assert raw.parse().status == "completed" and raw.parse().output
    (sent,) = [r.body for r in fake.app.state.recorded]
    assert sent is not None and [t["function"]["name"] for t in sent["tools"]] == ["shell"]
    # The access log's line is written as the request ends, just after the client has its answer.
    wait_until(lambda: any(r.name == ACCESS_LOGGER for r in caplog.records), what="the access log's line")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == ACCESS_LOGGER]
    assert [line["omitted_tools"] for line in lines] == [["web_search"]]


def test_a_request_that_loses_nothing_carries_no_omission(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, _ = chat_only(fakes, start_gateway, builtin_tools="omit")
    response = httpx.post(gateway.base_url + "/responses", json={"model": "m", "input": "hi", "tools": [SHELL]})
    assert response.status_code == 200 and "x-gateway-omitted-tools" not in response.headers


def test_by_default_a_built_in_tool_is_refused(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, fake = chat_only(fakes, start_gateway)
    response = httpx.post(gateway.base_url + "/responses", json={"model": "m", "input": "hi", "tools": [SHELL, WEB]})
    assert response.status_code == 400 and response.json()["error"]["param"] == "tools[1].type"
    assert not fake.app.state.recorded


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "/responses",
            {"model": "m", "input": "hi", "tools": [WEB], "tool_choice": {"type": "web_search"}},
            "tool_choice.type",
        ),
        ("/responses", {"model": "m", "input": "hi", "tools": [WEB], "tool_choice": "required"}, "tool_choice"),
        (
            "/messages",
            {
                "model": "m",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
                "tool_choice": {"type": "tool", "name": "web_search"},
            },
            "tool_choice",
        ),
    ],
)
def test_a_tool_choice_forcing_an_omitted_tool_is_refused(
    fakes: Fakes, start_gateway: StartGateway, path: str, body: dict[str, Any], field: str
) -> None:
    gateway, fake = chat_only(fakes, start_gateway, builtin_tools="omit")
    response = httpx.post(gateway.base_url + path, json=body)
    assert response.status_code == 400, response.text
    assert f"'{field}' cannot be translated" in response.json()["error"]["message"]
    assert not fake.app.state.recorded


def test_anthropic_server_tools_are_omitted_too(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, fake = chat_only(fakes, start_gateway, builtin_tools="omit")
    tools = [
        {"type": "web_search_20250305", "name": "web_search"},
        {"name": "shell", "input_schema": {"type": "object"}},
    ]
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    response = httpx.post(gateway.base_url + "/messages", json=body)
    assert response.status_code == 200 and response.headers["x-gateway-omitted-tools"] == "web_search"
    (sent,) = [r.body for r in fake.app.state.recorded]
    assert sent is not None and [t["function"]["name"] for t in sent["tools"]] == ["shell"]


def test_a_deployment_that_takes_the_request_whole_is_preferred(fakes: Fakes, start_gateway: StartGateway) -> None:
    chat = fakes.start("chat", FakeBehavior(output_tokens=3), record=True)
    native = fakes.start("native", FakeBehavior(output_tokens=3), record=True)
    config = gateway_config(
        [chat, native],
        provider_options={"chat": {"apis": ["chat"]}, "native": {"apis": ["responses"]}},
        deployments={"chat": {"builtin_tools": "omit"}},
    )
    gateway = start_gateway(config)
    for _ in range(3):
        body = {"model": "m", "input": "hi", "tools": [SHELL, WEB]}
        response = httpx.post(gateway.base_url + "/responses", json=body)
        assert response.status_code == 200 and response.headers["x-gateway-deployment"] == "native"
        assert "x-gateway-omitted-tools" not in response.headers
    assert not chat.app.state.recorded and len(native.app.state.recorded) == 3


def model_config(**keys: Any) -> dict[str, Any]:
    return {
        "providers": [{"name": "p", "base_url": "http://127.0.0.1:9", "apis": ["chat"]}],
        "models": [{"name": "m", "deployments": [{"provider": "p", "model": "x"}], **keys}],
    }


def test_the_setting_is_read_from_the_model_and_checked() -> None:
    assert parse_config(model_config()).models[0].deployments[0].builtin_tools == "refuse"
    assert parse_config(model_config(builtin_tools="omit")).models[0].deployments[0].builtin_tools == "omit"
    with pytest.raises(ConfigError, match="builtin_tools"):
        parse_config(model_config(builtin_tools="drop"))
