"""Claude Code and Codex, the real CLIs, run non-interactively through the gateway with a tool round trip.

The fake plays the agent's model (``FakeBehavior.agent``): it calls the CLI's shell tool, the CLI runs
``echo agent-round-trip`` and sends the result back, and the fake answers with it. Each CLI first works
against a deployment that speaks its API natively; the chat-only deployment is the same test with one
parameter changed (``apis``), which needs translation between the APIs. Either way the requests are measured
(a sample per turn, for the deployment, with its first token) and the second turn's prompt is served from the
fake's prompt cache: the translated prefix is the same bytes turn after turn.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.accesslog import ACCESS_LOGGER
from gateway.fakes import FakeBehavior
from gateway.fakes.agent import RESULT_PREFIX
from tests.support.access import access_lines
from tests.support.agent_clis import run_claude, run_codex
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
KEY = "sk-gateway-client"
AGENT = FakeBehavior(agent=True, agent_command="echo agent-round-trip", cache_prompts=8)
ANSWER = f"{RESULT_PREFIX} agent-round-trip"


def access_paths(caplog: pytest.LogCaptureFixture, count: int) -> list[tuple[object, object]]:
    lines = access_lines(caplog, count)
    return [(line["endpoint"], line["status"]) for line in lines]


def assert_measured(gateway: Gateway, caplog: pytest.LogCaptureFixture, upstream_api: str) -> None:
    """Two turns measured as native ones are: each a sample for deployment ``a`` with its first token and usage, the
    access log naming the upstream's API, and the second turn's prompt mostly read from the provider's cache."""
    samples = gateway.samples.samples
    assert [(s.deployment, s.outcome) for s in samples] == [("a", "ok"), ("a", "ok")]
    assert all(s.ttft_s is not None and s.usage_prompt_tokens and s.output_tokens for s in samples)
    second = samples[1]
    assert second.usage_cached_tokens is not None and second.usage_prompt_tokens is not None
    assert second.usage_cached_tokens / second.usage_prompt_tokens > 0.8
    lines = access_lines(caplog, 2)
    assert [line["upstream_api"] for line in lines] == [upstream_api, upstream_api]


def codex_gateway(
    fakes: Fakes, start_gateway: StartGateway, apis: list[str], model: str = "m"
) -> tuple[FakeServer, Gateway, bool]:
    """The fake agent provider "a" speaking ``apis``, behind a gateway that takes ``KEY``: (the fake, the gateway,
    whether Codex's Responses calls reach it by translation). A translated deployment omits the built-in tools it
    cannot run (Codex's web search), the one gateway-side line Codex needs there."""
    fake = fakes.start("a", AGENT)
    translated = apis != ["responses"]
    config = gateway_config(
        [fake],
        model=model,
        provider_options={"a": {"apis": apis}},
        deployments={"a": {"builtin_tools": "omit"}} if translated else None,
    )
    return fake, start_gateway(config, environ={"GATEWAY_API_KEYS": KEY}), translated


@pytest.mark.parametrize("apis", [["messages"], ["chat"]])
def test_claude_code_runs_a_tool_through_the_gateway(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture, apis: list[str]
) -> None:
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake = fakes.start("a", AGENT)
    gateway = start_gateway(
        gateway_config([fake], provider_options={"a": {"apis": apis}}), environ={"GATEWAY_API_KEYS": KEY}
    )
    run = run_claude(gateway.url, KEY, tmp_path)
    assert run.returncode == 0, run.stderr[-2000:] + run.stdout[-2000:]
    assert run.escapes == ()  # nothing but loopback was reached for
    result = json.loads(run.stdout)
    assert result["result"] == ANSWER and result["num_turns"] == 2 and not result["is_error"]
    # Both turns reached the gateway, and through it the fake: the second carried the command's output.
    assert access_paths(caplog, 2) == [("messages", 200), ("messages", 200)]
    sent = [r.body for r in fake.app.state.recorded if r.path.endswith(("/messages", "/chat/completions"))]
    assert len(sent) == 2 and "agent-round-trip" in json.dumps(sent[1])
    assert all(body is not None and body.get("stream") is True for body in sent)
    assert_measured(gateway, caplog, apis[0])


@pytest.mark.parametrize("apis", [["responses"], ["chat"], ["messages"]])
def test_codex_runs_a_tool_through_the_gateway(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture, apis: list[str]
) -> None:
    # Codex unchanged (its web search and sub-agent tools on). A chat-only or Messages-only deployment gets the
    # sub-agent namespace as flat functions, and, with the one gateway-side line (``builtin_tools = "omit"``), the
    # request without the web search it cannot run, which the access log names.
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake, gateway, translated = codex_gateway(fakes, start_gateway, apis)
    run, last = run_codex(gateway.base_url, KEY, tmp_path)
    assert run.returncode == 0, run.stderr[-2000:] + run.stdout[-2000:]
    assert run.escapes == ()  # nothing but loopback was reached for
    assert last.startswith(RESULT_PREFIX) and "agent-round-trip" in last
    assert access_paths(caplog, 2) == [("responses", 200), ("responses", 200)]
    answering = ("/responses", "/chat/completions", "/messages")
    sent = [r.body for r in fake.app.state.recorded if r.path.endswith(answering)]
    assert len(sent) == 2 and "agent-round-trip" in json.dumps(sent[1])
    assert all(body is not None and body.get("store") in (False, None) and body["stream"] is True for body in sent)
    assert_measured(gateway, caplog, apis[0])
    lines = access_lines(caplog, 2)
    assert [line["omitted_tools"] for line in lines] == ([["web_search"]] * 2 if translated else [None, None])
    if translated:
        names = [t.get("function", t)["name"] for t in sent[0]["tools"]]  # type: ignore[index]
        assert "multi_agent_v1__spawn_agent" in names and "web_search" not in json.dumps(sent[0]["tools"])  # type: ignore[index]
    if apis == ["messages"]:
        # Codex sets no output limit but asks to reason: the thinking budget comes on top of the answer's default
        # limit, never out of it (a budget of 4095 in 4096 tokens left the answer one token).
        thinking = sent[0]["thinking"]  # type: ignore[index]
        assert thinking["type"] == "enabled" and sent[0]["max_tokens"] - thinking["budget_tokens"] >= 4096  # type: ignore[index]


@pytest.mark.parametrize("apis", [["messages"], ["chat"]])
def test_claude_code_continues_a_conversation_whose_turns_each_call_a_tool(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, apis: list[str]
) -> None:
    """Two runs, the second with ``--continue``: each turn's tool call has its own id, so the resumed conversation
    pairs every result with its call and ends (the run's own timeout bounds it) instead of looping."""
    fake = fakes.start("a", AGENT)
    gateway = start_gateway(
        gateway_config([fake], provider_options={"a": {"apis": apis}}), environ={"GATEWAY_API_KEYS": KEY}
    )
    runs = [run_claude(gateway.url, KEY, tmp_path), run_claude(gateway.url, KEY, tmp_path, options=("--continue",))]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:] + run.stdout[-2000:]
        assert run.escapes == ()
        result = json.loads(run.stdout)
        assert result["result"] == ANSWER and not result["is_error"], result
    sent = [r.body for r in fake.app.state.recorded if r.path.endswith(("/messages", "/chat/completions"))]
    assert len(sent) == 4, [json.dumps(body)[:300] for body in sent]  # two requests per turn: the call, its result
    calls, results = _tool_ids(sent[-1])
    assert len(calls) == 2 and len(set(calls)) == 2, calls  # the first turn's call and the second's, told apart
    assert results == calls  # each result answers its own call


def _tool_ids(body: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """The ids of the tool calls in a request's conversation, and the ids its tool results answer, in order (the
    Messages or the chat shape)."""
    assert body is not None
    calls: list[str] = []
    results: list[str] = []
    for message in body["messages"]:
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if block.get("type") == "tool_use":
                calls.append(block["id"])
            elif block.get("type") == "tool_result":
                results.append(block["tool_use_id"])
        calls += [call["id"] for call in message.get("tool_calls") or ()]
        if message.get("role") == "tool":
            results.append(message["tool_call_id"])
    return calls, results


def test_claude_code_does_not_retry_a_wrong_key(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    gateway = start_gateway(
        gateway_config([fakes.start("a", AGENT)], provider_options={"a": {"apis": ["messages"]}}),
        environ={"GATEWAY_API_KEYS": KEY},
    )
    run = run_claude(gateway.url, "sk-wrong", tmp_path)
    assert run.returncode != 0
    assert access_paths(caplog, 1) == [("messages", 401)]


def test_codex_stops_at_once_on_a_model_it_cannot_get(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Codex re-sends five times on any status but 400 and 401; the gateway's 400 stops it (``api._model_error``).
    # With translation on, a Messages-only deployment would serve Codex: turned off here, none can.
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    config = gateway_config(
        [fakes.start("a", AGENT)],
        provider_options={"a": {"apis": ["messages"]}},
        deployments={"a": {"translate": False}},
    )
    gateway = start_gateway(config, environ={"GATEWAY_API_KEYS": KEY})
    run, _ = run_codex(gateway.base_url, KEY, tmp_path)
    assert run.returncode != 0 and "Responses API" in run.stdout + run.stderr
    assert access_paths(caplog, 1) == [("responses", 400)]


@pytest.mark.parametrize("model", ["m", "gpt-5.5"])
def test_codex_stops_at_once_on_a_tool_a_chat_model_cannot_run(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture, model: str
) -> None:
    # Codex as installed offers OpenAI's server-side web search, which no chat provider runs: by default refused
    # naming the tool, never dropped, and Codex does not re-send the 400. (For gpt-5.5 it offers its own tool search
    # too, which it runs itself: carried, so the 400 still names the web search.)
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake = fakes.start("a", AGENT)
    gateway = start_gateway(
        gateway_config([fake], model=model, provider_options={"a": {"apis": ["chat"]}}),
        environ={"GATEWAY_API_KEYS": KEY},
    )
    run, _ = run_codex(gateway.base_url, KEY, tmp_path, model=model)
    assert run.returncode != 0 and "untranslatable_field" in run.stderr
    assert "cannot be translated to the Chat Completions API: the built-in tool 'web_search'" in run.stderr
    assert access_paths(caplog, 1) == [("responses", 400)] and not fake.app.state.recorded


@pytest.mark.parametrize("apis", [["messages", "responses"], ["chat"]])
def test_both_clis_read_through_keep_alives(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture, apis: list[str]
) -> None:
    # A model silent for longer than first_byte_keepalive_s: the CLIs get keep-alives (Messages' ping before
    # message_start, an SSE comment before response.created), and then the answer, on every turn; natively, and
    # from a chat-only deployment through translation.
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    slow = FakeBehavior(agent=True, agent_command="echo agent-round-trip", ttft_s=0.8)
    fake = fakes.start("a", slow)
    policy = {"first_byte_keepalive_s": 0.2}
    options = {"a": {"apis": apis}}
    deployments = {"a": {"builtin_tools": "omit"}} if apis == ["chat"] else None
    gateway = start_gateway(
        gateway_config([fake], provider_options=options, policy=policy, deployments=deployments),
        environ={"GATEWAY_API_KEYS": KEY},
    )
    (tmp_path / "claude").mkdir()
    (tmp_path / "codex").mkdir()
    claude = run_claude(gateway.url, KEY, tmp_path / "claude")
    codex, last = run_codex(gateway.base_url, KEY, tmp_path / "codex")
    assert claude.returncode == 0 and json.loads(claude.stdout)["result"] == ANSWER, claude.stdout[-2000:]
    assert codex.returncode == 0 and "agent-round-trip" in last, codex.stdout[-2000:] + codex.stderr[-2000:]
    assert claude.escapes == codex.escapes == ()
    lines = access_lines(caplog, 4)
    assert len(lines) == 4 and all(line["status"] == 200 and line["keepalives"] >= 2 for line in lines)
    assert {line["upstream_api"] for line in lines} == ({"chat"} if apis == ["chat"] else {"messages", "responses"})


def test_codex_in_responses_lite_mode_reaches_a_native_deployment_and_is_refused_by_translation(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # For the models its catalog marks ``use_responses_lite`` (``gpt-6.2-sol``), Codex sends its tools as the first
    # input item, ``{"type": "additional_tools", "role": "developer", "tools": [...]}``, with no ``content``: a
    # native deployment gets it as sent; a chat one cannot carry it, and the 400 names it (Codex does not re-send).
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    native, chat = fakes.start("a", AGENT), fakes.start("b", AGENT)
    model = "gpt-6.2-sol"
    gateways = [
        start_gateway(gateway_config([fake], model=model, provider_options={fake.name: {"apis": [api]}}))
        for fake, api in ((native, "responses"), (chat, "chat"))
    ]
    (tmp_path / "native").mkdir()
    (tmp_path / "chat").mkdir()
    served, _ = run_codex(gateways[0].base_url, KEY, tmp_path / "native", model=model)
    refused, _ = run_codex(gateways[1].base_url, KEY, tmp_path / "chat", model=model)
    assert served.returncode == 0, served.stderr[-2000:]
    first = native.app.state.recorded[0].body
    assert first is not None and first["input"][0]["type"] == "additional_tools"
    assert refused.returncode != 0 and not chat.app.state.recorded
    assert "'input[0].type' cannot be translated to the Chat Completions API" in refused.stderr
    assert [line["status"] for line in access_lines(caplog, 2)] == [200, 400]


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def test_a_picture_a_tool_returned_reaches_a_chat_model(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Claude Code's Read of a picture and Codex's view_image answer with an image in the tool's result, which a chat
    # tool message cannot hold: it goes in a user message right after the tool messages (refused before, a 400 on
    # that turn and on every later one, since the history keeps the image).
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake = fakes.start("a", FakeBehavior(agent=True, agent_read="pic.png"))
    config = gateway_config(
        [fake], provider_options={"a": {"apis": ["chat"]}}, deployments={"a": {"builtin_tools": "omit"}}
    )
    gateway = start_gateway(config, environ={"GATEWAY_API_KEYS": KEY})
    for cli in ("claude", "codex"):
        (tmp_path / cli).mkdir()
        (tmp_path / cli / "pic.png").write_bytes(PNG)
    claude = run_claude(gateway.url, KEY, tmp_path / "claude")
    codex, last = run_codex(gateway.base_url, KEY, tmp_path / "codex")
    assert claude.returncode == 0 and json.loads(claude.stdout)["result"].startswith(RESULT_PREFIX), claude.stdout
    assert codex.returncode == 0 and last.startswith(RESULT_PREFIX), codex.stderr[-2000:]
    assert [line["status"] for line in access_lines(caplog, 4)] == [200] * 4
    sent = [r.body for r in fake.app.state.recorded if r.path.endswith("/chat/completions")]
    for body in (sent[1], sent[3]):  # each CLI's second turn
        assert body is not None
        tool, user = body["messages"][-2:]
        assert tool["role"] == "tool" and "next user message" in tool["content"]
        assert user["role"] == "user" and user["content"][-1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_claude_code_keeps_its_signed_thinking_through_a_tool_call(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A model that thinks before its tool call, checked as Anthropic checks (``check_thinking``): the next turn must
    # give the signed thinking block back. Claude Code drops the thinking of an answer naming another model than the
    # one it asked for, so the answer names "m", not the deployment's "a-upstream" (a 400 on the second turn before).
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake = fakes.start("a", FakeBehavior(agent=True, reasoning_tokens=5, check_thinking=True))
    gateway = start_gateway(
        gateway_config([fake], provider_options={"a": {"apis": ["messages"]}}), environ={"GATEWAY_API_KEYS": KEY}
    )
    run = run_claude(gateway.url, KEY, tmp_path)
    assert run.returncode == 0 and json.loads(run.stdout)["result"] == ANSWER, run.stdout[-2000:]
    assert access_paths(caplog, 2) == [("messages", 200), ("messages", 200)]
    second = fake.app.state.recorded[1].body
    assert second is not None and second["model"] == "a-upstream"
    assistant = [m for m in second["messages"] if m["role"] == "assistant"][-1]
    assert [block["type"] for block in assistant["content"]] == ["thinking", "tool_use"]


def test_codex_gives_anthropic_its_signed_thinking_back(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Codex through a Messages deployment whose model thinks before its tool call, checked as Anthropic checks: Codex
    # sends its reasoning items back without their text, but with the encrypted_content it asked for, where the
    # gateway sealed the signed thinking block (a 400 on the second turn before: the block was lost).
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake = fakes.start("a", FakeBehavior(agent=True, reasoning_tokens=5, check_thinking=True))
    config = gateway_config(
        [fake], provider_options={"a": {"apis": ["messages"]}}, deployments={"a": {"builtin_tools": "omit"}}
    )
    gateway = start_gateway(config, environ={"GATEWAY_API_KEYS": KEY})
    run, last = run_codex(gateway.base_url, KEY, tmp_path)
    assert run.returncode == 0 and last.startswith(RESULT_PREFIX), run.stderr[-2000:]
    assert access_paths(caplog, 2) == [("responses", 200), ("responses", 200)]
    second = fake.app.state.recorded[1].body
    assert second is not None
    thinking = [m for m in second["messages"] if m["role"] == "assistant"][-1]["content"][0]
    assert thinking["type"] == "thinking" and thinking["signature"] == "fake-signature" and thinking["thinking"]


PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from the patch\n*** End Patch\n"


@pytest.mark.parametrize("apis", [["chat"], ["messages"]])
def test_codex_applies_a_patch_through_a_chat_or_messages_model(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture, apis: list[str]
) -> None:
    # For its GPT-5 models (``gpt-5.5`` in its catalog) Codex offers apply_patch as a custom tool (free text following
    # a grammar). It goes to chat and Messages as a function of one string, and the call comes back to Codex as the
    # custom_tool_call it offered (before, refused, or left out with ``builtin_tools = "omit"``: no file written).
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake = fakes.start("a", FakeBehavior(agent=True, agent_patch=PATCH))
    config = gateway_config(
        [fake], model="gpt-5.5", provider_options={"a": {"apis": apis}}, deployments={"a": {"builtin_tools": "omit"}}
    )
    gateway = start_gateway(config, environ={"GATEWAY_API_KEYS": KEY})
    run, last = run_codex(gateway.base_url, KEY, tmp_path, model="gpt-5.5", options=("-s", "workspace-write"))
    assert run.returncode == 0 and last.startswith(RESULT_PREFIX), run.stderr[-2000:]
    assert (tmp_path / "hello.txt").read_text() == "hello from the patch\n"
    lines = access_lines(caplog, 2)
    assert [line["status"] for line in lines] == [200, 200]
    assert all("custom" not in line["omitted_tools"] for line in lines)


@pytest.mark.parametrize("apis", [["chat"], ["messages"]])
def test_claude_code_knows_a_prompt_too_long_for_the_window(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture, apis: list[str]
) -> None:
    # A provider's own "maximum context length" 400 reaches Claude Code in Anthropic's words ("prompt is too long:
    # N tokens > M maximum"), the only ones it reads as such (it compacts the conversation, or says why it cannot);
    # before, a bare "API Error: 400" with the provider's message.
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake = fakes.start("a", FakeBehavior(agent=True, context_window=5000))
    gateway = start_gateway(
        gateway_config([fake], provider_options={"a": {"apis": apis}}), environ={"GATEWAY_API_KEYS": KEY}
    )
    run = run_claude(gateway.url, KEY, tmp_path)
    result = json.loads(run.stdout)
    assert result["is_error"] and result["api_error_status"] == 400
    assert result["result"].startswith("Prompt is too long") and "(limit 5000)" in result["result"], result["result"]
    assert access_paths(caplog, 1) == [("messages", 400)]


def test_codex_knows_its_context_window_is_full_behind_a_messages_model(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Anthropic's "prompt is too long" carries no code; Codex reads a full context window by the OpenAI code only, so
    # the translated 400 carries ``context_length_exceeded`` (before, Codex printed the raw error body).
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake = fakes.start("a", FakeBehavior(agent=True, context_window=3000))
    config = gateway_config(
        [fake], provider_options={"a": {"apis": ["messages"]}}, deployments={"a": {"builtin_tools": "omit"}}
    )
    gateway = start_gateway(config, environ={"GATEWAY_API_KEYS": KEY})
    run, _ = run_codex(gateway.base_url, KEY, tmp_path)
    assert run.returncode != 0 and "Codex ran out of room in the model's context window" in run.stderr, run.stderr
    assert access_paths(caplog, 1) == [("responses", 400)]


FAST_MODE = ("--settings", json.dumps({"fastMode": True}))
"""Claude Code's fast mode, on for an Opus model that has it; ``CLAUDE_CODE_SKIP_FAST_MODE_ORG_CHECK`` spares it
asking Anthropic whether the organisation may use it."""


@pytest.mark.parametrize("apis", [["messages"], ["chat"], ["responses"]])
def test_claude_code_in_fast_mode_is_served_by_any_api(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture, apis: list[str]
) -> None:
    # In fast mode Claude Code sends ``speed: "fast"`` on every call: a native deployment gets it as sent; to a chat
    # or Responses deployment it asks nothing about the answer (the same model, served faster), so it is read as
    # absent there, as a default is (before, refused: fast mode failed on every translated deployment).
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake = fakes.start("a", AGENT)
    model = "claude-opus-4-8"
    gateway = start_gateway(
        gateway_config([fake], model=model, provider_options={"a": {"apis": apis}}),
        environ={"GATEWAY_API_KEYS": KEY},
    )
    run = run_claude(gateway.url, KEY, tmp_path, model, FAST_MODE, CLAUDE_CODE_SKIP_FAST_MODE_ORG_CHECK="1")
    assert run.returncode == 0, run.stderr[-2000:] + run.stdout[-2000:]
    assert run.escapes == ()
    result = json.loads(run.stdout)
    assert result["result"] == ANSWER and result["num_turns"] == 2 and result["fast_mode_state"] == "on"
    assert access_paths(caplog, 2) == [("messages", 200), ("messages", 200)]
    sent = [r.body for r in fake.app.state.recorded]
    assert len(sent) == 2 and all(body is not None for body in sent)
    if apis == ["messages"]:
        assert [body["speed"] for body in sent] == ["fast", "fast"]  # type: ignore[index]
    else:
        assert not {"speed", "service_tier"} & {key for body in sent for key in body}  # type: ignore[union-attr]


@pytest.mark.parametrize("apis", [["responses"], ["chat"], ["messages"]])
def test_codex_in_fast_mode_is_served_by_any_api(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture, apis: list[str]
) -> None:
    # Codex's fast mode (``service_tier = "fast"``) asks OpenAI's priority processing, ``service_tier: "priority"``,
    # on every call: a native deployment gets it as sent, and so does a chat one (the same tiers: before, dropped);
    # a Messages deployment, whose tiers have no priority to ask, serves the same model at its own tier.
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    model = "gpt-5.5"  # Codex asks a tier only of a model its catalog offers one for
    fake, gateway, translated = codex_gateway(fakes, start_gateway, apis, model)
    run, last = run_codex(gateway.base_url, KEY, tmp_path, model=model, options=("-c", 'service_tier="fast"'))
    assert run.returncode == 0, run.stderr[-2000:] + run.stdout[-2000:]
    assert run.escapes == () and last.startswith(RESULT_PREFIX) and "agent-round-trip" in last
    assert access_paths(caplog, 2) == [("responses", 200), ("responses", 200)]
    sent = [r.body for r in fake.app.state.recorded]
    assert len(sent) == 2 and all(body is not None for body in sent)
    tiers = [body.get("service_tier") for body in sent]  # type: ignore[union-attr]
    assert tiers == ([None, None] if apis == ["messages"] else ["priority", "priority"])


@pytest.mark.parametrize("apis", [["chat"], ["messages"]])
def test_codex_searches_its_deferred_tools_through_a_chat_or_messages_model(
    fakes: Fakes, start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture, apis: list[str]
) -> None:
    # For its GPT-5 models Codex defers some tools (its sub-agent tools among them) behind a ``tool_search`` it runs
    # itself. It goes to chat and Messages as a function; the model's call comes back as the ``tool_search_call``
    # Codex offered, Codex searches, and the tools it loaded reach the model in the next turn, flat, with the
    # search's result naming them (before, refused, or left out with ``builtin_tools = "omit"``).
    caplog.set_level(logging.INFO, ACCESS_LOGGER)
    fake = fakes.start("a", FakeBehavior(agent=True, agent_search="spawn a sub-agent"))
    config = gateway_config(
        [fake], model="gpt-5.5", provider_options={"a": {"apis": apis}}, deployments={"a": {"builtin_tools": "omit"}}
    )
    gateway = start_gateway(config, environ={"GATEWAY_API_KEYS": KEY})
    run, last = run_codex(gateway.base_url, KEY, tmp_path, model="gpt-5.5")
    assert run.returncode == 0 and run.escapes == (), run.stderr[-2000:]
    assert last.startswith(f"{RESULT_PREFIX} Tools loaded, now callable: ") and "multi_agent_v1__spawn_agent" in last
    lines = access_lines(caplog, 2)
    assert [(line["status"], line["omitted_tools"]) for line in lines] == [(200, ["web_search"])] * 2
    first, second = [r.body for r in fake.app.state.recorded]
    assert first is not None and second is not None
    names = [[t.get("function", t)["name"] for t in body["tools"]] for body in (first, second)]
    assert "tool_search" in names[0] and "multi_agent_v1__spawn_agent" not in names[0]
    assert names[1][: len(names[0])] == names[0] and "multi_agent_v1__spawn_agent" in names[1][len(names[0]) :]
