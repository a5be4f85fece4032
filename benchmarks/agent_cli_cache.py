"""The real agent CLIs' prompt caching, native and through translation to a chat-only deployment.

Run: ``python -m benchmarks.agent_cli_cache`` (seconds; needs the CLIs, see ``tests/support/agent_clis.py``;
prints a table for ``benchmarks/translate_notes.md``).

Claude Code (``claude -p``) and Codex (``codex exec``) each make one tool round trip (two requests) through
the gateway to the caching fake (``gateway.fakes.cache``), once with a deployment that speaks the CLI's API
and once with a chat-only one. Reported: the share of the second request's prompt the provider served from
its cache (the first request's prefix, kept when the translated prompt is the same bytes turn to turn), as
the samples recorded it from the usage, and each request's first-token time at the gateway.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from gateway.fakes import FakeBehavior
from tests.support.agent_clis import run_claude, run_codex
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import GatewayServers
from tests.support.servers import ServerThread, stop_all

KEY = "sk-gateway-client"
AGENT = FakeBehavior(agent=True, agent_command="echo agent-round-trip", cache_prompts=8)
RUNS = (("claude", "messages"), ("claude", "chat"), ("codex", "responses"), ("codex", "chat"))


def measure(cli: str, api: str, tmp: Path) -> str:
    servers: list[ServerThread] = []
    try:
        fake = Fakes(servers).start("a", AGENT)
        # Codex offers OpenAI's web search, which a chat provider cannot run: left out (``builtin_tools``).
        deployments = {"a": {"builtin_tools": "omit"}} if api == "chat" else None
        config = gateway_config([fake], provider_options={"a": {"apis": [api]}}, deployments=deployments)
        gateway = GatewayServers(servers).start(config, environ={"GATEWAY_API_KEYS": KEY})
        if cli == "claude":
            run = run_claude(gateway.url, KEY, tmp)
        else:
            run, _ = run_codex(gateway.base_url, KEY, tmp)
        samples = gateway.samples.samples
        if run.returncode != 0 or len(samples) != 2:
            return f"| {cli} | {api} | failed: exit {run.returncode}, {len(samples)} requests | | |"
        second = samples[1]
        cached, prompt = second.usage_cached_tokens or 0, second.usage_prompt_tokens or 1
        ttfts = " / ".join(f"{(s.ttft_s or 0.0) * 1000:.1f}" for s in samples)
        return f"| {cli} | {api} | {cached} / {prompt} | {cached / prompt:.1%} | {ttfts} |"
    finally:
        stop_all(servers)


def main() -> None:
    print("| CLI | deployment speaks | 2nd request cached / prompt tokens | cached share | first token (ms) |")
    print("|---|---|---:|---:|---:|")
    for cli, api in RUNS:
        with tempfile.TemporaryDirectory() as tmp:
            print(measure(cli, api, Path(tmp)))


if __name__ == "__main__":
    main()
