"""The demo's story about long answers (``gateway.demo_story``): its expectations are what the fakes really draw, and
what it says once ``fading`` degrades is true (a near-tie in which the cheap ``nimble`` takes part)."""

from __future__ import annotations

import statistics

from gateway.demo_setup import DEMO_MODELS
from gateway.demo_story import LONG_ANSWER_TOKENS, NEAR_TIE, expected_long_answers, long_answer_line
from gateway.fakes import FakeProvider
from gateway.fakes.profiles import DEMO_PROFILES

DRAWS = 20_000


def _drawn_time(provider: FakeProvider, tokens: int) -> float:
    """The mean time of a ``tokens``-long stream as the fake paces it (``fakes.pacing.play``): its first token after
    a jittered TTFT, each later one a jittered speed's interval after the first."""
    behavior = provider.behavior
    times = []
    for _ in range(DRAWS):
        ttft = provider.jittered(behavior.ttft_s, behavior.ttft_jitter)
        tps = provider.jittered(behavior.tokens_per_s, behavior.tps_jitter)
        times.append(ttft + (tokens - 1) / tps)
    return statistics.fmean(times)


def test_the_expected_times_are_what_the_fakes_draw() -> None:
    for degraded in (False, True):
        expected = {e.provider: e for e in expected_long_answers(degraded=degraded)}
        assert set(expected) == set(DEMO_MODELS[0][2])
        for index, profile in enumerate(DEMO_PROFILES):
            if profile.name not in expected:
                continue
            figures = profile.degraded if degraded and profile.degraded is not None else profile.figures
            fake = FakeProvider(profile.name, figures.behavior(seed=index))
            drawn = _drawn_time(fake, LONG_ANSWER_TOKENS)
            assert abs(drawn / expected[profile.name].time_s - 1) < 0.05, (profile.name, degraded, drawn)


def test_long_answers_go_to_fading_then_to_a_near_tie_that_includes_nimble() -> None:
    before = expected_long_answers(degraded=False)
    assert before[0].provider == "fading" and before[1].score > NEAR_TIE
    assert long_answer_line(degraded=False).endswith("the router should send long answers to fading")

    after = expected_long_answers(degraded=True)
    near = {e.provider for e in after if e.score < NEAR_TIE}
    # The quickest left is not worth its price alone: the cheap slow stream ties with it.
    assert near == {"steady", "torrent", "nimble"}, after
    quickest, cheapest = (
        min(after, key=lambda e: e.time_s),
        min(near, key=lambda p: next(e.money_usd for e in after if e.provider == p)),
    )
    assert quickest.provider == "steady" and cheapest == "nimble"
    assert after[-1].provider == "fading"
    line = long_answer_line(degraded=True)
    assert "steady, torrent and nimble score within" in line and "may go to any of them" in line, line
