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
from typing import Any

import anthropic
import openai
import pytest

from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

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
