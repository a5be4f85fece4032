"""The fault matrix: each provider fault in front of a streaming client, one line each.

Run: ``python -m benchmarks.faults`` (``--skip-outage`` leaves out the 61-second outage; ``--output``
writes the Markdown table). Each fault is staged on loopback with the project's fake provider (or a
raw socket, for faults below HTTP) in front of a gateway in this process, with default timeouts
(``first_token_timeout_s`` 30 s, ``idle_timeout_s`` 60 s) so that learned deadlines show. A line
says the client-visible outcome (``pass``: the complete answer, or the provider's own error where
none was possible, as the best client would end; ``fail`` otherwise), the attempts the gateway made
(``x-gateway-attempts``: sent with the headers, so a mid-stream recovery's continuation is not in
it) and the client's wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.procs import machine
from gateway.fakes import FakeBehavior
from tests.raw_upstream import RawUpstream
from tests.support.config import gateway_config
from tests.support.fakes import Fakes, FakeServer
from tests.support.gateway import Gateway, GatewayServers

MESSAGES = [{"role": "user", "content": "Say something."}]
WORDS = 16
POLICY: dict[str, Any] = {"extends": "fixed-order", "min_samples": 3, "explore_share": 0.0}
CAN = {"continue_prefill": True}


@dataclass
class Line:
    fault: str
    outcome: str
    attempts: str
    wall_s: float
    note: str = ""


class Stage:
    """One fault's servers, stopped afterwards."""

    def __init__(self) -> None:
        self.fakes = Fakes()
        self.gateways = GatewayServers()
        self.raws: list[RawUpstream] = []

    def fake(self, name: str, **behavior: Any) -> FakeServer:
        return self.fakes.start(name, FakeBehavior(output_tokens=WORDS, **behavior))

    def raw(self, mode: Any) -> RawUpstream:
        upstream = RawUpstream(mode).start()
        self.raws.append(upstream)
        return upstream

    def gateway(self, upstreams: list[Any], policy: dict[str, Any] | None = None, **options: Any) -> Gateway:
        return self.gateways.start(gateway_config(upstreams, policy={**POLICY, **(policy or {})}, **options))

    def stop(self) -> None:
        self.gateways.stop()
        self.fakes.stop()
        for raw in self.raws:
            raw.stop()


def ask(gateway: Gateway, **extra: Any) -> tuple[httpx.Response, float]:
    body = {"model": "m", "messages": MESSAGES, "stream": True, **extra}
    started = time.monotonic()
    response = httpx.post(gateway.base_url + "/chat/completions", json=body, timeout=120)
    return response, time.monotonic() - started


def whole(response: httpx.Response) -> bool:
    """The complete answer: every word, one [DONE], no error event."""
    if response.status_code != 200 or not response.content.endswith(b"data: [DONE]\n\n"):
        return False
    text = ""
    for block in response.content.split(b"\n\n"):
        if block.startswith(b"data: {"):
            try:
                event = json.loads(block[6:])
            except ValueError:
                continue  # a malformed event, skipped as an SDK skips it
            if "error" in event:
                return False
            text += "".join(c.get("delta", {}).get("content") or "" for c in event.get("choices", []))
    return len(text.split()) == WORDS


def line(fault: str, response: httpx.Response, wall_s: float, passed: bool, note: str = "") -> Line:
    return Line(fault, "pass" if passed else "fail", response.headers.get("x-gateway-attempts", "?"), wall_s, note)


def warm(gateway: Gateway, n: int = 4, **extra: Any) -> None:
    for _ in range(n):
        ask(gateway, **extra)


def fail_next(fake: FakeServer, **behavior: Any) -> None:
    fake.app.behavior = dataclasses.replace(fake.app.behavior, fail_first=fake.app.state.requests + 1, **behavior)


# -- the faults ----------------------------------------------------------------------------------


def lone_500(stage: Stage) -> Line:
    a = stage.fake("a", status=500, fail_first=1)
    response, wall = ask(stage.gateway([a]))
    return line("500 once, one deployment", response, wall, whole(response))


def lone_429(stage: Stage) -> Line:
    a = stage.fake("a", status=429, retry_after="2", fail_first=1)
    response, wall = ask(stage.gateway([a]))
    return line("429 once (Retry-After: 2), one deployment", response, wall, whole(response) and wall >= 1.8)


def pair_500(stage: Stage) -> Line:
    a, b = stage.fake("a"), stage.fake("b", ttft_s=1.0)
    gateway = stage.gateway([a, b])
    warm(gateway)
    warm(gateway, 1, provider={"only": ["b"]})
    fail_next(a, status=500)
    response, wall = ask(gateway)
    provider = response.headers.get("x-gateway-provider")
    note = f"answered by {provider} (a short back-off beats b's 1 s)"
    return line("500 once, fast primary + slow backup", response, wall, whole(response) and provider == "a", note)


def pair_429(stage: Stage) -> Line:
    a, b = stage.fake("a"), stage.fake("b")
    gateway = stage.gateway([a, b])
    warm(gateway)
    warm(gateway, 1, provider={"only": ["b"]})
    fail_next(a, status=429, retry_after="2")
    response, wall = ask(gateway)
    note = f"answered by {response.headers.get('x-gateway-provider')}"
    return line("429 once (Retry-After: 2), two deployments", response, wall, whole(response) and wall < 1.5, note)


def persistent_503(stage: Stage) -> Line:
    gateway = stage.gateway([stage.fake("a", status=503), stage.fake("b")])
    response, wall = ask(gateway)
    return line("503 persistent", response, wall, whole(response))


def refused(stage: Stage) -> Line:
    response, wall = ask(stage.gateway(["down", stage.fake("b")]))
    return line("connection refused", response, wall, whole(response))


def reset(stage: Stage) -> Line:
    response, wall = ask(stage.gateway([stage.raw("reset"), stage.fake("b")]))
    return line("connection reset before headers", response, wall, whole(response))


def silent(stage: Stage) -> Line:
    a, b = stage.fake("a", ttft_s=0.05), stage.fake("b")
    gateway = stage.gateway([a, b])
    warm(gateway)
    response, wall = ask(gateway, fake={"servers": {"a": {"hang_s": 60}}})
    return line("silent provider (measured history)", response, wall, whole(response) and wall < 7)


def late_first_token(stage: Stage) -> Line:
    a, b = stage.fake("a", ttft_s=0.05), stage.fake("b")
    gateway = stage.gateway([a, b])
    warm(gateway)
    response, wall = ask(gateway, fake={"servers": {"a": {"ttft_s": 20}}})
    return line("first token after 20 s (measured history)", response, wall, whole(response) and wall < 7)


def _broken(stage: Stage, fault: str, **behavior: Any) -> Line:
    a, b = stage.fake("a", tokens_per_s=200), stage.fake("b")
    gateway = stage.gateway([a, b], deployments={"b": CAN})
    warm(gateway)
    response, wall = ask(gateway, fake={"servers": {"a": behavior}})
    return line(fault, response, wall, whole(response) and wall < 7)


def stall(stage: Stage) -> Line:
    return _broken(stage, "stall mid-stream (measured history)", stall_after=5)


def cut(stage: Stage) -> Line:
    return _broken(stage, "stream cut mid-answer", drop_after=5)


def error_event_mid(stage: Stage) -> Line:
    return _broken(stage, "error event mid-stream", error_event_after=5)


def error_event_first(stage: Stage) -> Line:
    gateway = stage.gateway([stage.fake("a", error_event_after=0), stage.fake("b")])
    response, wall = ask(gateway)
    return line("error event before the first token", response, wall, whole(response))


def malformed(stage: Stage) -> Line:
    a = stage.fake("a", malformed_after=3)
    gateway = stage.gateway([a, stage.fake("b")])
    response, wall = ask(gateway)
    waited = time.monotonic() + 5
    while not gateway.samples.samples and time.monotonic() < waited:
        time.sleep(0.01)  # the sample is recorded just after the stream's end
    outcomes = [s.outcome for s in gateway.samples.samples]
    return line("one malformed event", response, wall, whole(response) and outcomes == ["ok"], f"sample {outcomes}")


def missing_done(stage: Stage) -> Line:
    gateway = stage.gateway([stage.fake("a", no_done=True), stage.fake("b")])
    response, wall = ask(gateway)
    return line("missing [DONE]", response, wall, whole(response) and wall < 2)


def context_length(stage: Stage) -> Line:
    small, large = stage.fake("a", context_window=8192), stage.fake("b", context_window=131072)
    gateway = stage.gateway([small, large])
    long = [{"role": "user", "content": "word " * 12_000}]
    response, wall = ask(gateway, messages=long)
    return line("context_length_exceeded, 8k then 128k", response, wall, whole(response))


def content_filter(stage: Stage) -> Line:
    gateway = stage.gateway([stage.fake("a", status=400, error_code="content_filter"), stage.fake("b")])
    response, wall = ask(gateway)
    relayed = response.status_code == 400 and response.json()["error"]["code"] == "content_filter"
    return line("content filter 400", response, wall, relayed, "relayed as is")


def refused_continuation(stage: Stage) -> Line:
    a = stage.fake("a", drop_after=5)
    b, c = stage.fake("b", reject_prefill=True), stage.fake("c")
    gateway = stage.gateway([a, b, c], deployments={"b": CAN, "c": CAN})
    ask(gateway)
    response, wall = ask(gateway)
    note = f"b asked {b.app.state.requests} time(s) over 2 breaks"
    return line("continuation refused (400)", response, wall, whole(response) and b.app.state.requests == 1, note)


def usage_sum(stage: Stage) -> Line:
    gateway = stage.gateway([stage.fake("a", drop_after=5), stage.fake("b")], deployments={"b": CAN})
    response, wall = ask(gateway, stream_options={"include_usage": True})
    usages = [json.loads(b[6:]).get("usage") for b in response.content.split(b"\n\n") if b.startswith(b"data: {")]
    usage = next((u for u in usages if u), None)
    passed = whole(response) and usage is not None and usage["completion_tokens"] == WORDS
    return line(
        "usage after a recovery", response, wall, passed, f"completion_tokens {usage and usage['completion_tokens']}"
    )


def outage(stage: Stage) -> Line:
    """61 s down, a request every 4 s: how soon after its recovery the primary serves again."""
    primary, backup = stage.fake("a"), stage.fake("b")
    gateway = stage.gateway([primary, backup])
    warm(gateway, 2)
    primary.app.behavior = dataclasses.replace(primary.app.behavior, status=503)
    ends = time.monotonic() + 61
    while time.monotonic() < ends:
        ask(gateway)
        time.sleep(4)
    primary.app.behavior = dataclasses.replace(primary.app.behavior, status=200)
    recovered = time.monotonic()
    while True:
        response, _ = ask(gateway)
        back = time.monotonic() - recovered
        if response.headers.get("x-gateway-provider") == "a" or back > 120:
            break
        time.sleep(4)
    return line("61 s outage, a request every 4 s", response, back, back <= 20, "wall = recovery to primary")


FAULTS: list[Callable[[Stage], Line]] = [
    lone_500,
    lone_429,
    pair_500,
    pair_429,
    persistent_503,
    refused,
    reset,
    silent,
    late_first_token,
    stall,
    cut,
    error_event_mid,
    error_event_first,
    malformed,
    missing_done,
    context_length,
    content_filter,
    refused_continuation,
    usage_sum,
    outage,
]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--skip-outage", action="store_true")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    lines = []
    for fault in FAULTS:
        if args.skip_outage and fault is outage:
            continue
        stage = Stage()
        try:
            result = fault(stage)
        finally:
            stage.stop()
        lines.append(result)
        shown = f"{result.fault:<44} {result.outcome:<5} attempts={result.attempts:<2} wall={result.wall_s:6.2f}s"
        print(f"{shown}  {result.note}")
        sys.stdout.flush()
    passed = sum(r.outcome == "pass" for r in lines)
    print(f"{passed}/{len(lines)} pass")
    if args.output:
        table = [
            "| fault | outcome | attempts | wall (s) | note |",
            "|---|---|---|---|---|",
            *(f"| {r.fault} | {r.outcome} | {r.attempts} | {r.wall_s:.2f} | {r.note} |" for r in lines),
        ]
        args.output.write_text(
            "# Fault matrix\n\n"
            f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}.\n\n"
            "Command: `python -m benchmarks.faults --output benchmarks/results/faults.md`. Each fault staged on\n"
            "loopback (fake providers, a raw socket for the reset) in front of a gateway in the same process,\n"
            "default timeouts (first token 30 s, idle 60 s), `fixed-order` ranking, a streaming client.\n\n"
            + "\n".join(table)
            + f"\n\n**{passed}/{len(lines)} pass.**\n"
        )


if __name__ == "__main__":
    main()
