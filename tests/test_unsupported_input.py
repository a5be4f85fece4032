"""A deployment that cannot read the request's image: llama.cpp's server without a vision projector.

llama.cpp answers an image part, on a model loaded without its ``--mmproj``, with HTTP 500 and ``image input is
not supported - hint: if this is unexpected, you may need to provide the mmproj``. That is no server fault to
retry: the deployment refuses this request, as a prompt too long for its window is refused. So it is not asked
again, its health is not touched, the request falls back to the model's next deployment (which may read images),
and with none left the client gets a 400 in its API's shape saying the deployment does not accept image input.
The fake provider plays llama.cpp's refusal when steered per request (``text_only``); real SDK clients.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.app import AppOptions, create_app
from gateway.config import load_config
from gateway.fakes import FakeBehavior
from gateway.routing.inputs import RefusedInputs, inputs_of
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway, GatewayServers

StartGateway = Callable[..., Gateway]
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
LOOK: list[openai.types.chat.ChatCompletionMessageParam] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
        ],
    }
]
TEXT_ONLY = {"fake": {"servers": {"text": {"text_only": True}}}}
"""Per request: the deployment ``text`` reads no images (its model has no projector); any other does."""
REFUSED = "deployment 'text' does not accept image input (upstream returned 500: image input is not supported"
LEARNED = "learned from an earlier request, so this one was not sent upstream"
LOOK_RESPONSES: list[Any] = [
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is in this picture?"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PIXEL}", "detail": "auto"},
        ],
    }
]


def asked(fake: FakeServer) -> int:
    return sum(1 for seen in fake.app.state.recorded if seen.path.endswith(("/chat/completions", "/messages")))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_image_goes_to_a_deployment_that_reads_it(fakes: Fakes, start_gateway: StartGateway, stream: bool) -> None:
    text, vision = fakes.start("text"), fakes.start("vision")
    gateway = start_gateway(gateway_config([text, vision]))  # config order: the text-only one first
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        answer = client.chat.completions.with_raw_response.create(
            model="m", messages=LOOK, stream=stream, extra_body=TEXT_ONLY
        )
        assert (answer.headers["x-gateway-deployment"], answer.headers["x-gateway-route"]) == ("vision", "fallback")
        assert answer.headers["x-gateway-attempts"] == "2"
        parsed: Any = answer.parse()
        said = (
            "".join(c.choices[0].delta.content or "" for c in parsed) if stream else parsed.choices[0].message.content
        )
        assert said
    assert (asked(text), asked(vision)) == (1, 1)  # refused once, never asked again
    # The request's fault there, not the deployment's failure: nothing against its health.
    assert [s.outcome for s in gateway.samples.samples if s.deployment == "text"] == ["client_error"]


def test_a_lone_text_only_deployment_says_it_takes_no_images(fakes: Fakes, start_gateway: StartGateway) -> None:
    """Not retried (a lone deployment's 500 is, after a wait), nor held against its health: text still goes there."""
    text = fakes.start("text")
    gateway = start_gateway(gateway_config([text]))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="m", messages=LOOK, extra_body=TEXT_ONLY)
        error = refused.value.response.json()["error"]
        assert (error["type"], error["code"]) == ("invalid_request_error", "image_input_unsupported")
        assert REFUSED in error["message"]
        assert asked(text) == 1
        # Learned: the next image is answered at once, saying so, with no upstream call.
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="m", messages=LOOK, extra_body=TEXT_ONLY)
        error = refused.value.response.json()["error"]
        assert (error["type"], error["code"]) == ("invalid_request_error", "image_input_unsupported")
        assert REFUSED in error["message"] and LEARNED in error["message"]
        assert asked(text) == 1
        for _ in range(3):  # its circuit stays closed
            answer = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], extra_body=TEXT_ONLY
            )
            assert answer.choices[0].message.content
    assert asked(text) == 4


def test_a_messages_client_is_told_in_anthropics_shape(fakes: Fakes, start_gateway: StartGateway) -> None:
    text = fakes.start("text")
    gateway = start_gateway(gateway_config([text], provider_options={"text": {"apis": ["messages"]}}))
    image: anthropic.types.ImageBlockParam = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PIXEL},
    }
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0, timeout=10) as claude:
        for _ in range(2):  # refused upstream, then by the gateway that learned it
            with pytest.raises(anthropic.BadRequestError) as refused:
                claude.messages.create(
                    model="m",
                    max_tokens=16,
                    messages=[{"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}],
                    extra_body=TEXT_ONLY,
                )
            body = refused.value.response.json()
            assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
            assert REFUSED in body["error"]["message"]
            assert asked(text) == 1
    assert LEARNED in body["error"]["message"]


def test_a_learned_refusal_sends_later_images_straight_elsewhere(fakes: Fakes, start_gateway: StartGateway) -> None:
    """One refusal teaches the router: later images, in any client API, go to the deployment that reads them first
    (no second round trip to the one that refused); text still goes to the refusing one, first in order."""
    text, vision = fakes.start("text", FakeBehavior(text_only=True)), fakes.start("vision")  # as a server: any API
    gateway = start_gateway(gateway_config([text, vision]))
    with openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client:
        first = client.chat.completions.with_raw_response.create(model="m", messages=LOOK)
        assert (first.headers["x-gateway-deployment"], first.headers["x-gateway-attempts"]) == ("vision", "2")
        again = client.chat.completions.with_raw_response.create(model="m", messages=LOOK)
        assert (again.headers["x-gateway-deployment"], again.headers["x-gateway-attempts"]) == ("vision", "1")
        responses = client.responses.with_raw_response.create(model="m", input=LOOK_RESPONSES)
        assert (responses.headers["x-gateway-deployment"], responses.headers["x-gateway-attempts"]) == ("vision", "1")
        assert (asked(text), asked(vision)) == (1, 3)
        plain = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert (plain.headers["x-gateway-deployment"], plain.headers["x-gateway-attempts"]) == ("text", "1")
    assert (asked(text), asked(vision)) == (2, 3)


def _config_text(text: FakeServer, vision: FakeServer, text_model: str) -> str:
    return (
        f'[[providers]]\nname = "text"\nbase_url = "{text.base_url}"\n\n'
        f'[[providers]]\nname = "vision"\nbase_url = "{vision.base_url}"\n\n'
        '[[models]]\nname = "m"\npolicy = "fixed-order"\n'
        f'  [[models.deployments]]\n  provider = "text"\n  model = "{text_model}"\n'
        '  [[models.deployments]]\n  provider = "vision"\n  model = "vision-upstream"\n'
    )


def test_a_reload_that_changes_the_deployment_forgets_its_refusal(fakes: Fakes, tmp_path: Path) -> None:
    """A reload that leaves the deployment as it was keeps what was learned; one that serves it from another
    upstream model (a new server, perhaps with its projector) asks it again."""
    text, vision = fakes.start("text"), fakes.start("vision")
    path = tmp_path / "gateway.toml"
    path.write_text(_config_text(text, vision, "text-upstream"))
    app = create_app(load_config(path), AppOptions(environ={"GATEWAY_ADMIN_KEY": "admin"}, config_path=str(path)))
    gateway = GatewayServers(fakes.servers).serve(app)
    admin = {"authorization": "Bearer admin"}
    with (
        openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client,
        httpx.Client(base_url=gateway.url, timeout=10) as http,
    ):

        def look() -> str:
            answer = client.chat.completions.with_raw_response.create(model="m", messages=LOOK, extra_body=TEXT_ONLY)
            return answer.headers["x-gateway-attempts"]

        assert (look(), look()) == ("2", "1")
        path.write_text(_config_text(text, vision, "text-upstream") + "\n")  # the same deployments
        assert http.post("/v1/gateway/reload", headers=admin).status_code == 200
        assert look() == "1"
        path.write_text(_config_text(text, vision, "text-upstream-mmproj"))
        assert http.post("/v1/gateway/reload", headers=admin).status_code == 200
        assert (look(), look()) == ("2", "1")  # asked again, refused again, learned again
    assert (asked(text), asked(vision)) == (2, 5)


def test_what_a_body_carries_is_read_only_once_something_was_refused() -> None:
    """Each API's parts (a tool result's too); until a refusal, no body is scanned and nothing is carried."""
    pixel = {"type": "base64", "media_type": "image/png", "data": PIXEL}
    chat: Any = {"messages": [*LOOK, {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}
    messages: Any = {
        "messages": [
            {"role": "user", "content": [{"type": "tool_result", "content": [{"type": "image", "source": pixel}]}]}
        ]
    }
    responses: Any = {"input": [{"type": "function_call_output", "output": [LOOK_RESPONSES[0]["content"][1]]}]}
    plain: Any = {"messages": [{"role": "user", "content": "hi"}], "input": "hi"}
    refused = RefusedInputs()
    assert inputs_of(refused, "chat", chat) == frozenset()
    refused.learn(("m", "text"), "image", "deployment 'text' does not accept image input", 0.0)
    assert inputs_of(refused, "chat", chat) == {"image", "audio"}
    assert inputs_of(refused, "messages", messages) == {"image"}
    assert inputs_of(refused, "responses", responses) == {"image"}
    assert inputs_of(refused, "responses", {"input": LOOK_RESPONSES}) == {"image"}
    assert [inputs_of(refused, api, plain) for api in ("chat", "responses", "embeddings")] == [frozenset()] * 3
