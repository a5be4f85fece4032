"""A provider that refuses the gateway's own key (a 401 or 403): the operator's mistake, not the client's.

The provider's answer says ``invalid_api_key`` (Anthropic's ``authentication_error`` / ``permission_error``), and
OpenAI's words repeat the start and end of the key; relayed, a client (and its SDK) would read that *its* key to the
gateway is wrong. The client's key is fine: the client gets a 502 in its API's shape that names the deployment and
says the provider refused the gateway's credentials, with none of the key. No retry cures it until the operator
fixes the key, so the deployment's circuit opens at once, the request falls back, and the next goes elsewhere.
Real ``openai`` and ``anthropic`` SDK clients; a ``ScriptedUpstream`` answers as OpenAI and Anthropic do.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.scripted import ScriptedUpstream
from tests.support.servers import ServerThread

StartGateway = Callable[..., Gateway]
SECRET = "sk-upstream-secret-5d1c"
OPENAI_401 = {
    "error": {
        "message": "Incorrect API key provided: sk-upstr***********5d1c. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
OPENAI_403 = {
    "error": {
        "message": "Project `proj_abc` does not have access to model `wrong-upstream`",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }
}
ANTHROPIC_401 = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
ANTHROPIC_403 = {
    "type": "error",
    "error": {"type": "permission_error", "message": "Your API key does not have permission to use the resource."},
}
ASK: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
REFUSED = "deployment 'wrong': the provider refused the gateway's credentials"


def refusing(test_servers: list[ServerThread], answer: dict[str, Any], status: int) -> ScriptedUpstream:
    upstream = ScriptedUpstream("wrong")
    test_servers.append(upstream.server.start())
    upstream.answer_json(answer, status=status)
    return upstream


def openai_error(gateway: Gateway, client: str) -> tuple[int, dict[str, Any]]:
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0, timeout=10) as sdk:
        with pytest.raises(openai.APIStatusError) as caught:
            if client == "embeddings":
                sdk.embeddings.create(model="m", input="hi")
            elif client == "responses":
                sdk.responses.create(model="m", input="hi")
            else:
                sdk.chat.completions.create(model="m", messages=ASK, stream=client == "chat-stream")
    return caught.value.status_code, caught.value.response.json()["error"]


def anthropic_error(gateway: Gateway) -> tuple[int, dict[str, Any]]:
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        with pytest.raises(anthropic.APIStatusError) as refused:
            claude.messages.create(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    return refused.value.status_code, refused.value.response.json()["error"]


@pytest.mark.parametrize(
    ("client", "answer", "status"),
    [
        ("chat", OPENAI_401, 401),
        ("chat-stream", OPENAI_401, 401),
        ("embeddings", OPENAI_403, 403),
        ("responses", OPENAI_401, 401),
        ("messages", ANTHROPIC_401, 401),
        ("messages", ANTHROPIC_403, 403),
    ],
)
def test_the_client_is_not_told_its_key_is_wrong(
    test_servers: list[ServerThread], start_gateway: StartGateway, client: str, answer: dict[str, Any], status: int
) -> None:
    upstream = refusing(test_servers, answer, status)
    apis = ["messages"] if client == "messages" else ["chat", "completions", "embeddings", "responses"]
    config = gateway_config(
        [upstream],
        provider_options={"wrong": {"api_key_env": "WRONG_KEY", "apis": apis}},
        deployments={"wrong": {"model": "wrong-upstream"}},
    )
    gateway = start_gateway(config, environ={"WRONG_KEY": SECRET})
    if client == "messages":
        got, error = anthropic_error(gateway)
        assert error["type"] == "api_error"
    else:
        got, error = openai_error(gateway, client)
        assert error["code"] == "upstream_error"
        assert error["type"] == "upstream_error"
    assert upstream.last["model"] == "wrong-upstream"
    assert got == 502
    assert f"{REFUSED} (upstream returned {status})" in str(error["message"])
    shown = json.dumps(error)
    for word in ("invalid_api_key", "authentication_error", "permission_error", "sk-upstr", "proj_abc", SECRET):
        assert word not in shown


def test_the_request_falls_back_and_the_next_goes_elsewhere(
    test_servers: list[ServerThread], start_gateway: StartGateway, fakes: Fakes
) -> None:
    """In config order the refused deployment is first: its one 401 sends this request and every next one on."""
    upstream = refusing(test_servers, OPENAI_401, 401)
    good = fakes.start("good")
    gateway = start_gateway(gateway_config([upstream, good]))
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        answer = client.chat.completions.with_raw_response.create(model="m", messages=ASK)
        assert (answer.headers["x-gateway-deployment"], answer.headers["x-gateway-route"]) == ("good", "fallback")
        for _ in range(5):
            answer = client.chat.completions.with_raw_response.create(model="m", messages=ASK)
            assert answer.headers["x-gateway-deployment"] == "good"
            assert answer.headers["x-gateway-route"] != "fallback"  # the refused one was not asked first
    assert len(upstream.bodies) == 1


def test_count_tokens_refused_the_gateway_key_is_counted_by_the_gateway(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    """Claude Code asks count_tokens before each turn: a refusal of the gateway's key must not read as its own."""
    upstream = refusing(test_servers, ANTHROPIC_401, 401)
    config = gateway_config([upstream], provider_options={"wrong": {"api_key_env": "WRONG_KEY", "apis": ["messages"]}})
    gateway = start_gateway(config, environ={"WRONG_KEY": SECRET})
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        counted = claude.messages.with_raw_response.count_tokens(
            model="m", messages=[{"role": "user", "content": "hello there"}]
        )
    assert counted.headers["x-gateway-count"] == "estimated" and counted.parse().input_tokens > 0
    assert upstream.last["model"] == "wrong-upstream"


def test_a_lone_refused_deployment_says_why_while_its_circuit_is_open(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    """Its one 401 opens its circuit; the next request (Claude Code's next turn) is told why, in Anthropic's shape."""
    upstream = refusing(test_servers, ANTHROPIC_401, 401)
    config = gateway_config([upstream], provider_options={"wrong": {"api_key_env": "WRONG_KEY", "apis": ["messages"]}})
    gateway = start_gateway(config, environ={"WRONG_KEY": SECRET})
    first, _ = anthropic_error(gateway)
    second, error = anthropic_error(gateway)
    assert (first, second, error["type"]) == (502, 503, "overloaded_error")
    assert "wrong: circuit open, retry in " in error["message"]
    assert f"after: wrong: {REFUSED} (upstream returned 401)" in error["message"]
    assert SECRET not in json.dumps(error) and len(upstream.bodies) == 1
