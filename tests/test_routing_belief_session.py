"""The belief router's request terms beside the beliefs: a session's cached prompt, the request kind's valid rate,
the policy's soft constraints and ``explore_share = 0`` (``gateway.routing.belief_candidates``, ``cost``,
``affinity``)."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any, cast

from gateway.config import GatewayConfig
from gateway.routing import Candidate, RouteRequest
from gateway.routing.affinity import cached_on, decided, staying
from gateway.routing.belief import Belief
from gateway.routing.belief_attempts import answer_pair, tell
from gateway.routing.belief_candidates import choose_for
from gateway.routing.belief_live import LiveBeliefRouter
from gateway.routing.choose import Option
from gateway.routing.cost import Shape, Weights, cost, scores, valid_rate
from gateway.routing.overrides import NO_PREFERENCES
from gateway.routing.plan import RoutePlan, SessionRoute
from gateway.routing.priors import Prior
from gateway.samples import Validity
from gateway.stats import InMemoryStatsStore, StatsSnapshot
from gateway.stats.answers import Answer, answer_of
from tests.support.clock import FakeClock
from tests.support.config import gateway_config
from tests.support.samples import make_sample

POLICY: dict[str, Any] = {"extends": "balanced"}
PROMPT = 6000


def _config(**policy: Any) -> GatewayConfig:
    deployments = {name: {"price_cached_in": 0.1} for name in ("a", "b")}
    return gateway_config(["a", "b"], policy={**POLICY, **policy}, deployments=deployments)


def _taught(config: GatewayConfig, ttft: dict[str, float]) -> tuple[LiveBeliefRouter, FakeClock]:
    """A router that heard 20 answers from each deployment at about these first tokens (100 tokens/s)."""
    clock = FakeClock()
    router = LiveBeliefRouter(config, InMemoryStatsStore(config.stats), rng=random.Random(1), clock=clock)
    model = config.models[0]
    rng = random.Random(2)
    for _ in range(20):
        for deployment in model.deployments:
            clock.advance(0.5)
            candidate = Candidate(deployment, config.provider(deployment.provider), model=model.name)
            assert router.attempt_started(candidate)
            value = ttft[deployment.name] * math.exp(rng.gauss(0, 0.1))
            router.attempt_finished(candidate, make_sample(deployment=deployment.name, ttft_s=value))
    return router, clock


def _request(config: GatewayConfig, session: SessionRoute | None = None, *, stream: bool = True) -> RouteRequest:
    return RouteRequest(config.models[0], "chat", stream, PROMPT, 100, session=session)


def _bound(deployment: str, affinity: str = "auto") -> SessionRoute:
    return SessionRoute("s1", "header", cast(Any, affinity), "bound", deployment, PROMPT - 200)


def test_a_request_cached_on_a_deployment_costs_its_cached_price_and_only_its_uncached_prefill() -> None:
    config = _config()
    a = config.models[0].deployments[0]
    weights = Weights.of(config.policy_for(config.models[0]))
    draw = Belief().expected(0.0)
    cold = cost(draw, a, Shape(PROMPT, 100), weights, prefill_s=1e-4)
    warm = cost(draw, a, Shape(PROMPT, 100, {"a": 5800}), weights, prefill_s=1e-4)
    assert math.isclose(cold.ttft_s - warm.ttft_s, 5800 * 1e-4)
    assert math.isclose(cold.money_usd - warm.money_usd, 5800 * (1.0 - 0.1) / 1e6)


def test_the_cache_terms_are_the_sessions_where_it_is_bound_else_the_observed_hit_ratio() -> None:
    config = _config()
    deployments = config.models[0].deployments
    empty = StatsSnapshot.from_samples([])
    assert cached_on("m", _bound("b"), deployments, NO_PREFERENCES, PROMPT, empty) == {"a": 0, "b": PROMPT - 200}
    assert cached_on("m", None, deployments, NO_PREFERENCES, PROMPT, empty) == {"a": 0, "b": 0}
    assert staying(_bound("b"), deployments, NO_PREFERENCES) == "b"
    assert staying(_bound("gone"), deployments, NO_PREFERENCES) is None
    assert staying(dataclasses.replace(_bound("b"), affinity="off"), deployments, NO_PREFERENCES) is None


def test_a_bound_session_stays_on_its_cache_with_no_look_even_where_another_is_a_little_quicker() -> None:
    config = _config()
    router, _ = _taught(config, {"a": 0.30, "b": 0.36})
    for _ in range(20):  # the look's budget would be full many times over: a turn of a session is never explored
        plan = router.plan(_request(config, _bound("b")))
        assert [c.name for c in plan.candidates] == ["b", "a"]
        assert (plan.candidates[0].reason, plan.race, plan.shadow) == ("affinity", (), None)
        assert plan.affinity is not None and plan.affinity.header == "stay"


def test_a_bound_session_moves_when_its_deployment_is_much_slower_and_says_why() -> None:
    config = _config()
    router, _ = _taught(config, {"a": 0.3, "b": 3.0})
    plan = router.plan(_request(config, _bound("b")))
    assert plan.candidates[0].name == "a" and plan.candidates[0].reason != "affinity"
    assert plan.affinity is not None and plan.affinity.header == "move; reason=slower; from=b"
    strict = _config(affinity="strict")
    router, _ = _taught(strict, {"a": 0.3, "b": 3.0})
    plan = router.plan(_request(strict, _bound("b", "strict")))
    assert (plan.candidates[0].name, plan.candidates[0].reason) == ("b", "affinity")


def test_a_session_whose_deployment_is_gone_is_told_so() -> None:
    session = _bound("b")
    assert decided(session, "a", "excluded", NO_PREFERENCES).header == "move; reason=excluded; from=b"
    assert decided(session, "a", "unavailable", NO_PREFERENCES).header == "move; reason=unavailable; from=b"
    assert decided(session, "b", "available", NO_PREFERENCES).header == "stay"


def _options(config: GatewayConfig, router: LiveBeliefRouter) -> list[Option]:
    return [Option(d, router.belief("m", d.name), Prior()) for d in config.models[0].deployments]


def test_an_answer_invalid_for_the_requests_kind_weighs_as_a_failure_by_the_quality_weight() -> None:
    config = _config()
    policy = config.policy_for(config.models[0])
    a, b = config.models[0].deployments
    draw = Belief().expected(0.0)
    shape = Shape(100, 50, valid={"a": 0.5})
    weights = Weights.of(policy)
    first, second = scores([cost(draw, a, shape, weights), cost(draw, b, shape, weights)], weights)
    assert math.isclose(first - second, policy.failure_weight * policy.quality_weight)
    ignored = dataclasses.replace(weights, quality=0.0)
    assert len(set(scores([cost(draw, a, shape, ignored), cost(draw, b, shape, ignored)], ignored))) == 1
    assert valid_rate(7, 10) == 12 / 15


def test_a_deployment_breaking_a_constraint_is_neither_drawn_nor_explored_but_stays_a_fallback() -> None:
    config = _config()
    router, clock = _taught(config, {"a": 0.1, "b": 0.3})
    options = _options(config, router)
    weights = Weights.of(config.policy_for(config.models[0]))
    rng = random.Random(3)
    for may_race in (False, True):
        for _ in range(50):
            choice = choose_for(
                options,
                [("max_latency",), ()],
                Shape(20, 50),
                weights,
                clock(),
                rng,
                may_race=may_race,
                budget=None,
                model="m",
            )
            assert choice.order == (1, 0) and 0 not in choice.race and choice.shadow is None
            assert len(choice.costs) == 2


def test_tool_requests_leave_a_deployment_that_breaks_tool_calls_and_plain_ones_stay() -> None:
    store_config = _config()
    router, _ = _taught(store_config, {"a": 0.1, "b": 0.3})
    valid: list[Validity] = ["valid"] * 7
    broken: list[Validity] = valid + ["tool_args_not_json"] * 3
    honest: list[Validity] = ["valid"] * 10
    samples = [
        dataclasses.replace(make_sample(deployment=d), kind=kind, validity=v)
        for d in ("a", "b")
        for kind in ("tools", "plain")
        for v in (broken if (d, kind) == ("a", "tools") else honest)
    ]
    router.stats = cast(Any, _Snapshots(StatsSnapshot.from_samples(samples)))
    tools = dataclasses.replace(_request(store_config, stream=False), kind="tools")
    plain = dataclasses.replace(_request(store_config, stream=False), kind="plain")
    assert all(_first(router.plan(tools)) == "b" for _ in range(20))
    assert sum(_first(router.plan(plain)) == "a" for _ in range(20)) >= 18


def test_explore_share_zero_leaves_no_look_and_no_draw() -> None:
    config = _config(explore_share=0.0)
    router, _ = _taught(config, {"a": 0.30, "b": 0.33})
    for stream in (True, False):
        for _ in range(30):
            plan = router.plan(_request(config, stream=stream))
            assert _first(plan) == "a" and plan.race == () and plan.shadow is None


def _first(plan: RoutePlan) -> str:
    return plan.candidates[0].name


class _Snapshots:
    def __init__(self, snapshot: StatsSnapshot) -> None:
        self._snapshot = snapshot

    def snapshot(self) -> StatsSnapshot:
        return self._snapshot


def test_a_models_first_answer_far_from_one_second_is_believed_not_read_as_wild() -> None:
    """Nothing measured anywhere: a first token of 5 ms and 2,000 tokens/s (far from 1 s and 50 tokens/s) is where the
    level is, and says little of how far answers scatter (held a factor e wide, that prior believed 80 ms and 490
    tokens/s, and an answers' spread of 1.4 and 1.0)."""
    belief = Belief()
    belief.observe(1.0, Prior(), 0.005, 1 / 2000.0)
    expected = belief.expected(1.0)
    assert 0.5 < expected.ttft_s / 0.005 < 1.5 and 0.5 < expected.s_per_token * 2000.0 < 1.5
    assert max(belief.spread()) < 0.6


def test_an_answer_that_came_whole_says_how_quick_its_deployment_was() -> None:
    draw = Belief().expected(0.0)  # 1 s to a first token, 50 tokens/s
    expected = (draw.ttft_s, draw.s_per_token)
    streamed = dataclasses.replace(make_sample(ttft_s=0.2, tokens_per_s=100.0, output_tokens=50), attempt_s=0.7)
    assert answer_pair(answer_of(streamed), expected) == (0.2, 0.01)
    # Its 50 tokens in one piece, 10 ms after the first token: 5 ms per 25 tokens, not the prior's 20 ms a token.
    piece = dataclasses.replace(streamed, tokens_per_s=None, attempt_s=0.21)
    ttft, spt = answer_pair(answer_of(piece), expected)
    assert ttft == 0.2 and spt is not None and math.isclose(spt, 0.01 / 49)
    # Not streamed: 0.49 s for the whole, split as the belief expects (1 s + 49 × 20 ms), both scaled to it.
    whole = dataclasses.replace(piece, stream=False, ttft_s=None, attempt_s=0.49)
    ttft, spt = answer_pair(answer_of(whole), expected)
    assert ttft is not None and spt is not None
    assert math.isclose(ttft + 49 * spt, 0.49) and math.isclose(ttft / spt, draw.ttft_s / draw.s_per_token)


def test_a_whole_answer_told_is_split_as_the_belief_expected_it_and_a_streamed_one_as_measured() -> None:
    """``tell`` finds what the belief expects only for an answer with no first token: a whole one (0.49 s, 50 tokens)
    is heard split as ``answer_pair`` splits it by the belief's expectation before it heard; a streamed one as it was
    measured, the same as told its pair directly."""
    prior = Prior((math.log(0.3), math.log(0.02)))
    for answer in (
        Answer("r", 1, 0.0, "ok", stream=False, output_tokens=50, attempt_s=0.49),
        Answer("r", 2, 0.0, "ok", ttft_s=0.2, tokens_per_s=100.0, output_tokens=50, attempt_s=0.7),
    ):
        told, direct = Belief(), Belief()
        for b in (told, direct):
            b.observe(1.0, prior, 0.4, 0.03)
        draw = direct.expected(5.0, prior)
        ttft, spt = answer_pair(answer, (draw.ttft_s, draw.s_per_token))
        assert ttft is not None and spt is not None
        direct.observe(5.0, prior, ttft, spt, uncached_tokens=None)
        direct.failed(5.0, False)
        assert tell(told, prior, answer, 5.0, 0.49)
        assert told.expected(6.0) == direct.expected(6.0) and told.runs == direct.runs
