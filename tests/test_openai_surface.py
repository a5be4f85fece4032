"""The OpenAI surface as the SDKs meet it: ``models.retrieve``, request shapes refused with the param named
(and valid ones untouched), an upstream 429's ``Retry-After``, and client values clipped when echoed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.config import GatewayConfig
from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway


def _start(
    start_gateway: Callable[..., Gateway], fakes: Fakes, behavior: FakeBehavior | None = None
) -> tuple[Gateway, FakeServer]:
    fake = fakes.start("p", behavior or FakeBehavior(output_tokens=4))
    config: GatewayConfig = gateway_config(
        [fake],
        provider_options={"p": {"apis": ["chat", "completions", "embeddings", "responses", "messages"]}},
        extra={
            "models": [
                {"name": "m", "deployments": [{"provider": "p", "model": "up"}]},
                {"name": "org/m:free", "deployments": [{"provider": "p", "model": "up"}]},
            ]
        },
    )
    return start_gateway(config), fake


def test_models_retrieve(start_gateway: Callable[..., Gateway], fakes: Fakes) -> None:
    gateway, _ = _start(start_gateway, fakes)
    with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
        assert client.models.retrieve("m").id == "m"
        assert client.models.retrieve("org/m:free").id == "org/m:free"
        with pytest.raises(openai.NotFoundError) as caught:
            client.models.retrieve("nope")
        assert caught.value.code == "model_not_found" and "'nope'" in caught.value.message
        huge = "x" * 50_000
        with pytest.raises(openai.NotFoundError) as caught:
            client.models.retrieve(huge)
        assert len(caught.value.message) < 400 and "(50000 characters)" in caught.value.message
        with pytest.raises(openai.NotFoundError) as caught:
            client.chat.completions.create(model=huge, messages=[{"role": "user", "content": "hi"}])
        assert len(caught.value.message) < 1000 and "(50000 characters)" in caught.value.message


def test_an_anthropic_client_lists_and_retrieves_models_in_its_own_shape(
    start_gateway: Callable[..., Gateway], fakes: Fakes
) -> None:
    """The Anthropic SDK (and Claude Code) send ``anthropic-version``: the model list, one model, and a model not
    found come in the Models API's shapes; without the header, OpenAI's as before."""
    gateway, _ = _start(start_gateway, fakes)
    with anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0) as claude:
        listed = claude.models.list()
        assert [(m.id, m.type, m.display_name) for m in listed.data] == [
            ("m", "model", "m"),
            ("org/m:free", "model", "org/m:free"),
        ]
        assert listed.data[0].created_at.year == 1970 and listed.has_more is False
        assert (listed.first_id, listed.last_id) == ("m", "org/m:free")
        assert claude.models.retrieve("org/m:free").display_name == "org/m:free"
        with pytest.raises(anthropic.NotFoundError) as caught:
            claude.models.retrieve("nope")
        assert caught.value.body == {
            "type": "error",
            "error": {"type": "not_found_error", "message": "model 'nope' does not exist"},
        }
    with httpx.Client(base_url=gateway.url) as http:
        assert http.get("/v1/models").json()["object"] == "list"
        missing = http.get("/v1/nothing-here", headers={"anthropic-version": "2023-06-01"})
        assert missing.status_code == 404 and missing.json()["type"] == "error"


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("no role", {"messages": [{"content": "hi"}]}, "messages[0].role"),
    (
        "wizard",
        {"messages": [{"role": "user", "content": "hi"}, {"role": "wizard", "content": "x"}]},
        "messages[1].role",
    ),
    ("numeric content", {"messages": [{"role": "user", "content": 42}]}, "messages[0].content"),
    ("null user content", {"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ("part without type", {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}, "messages[0].content[0].type"),
    ("message not an object", {"messages": ["hi"]}, "messages[0]"),
    ("hot", {"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, "temperature"),
    ("boolean top_p", {"messages": [{"role": "user", "content": "hi"}], "top_p": True}, "top_p"),
    ("tools object", {"messages": [{"role": "user", "content": "hi"}], "tools": {"a": 1}}, "tools"),
]


@pytest.mark.parametrize(("case", "fields", "param"), REFUSED, ids=[case for case, _, _ in REFUSED])
def test_malformed_chat_requests_are_refused_naming_the_param(
    start_gateway: Callable[..., Gateway], fakes: Fakes, case: str, fields: dict[str, Any], param: str
) -> None:
    gateway, fake = _start(start_gateway, fakes)
    with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", **fields)
    assert caught.value.param == param, caught.value.message
    assert f"'{param}'" in caught.value.message
    assert fake.app.state.requests == 0  # nothing reached the provider


def test_valid_shapes_pass_untouched(start_gateway: Callable[..., Gateway], fakes: Fakes) -> None:
    gateway, fake = _start(start_gateway, fakes)
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages: Any = [
        {"role": "developer", "content": "be brief"},
        {"role": "system", "content": [{"type": "text", "text": "s"}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:,"}}],
        },
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "42"}]},
        {"role": "user", "content": "and?", "name": "bob"},
    ]
    with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
        client.chat.completions.create(
            model="m", messages=messages, temperature=0, top_p=1, stop=None, seed=3, tool_choice="auto", user="u"
        )
        client.completions.create(model="m", prompt="hi", temperature=0.5, logprobs=2)
        client.embeddings.create(model="m", input=["a", "b"], dimensions=8)
        client.responses.create(
            model="m",
            input=[
                {"role": "user", "content": "hi"},
                {"role": "developer", "content": [{"type": "input_text", "text": "x"}]},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
            ],
            temperature=0.2,
        )
    with httpx.Client(base_url=gateway.base_url) as http:  # curl -d's default content type, with a JSON body
        form = {"content-type": "application/x-www-form-urlencoded"}
        body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
        assert http.post("/chat/completions", content=body, headers=form).status_code == 200
    assert fake.app.state.requests == 5
    forwarded = fake.app.state.recorded[0].body
    assert forwarded is not None and forwarded["messages"] == messages


def test_a_text_plain_body_is_refused(start_gateway: Callable[..., Gateway], fakes: Fakes) -> None:
    gateway, fake = _start(start_gateway, fakes)
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    with httpx.Client(base_url=gateway.base_url) as http:
        response = http.post("/chat/completions", content=body, headers={"content-type": "text/plain"})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "unsupported_content_type"
        assert "text/plain" in response.json()["error"]["message"]
        assert http.post("/chat/completions", content=body).status_code == 200  # no content-type: read as JSON
    assert fake.app.state.requests == 1


def test_other_apis_refuse_their_malformed_shapes(start_gateway: Callable[..., Gateway], fakes: Fakes) -> None:
    gateway, fake = _start(start_gateway, fakes)
    wizard: Any = [{"role": "wizard", "content": "hi"}]
    untyped: Any = [{"call_id": "c1"}]
    wizard_turn: Any = [{"role": "wizard", "content": "hi"}]
    numeric: Any = [{"role": "user", "content": 7}]
    hot: Any = "hot"
    with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            client.embeddings.create(model="m", input="a", dimensions="big")  # type: ignore[arg-type]
        assert caught.value.param == "dimensions"
        with pytest.raises(openai.BadRequestError) as caught:
            client.completions.create(model="m", prompt="hi", temperature=hot)
        assert caught.value.param == "temperature"
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input=wizard)
        assert caught.value.param == "input[0].role"
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="m", input=untyped)
        assert caught.value.param == "input[0].type"
    with anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0) as claude:
        with pytest.raises(anthropic.BadRequestError) as refused:
            claude.messages.create(model="m", max_tokens=8, messages=wizard_turn)
        assert refused.value.body["type"] == "error"  # type: ignore[index]
        assert "'messages[0].role'" in refused.value.message
        with pytest.raises(anthropic.BadRequestError) as refused:
            claude.messages.create(model="m", max_tokens=8, messages=numeric)
        assert "'messages[0].content'" in refused.value.message
        assert claude.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
        ).content
    assert fake.app.state.requests == 1


# The said wait is short: the lone deployment's 429 is retried twice after waiting it (``retries_per_deployment``)
# before the client gets the last one, so this case takes about twice the wait (7 s made it 14).
@pytest.mark.parametrize("retry_after", [None, "2"], ids=["unsaid", "said"])
def test_an_upstream_429_reaches_the_client_with_retry_after(
    start_gateway: Callable[..., Gateway], fakes: Fakes, retry_after: str | None
) -> None:
    gateway, _ = _start(start_gateway, fakes, FakeBehavior(status=429, retry_after=retry_after))
    with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    wait = caught.value.response.headers.get("retry-after")
    assert wait is not None and int(wait) >= 1
    if retry_after is not None:
        assert wait == retry_after
    else:  # the cool-down the router gave the deployment, which the next request meets
        with openai.OpenAI(base_url=gateway.base_url, api_key="x", max_retries=0) as client:
            with pytest.raises(openai.RateLimitError) as again:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert again.value.response.headers.get("retry-after") is not None
        assert int(again.value.response.headers["retry-after"]) <= int(wait)
