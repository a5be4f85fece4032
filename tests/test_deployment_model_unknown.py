"""A deployment whose own model id the provider does not know (a 404): the operator's mistake, not the client's.

The provider's answer says ``model_not_found``; relayed, a client (and the OpenAI SDK's users) would read that its
own model does not exist. The client's model exists: the gateway could not reach a working deployment of it. The
client gets a 502 that names the deployment and says its provider did not know the deployment's model, and the
deployment counts as unable to serve, so the next request goes elsewhere at once. Real ``openai`` and
``anthropic`` SDK clients; a ``ScriptedUpstream`` answers 404 as OpenAI does, the fake provider serves.
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
OPENAI_404 = {
    "error": {
        "message": "The model `wrong-upstream` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }
}
VLLM_404 = {
    "object": "error",
    "message": "The model `wrong-upstream` does not exist.",
    "type": "NotFoundError",
    "param": None,
    "code": 404,
}
OLLAMA_404 = {"error": 'model "wrong-upstream" not found, try pulling it first'}
ASK: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def misconfigured(test_servers: list[ServerThread], answer: dict[str, Any] = OPENAI_404) -> ScriptedUpstream:
    upstream = ScriptedUpstream("wrong")
    test_servers.append(upstream.server.start())
    upstream.answer_json(answer, status=404)
    return upstream


@pytest.mark.parametrize(
    ("client", "answer"), [("chat", OPENAI_404), ("chat-stream", VLLM_404), ("messages", OLLAMA_404)]
)
def test_the_client_is_not_told_its_model_does_not_exist(
    test_servers: list[ServerThread], start_gateway: StartGateway, client: str, answer: dict[str, Any]
) -> None:
    upstream = misconfigured(test_servers, answer)
    config = gateway_config(
        [upstream],
        provider_options={"wrong": {"api_key_env": "WRONG_KEY"}},
        deployments={"wrong": {"model": "wrong-upstream"}},
    )
    gateway = start_gateway(config, environ={"WRONG_KEY": SECRET})
    error: dict[str, object]
    if client == "messages":
        with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
            with pytest.raises(anthropic.APIStatusError) as refused:
                claude.messages.create(model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        status, error = refused.value.status_code, refused.value.response.json()["error"]
    else:
        with openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0, timeout=10) as sdk:
            with pytest.raises(openai.APIStatusError) as caught:
                sdk.chat.completions.create(model="m", messages=ASK, stream=client == "chat-stream")
        status, error = caught.value.status_code, caught.value.response.json()["error"]
        assert error["code"] == "upstream_error"
    assert upstream.last["model"] == "wrong-upstream"
    assert status == 502
    assert "deployment 'wrong': the provider does not know its model 'wrong-upstream'" in str(error["message"])
    assert "model_not_found" not in json.dumps(error)
    assert SECRET not in json.dumps(error)


def test_the_next_request_goes_to_a_deployment_that_can_serve(
    test_servers: list[ServerThread], start_gateway: StartGateway, fakes: Fakes
) -> None:
    """In config order the misconfigured deployment is first: after its one 404, the others serve."""
    upstream = misconfigured(test_servers)
    good = fakes.start("good")
    gateway = start_gateway(gateway_config([upstream, good]))
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0, timeout=10) as client:
        for _ in range(6):
            answer = client.chat.completions.with_raw_response.create(model="m", messages=ASK)
            assert answer.headers["x-gateway-deployment"] == "good"
    assert len(upstream.bodies) == 1


def test_a_lone_broken_deployment_says_why_while_its_circuit_is_open(
    test_servers: list[ServerThread], start_gateway: StartGateway
) -> None:
    """Its one 404 opens its circuit; the next request finds no deployment, and its 503 says what the 404 said."""
    upstream = misconfigured(test_servers)
    config = gateway_config(
        [upstream],
        provider_options={"wrong": {"api_key_env": "WRONG_KEY"}},
        deployments={"wrong": {"model": "wrong-upstream"}},
    )
    gateway = start_gateway(config, environ={"WRONG_KEY": SECRET})
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0, timeout=10) as sdk:
        with pytest.raises(openai.APIStatusError) as first:
            sdk.chat.completions.create(model="m", messages=ASK)
        with pytest.raises(openai.APIStatusError) as second:
            sdk.chat.completions.create(model="m", messages=ASK)
    assert (first.value.status_code, second.value.status_code) == (502, 503)
    message = str(second.value.response.json()["error"]["message"])
    assert "no deployment of model 'm' can take a request now (wrong: circuit open, retry in " in message
    assert "after: wrong: deployment 'wrong': the provider does not know its model 'wrong-upstream'" in message
    assert SECRET not in message and len(upstream.bodies) == 1
