"""What a translation must not lose: each case has the real ``anthropic`` or ``openai`` SDK as the client and a provider
of another API upstream, and checks what the provider was sent or what the client got against what the client's own
API promises (a tool's failure stays a failure, a cache hint stays harmless, a call keeps its arguments)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from gateway.fakes import FakeBehavior
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
TOOLS: list[anthropic.types.ToolParam] = [{"name": "shot", "input_schema": {"type": "object"}}]


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="k", max_retries=0, timeout=10)


def sent(fakes_recorded: list[Any]) -> dict[str, Any]:
    """The last inference request body a fake was sent."""
    body: dict[str, Any] = fakes_recorded[-1].body
    return body


def test_a_failed_tool_result_with_an_image_stays_a_failure_on_a_responses_provider(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    """Claude Code's screenshot tool fails with text and a picture: a Responses output has no error flag, so the
    failure must be said in the output's text, as it is for a result of text alone."""
    fake = fakes.start("only", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([fake], provider_options={"only": {"apis": ["responses"]}}))
    image: anthropic.types.ImageBlockParam = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PIXEL},
    }
    messages: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "Take a screenshot."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": True,
                    "content": [{"type": "text", "text": "display locked"}, image],
                },
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True, "content": [image]},
            ],
        },
    ]
    with claude(gateway.url) as client:
        client.messages.create(model="m", max_tokens=64, tools=TOOLS, messages=messages)
    outputs = [i["output"] for i in sent(fake.app.state.recorded)["input"] if i.get("type") == "function_call_output"]
    picture = {"type": "input_image", "image_url": f"data:image/png;base64,{PIXEL}", "detail": "auto"}
    assert outputs == [
        [{"type": "input_text", "text": "Error: display locked"}, picture],
        [{"type": "input_text", "text": "Error:"}, picture],
    ]


@pytest.mark.parametrize("upstream", ["chat", "responses"])
def test_a_top_level_cache_control_is_a_cache_hint_not_a_refusal(
    fakes: Fakes, start_gateway: StartGateway, upstream: str
) -> None:
    """The Messages API's request-wide ``cache_control`` (automatic caching: the last cacheable block is marked) asks
    nothing of the answer; chat and Responses providers cache prefixes without marks, as for a block's own mark."""
    fake = fakes.start("only", FakeBehavior(output_tokens=3))
    gateway = start_gateway(gateway_config([fake], provider_options={"only": {"apis": [upstream]}}))
    with claude(gateway.url) as client:
        answer = client.messages.create(
            model="m", max_tokens=64, cache_control={"type": "ephemeral"}, messages=[{"role": "user", "content": "hi"}]
        )
    assert answer.stop_reason == "end_turn"
    assert "cache_control" not in sent(fake.app.state.recorded)
