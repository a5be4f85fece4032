"""The answer-length predictor (``gateway.routing.lengths``): per shape, key and session, capped by max_tokens."""

from __future__ import annotations

import math
import random

import pytest

from gateway.admission.spending.ledger import LIKELY_ANSWERS, LIKELY_QUANTILE, likely_output_tokens
from gateway.routing import RouteRequest
from gateway.routing.lengths import SESSIONS_KEPT, Lengths, shape_of
from gateway.routing.plan import SessionRoute
from gateway.routing.priors import MEMORY
from gateway.routing.serving import build_router
from gateway.samples import RequestKind
from gateway.stats import InMemoryStatsStore
from tests.support.config import routing_config
from tests.support.samples import sample

AGENT = 32000


def test_nothing_heard_the_callers_prior_capped_by_max_tokens() -> None:
    lengths = Lengths()
    ceiling = lengths.forecast(shape_of("m", AGENT), AGENT, float(AGENT), "request")
    assert (ceiling.mean, ceiling.source, ceiling.answers) == (AGENT, "request", 0)
    small = lengths.forecast(shape_of("m", 100), 100, 256.0)
    assert small.mean == 100 and small.at(0.99) == 100  # never above the ceiling, nor its tail
    assert lengths.forecast(shape_of("m", None), None, 256.0).mean == 256


def test_an_agents_ceiling_gives_way_to_its_answers_at_once() -> None:
    lengths = Lengths()
    key = shape_of("m", AGENT, kind="tools")
    lengths.heard(key, 120, AGENT)
    forecast = lengths.forecast(key, AGENT, float(AGENT), "request")
    # The shape's own answer replaces the ceiling outright (a prior from elsewhere would take hundreds to wash out).
    assert forecast.mean == 120 and forecast.source == "learned" and forecast.answers == 1
    for tokens in (16, 60, 150, 60, 16, 400, 60):
        lengths.heard(key, tokens, AGENT)
    assert lengths.forecast(key, AGENT, float(AGENT)).mean == pytest.approx(
        (120 + 16 + 60 + 150 + 60 + 16 + 400 + 60) / 8
    )


def test_the_mean_lies_above_the_median_and_the_tail_above_both() -> None:
    rng = random.Random(3)
    lengths = Lengths()
    key = shape_of("m", AGENT)
    answers = [round(math.exp(rng.gauss(math.log(80), 1.0))) for _ in range(MEMORY)]
    for tokens in answers:
        lengths.heard(key, tokens, AGENT)
    forecast = lengths.forecast(key, AGENT, float(AGENT))
    median = forecast.at(0.5)
    assert median < forecast.mean < forecast.at(0.95) < forecast.at(0.99) < AGENT
    # Of the answers heard, about one in a hundred passes the 99th percentile, and about half the median.
    assert sum(a > forecast.at(0.99) for a in answers) <= 2
    assert 0.3 < sum(a > median for a in answers) / len(answers) < 0.7


def test_shapes_are_learned_apart() -> None:
    lengths = Lengths()
    for _ in range(10):
        lengths.heard(shape_of("m", AGENT, kind="tools"), 40, AGENT)
        lengths.heard(shape_of("m", AGENT, kind="plain"), 900, AGENT)
        lengths.heard(shape_of("m", AGENT, kind="tools", stream=False), 5, AGENT)
        lengths.heard(shape_of("m", AGENT, kind="tools", api="messages"), 300, AGENT)
    assert lengths.forecast(shape_of("m", AGENT, kind="tools"), AGENT, 1.0).mean == pytest.approx(40)
    assert lengths.forecast(shape_of("m", AGENT, kind="plain"), AGENT, 1.0).mean == pytest.approx(900)
    assert lengths.forecast(shape_of("m", AGENT, kind="tools", stream=False), AGENT, 1.0).mean == pytest.approx(5)
    assert lengths.forecast(shape_of("m", AGENT, kind="tools", api="messages"), AGENT, 1.0).mean == pytest.approx(300)
    assert lengths.forecast(shape_of("other", AGENT), AGENT, 256.0).mean == 256  # another model knows nothing


def test_a_shape_never_answered_borrows_the_share_of_max_tokens_used() -> None:
    lengths = Lengths()
    for _ in range(5):
        lengths.heard(shape_of("m", 800), 800, 800)  # a benchmark asking for exactly its length
    forecast = lengths.forecast(shape_of("m", 100), 100, 256.0)
    assert forecast.mean == 100 and forecast.source == "share" and forecast.answers == 0


def test_a_key_and_a_session_pull_the_prediction_toward_their_own_answers() -> None:
    lengths = Lengths()
    for _ in range(20):
        lengths.heard(shape_of("m", AGENT, client="k1"), 100, AGENT)
    for _ in range(20):
        lengths.heard(shape_of("m", AGENT, client="k2"), 1000, AGENT)
    model = lengths.forecast(shape_of("m", AGENT), AGENT, 1.0).mean
    k1 = lengths.forecast(shape_of("m", AGENT, client="k1"), AGENT, 1.0).mean
    k2 = lengths.forecast(shape_of("m", AGENT, client="k2"), AGENT, 1.0).mean
    new = lengths.forecast(shape_of("m", AGENT, client="k3"), AGENT, 1.0).mean
    assert model == pytest.approx(550) and new == model  # a key never heard gets the model's
    assert 100 < k1 < 200 and 900 < k2 < 1000
    # A session of k1 that writes long answers: after a few, its own dominate.
    session = shape_of("m", AGENT, client="k1", session="s1")
    for _ in range(6):
        lengths.heard(session, 3000, AGENT)
    assert lengths.forecast(session, AGENT, 1.0).mean > 1500
    assert lengths.forecast(session, AGENT, 1.0).answers == 46  # each answer once, in whichever cells know it
    assert lengths.forecast(shape_of("m", AGENT, client="k1", session="s2"), AGENT, 1.0).mean < 1500


def test_memory_forgets_old_answers_and_sessions_are_bounded() -> None:
    lengths = Lengths()
    key = shape_of("m", AGENT)
    for _ in range(MEMORY):
        lengths.heard(key, 1000, AGENT)
    for _ in range(5 * MEMORY):
        lengths.heard(key, 50, AGENT)
    assert (
        lengths.forecast(key, AGENT, 1.0).mean < 60
    )  # the traffic changed: the old answers faded (their weight: 0.98^250)
    for i in range(SESSIONS_KEPT + 10):
        lengths.heard(shape_of("m", AGENT, session=f"s{i}"), 10, AGENT)
    assert len(lengths.sessions) == SESSIONS_KEPT
    assert shape_of("m", AGENT, session="s0") not in lengths.sessions  # the oldest went first


def test_a_budgets_likely_output_needs_enough_answers_and_stays_under_the_ceiling() -> None:
    lengths = Lengths()
    key = shape_of("m", AGENT)
    assert likely_output_tokens(None, AGENT) is None
    for _ in range(LIKELY_ANSWERS - 1):
        lengths.heard(key, 32, AGENT)
    assert likely_output_tokens(lengths.forecast(key, AGENT, float(AGENT)), AGENT) is None  # too few
    lengths.heard(key, 32, AGENT)
    forecast = lengths.forecast(key, AGENT, float(AGENT))
    likely = likely_output_tokens(forecast, AGENT)
    assert likely is not None and 32 < likely < 400  # the tail of few equal answers is still wide, not the ceiling
    assert likely == math.ceil(forecast.at(LIKELY_QUANTILE))
    assert likely_output_tokens(forecast, 50) == 50


def test_a_reloaded_router_keeps_what_the_answers_taught() -> None:
    config = routing_config([("a", 1, 1), ("b", 1, 1)])
    router = build_router(config, InMemoryStatsStore(config.stats))
    request = RouteRequest(config.models[0], "chat", True, 10, AGENT, client="k")
    assert router.forecast(request).source == "request"  # nothing heard: the ceiling
    (candidate, *_) = router.plan(request).candidates
    assert router.attempt_started(candidate)
    router.attempt_finished(candidate, sample(candidate.name, tokens=64))
    reloaded = build_router(config, InMemoryStatsStore(config.stats), previous=router)
    forecast = reloaded.forecast(request)
    assert forecast.source == "learned" and forecast.mean == 64


def test_the_router_learns_each_key_and_session_and_kind_apart() -> None:
    """What the router plans for is the request's whole shape: an agent's key writing short answers, another writing
    long ones, and one of its sessions writing longer still are told apart; so are tool calls from plain answers."""
    config = routing_config([("a", 1, 1), ("b", 1, 1)])
    router = build_router(config, InMemoryStatsStore(config.stats))
    model = config.models[0]

    def request(client: str, session: str | None = None, kind: RequestKind = "plain") -> RouteRequest:
        route = SessionRoute(session, "header", "off") if session is not None else None
        return RouteRequest(model, "chat", True, 10, AGENT, session=route, kind=kind, client=client)

    def answer(of: RouteRequest, tokens: int) -> None:
        (candidate, *_) = router.plan(of).candidates
        assert router.attempt_started(candidate)
        router.attempt_finished(candidate, sample(candidate.name, tokens=tokens))

    for _ in range(6):
        answer(request("short"), 40)
        answer(request("long"), 2000)
        answer(request("long", "s1"), 8000)
        answer(request("short", kind="tools"), 300)
    short, long = router.forecast(request("short")), router.forecast(request("long"))
    session, tools = router.forecast(request("long", "s1")), router.forecast(request("short", kind="tools"))
    assert short.source == long.source == session.source == tools.source == "learned"
    model_mean = router.forecast(request("new")).mean  # a key never heard: the model's plain answers alone
    assert model_mean == router.forecast(request("new", "s9")).mean
    assert short.mean < model_mean < long.mean < session.mean, (short.mean, model_mean, long.mean, session.mean)
    assert tools.mean == pytest.approx(300)  # tool calls are their own shape: no plain answer mixed in
