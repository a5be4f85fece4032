"""One pool per model whatever API the client speaks: translated candidates in the plan, the trace, the
explanation, the access log and the metrics; what cannot be translated is refused, or sent where it is native."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.config import ConfigError, parse_config
from gateway.fakes import FakeBehavior
from gateway.fakes.provider import answer_words
from gateway.routing.apis import reachable
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway
from tests.support.wait import wait_until

StartGateway = Callable[..., Gateway]
ASK = {"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]}


def mixed(fakes: Fakes, start_gateway: StartGateway, **options: Any) -> tuple[Gateway, FakeServer, FakeServer]:
    """Model ``m`` on a chat-only deployment (first, in config order) and a Messages-only one."""
    chat = fakes.start("chat", FakeBehavior(output_tokens=3), record=True)
    messages = fakes.start("anth", FakeBehavior(output_tokens=3), record=True)
    apis = {"chat": {"apis": ["chat"]}, "anth": {"apis": ["messages"]}}
    return start_gateway(gateway_config([chat, messages], provider_options=apis, **options)), chat, messages


def test_translated_candidates_are_traced_explained_logged_and_counted(
    fakes: Fakes, start_gateway: StartGateway
) -> None:
    gateway, chat, _ = mixed(fakes, start_gateway)
    response = httpx.post(gateway.base_url + "/messages", json=ASK, headers={"x-gateway-trace": "1"})
    assert response.status_code == 200 and response.json()["content"][0]["text"] == "".join(answer_words(0, 3))
    assert response.headers["x-gateway-deployment"] == "chat"
    trace = json.loads(response.headers["x-gateway-trace"])
    via = {c["d"]: c.get("via") for c in trace["c"]}
    assert via == {"chat": "chat", "anth": None}  # chat is reached by translation, anth natively
    explained = httpx.get(gateway.base_url + "/gateway/routes", params={"endpoint": "messages"}).json()
    rows = {r["deployment"]: r for r in explained["data"][0]["deployments"]}
    assert (rows["chat"]["upstream_api"], rows["chat"]["translated"]) == ("chat", True)
    assert (rows["anth"]["upstream_api"], rows["anth"]["translated"]) == ("messages", False)
    labels = {"model": "m", "api": "messages", "upstream_api": "chat", "status_class": "2xx"}
    value = gateway.metrics.registry.get_sample_value
    wait_until(lambda: value("gateway_api_requests_total", labels) == 1, what="counted with its upstream API")
    assert chat.app.state.requests == 1


def test_a_failed_translated_attempt_falls_back_to_a_native_one(fakes: Fakes, start_gateway: StartGateway) -> None:
    broken = fakes.start("chat", FakeBehavior(status=503))
    native = fakes.start("anth", FakeBehavior(output_tokens=2))
    apis = {"chat": {"apis": ["chat"]}, "anth": {"apis": ["messages"]}}
    gateway = start_gateway(gateway_config([broken, native], provider_options=apis))
    response = httpx.post(gateway.base_url + "/messages", json={**ASK, "stream": True})
    assert response.status_code == 200 and response.headers["x-gateway-route"] == "fallback"
    assert "event: message_stop" in response.text and broken.app.state.requests == 1
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both attempts recorded")
    assert [s.deployment for s in gateway.samples.samples] == ["chat", "anth"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        # A Responses built-in tool.
        ("/responses", {"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        # A document block of plain text (a PDF's is carried).
        (
            "/messages",
            {
                "model": "m",
                "max_tokens": 8,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "document", "source": {"type": "text", "data": "x", "media_type": "text/plain"}}
                        ],
                    }
                ],
            },
            "messages[0].content[0].source.type",
        ),
        # An Anthropic server tool.
        (
            "/messages",
            {**ASK, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "tools[0].type",
        ),
        # A sampling option chat has and the others lack.
        ("/responses", {"model": "m", "input": "hi", "top_logprobs": 2}, "top_logprobs"),
        # A field no mapping knows.
        ("/messages", {**ASK, "container": "c1"}, "container"),
        # Chat's several choices.
        ("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
    ],
)
def test_an_untranslatable_field_is_refused_naming_it(
    fakes: Fakes, start_gateway: StartGateway, path: str, body: dict[str, Any], field: str
) -> None:
    target = "messages" if path == "/chat/completions" else "chat"
    fake = fakes.start("only", FakeBehavior(output_tokens=2))
    gateway = start_gateway(gateway_config([fake], provider_options={"only": {"apis": [target]}}))
    response = httpx.post(gateway.base_url + path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert f"'{field}'" in error["message"] and fake.app.state.requests == 0
    if path == "/messages":
        assert response.json()["type"] == "error" and error["type"] == "invalid_request_error"
    else:
        assert error["param"] == field and error["code"] == "untranslatable_field"


def test_an_untranslatable_request_goes_where_it_is_native(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, chat, messages = mixed(fakes, start_gateway)
    tools = [{"type": "web_search_20250305", "name": "web_search"}]
    for _ in range(3):
        response = httpx.post(gateway.base_url + "/messages", json={**ASK, "tools": tools})
        assert response.status_code == 200 and response.headers["x-gateway-deployment"] == "anth"
    assert chat.app.state.requests == 0 and messages.app.state.requests == 3


def test_translation_can_be_turned_off(fakes: Fakes, start_gateway: StartGateway) -> None:
    fake = fakes.start("only")
    config = gateway_config(
        [fake], provider_options={"only": {"apis": ["chat"]}}, deployments={"only": {"translate": False}}
    )
    response = httpx.post(start_gateway(config).base_url + "/messages", json=ASK)
    assert response.status_code == 404 and "Messages API" in response.json()["error"]["message"]


def test_a_translated_hedge_wins_over_a_late_native_primary(fakes: Fakes, start_gateway: StartGateway) -> None:
    late = fakes.start("anth", FakeBehavior(output_tokens=3, ttft_s=3.0))
    quick = fakes.start("chat", FakeBehavior(output_tokens=3))
    apis = {"anth": {"apis": ["messages"]}, "chat": {"apis": ["chat"]}}
    policy = {"hedge_after_s": 0.1, "hedge_budget": 1.0}
    gateway = start_gateway(gateway_config([late, quick], provider_options=apis, policy=policy))
    response = httpx.post(gateway.base_url + "/messages", json={**ASK, "stream": True}, timeout=10)
    assert response.status_code == 200 and response.headers["x-gateway-route"] == "hedge"
    assert response.headers["x-gateway-deployment"] == "chat"
    assert "".join(answer_words(0, 3)) in "".join(
        json.loads(line[6:])["delta"].get("text", "")
        for line in response.text.splitlines()
        if line.startswith("data: ") and '"content_block_delta"' in line
    )
    wait_until(lambda: len(gateway.samples.samples) == 2, what="both attempts recorded")
    outcomes = {s.deployment: (s.outcome, s.hedged) for s in gateway.samples.samples}
    assert outcomes == {"anth": ("client_cancelled", True), "chat": ("ok", True)}


def test_the_routing_overrides_apply_to_translated_candidates(fakes: Fakes, start_gateway: StartGateway) -> None:
    gateway, chat, messages = mixed(fakes, start_gateway)
    for order in (["anth"], ["chat"]):
        body = {**ASK, "provider": {"order": order, "allow_fallbacks": False}}
        response = httpx.post(gateway.base_url + "/messages", json=body)
        assert response.status_code == 200 and response.headers["x-gateway-deployment"] == order[0]
    assert chat.app.state.requests == messages.app.state.requests == 1
    sent = chat.app.state.recorded[-1].body
    assert sent is not None and "provider" not in sent and sent["messages"] == ASK["messages"]


def test_translate_is_set_per_model_and_overridden_per_deployment() -> None:
    data = {
        "providers": [{"name": "p", "base_url": "http://127.0.0.1:9/v1", "apis": ["chat"]}],
        "models": [
            {
                "name": "m",
                "translate": False,
                "deployments": [
                    {"provider": "p", "model": "a", "name": "a"},
                    {"provider": "p", "model": "b", "name": "b", "translate": True},
                ],
            }
        ],
    }
    model = parse_config(data).models[0]
    assert [d.translate for d in model.deployments] == [False, True]
    assert [d.name for d in reachable(model, "messages")] == ["b"] and len(reachable(model, "chat")) == 2
    data["models"][0]["translate"] = "no"  # type: ignore[index]
    with pytest.raises(ConfigError, match=r"models\[0\]\.translate"):
        parse_config(data)


def test_every_api_measures_one_deployment_once_on_the_leaderboard(fakes: Fakes, start_gateway: StartGateway) -> None:
    """A sample belongs to the deployment whatever API the client spoke: each sample keeps its first token, speed,
    usage and cost, and the leaderboard (``GET /v1/gateway/stats``) shows each deployment once."""
    # Paced 50 ms a token, so that a speed can be measured even when a loaded machine reads the stream late.
    paced = FakeBehavior(output_tokens=3, tokens_per_s=20.0)
    chat, anth = fakes.start("chat", paced), fakes.start("anth", paced)
    apis = {"chat": {"apis": ["chat"]}, "anth": {"apis": ["messages"]}}
    gateway = start_gateway(gateway_config([chat, anth], provider_options=apis))
    only_chat = {"only": ["chat"]}
    asks = [
        ("/chat/completions", {"model": "m", "messages": ASK["messages"], "stream": True, "provider": only_chat}),
        ("/messages", {**ASK, "stream": True, "provider": only_chat}),
        ("/responses", {"model": "m", "input": "hi", "stream": True, "provider": only_chat}),
        ("/messages", {**ASK, "provider": {"only": ["anth"]}}),
    ]
    for path, body in asks:
        assert httpx.post(gateway.base_url + path, json=body).status_code == 200
    wait_until(lambda: len(gateway.samples.samples) == 4, what="every request measured")
    on_chat = [s for s in gateway.samples.samples if s.deployment == "chat"]
    assert len(on_chat) == 3 and chat.app.state.requests == 3 and anth.app.state.requests == 1
    for sample in on_chat:
        assert sample.outcome == "ok" and sample.ttft_s is not None and sample.tokens_per_s is not None
        assert sample.usage_prompt_tokens and sample.usage_completion_tokens == 3 and sample.cost_usd
    rows = [r for r in httpx.get(gateway.base_url + "/gateway/stats").json()["data"] if r["model"] == "m"]
    assert sorted((r["deployment"], r["samples"]) for r in rows) == [("anth", 1), ("chat", 3)]
