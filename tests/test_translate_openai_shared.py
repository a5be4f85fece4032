"""Options chat and Responses share and the Messages API lacks, driven with the openai SDK through the gateway.

``verbosity`` (chat) is Responses' ``text.verbosity``, and ``prompt_cache_retention`` is the same in both: carried
between them (before: refused one way, dropped the other). Toward a Messages deployment, which has neither, they are
left out with no error (a length the model writes at its own, a cache hint), the answer still given.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.fakes import Fakes
from tests.support.recorded import StartGateway, deployment, sent

HI: Any = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_client_s_verbosity_and_cache_retention_reach_a_responses_deployment(
    fakes: Fakes, start_gateway: StartGateway, stream: bool
) -> None:
    client, fake = deployment(fakes, start_gateway, "responses")
    answer = client.chat.completions.create(
        model="m", messages=HI, verbosity="low", prompt_cache_retention="24h", stream=stream
    )
    text = (
        "".join(c.choices[0].delta.content or "" for c in answer if c.choices)  # type: ignore[union-attr]
        if stream
        else answer.choices[0].message.content  # type: ignore[union-attr]
    )
    client.close()
    assert text
    body = sent(fake)
    assert body["text"] == {"verbosity": "low"} and body["prompt_cache_retention"] == "24h"


def test_a_responses_client_s_verbosity_and_cache_retention_reach_a_chat_deployment(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    client, fake = deployment(fakes, start_gateway, "chat")
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    text: Any = {"verbosity": "high", "format": {"type": "json_schema", "name": "s", "schema": schema}}
    response = client.responses.create(model="m", input="hi", text=text, prompt_cache_retention="in_memory")
    client.close()
    assert response.status == "completed"
    body = sent(fake)
    assert body["verbosity"] == "high" and body["prompt_cache_retention"] == "in_memory"
    assert body["response_format"]["json_schema"]["schema"] == schema  # the format beside it, still carried


def test_a_messages_deployment_is_asked_neither(fakes: Fakes, start_gateway: StartGateway) -> None:
    client, fake = deployment(fakes, start_gateway, "messages")
    answer = client.chat.completions.create(model="m", messages=HI, verbosity="low", prompt_cache_retention="24h")
    response = client.responses.create(model="m", input="hi", text={"verbosity": "low"}, prompt_cache_retention="24h")
    client.close()
    assert answer.choices[0].message.content and response.output_text
    for request in fake.app.state.recorded:
        assert request.body is not None and not {"verbosity", "text", "prompt_cache_retention"} & request.body.keys()
