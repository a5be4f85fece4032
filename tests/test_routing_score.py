"""The request-aware score on fixed snapshots: exact predictions, terms and constraints."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gateway.policies import BUILTIN_POLICIES, PolicyConfig
from gateway.routing.estimates import DeploymentView, Observation
from gateway.routing.overrides import ProviderPreferences
from gateway.routing.score import CAUTION, Weights, expected_output, predict, score_all
from gateway.routing.scored import Prediction, RequestShape, Scored, Uncertainty
from gateway.stats import StatsSnapshot
from tests.support.config import routing_config
from tests.support.samples import sample, samples
from tests.support.streams import Stream

BALANCED = BUILTIN_POLICIES["balanced"]
MEDIAN = PolicyConfig(name="median", estimate="quantile")


def scored(
    snapshot: StatsSnapshot,
    deployments: list[tuple[str, float, float]],
    *,
    output: int = 100,
    prompt: int = 1000,
    policy: PolicyConfig = BALANCED,
    preferences: ProviderPreferences | None = None,
) -> dict[str, Scored]:
    config = routing_config(deployments)
    shape = RequestShape("chat", prompt, output, "request")
    rows = score_all("m", config.models[0].deployments, shape, snapshot, policy, preferences or ProviderPreferences())
    return {row.deployment.name: row for row in rows}


def best(rows: dict[str, Scored]) -> str:
    return min(rows.values(), key=lambda r: r.score).deployment.name


def test_short_answers_go_to_low_latency_long_ones_to_high_throughput() -> None:
    snapshot = StatsSnapshot.from_samples(
        samples("quick", 20, ttft=0.1, tps=50.0) + samples("wide", 20, ttft=1.0, tps=500.0)
    )
    deployments = [("quick", 1.0, 1.0), ("wide", 1.0, 1.0)]
    short = scored(snapshot, deployments, output=5)
    long = scored(snapshot, deployments, output=2000)
    assert best(short) == "quick"
    assert best(long) == "wide"
    # time = TTFT + tokens / tps, within the histogram's 1%.
    assert short["quick"].prediction.time_s == pytest.approx(0.1 + 5 / 50, rel=0.02)
    assert long["wide"].prediction.time_s == pytest.approx(1.0 + 2000 / 500, rel=0.02)


def test_time_term_is_log2_of_the_ratio_to_the_best() -> None:
    snapshot = StatsSnapshot.from_samples(
        samples("a", 10, ttft=1.0, tps=None, tokens=1) + samples("b", 10, ttft=2.0, tps=None, tokens=1)
    )
    rows = scored(snapshot, [("a", 1.0, 1.0), ("b", 1.0, 1.0)], output=1)
    assert rows["a"].parts.time == 0.0
    assert rows["b"].parts.time == pytest.approx(1.0, abs=0.03)  # twice as slow: one doubling
    assert rows["b"].parts.price == 0.0


def test_equal_speed_picks_the_cheaper() -> None:
    snapshot = StatsSnapshot.from_samples(samples("dear", 20) + samples("cheap", 20))
    rows = scored(snapshot, [("dear", 2.0, 4.0), ("cheap", 1.0, 2.0)])
    assert best(rows) == "cheap"
    # Twice the price costs price_weight (0.3) with the balanced policy.
    assert rows["dear"].parts.price == pytest.approx(0.3 * math.log2((2 + 0.02) / (1 + 0.02)), rel=1e-6)
    assert rows["dear"].prediction.cost_usd == pytest.approx((1000 * 2.0 + 100 * 4.0) / 1e6)


def test_a_much_faster_provider_is_worth_a_higher_price() -> None:
    snapshot = StatsSnapshot.from_samples(
        samples("fast", 20, ttft=0.2, tps=200.0) + samples("slow", 20, ttft=2.0, tps=20.0)
    )
    rows = scored(snapshot, [("fast", 2.0, 4.0), ("slow", 1.0, 2.0)])
    assert best(rows) == "fast"
    cheapest = scored(snapshot, [("fast", 2.0, 4.0), ("slow", 1.0, 2.0)], policy=BUILTIN_POLICIES["cheapest"])
    assert best(cheapest) == "slow"


def test_a_free_deployment_is_not_infinitely_better() -> None:
    snapshot = StatsSnapshot.from_samples(samples("free", 10) + samples("paid", 10))
    rows = scored(snapshot, [("free", 0.0, 0.0), ("paid", 1.0, 1.0)])
    # Costs are compared with a resolution of 1% of the dearest: at most log2(101) doublings.
    assert rows["paid"].parts.price == pytest.approx(0.3 * math.log2(101), rel=1e-6)


def test_throughput_quantile_is_a_floor() -> None:
    tail = samples("a", 5, tps=10.0)
    body = samples("a", 95, tps=100.0)
    snapshot = StatsSnapshot.from_samples(tail + body)
    median = scored(snapshot, [("a", 1.0, 1.0)], policy=MEDIAN)["a"].prediction
    p95 = PolicyConfig(name="p95", estimate="quantile", tps_quantile=0.95)
    floor = scored(snapshot, [("a", 1.0, 1.0)], policy=p95)["a"].prediction
    assert median.tokens_per_s == pytest.approx(100.0, rel=0.02)
    assert floor.tokens_per_s == pytest.approx(10.0, rel=0.02)  # the speed 95% of answers reached


def test_ttft_quantile_is_an_upper_tail() -> None:
    snapshot = StatsSnapshot.from_samples(samples("a", 90, ttft=0.1) + samples("a", 10, ttft=3.0))
    p50 = scored(snapshot, [("a", 1.0, 1.0)], policy=MEDIAN)["a"].prediction
    tail = PolicyConfig(name="tail", estimate="quantile", ttft_quantile=0.95)
    p95 = scored(snapshot, [("a", 1.0, 1.0)], policy=tail)["a"].prediction
    assert p50.ttft_s == pytest.approx(0.1, rel=0.02)
    assert p95.ttft_s == pytest.approx(3.0, rel=0.02)


def test_the_mean_estimate_makes_a_slow_tail_count() -> None:
    # "tail" is faster in the median, but one answer in five takes 10 s: its expected time is worse.
    tail = samples("tail", 80, ttft=0.5, tps=1e4, tokens=1) + samples("tail", 20, ttft=10.0, tps=1e4, tokens=1)
    steady = samples("steady", 100, ttft=1.0, tps=1e4, tokens=1)
    snapshot = StatsSnapshot.from_samples(tail + steady)
    deployments = [("tail", 1.0, 1.0), ("steady", 1.0, 1.0)]
    by_mean = scored(snapshot, deployments, output=1)
    assert by_mean["tail"].prediction.ttft_s == pytest.approx(0.8 * 0.5 + 0.2 * 10.0, rel=0.02)
    assert best(by_mean) == "steady"
    assert best(scored(snapshot, deployments, output=1, policy=MEDIAN)) == "tail"


def test_the_mean_estimate_uses_the_harmonic_mean_of_tokens_per_second() -> None:
    # Half the answers stream at 10 tokens/s, half at 1000: 100 tokens take 5.05 s on average, not 0.2 s.
    snapshot = StatsSnapshot.from_samples(samples("a", 50, ttft=0.0, tps=10.0) + samples("a", 50, ttft=0.0, tps=1000.0))
    prediction = scored(snapshot, [("a", 1.0, 1.0)], output=100)["a"].prediction
    assert prediction.tokens_per_s == pytest.approx(2 / (1 / 10 + 1 / 1000), rel=0.02)
    assert prediction.time_s == pytest.approx(100 * (0.5 / 10 + 0.5 / 1000), rel=0.02)


def _view(answers: list[tuple[float, float, float]], half_life_s: float = 10.0) -> DeploymentView:
    """A fast view fed ``(at, ttft_s, tokens_per_s)`` answers."""
    view = DeploymentView(half_life_s)
    for at, ttft, tps in answers:
        view.add(Observation(at, ttft, 1 / tps, None))
    return view


def test_the_fast_view_stands_in_for_the_window_and_says_how_sure_it_is() -> None:
    snapshot = StatsSnapshot.from_samples(samples("a", 50, ttft=0.2, tps=100.0))
    config = routing_config([("a", 1.0, 1.0)])
    shape = RequestShape("chat", 100, 100, "request")
    deployment = config.models[0].deployments[0]
    window = predict("m", deployment, shape, snapshot, BALANCED)
    assert window.time_s == pytest.approx(1.2, rel=0.02) and window.source == "window" and window.age_s is None
    # Three slow answers: a change (the CUSUM): the window's fifty fast ones stop counting at once.
    view = _view([(t, 0.2, 100.0) for t in range(10)] + [(10.0, 1.0, 20.0), (10.5, 1.0, 20.0), (11.0, 1.0, 20.0)])
    slow = predict("m", deployment, shape, snapshot, BALANCED, view, now=11.0)
    assert slow.source == "recent" and slow.drift
    assert slow.time_s == pytest.approx(1.0 + 100 / 20, rel=0.01) and slow.tokens_per_s == pytest.approx(20.0)
    assert slow.age_s == 0.0 and slow.answers == 13
    # Its uncertainty grows as its newest answer ages, however many answers came before.
    later = predict("m", deployment, shape, snapshot, BALANCED, view, now=31.0)
    assert later.time_s == slow.time_s  # the estimate holds: no sliding back to the window's old numbers
    assert later.uncertainty.time > 2 * slow.uncertainty.time
    assert later.sampling == slow.sampling and later.age_s == 20.0


def test_one_outlier_is_not_a_change_and_the_window_steadies_a_noisy_mean() -> None:
    snapshot = StatsSnapshot.from_samples(samples("a", 50, ttft=0.2, tps=100.0))
    config = routing_config([("a", 1.0, 1.0)])
    deployment = config.models[0].deployments[0]
    shape = RequestShape("chat", 100, 100, "request")
    view = _view([(t, 0.2, 100.0) for t in range(10)] + [(10.0, 3.0, 100.0), (10.5, 0.2, 100.0)])
    assert not view.changed_at
    p = predict("m", deployment, shape, snapshot, BALANCED, view, now=10.5)
    assert not p.drift
    # The outlier weighs less than in the recent answers alone: the window's fifty answers are blended in.
    alone = predict("m", deployment, shape, StatsSnapshot(), BALANCED, view, now=10.5)
    assert 1.2 < (p.time_s or 0) < (alone.time_s or 0)
    assert p.sampling.time < alone.sampling.time


def test_bonus_and_caution_follow_the_uncertainty() -> None:
    config = routing_config([("old", 1.0, 1.0), ("thin", 1.0, 1.0), ("busy", 1.0, 1.0)])
    views = {
        "old": _view([(t, 0.5, 100.0) for t in range(40)]),  # many answers, the newest 60 s old at 100
        "thin": _view([(99.0, 0.5, 100.0)]),  # one answer, just now
        "busy": _view([(60.0 + t, 0.5, 100.0) for t in range(40)]),  # many answers, just now
    }
    shape = RequestShape("chat", 100, 100, "request")
    rows = {
        r.deployment.name: r
        for r in score_all("m", config.models[0].deployments, shape, StatsSnapshot(), BALANCED, views=views, now=100.0)
    }
    assert [rows[n].score for n in ("old", "thin", "busy")] == pytest.approx([0.0, 0.0, 0.0], abs=1e-9)
    # Stale evidence: a large bonus (worth exploring), no caution (it is not demoted for its age).
    assert rows["old"].bonus > 2 * rows["busy"].bonus
    assert rows["old"].caution == pytest.approx(rows["busy"].caution, rel=0.05)
    # Thin evidence: ranked behind its score until more answers come.
    assert rows["thin"].caution > 2 * rows["busy"].caution
    assert rows["thin"].ranked_by == pytest.approx(rows["thin"].caution)
    assert CAUTION > 0 and rows["busy"].optimistic < 0


def test_an_unmeasured_deployment_borrows_the_model_average() -> None:
    snapshot = StatsSnapshot.from_samples(samples("a", 10, ttft=0.4) + samples("b", 10, ttft=0.8))
    rows = scored(snapshot, [("a", 1.0, 1.0), ("b", 1.0, 1.0), ("new", 1.0, 1.0)])
    new = rows["new"].prediction
    assert new.prior and not rows["a"].prediction.prior
    assert new.attempts == 0
    assert 0.4 <= (new.ttft_s or 0) <= 0.81


def test_first_tokens_of_its_own_make_a_short_answer_measured_even_with_its_stream_never_seen() -> None:
    # "b" answered in one chunk each (no tokens/s of its own): its stream is the model's average.
    snapshot = StatsSnapshot.from_samples(
        samples("a", 10, ttft=0.08, tps=1000.0) + samples("b", 2, ttft=0.02, tps=None)
    )
    config = routing_config([("a", 1.0, 1.0), ("b", 1.0, 1.0)])
    b = config.models[0].deployments[1]
    view = DeploymentView(10.0)
    view.add(Observation(1.0, 0.02, None, 0.021))
    short = predict("m", b, RequestShape("chat", 100, 8, "request"), snapshot, BALANCED, view, now=1.0)
    # Eight tokens: its own first token is most of the time, so it is measured (explorable, ranked on it).
    assert short.source == "recent" and not short.prior and short.stream_source == "model"
    assert short.uncertainty.time > short.uncertainty.ttft  # the borrowed stream still widens it
    # A long answer is mostly the borrowed stream: the model's average, to be measured.
    long = predict("m", b, RequestShape("chat", 100, 800, "request"), snapshot, BALANCED, view, now=1.0)
    assert long.source == "model" and long.prior


def test_a_first_long_answer_still_streaming_is_judged_by_its_stream_not_the_models_average() -> None:
    # "slow" has finished answers (0.25 s, 40 tokens/s); "bulk" has none yet: its first, an 800-token one,
    # has streamed 130 tokens in the 0.5 s since its first token came at 1.2 s.
    snapshot = StatsSnapshot.from_samples(samples("slow", 4, ttft=0.25, tps=40.0, tokens=8))
    config = routing_config([("slow", 1.0, 1.0), ("bulk", 1.0, 1.0)])
    slow, bulk = config.models[0].deployments
    shape = RequestShape("chat", 100, 800, "request")
    before = predict("m", bulk, shape, snapshot, BALANCED)
    assert before.prior and before.time_s == pytest.approx(0.25 + 800 / 40, rel=0.05)  # the model's average
    view = DeploymentView(10.0)
    stream = Stream()
    view.started(1, 0.0, None)
    stream.received_bytes = 100
    view.streaming(1, 1.2, stream)
    stream.received_bytes = 100 + 100 * 130
    early = predict("m", bulk, shape, snapshot, BALANCED, view, now=1.7, bytes_per_token={"chat": 100.0})
    assert early.source == "recent" and not early.prior and early.answers == 0
    assert early.time_s == pytest.approx(1.2 + 800 * 0.5 / 130, rel=0.01)  # 4.3 s, not 20
    assert early.uncertainty.time >= 0.4  # one partial answer


def test_nothing_measured_leaves_only_price() -> None:
    rows = scored(StatsSnapshot(), [("a", 3.0, 3.0), ("b", 1.0, 1.0)])
    assert rows["a"].prediction.time_s is None
    assert rows["a"].parts.time == 0.0
    assert best(rows) == "b"


def test_failures_are_penalised_with_a_prior() -> None:
    flaky = samples("flaky", 50) + samples("flaky", 50, outcome="upstream_error")
    neutral = samples("steady", 50) + samples("steady", 50, outcome="client_error")
    snapshot = StatsSnapshot.from_samples(flaky + neutral)
    rows = scored(snapshot, [("flaky", 1.0, 1.0), ("steady", 1.0, 1.0)])
    assert rows["flaky"].prediction.success_rate == pytest.approx(52 / 102)
    assert rows["flaky"].parts.failure == pytest.approx(BALANCED.failure_weight * math.log2(102 / 52))
    # Its time counts the fallbacks its failures cost (instant failures: the other's time).
    assert rows["flaky"].prediction.expected_s == pytest.approx(rows["steady"].prediction.time_s)
    # A client's own 400s say nothing of the provider.
    assert rows["steady"].prediction.success_rate == 1.0
    assert rows["steady"].parts.failure == 0.0
    assert best(rows) == "steady"


def test_soft_constraints_are_reported_once_judged() -> None:
    policy = PolicyConfig(name="strict", max_ttft_s=1.0, min_tokens_per_s=50.0, max_price_out=3.0, min_samples=5)
    snapshot = StatsSnapshot.from_samples(
        samples("slow", 10, ttft=2.0, tps=20.0) + samples("young", 2, ttft=2.0) + samples("ok", 10, ttft=0.5)
    )
    rows = scored(snapshot, [("slow", 1.0, 1.0), ("young", 1.0, 1.0), ("ok", 1.0, 5.0)], policy=policy)
    assert rows["slow"].violations == ("ttft 1.99s > 1s", "tokens/s 19.9 < 50")  # histogram values, within 1%
    assert rows["young"].violations == ()  # two samples prove nothing yet
    assert rows["ok"].violations == ("price_out 5 > 3",)  # prices are known without samples


def test_preferred_latency_and_throughput_percentiles() -> None:
    snapshot = StatsSnapshot.from_samples(samples("a", 80, ttft=0.5, tps=100.0) + samples("a", 20, ttft=5.0, tps=5.0))
    prefs = ProviderPreferences(max_ttft_s=((0.5, 1.0), (0.9, 2.0)), min_tokens_per_s=((0.5, 50.0), (0.9, 50.0)))
    violations = scored(snapshot, [("a", 1.0, 1.0)], preferences=prefs)["a"].violations
    assert violations == ("ttft p90 5s > preferred 2s", "tokens/s p90 5 < preferred 50")


def test_embeddings_are_judged_by_end_to_end_time() -> None:
    snapshot = StatsSnapshot.from_samples(
        [sample("a", ttft=None, tps=None, e2e=0.2) for _ in range(5)]
        + [sample("b", ttft=None, tps=None, e2e=0.1) for _ in range(5)]
    )
    config = routing_config([("a", 1.0, 0.0), ("b", 1.0, 0.0)])
    shape = RequestShape("embeddings", 100, 0, "request")
    rows = score_all("m", config.models[0].deployments, shape, snapshot, BALANCED)
    assert [r.prediction.time_s for r in rows] == [pytest.approx(0.2, rel=0.02), pytest.approx(0.1, rel=0.02)]


def test_expected_output_request_then_observed_then_default() -> None:
    observed = StatsSnapshot.from_samples(samples("a", 9, tokens=40) + samples("a", 2, tokens=400))
    assert expected_output("m", 7, observed, BALANCED) == (7, "request")
    tokens, source = expected_output("m", None, observed, BALANCED)
    assert (tokens, source) == (40, "observed")
    assert expected_output("m", None, StatsSnapshot(), BALANCED) == (256, "default")


def test_request_sort_replaces_the_policy_weights() -> None:
    assert Weights.of(BALANCED, "price").price == 1.0
    assert Weights.of(BALANCED, "throughput").throughput == 1.0
    assert Weights.of(BALANCED, "latency").ttft == 1.0
    assert Weights.of(BALANCED) == Weights(1.0, 0.0, 0.0, 0.3, BALANCED.failure_weight)
    snapshot = StatsSnapshot.from_samples(
        samples("quick", 10, ttft=0.1, tps=50.0) + samples("wide", 10, ttft=1.0, tps=500.0)
    )
    rows = scored(
        snapshot, [("quick", 1.0, 1.0), ("wide", 5.0, 5.0)], preferences=ProviderPreferences(sort="throughput")
    )
    assert best(rows) == "wide"
    rows = scored(snapshot, [("quick", 1.0, 1.0), ("wide", 5.0, 5.0)], preferences=ProviderPreferences(sort="latency"))
    assert best(rows) == "quick"


def test_with_expected_copies_every_field_as_replace_does() -> None:
    """The fallback cost's copy is its own (faster) constructor call: it must miss no field."""
    values: dict[str, object] = {}
    for index, field in enumerate(dataclasses.fields(Prediction)):
        values[field.name] = index + 0.5
    values["uncertainty"] = Uncertainty(0.1, 0.2, 0.3)
    values["sampling"] = Uncertainty(0.4, 0.5, 0.6)
    prediction = Prediction(**values)  # type: ignore[arg-type]
    for expected in (7.0, None):
        assert prediction.with_expected(expected) == dataclasses.replace(prediction, expected_s=expected)
