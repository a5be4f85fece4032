"""The router's fast view of one deployment, fed by hand on a clock the test sets: weights, changes, uncertainty."""

from __future__ import annotations

import math

import pytest

from gateway.routing.estimates import DRIFT_SIGMA, FOLLOW_UP_TRIES, DeploymentView, Observation, change_threshold
from tests.support.streams import Stream


def answer(at: float, ttft: float = 0.5, tps: float = 100.0) -> Observation:
    return Observation(at, ttft, 1 / tps, None)


def fed(answers: list[Observation], half_life_s: float = 10.0) -> DeploymentView:
    view = DeploymentView(half_life_s)
    for observation in answers:
        view.add(observation)
    return view


def test_newer_answers_weigh_more_by_time_and_by_count() -> None:
    # Two answers a half-life apart: the older weighs half (and a little less for the one after it).
    view = fed([answer(0.0, ttft=1.0), answer(10.0, ttft=2.0)])
    estimate = view.estimate("ttft_s")
    assert estimate is not None
    older = 2 ** (-1 - 1 / 16)
    assert estimate.mean == pytest.approx((older * 1.0 + 2.0) / (older + 1), rel=1e-9)
    assert estimate.samples == pytest.approx((1 + older) ** 2 / (1 + older**2))
    # A busy deployment: its estimate follows the last few dozen answers, not the first hundred.
    busy = fed([answer(i * 0.01, ttft=1.0) for i in range(100)] + [answer(1 + i * 0.01, ttft=2.0) for i in range(40)])
    assert busy.estimate("ttft_s").mean == pytest.approx(2.0, rel=0.2)  # type: ignore[union-attr]


def test_slow_answers_in_a_row_are_a_change_one_is_not() -> None:
    steady = [answer(i * 0.25, tps=100.0) for i in range(40)]
    view = fed([*steady, answer(10.0, tps=20.0), answer(10.2, tps=100.0), answer(10.4, tps=100.0)])
    assert "seconds_per_token" not in view.changed_at  # one outlier
    # Five times slower, twice in a row: two surprises are a change.
    view = fed([*steady, answer(10.0, tps=20.0), answer(10.2, tps=20.0)])
    assert view.changed_at["seconds_per_token"] == 10.2
    estimate = view.estimate("seconds_per_token")
    assert estimate is not None and estimate.mean == pytest.approx(1 / 20)  # the forty fast ones stopped counting
    assert "ttft_s" not in view.changed_at  # its first token did not change
    # Twice slower (two spreads of 0.35 per answer): a deployment answering four times a second must show
    # more than a few (it is tested thousands of times an hour); five in a row are a change.
    view = fed([*steady, *(answer(10.0 + i * 0.25, tps=50.0) for i in range(3))])
    assert "seconds_per_token" not in view.changed_at
    view.add(answer(10.75, tps=50.0))
    assert "seconds_per_token" not in view.changed_at
    view.add(answer(11.0, tps=50.0))
    assert view.changed_at["seconds_per_token"] == 11.0
    assert view.estimate("seconds_per_token").mean == pytest.approx(1 / 50)  # type: ignore[union-attr]


def test_the_bar_for_a_change_falls_with_the_time_a_deployment_went_unheard() -> None:
    # The same two answers, twice as slow as 20 before them: no change right after them, a change after a
    # minute unheard (a change is as likely as the time it had to happen in).
    busy = fed([answer(i * 0.25, tps=100.0) for i in range(20)] + [answer(5.0, tps=40.0), answer(5.2, tps=40.0)])
    assert "seconds_per_token" not in busy.changed_at
    idle = fed([answer(i * 0.25, tps=100.0) for i in range(20)] + [answer(65.0, tps=40.0), answer(65.2, tps=40.0)])
    assert idle.changed_at["seconds_per_token"] == 65.2
    assert change_threshold(0.25) > 4.0 > change_threshold(5.0) > 3.0 > change_threshold(60.0) >= 2.5


def test_after_a_change_the_window_is_blended_in_again_once_it_holds_mostly_new_answers() -> None:
    view = fed([answer(i, tps=100.0) for i in range(10)] + [answer(10.0, tps=20.0), answer(10.2, tps=20.0)])
    assert view.trusts_window("ttft_s", 10.2, 12)  # no change there
    view.note_window("seconds_per_token", 10)
    assert not view.trusts_window("seconds_per_token", 20.0, 12)
    assert view.trusts_window("seconds_per_token", 60.0, 200)  # ten old ones among 200
    assert view.trusts_window("seconds_per_token", 10.2 + view.window_s, 12)  # they aged out


def test_a_surprise_on_thin_evidence_asks_for_a_second_look_and_two_are_a_change() -> None:
    # A deployment measured twice, long ago (an explored one): 1.5 s to its first token.
    view = fed([answer(0.0, ttft=1.5, tps=40), answer(5.0, ttft=1.5, tps=40)])
    view.add(answer(60.0, ttft=0.55, tps=40))  # faster by less than a leap: it recovered?
    assert view.follow_ups == FOLLOW_UP_TRIES and "ttft_s" not in view.changed_at
    view.add(answer(62.0, ttft=0.5, tps=40))  # the second look agrees: a change
    assert view.changed_at["ttft_s"] == 62.0 and view.follow_ups == 0
    assert view.estimate("ttft_s").mean == pytest.approx(0.525, rel=0.05)  # type: ignore[union-attr]
    # A second look that disagrees with the surprise: no change, and no more looks asked for.
    view = fed([answer(0.0, ttft=1.5), answer(5.0, ttft=1.5), answer(60.0, ttft=0.55), answer(61.0, ttft=1.4)])
    assert not view.changed_at and view.follow_ups == 0


def test_a_leap_far_past_the_spread_is_a_change_at_once_and_still_gets_a_second_look() -> None:
    # Slow in both (1.5 s, 40 tokens/s), then an answer five times faster in both: a recovery, not luck.
    view = fed([answer(0.0, ttft=1.5, tps=40), answer(5.0, ttft=1.5, tps=40)])
    view.add(answer(60.0, ttft=0.3, tps=300))
    assert view.changed_at == {"ttft_s": 60.0, "seconds_per_token": 60.0}
    assert view.estimate("ttft_s").mean == pytest.approx(0.3)  # type: ignore[union-attr]
    assert view.estimate("seconds_per_token").mean == pytest.approx(1 / 300)  # type: ignore[union-attr]
    assert view.follow_ups == FOLLOW_UP_TRIES  # exploration still looks again if no traffic comes
    view.add(answer(61.0, ttft=0.28, tps=310))  # it agrees: nothing more to look at
    assert view.follow_ups == 0 and view.changed_at["ttft_s"] == 60.0
    # A first token as lucky, its stream as slow as ever (a heavy tail's good draw): a surprise, not a leap.
    lucky = fed([answer(0.0, ttft=1.5, tps=40), answer(5.0, ttft=1.5, tps=40)])
    lucky.add(answer(60.0, ttft=0.3, tps=40))
    assert not lucky.changed_at and lucky.follow_ups == FOLLOW_UP_TRIES


def test_an_answer_sent_before_a_change_began_does_not_count_for_the_new_speed() -> None:
    # Slow (1.5 s, 40 tokens/s); a long answer went out at 50 s. It recovered: an answer sent at 60 s is a leap.
    before = [Observation(t, 1.5, 1 / 40, None, started_at=t - 6.0) for t in (6.0, 11.0)]
    view = fed([*before, Observation(61.2, 0.3, 1 / 300, None, started_at=60.0)])
    assert view.changed_at == {"ttft_s": 61.2, "seconds_per_token": 61.2}
    # The long answer ends after it, as slow as before the recovery: it measured the old speed.
    view.add(Observation(63.0, 0.4, 1 / 15, None, started_at=50.0))
    assert view.estimate("seconds_per_token").mean == pytest.approx(1 / 300)  # type: ignore[union-attr]
    assert view.estimate("ttft_s").mean == pytest.approx(0.3)  # type: ignore[union-attr]
    # One sent after the change began counts, however it came out.
    view.add(Observation(64.0, 0.35, 1 / 250, None, started_at=62.5))
    assert view.estimate("seconds_per_token").mean == pytest.approx((1 / 300 + 1 / 250) / 2, rel=0.1)  # type: ignore[union-attr]


def test_a_heavy_tail_surprises_nobody_once_its_spread_is_known() -> None:
    # First tokens log-normal with sigma 1 (p99 ~ 10x the median): deterministic quantiles of it.
    z = [-1.5, -0.5, 0.0, 0.5, 1.0, -1.0, 0.3, -0.3, 1.5, -0.8, 0.8, 0.1, -0.1, 2.2, -2.0, 0.6]
    view = fed([answer(i * 0.25, ttft=0.3 * math.exp(v)) for i, v in enumerate(z * 4)])
    first = dict(view.changed_at)  # a thin start may take its first answers for a change: no matter
    view.add(answer(20.0, ttft=0.3 * math.exp(2.4)))  # a 3.3 s first token, twice
    view.add(answer(20.2, ttft=0.3 * math.exp(2.4)))
    assert view.changed_at == first


def test_uncertainty_grows_with_age_not_with_fewer_answers() -> None:
    many = fed([answer(i * 0.1) for i in range(60)]).estimate("ttft_s")
    few = fed([answer(5.9)]).estimate("ttft_s")
    assert many is not None and few is not None
    assert many.uncertainty(6.0, 5.0) < few.uncertainty(6.0, 5.0)
    # After one half-life the drift adds DRIFT_SIGMA (in quadrature) whatever came before.
    aged = many.uncertainty(5.9 + 5.0, 5.0)
    assert aged == pytest.approx(math.hypot(many.sampling(), DRIFT_SIGMA), rel=1e-6)
    assert many.uncertainty(5.9 + 20.0, 5.0) > 3 * DRIFT_SIGMA


def test_a_lost_race_refreshes_an_estimate_it_agrees_with_and_corrects_one_it_does_not() -> None:
    view = fed([answer(0.0, ttft=1.0), answer(1.0, ttft=1.0)])
    view.confirm("ttft_s", 0.4, now=30.0)  # cancelled at 0.4 s without a token: consistent with 1 s
    estimate = view.estimate("ttft_s")
    assert estimate is not None and estimate.mean == 1.0 and estimate.newest_at == 30.0
    view.confirm("ttft_s", 3.0, now=31.0)  # still waiting at 3 s: slower than thought
    assert view.estimate("ttft_s").mean > 1.5  # type: ignore[union-attr]
    assert view.answered == 2  # a bound is not an answer


def test_attempts_in_flight_far_past_their_prediction_show_a_slowdown_before_any_answer() -> None:
    view = DeploymentView(10.0)
    for i in range(8):  # the last answers were on time
        view.started(i, i * 0.25, 1.0)
        view.ended(i, i * 0.25 + 1.0)
    for i in range(8, 14):  # then six attempts that have not answered
        view.started(i, 4.0 + (i - 8) * 0.25, 1.0)
    assert view.overdue(5.0) == 1.0  # not overdue yet
    assert view.overdue(8.0) == pytest.approx((8.0 - 4.75) / 1.0, rel=0.2)  # the median of the overdue
    # A heavy tail keeps a few attempts late; most finish: not a slowdown.
    tail = DeploymentView(10.0)
    for i in range(16):
        tail.started(i, i * 0.25, 1.0)
        if i % 4:
            tail.ended(i, i * 0.25 + 0.9)
    assert tail.overdue(10.0) == 1.0


def test_streams_waiting_far_past_their_predicted_first_token_show_it_late_long_before_they_are_overdue() -> None:
    view = DeploymentView(10.0)
    for i in range(8):  # long answers whose first tokens came on time (0.1 s)
        view.started(i, i * 0.25, 20.0, 0.1)
        view.streaming(i, i * 0.25 + 0.1, Stream())
        view.ended(i, i * 0.25 + 20.0, output_tokens=2000)
    for i in range(8, 12):  # then four that wait for theirs
        view.started(i, 3.0 + (i - 8) * 0.05, 20.0, 0.1)
    assert view.late_first_token(3.1) == 1.0  # none waits 1.5 times its prediction yet
    assert view.late_first_token(4.0) == pytest.approx((4.0 - 3.1) / 0.1, rel=0.1)  # the median of their waits
    assert view.overdue(4.0) == 1.0  # by their whole predicted time (20 s), they are on time
    for i in range(8, 12):  # their first tokens come: nothing waits any more
        view.streaming(i, 4.0, Stream())
    assert view.late_first_token(4.5) == 1.0
    # A heavy tail keeps one in four waiting: not late.
    tail = DeploymentView(10.0)
    for i in range(16):
        tail.started(i, i * 0.25, 20.0, 0.1)
        if i % 4:
            tail.streaming(i, i * 0.25 + 0.09, Stream())
    assert tail.late_first_token(4.5) == 1.0
    # Attempts not streamed predict no first token and are never judged by one.
    unstreamed = DeploymentView(10.0)
    for i in range(4):
        unstreamed.started(i, 0.0, 20.0)
    assert unstreamed.late_first_token(5.0) == 1.0


def streamed(view: DeploymentView, token: int, start: float, tps: float, tokens: int, now: float) -> Stream:
    """An attempt at ``tps`` tokens/s of 100 bytes each, its first token 0.1 s after ``start``, read at ``now``."""
    stream = Stream()
    view.started(token, start, 0.1 + tokens / tps)
    stream.received_bytes = 100
    view.streaming(token, start + 0.1, stream)
    stream.received_bytes = 100 + 100 * min(tokens, int((now - start - 0.1) * tps))
    return stream


def test_streams_in_flight_delivering_slower_than_the_estimate_slow_its_speed_before_any_answer() -> None:
    view = fed([answer(i * 0.25, ttft=0.1, tps=200.0) for i in range(12)])
    for i in range(8):  # complete streams teach its bytes per token (100) and leave no trace in flight
        streamed(view, i, i * 0.25, 200.0, 200, i * 0.25 + 1.1)
        view.ended(i, i * 0.25 + 1.1, output_tokens=201)
    assert view.per_token("chat") == pytest.approx(100.0) and view.per_token("responses") is None
    assert view.slow_stream(3.0) == 1.0
    # Its tokens/s falls fivefold: four streams in flight, first tokens on time, 40 tokens/s since.
    for i in range(8, 12):
        streamed(view, i, 3.0 + (i - 8) * 0.25, 40.0, 200, 5.0)
    assert view.slow_stream(3.9) == 1.0  # too soon to judge: no stream has run long enough
    # Read at 5.0 s (the streams' bytes were counted for then): about five times slower than the estimate.
    assert 3.5 < view.slow_stream(5.0) < 6.0


def test_a_widely_spread_provider_that_fell_fivefold_is_judged_slow_by_its_streams_in_flight() -> None:
    # Its answers spread like baseten's (0.83 in log units: 2.3x either way one time in six), so three streams
    # five times slower, judged beside its two answers from before, are 2.6 standard errors off its estimate:
    # slow. Sending it every request until their answers end would cost five times the time; a false alarm, a
    # second of traffic to the next best.
    speeds = [200.0 * math.exp(0.83 * (1 if i % 2 else -1)) for i in range(24)]
    view = fed([answer(i * 0.25, ttft=0.1, tps=tps) for i, tps in enumerate(speeds)])
    for i in range(2):  # two complete streams at its usual speed: its bytes per token, and the two before
        streamed(view, i, 6.0 + i * 0.25, 200.0, 200, 7.5)
        view.ended(i, 6.0 + i * 0.25 + 1.1, output_tokens=201)
    for i in range(2, 5):
        streamed(view, i, 7.0 + (i - 2) * 0.1, 40.0, 200, 8.0)
    assert 3.5 < view.slow_stream(8.0) < 6.0
    # One of them (an unlucky draw of a wide spread) is no alarm.
    one = fed([answer(i * 0.25, ttft=0.1, tps=tps) for i, tps in enumerate(speeds)])
    for i in range(2):
        streamed(one, i, 6.0 + i * 0.25, 200.0, 200, 7.5)
        one.ended(i, 6.0 + i * 0.25 + 1.1, output_tokens=201)
    streamed(one, 2, 7.0, 40.0, 200, 8.0)
    assert one.slow_stream(8.0) == 1.0


def test_a_healthy_deployments_slow_streams_in_flight_are_no_slowdown() -> None:
    # Streams in flight are the slow ones of a healthy provider (the fast ones ended): its whole recent
    # streams, ended ones included, are judged, not only the stragglers.
    view = fed([answer(i * 0.25, ttft=0.1, tps=200.0) for i in range(12)])
    speeds = [400.0, 300.0, 250.0, 100.0, 400.0, 300.0, 250.0, 100.0]
    for i, tps in enumerate(speeds):
        stream = streamed(view, i, i * 0.25, tps, 200, 3.0)
        if tps > 100.0:
            view.ended(i, i * 0.25 + 0.1 + 200 / tps, output_tokens=201)
        del stream
    assert view.slow_stream(3.0) == 1.0


def test_a_deployment_with_no_answer_yet_is_read_from_its_stream_in_flight() -> None:
    view = DeploymentView(10.0)
    assert view.in_flight(1.0, {"chat": 100.0}) is None  # nothing running
    stream = Stream()
    view.started(1, 0.0, None)
    stream.received_bytes = 100
    view.streaming(1, 1.2, stream)  # its first token after 1.2 s
    assert view.in_flight(1.3, {"chat": 100.0}) == (1.2, None)  # too soon for its pace
    stream.received_bytes = 100 + 100 * 130  # 130 tokens of 100 bytes in the next 0.5 s: 260 tokens/s
    first, pace = view.in_flight(1.7, {"chat": 100.0})  # type: ignore[misc]
    assert first == pytest.approx(1.2) and pace == pytest.approx(0.5 / 130)
    assert view.in_flight(1.7, None) == (1.2, None)  # no bytes per token known anywhere
    assert view.in_flight(1.7, {"messages": 60.0}) == (1.2, None)  # nor of this API: another's envelope differs


def test_a_stream_is_read_by_its_own_apis_envelope() -> None:
    # Chat chunks of 100 bytes per token learned; then Messages streams of 25-byte events at the usual speed,
    # which chat's envelope would read as 4 times slower: they are not judged until their own is learned.
    view = fed([answer(i * 0.25, ttft=0.1, tps=200.0) for i in range(12)])
    for i in range(8):
        streamed(view, i, i * 0.25, 200.0, 200, i * 0.25 + 1.1)
        view.ended(i, i * 0.25 + 1.1, output_tokens=201)
    for i in range(8, 12):
        stream = Stream(api="messages")
        view.started(i, 3.0 + (i - 8) * 0.25, 1.1)
        view.streaming(i, 3.1 + (i - 8) * 0.25, stream)
        stream.received_bytes = 25 * int((5.0 - 3.1 - (i - 8) * 0.25) * 200.0)
    assert view.per_token("messages") is None
    assert view.slow_stream(5.0) == 1.0


def test_a_thinly_measured_deployment_is_judged_by_its_models_spread() -> None:
    # Three answers alone show nothing of a tail. Against its model's heavy tail (the others' spreads), an
    # answer three times faster in both is a lucky draw worth a second look; against a steady model, a leap.
    def probed(prior: float) -> DeploymentView:
        view = DeploymentView(10.0)
        view.prior_spreads = {"ttft_s": prior, "seconds_per_token": prior}
        for at, ttft, tps in ((0.0, 1.4, 60.0), (10.0, 1.6, 55.0), (20.0, 1.5, 65.0)):
            view.add(answer(at, ttft=ttft, tps=tps))
        view.add(answer(50.0, ttft=0.5, tps=180.0))
        return view

    assert not probed(1.0).changed_at
    steady = probed(0.35)
    assert set(steady.changed_at) == {"ttft_s", "seconds_per_token"}


def test_a_change_of_first_token_is_looked_for_in_the_stream_at_the_same_answer() -> None:
    # Its first token changes first; its stream (as noisy as ever) then leans the same way, by less than a change of
    # its own: the first token's change point carries the stream along.
    view = DeploymentView(10.0)
    for i, tps in enumerate((40.0, 60.0, 45.0, 70.0, 50.0, 55.0)):
        view.add(answer(i * 2.0, ttft=1.5, tps=tps))
    view.add(answer(40.0, ttft=0.3, tps=52.0))
    view.add(answer(42.0, ttft=0.28, tps=55.0))
    assert view.changed_at == {"ttft_s": 42.0}
    view.add(answer(44.0, ttft=0.3, tps=110.0))
    view.add(answer(46.0, ttft=0.3, tps=120.0))
    assert "seconds_per_token" not in view.changed_at
    view.add(answer(48.0, ttft=0.3, tps=115.0))
    assert view.changed_at["seconds_per_token"] == 48.0
    assert view.restart_seq["seconds_per_token"] == view.restart_seq["ttft_s"]  # from the same answer on


def test_one_answer_slower_in_both_is_a_stall_not_a_change() -> None:
    # A whole answer slowed by a stall (first token and stream alike) restarts nothing; a second one would.
    view = fed([answer(i * 0.5, ttft=0.2, tps=200.0) for i in range(20)])
    view.add(answer(10.5, ttft=1.0, tps=40.0))
    assert not view.changed_at
    view.add(answer(11.0, ttft=1.0, tps=40.0))
    assert set(view.changed_at) >= {"ttft_s", "seconds_per_token"}


def test_one_far_answer_does_not_stretch_the_yardstick_its_follow_up_is_judged_by() -> None:
    # A provider at 40 tokens/s, probed every 3 s, is back at full speed: its first fast answer alone (its first
    # token unchanged) is no change, but it must not widen the spread so far that the second is not one either.
    slowed = [answer(i * 3.0, tps=40.0 * math.exp(0.2 * (-1) ** i)) for i in range(20)]
    view = fed([*slowed, answer(60.0, tps=385.0)])
    assert "seconds_per_token" not in view.changed_at
    assert view.spread("seconds_per_token") < 0.45  # counted whole, this one answer made it 0.5
    view.add(answer(63.4, tps=150.0))  # nearly four times its slowed speed: judged by a stretched spread, no change
    assert view.changed_at["seconds_per_token"] == 63.4
    assert 1 / view.estimate("seconds_per_token").mean > 150  # type: ignore[union-attr]  # the slow ones stopped counting
