"""An agent's ``max_tokens: 32000`` end to end: real gateways on loopback, the fake provider.

Why: an agent asks for 32,000 tokens on every call and is answered in a few dozen. Planned for the ceiling,
every deployment is judged by its speed alone and a provider with a five times slower first token wins; a
budget under the ceiling's price refuses every call, and a tokens-per-minute limit of three ceilings throttles
the fourth call in flight. All three should follow what the answers actually were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from gateway.admission.ratelimit import WINDOW_S, InMemoryRateLimiter, RedisRateLimiter, ratelimit_key
from gateway.admission.spending.ledger import LIKELY_ANSWERS
from gateway.fakes import FakeBehavior
from gateway.routing import RouteRequest
from tests.redis_server import RedisServer
from tests.support.clients import MESSAGES, sdk
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.support.wait import wait_until
from tests.test_budgets import ENVIRON, KEY, config_for, costs, settled, spend

AGENT_MAX_TOKENS = 32000
ANSWER_TOKENS = 20


def _stream(gateway: Gateway, client: httpx.Client) -> tuple[str, str]:
    """One streamed agent-shaped request: its provider and route reason."""
    body = {"model": "m", "messages": MESSAGES, "stream": True, "max_tokens": AGENT_MAX_TOKENS}
    with client.stream("POST", gateway.base_url + "/chat/completions", json=body) as response:
        assert response.status_code == 200
        response.read()
        return response.headers["x-gateway-provider"], response.headers["x-gateway-route"]


def test_short_answers_to_a_32000_token_ceiling_go_to_the_quick_starter(
    fakes: Fakes, start_gateway: Callable[..., Gateway]
) -> None:
    # "starter": a first token twelve times later, twice the tokens/s. For 32,000 tokens it is the faster by
    # 40 s; for the 20 tokens actually written, "quick" is (0.07 s against 0.275 s: apart by more than a busy
    # host's late timers).
    quick = fakes.start("quick", FakeBehavior(ttft_s=0.02, tokens_per_s=400, output_tokens=ANSWER_TOKENS))
    starter = fakes.start("starter", FakeBehavior(ttft_s=0.25, tokens_per_s=800, output_tokens=ANSWER_TOKENS))
    gateway = start_gateway(gateway_config([quick, starter], policy={"extends": "balanced"}))
    served = []
    with httpx.Client(timeout=10) as client:
        for _ in range(30):
            served.append(_stream(gateway, client))
    router = gateway.runtime.router
    model = gateway.runtime.config.models[0]
    request = RouteRequest(model, "chat", True, 10, AGENT_MAX_TOKENS, kind="plain", client="anonymous")
    forecast = router.forecast(request)
    assert forecast.source == "learned" and forecast.mean == pytest.approx(ANSWER_TOKENS, rel=0.2)
    # Ranked for the predicted answer (not the ceiling), the quick starter leads.
    predicted = router.rank(model, endpoint="chat", max_tokens=AGENT_MAX_TOKENS)
    assert predicted.rows[0].deployment.name == "quick"
    best = [provider for provider, route in served[-10:] if route == "best-score"]
    assert len(best) >= 5, served  # exploration takes a share, not most
    assert set(best) == {"quick"}, served


@pytest.fixture(params=["memory", "redis"])
def stats(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str] | None]:
    """The gateway's ``[stats]`` table per backend: the default (in memory), or a Redis server of its own."""
    if request.param == "memory":
        yield None
        return
    redis = RedisServer(tmp_path / "redis").start()
    try:
        yield {"backend": "redis", "redis_url": redis.url}
    finally:
        redis.stop()


def test_a_budget_under_the_ceilings_price_serves_a_key_whose_answers_fit(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path, stats: dict[str, str] | None
) -> None:
    # $10 per 1M output tokens: the ceiling's worst case is $0.32 of output, the answers' real cost well under
    # $0.001 each. A $0.05 budget holds dozens of such answers, and not one worst case.
    _serve_a_budgeted_agent(fakes, start_gateway, tmp_path, stats)


def _serve_a_budgeted_agent(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path, stats: dict[str, str] | None
) -> None:
    fake = fakes.start("p", FakeBehavior(output_tokens=ANSWER_TOKENS))
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[keys]]\nname = "alice"\nkey = "{KEY}"\nbudget_usd = 0.05\nbudget_window = "day"\n\n'
        '[[keys]]\nname = "bob"\nkey = "sk-gw-unbudgeted-0123456789"\n'
    )
    gateway = start_gateway(config_for([fake], str(keys), price_in=1.0, price_out=10.0, stats=stats), ENVIRON)
    with sdk(gateway.base_url, KEY) as alice, sdk(gateway.base_url, "sk-gw-unbudgeted-0123456789") as bob:
        # Nothing is known of the answers yet: only the worst case can be held, and it does not fit.
        with pytest.raises(openai.APIStatusError) as refused:
            alice.chat.completions.create(model="m", messages=MESSAGES, max_tokens=AGENT_MAX_TOKENS)
        assert refused.value.status_code == 402
        assert fake.app.state.requests == 0
        for _ in range(LIKELY_ANSWERS):  # another key's answers teach the model's lengths for this shape
            bob.chat.completions.create(model="m", messages=MESSAGES, max_tokens=AGENT_MAX_TOKENS)
        settled(gateway)
        before = len(gateway.samples.samples)
        for _ in range(12):
            answer = alice.chat.completions.create(model="m", messages=MESSAGES, max_tokens=AGENT_MAX_TOKENS)
            assert answer.choices[0].message.content
            settled(gateway)
    alices = gateway.samples.samples[before:]
    assert len(alices) == 12 and all(s.outcome == "ok" for s in alices)
    (budget,) = [b for b in spend(gateway)["budgets"] if b["name"] == "alice"]
    # The spend afterwards is what the answers cost, to the nano-dollar, and nothing is left held.
    assert budget["spent_usd"] == pytest.approx(costs(alices), abs=1e-8)
    assert budget["reserved_usd"] == 0
    assert 0 < budget["spent_usd"] < 0.05 < AGENT_MAX_TOKENS * 10.0 / 1e6  # under one request's worst case


AGENT_CALLS = 12
SMALL_KEY = "sk-gw-small-0123456789"
AGENT_TPM = 100_000
"""Three ceilings and a bit: the fourth agent call in flight does not fit at 32,000 tokens, all twelve do at
their real size."""


def test_a_tokens_per_minute_limit_of_three_ceilings_serves_twelve_calls_in_flight(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path, stats: dict[str, str] | None
) -> None:
    _serve_an_agent_under_a_tpm_limit(fakes, start_gateway, tmp_path, stats)


def _serve_an_agent_under_a_tpm_limit(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path, stats: dict[str, str] | None
) -> None:
    assert AGENT_TPM < AGENT_MAX_TOKENS * AGENT_CALLS
    fake = fakes.start("p", FakeBehavior(output_tokens=ANSWER_TOKENS))
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[keys]]\nname = "alice"\nkey = "{KEY}"\ntokens_per_minute = {AGENT_TPM}\n\n'
        '[[keys]]\nname = "bob"\nkey = "sk-gw-unlimited-0123456789"\n\n'
        f'[[keys]]\nname = "carol"\nkey = "{SMALL_KEY}"\ntokens_per_minute = {AGENT_MAX_TOKENS // 8}\n'
    )
    gateway = start_gateway(config_for([fake], str(keys), stats=stats), ENVIRON)
    (alice_id,) = [key.key_id for key in gateway.runtime.access.ring.keys if key.name == "alice"]
    # One minute for the whole test (mid-minute): the limiter's count is then one number to compare.
    limiter = gateway.runtime.access.state.limiter
    local = limiter.fallback if isinstance(limiter, RedisRateLimiter) else limiter
    assert isinstance(local, InMemoryRateLimiter)
    minute = 1_000
    local.wall_clock = lambda: (minute + 0.5) * WINDOW_S
    if isinstance(limiter, RedisRateLimiter):
        limiter.wall_clock = local.wall_clock
    with (
        sdk(gateway.base_url, KEY) as alice,
        sdk(gateway.base_url, "sk-gw-unlimited-0123456789") as bob,
        sdk(gateway.base_url, SMALL_KEY) as carol,
    ):
        # A limit under one ceiling: nothing is known of the answers yet, so the call can never fit.
        with pytest.raises(openai.RateLimitError) as refused:
            carol.chat.completions.create(model="m", messages=MESSAGES, max_tokens=AGENT_MAX_TOKENS)
        assert refused.value.code == "tokens_exceed_limit" and fake.app.state.requests == 0
        for _ in range(LIKELY_ANSWERS):  # another key's answers teach the model's lengths for this shape
            bob.chat.completions.create(model="m", messages=MESSAGES, max_tokens=AGENT_MAX_TOKENS)
        settled(gateway)
        # ... and now it fits at its likely size.
        assert carol.chat.completions.create(model="m", messages=MESSAGES, max_tokens=AGENT_MAX_TOKENS).choices
        settled(gateway)
        # All in flight at once (the fake holds each first token 1 s), as an agent's parallel calls are.
        held = {"fake": {"ttft_s": 1.0}}

        def call(_: int) -> openai.types.chat.ChatCompletion:
            return alice.chat.completions.create(
                model="m", messages=MESSAGES, max_tokens=AGENT_MAX_TOKENS, extra_body=held
            )

        with ThreadPoolExecutor(AGENT_CALLS) as pool:
            answers = list(pool.map(call, range(AGENT_CALLS)))
        settled(gateway)
    assert fake.app.state.max_in_flight == AGENT_CALLS, "the calls were not all in flight at once"
    real = 0
    for answer in answers:
        assert answer.choices[0].message.content and answer.usage is not None
        assert answer.usage.completion_tokens == ANSWER_TOKENS
        real += answer.usage.prompt_tokens + answer.usage.completion_tokens
    assert real < AGENT_TPM
    # Afterwards the limiter counts what the answers really used, to the token.
    if isinstance(limiter, RedisRateLimiter):
        name = ratelimit_key(limiter.prefix, alice_id, minute)

        def shared() -> list[int]:
            gateway.server.call(limiter.sync())
            values = gateway.server.call(limiter.client.hmget(name, ["r", "t"]))
            return [int(v or 0) for v in values]

        wait_until(
            lambda: shared() == [AGENT_CALLS, real], what=f"Redis counting {AGENT_CALLS} requests, {real} tokens"
        )
    counters = local._keys[alice_id]
    assert (counters.current_requests, counters.current_tokens) == (AGENT_CALLS, real)
