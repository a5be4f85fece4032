"""What a provider's client learned survives a reload that leaves the provider where it was, and only that.

Gemini signs its function calls and refuses a turn that sends one back unsigned; the gateway learns which
deployments sign from their answers (``UpstreamClient.thought_signers``) and sends those a placeholder for a call
made elsewhere. A reload builds new clients: one that changes nothing of the deployment must not forget that (the
next step of a tool loop would be refused), one that points it at another server must (it may be another vendor).
Real reloads of a config file (``POST /v1/gateway/reload``), the fake provider as each vendor, the OpenAI SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.app import AppOptions, create_app
from gateway.config import load_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import GatewayServers
from tests.test_thought_placeholder import CHAT_TOOLS, PLACED, PLAIN, VENDOR, sent_calls

ADMIN = {"authorization": "Bearer admin"}


def _config(gemini: FakeServer, vllm: FakeServer, gemini_model: str = "gemini-flash") -> str:
    return (
        f'[[providers]]\nname = "gemini"\nbase_url = "{gemini.base_url}"\n\n'
        f'[[providers]]\nname = "vllm"\nbase_url = "{vllm.base_url}"\n\n'
        '[[models]]\nname = "m"\npolicy = "fixed-order"\n'
        f'  [[models.deployments]]\n  provider = "gemini"\n  model = "{gemini_model}"\n'
        '  [[models.deployments]]\n  provider = "vllm"\n  model = "llama"\n'
    )


def _step(client: openai.OpenAI, messages: list[Any], to: str) -> list[Any]:
    """One step of a chat tool loop at ``to``: its call, and the tool's result."""
    answer = client.chat.completions.create(
        model="m", messages=messages, tools=CHAT_TOOLS, extra_body={"provider": {"only": [to]}}
    )
    message = answer.choices[0].message.model_dump(exclude_none=True)
    call = message["tool_calls"][0]
    return [*messages, message, {"role": "tool", "tool_call_id": call["id"], "content": "found"}]


LOOK: list[Any] = [{"role": "user", "content": "Look it up."}]


def test_a_reload_keeps_the_signers_of_deployments_it_left_alone(fakes: Fakes, tmp_path: Path) -> None:
    gemini, moved, vllm = fakes.start("gemini", VENDOR), fakes.start("moved", VENDOR), fakes.start("vllm", PLAIN)
    path = tmp_path / "gateway.toml"
    path.write_text(_config(gemini, vllm))
    app = create_app(load_config(path), AppOptions(environ={"GATEWAY_ADMIN_KEY": "admin"}, config_path=str(path)))
    gateway = GatewayServers(fakes.servers).serve(app)
    with (
        openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10) as client,
        httpx.Client(base_url=gateway.url, timeout=10) as http,
    ):

        def reload(text: str) -> None:
            path.write_text(text)
            assert http.post("/v1/gateway/reload", headers=ADMIN).status_code == 200

        _step(client, LOOK, "gemini")  # its signed call teaches the gateway that it signs
        reload(_config(gemini, vllm) + "\n# a comment: the same deployments\n")
        made_elsewhere = _step(client, LOOK, "vllm")  # an unsigned call
        _step(client, made_elsewhere, "gemini")  # would be refused (400) were the call sent unsigned
        assert [call.get("extra_content") for call in sent_calls(gemini)] == [PLACED]

        reload(_config(moved, vllm))  # the same name, another server: what it wants is not known
        with pytest.raises(openai.BadRequestError, match="thought_signature"):
            _step(client, made_elsewhere, "gemini")
        assert [call.get("extra_content") for call in sent_calls(moved)] == [None]
        _step(client, LOOK, "gemini")  # learned again from its own signed call
        _step(client, made_elsewhere, "gemini")
        assert [call.get("extra_content") for call in sent_calls(moved)] == [PLACED]

        reload(_config(moved, vllm, "gemini-pro"))  # another upstream model there: never seen signing
        with pytest.raises(openai.BadRequestError, match="thought_signature"):
            _step(client, made_elsewhere, "gemini")
