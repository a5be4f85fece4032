"""The routing benchmark's markets and their oracle (``benchmarks/routing_scenarios.py``); the stress run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks import routing, routing_simulate
from benchmarks.routing_held_out import HELD_OUT_2
from benchmarks.routing_held_out_3 import HELD_OUT_3
from benchmarks.routing_held_out_4 import HELD_OUT_4
from benchmarks.routing_held_out_5 import HELD_OUT_5
from benchmarks.routing_held_out_6 import HELD_OUT_6
from benchmarks.routing_held_out_7 import HELD_OUT_7
from benchmarks.routing_held_out_8 import HELD_OUT_8
from benchmarks.routing_held_out_9 import HELD_OUT_9
from benchmarks.routing_held_out_10 import HELD_OUT_10
from benchmarks.routing_held_out_11 import HELD_OUT_11
from benchmarks.routing_held_out_12 import HELD_OUT_12
from benchmarks.routing_scenarios import HELD_OUT, SCENARIOS, STRESS, Profile, Scenario, oracle_choice


def test_the_oracle_never_picks_a_provider_that_fails_every_request() -> None:
    # A provider failing everything is predicted at its fallback's time: a tie the healthy one must win.
    down = Profile("a", ttft_s=0.4, tps=200.0, price=0.5, error_rate=1.0)
    healthy = Profile("b", ttft_s=0.8, tps=120.0, price=0.5)
    assert oracle_choice(128, [down, healthy]) == "b"
    assert oracle_choice(128, [replace(down, error_rate=0.0), healthy]) == "a"


def test_the_policy_oracle_prices_a_failing_provider_at_its_fallbacks_price() -> None:
    # A failure is billed nothing and its fallback answers at its own price: a provider down for every request
    # costs its fallback's time and money, so its own low price does not make it the policy's pick while down.
    down = Profile("cheap", ttft_s=0.4, tps=200.0, price=0.05, error_rate=1.0)
    healthy = Profile("dear", ttft_s=0.8, tps=120.0, price=0.9)
    assert oracle_choice(128, [down, healthy], price_weight=0.3) == "dear"
    assert oracle_choice(128, [replace(down, error_rate=0.0), healthy], price_weight=0.3) == "cheap"


def test_the_policy_oracle_trades_time_for_price_as_the_policy_score_does() -> None:
    # 10% faster for twice the price: the fastest provider for time alone; under balanced's weights (a doubling of
    # price costs 0.3 of a doubling of time) the cheaper one, and the dear one again once it is 30% faster.
    dear = Profile("dear", ttft_s=0.4, tps=110.0, price=1.0)
    cheap = Profile("cheap", ttft_s=0.4, tps=100.0, price=0.5)
    assert oracle_choice(256, [dear, cheap]) == "dear"
    assert oracle_choice(256, [dear, cheap], price_weight=0.3) == "cheap"
    assert oracle_choice(256, [replace(dear, tps=140.0), cheap], price_weight=0.3) == "dear"


def test_the_policy_regret_is_the_time_regret_without_a_price_weight_and_counts_money_with_one() -> None:
    oracle = routing_simulate.Result(times=[1.0, 3.0], money=1.0)
    slower = routing_simulate.Result(times=[1.5, 3.5], money=1.0)
    assert routing_simulate.policy_regret(slower, oracle, 0.0) == pytest.approx(0.25)
    assert routing_simulate.policy_regret(slower, oracle, 0.3) == pytest.approx(0.25)
    # As fast at half the money scores 0.3 doublings better: the time that scores the same is 2**-0.3 of the oracle's.
    cheaper = routing_simulate.Result(times=[1.0, 3.0], money=0.5)
    assert routing_simulate.policy_regret(cheaper, oracle, 0.3) == pytest.approx(2**-0.3 - 1)
    assert routing_simulate.policy_regret(cheaper, oracle, 0.0) == pytest.approx(0.0)


def test_every_stress_market_changes_a_provider_it_has() -> None:
    for scenario in STRESS:
        names = {p.name for p in scenario.providers}
        assert {change.name for change in scenario.changes} <= names, scenario.name
        assert scenario.schedule(1), scenario.name


def _earlier(number: int) -> tuple[Scenario, ...]:
    """Every market written before held-out set ``number``: the benchmark's, the stress markets and the held-out sets
    ``routing_simulate`` runs as 1 to ``number`` - 1."""
    return (*SCENARIOS, *STRESS, *(s for n in range(1, number) for s in routing_simulate.MARKETS[n]))


def _assert_new_markets_that_move_their_best(
    markets: tuple[Scenario, ...], earlier: tuple[Scenario, ...], stable_by_design: set[str]
) -> None:
    """Each market is new by name, changes only providers it has, and (but the stable-by-design ones) moves the
    oracle's best provider at least once: a held-out market where nothing moves tests nothing."""
    earlier_names = {s.name for s in earlier}
    for scenario in markets:
        assert scenario.name not in earlier_names, scenario.name
        names = {p.name for p in scenario.providers}
        assert {change.name for change in scenario.changes} <= names, scenario.name
        planned = scenario.schedule(1)
        assert planned, scenario.name
        tokens = planned[0].tokens
        bests = {
            oracle_choice(tokens, list(scenario.profiles_at(at).values()))
            for at in range(0, int(scenario.duration_s), 5)
        }
        assert len(bests) > 1 or scenario.name in stable_by_design, (scenario.name, bests)
    assert len({s.name for s in markets}) == len(markets)
    assert any(s.replicas > 1 for s in markets)
    assert any(s.max_tokens is not None and s.max_tokens >= 16384 for s in markets)


def test_the_second_held_out_set_names_new_markets_that_move_their_best() -> None:
    _assert_new_markets_that_move_their_best(HELD_OUT_2, (*SCENARIOS, *STRESS, *HELD_OUT), {"ho2-agent"})


def test_the_third_held_out_set_names_new_markets_that_move_their_best() -> None:
    """Set three holds every behaviour the gate names, under names and parameters of its own."""
    _assert_new_markets_that_move_their_best(HELD_OUT_3, (*SCENARIOS, *STRESS, *HELD_OUT, *HELD_OUT_2), set())
    assert len(HELD_OUT_3) == 7
    assert all(s.name.startswith("ho3-") for s in HELD_OUT_3)
    earlier_providers = {p for s in (*SCENARIOS, *STRESS, *HELD_OUT, *HELD_OUT_2) for p in s.providers}
    assert not earlier_providers & {p for s in HELD_OUT_3 for p in s.providers}  # fresh parameters throughout


def test_the_fourth_held_out_set_names_new_markets_that_move_their_best() -> None:
    """Set four holds every behaviour the gate names, under names and parameters of its own."""
    earlier = _earlier(4)
    _assert_new_markets_that_move_their_best(HELD_OUT_4, earlier, set())
    assert len(HELD_OUT_4) == 7
    assert all(s.name.startswith("ho4-") for s in HELD_OUT_4)
    earlier_providers = {p for s in earlier for p in s.providers}
    assert not earlier_providers & {p for s in HELD_OUT_4 for p in s.providers}  # fresh parameters throughout


def test_the_fifth_held_out_set_names_new_markets_that_move_their_best() -> None:
    """Set five holds every behaviour the gate names, under names and parameters of its own."""
    earlier = _earlier(5)
    _assert_new_markets_that_move_their_best(HELD_OUT_5, earlier, set())
    assert len(HELD_OUT_5) == 7
    assert all(s.name.startswith("ho5-") for s in HELD_OUT_5)
    earlier_providers = {p for s in earlier for p in s.providers}
    assert not earlier_providers & {p for s in HELD_OUT_5 for p in s.providers}  # fresh parameters throughout


def test_the_sixth_held_out_set_names_new_markets_that_move_their_best() -> None:
    """Set six holds every behaviour the gate names, a short outage of the leader and a stable market at a low rate,
    under names and parameters of its own; only the stable market keeps its best."""
    earlier = _earlier(6)
    _assert_new_markets_that_move_their_best(HELD_OUT_6, earlier, {"ho6-slow-rate"})
    assert len(HELD_OUT_6) == 9
    assert all(s.name.startswith("ho6-") for s in HELD_OUT_6)
    earlier_providers = {p for s in earlier for p in s.providers}
    assert not earlier_providers & {p for s in HELD_OUT_6 for p in s.providers}  # fresh parameters throughout
    markets = {s.name: s for s in HELD_OUT_6}
    assert 8 <= len(markets["ho6-many"].providers) <= 12
    assert markets["ho6-slow-rate"].rate_per_s <= 1.0 and not markets["ho6-slow-rate"].changes
    down, back = markets["ho6-outage"].changes  # the leader fails every request for 20-40 s, then is as before
    assert down.profile.error_rate == 1.0 and back.profile.error_rate == 0.0 and 20 <= back.at_s - down.at_s <= 40


def _fresh_set(
    markets: tuple[Scenario, ...], earlier: tuple[Scenario, ...], prefix: str, count: int
) -> dict[str, Scenario]:
    """A held-out set of ``count`` markets named ``prefix``-…, new (``_assert_new_markets_that_move_their_best``) and
    with no provider profile of an earlier market: its markets by name."""
    _assert_new_markets_that_move_their_best(markets, earlier, set())
    assert len(markets) == count
    assert all(s.name.startswith(prefix) for s in markets)
    earlier_providers = {p for s in earlier for p in s.providers}
    assert not earlier_providers & {p for s in markets for p in s.providers}  # fresh parameters throughout
    return {s.name: s for s in markets}


def _outage_s(market: Scenario) -> float:
    """How long the leader fails every request before it is back as before."""
    down, back = market.changes
    assert down.profile.error_rate == 1.0 and back.profile.error_rate == 0.0
    return back.at_s - down.at_s


def _flaky_share(market: Scenario) -> float:
    """The share the quickest fails from start to end (it never changes)."""
    (failing,) = [p for p in market.providers if p.error_rate > 0]
    assert 0.2 <= failing.error_rate <= 0.4 and failing.name not in {c.name for c in market.changes}
    return failing.error_rate


def test_the_seventh_held_out_set_names_new_markets_that_move_their_best() -> None:
    """Set seven holds every behaviour the gate names, mixed answer lengths and a provider failing a share all
    through, under names and parameters of its own; every market moves its best."""
    earlier = _earlier(7)
    markets = _fresh_set(HELD_OUT_7, earlier, "ho7-", 10)
    many = markets["ho7-many"]
    assert 8 <= len(many.providers) <= 12
    (change,) = many.changes  # the one that becomes the quickest is neither the cheapest nor the dearest
    prices = [p.price for p in many.providers]
    assert min(prices) < next(p.price for p in many.providers if p.name == change.name) < max(prices)
    outage = _outage_s(markets["ho7-outage"])
    assert 10 <= outage <= 50 and abs(outage - 30) > 2  # not set six's ~30 s
    _flaky_share(markets["ho7-flaky"])
    assert 2 <= markets["ho7-replicas"].replicas <= 3


def test_the_eighth_held_out_set_names_new_markets_that_move_their_best() -> None:
    """Set eight holds every behaviour the gate names under names and parameters of its own; every market moves its
    best, and none copies set seven's outage length, flaky share or replica count."""
    earlier = _earlier(8)
    markets = _fresh_set(HELD_OUT_8, earlier, "ho8-", 10)
    assert 6 <= len(markets["ho8-many"].providers) <= 8
    (change,) = markets["ho8-many"].changes  # one provider changes, once
    assert change.name in {p.name for p in markets["ho8-many"].providers}
    assert 10 <= _outage_s(markets["ho8-outage"]) <= 50 and _outage_s(markets["ho8-outage"]) not in {17, 29}
    _flaky_share(markets["ho8-flaky"])
    assert markets["ho8-replicas"].replicas == 2
    agent = markets["ho8-agent"]
    assert agent.max_tokens is not None and agent.max_tokens >= 16384
    assert max(t for t, _ in agent.lengths) * 100 < agent.max_tokens  # short answers under a large ceiling
    (started_down,) = [p for p in markets["ho8-down-at-start"].providers if p.error_rate == 1.0]
    assert started_down.name in {c.name for c in markets["ho8-down-at-start"].changes}


def test_the_ninth_held_out_set_names_new_markets_that_move_their_best() -> None:
    """Set nine holds every behaviour the gate names and a cold start over a quick starter and a fast streamer alone,
    under names and parameters of its own; every market moves its best, and none copies set eight's outage length,
    flaky share or replica count."""
    earlier = _earlier(9)
    markets = _fresh_set(HELD_OUT_9, earlier, "ho9-", 11)
    assert 6 <= len(markets["ho9-many"].providers) <= 9
    (change,) = markets["ho9-many"].changes  # one provider changes, once
    assert change.name in {p.name for p in markets["ho9-many"].providers}
    assert 10 <= _outage_s(markets["ho9-outage"]) <= 50 and _outage_s(markets["ho9-outage"]) not in {17, 24, 29}
    assert _flaky_share(markets["ho9-flaky"]) not in {0.27, 0.31}
    assert markets["ho9-replicas"].replicas == 3
    agent = markets["ho9-agent"]
    assert agent.max_tokens is not None and agent.max_tokens >= 16384
    assert max(t for t, _ in agent.lengths) * 100 < agent.max_tokens  # short answers under a large ceiling
    (started_down,) = [p for p in markets["ho9-down-at-start"].providers if p.error_rate == 1.0]
    assert started_down.name in {c.name for c in markets["ho9-down-at-start"].changes}
    assert len(markets["ho9-cold"].providers) == 2  # the quick starter and the fast streamer, both new at the start


def test_the_tenth_held_out_set_names_new_markets_that_move_their_best() -> None:
    """Set ten holds every behaviour the gate names, a cold start over three correlated providers and a first-token
    tail that widens with its median unchanged, under names and parameters of its own; every market moves its best,
    and none copies an earlier set's outage length, flaky share or agent ceiling."""
    earlier = _earlier(10)
    markets = _fresh_set(HELD_OUT_10, earlier, "ho10-", 12)
    assert 8 <= len(markets["ho10-many"].providers) <= 12
    assert {c.name for c in markets["ho10-many"].changes} == {"m6"}  # one provider changes, and comes back
    assert 10 <= _outage_s(markets["ho10-outage"]) <= 50 and _outage_s(markets["ho10-outage"]) not in {17, 24, 29, 37}
    assert _flaky_share(markets["ho10-flaky"]) not in {0.23, 0.27, 0.31}
    assert markets["ho10-replicas"].replicas == 2
    agent = markets["ho10-agent"]
    assert agent.max_tokens is not None and agent.max_tokens >= 16384
    assert max(t for t, _ in agent.lengths) * 100 < agent.max_tokens  # short answers under a large ceiling
    assert agent.max_tokens not in {s.max_tokens for s in earlier}
    (started_down,) = [p for p in markets["ho10-down-at-start"].providers if p.error_rate == 1.0]
    assert started_down.name in {c.name for c in markets["ho10-down-at-start"].changes}
    cold = sorted(markets["ho10-cold"].providers, key=lambda p: p.ttft_s)
    assert len(cold) == 3 and [p.tps for p in cold] == sorted((p.tps for p in cold), reverse=True)  # correlated
    tail = markets["ho10-tail"]
    wide, narrow = tail.changes  # only the first-token spread moves, and comes back
    before = next(p for p in tail.providers if p.name == wide.name)
    assert wide.profile == replace(before, ttft_sigma=wide.profile.ttft_sigma) and wide.profile.ttft_sigma >= 1.0
    assert narrow.profile == before


def test_the_eleventh_held_out_set_names_new_markets_that_move_their_best() -> None:
    """Set eleven holds every behaviour the gate names and those later sets added, under names and parameters of its
    own: every market moves its best, none copies an earlier set's outage length, flaky share, agent ceiling or (set
    ten's) provider count, the drift goes in uneven steps one way, the cold start is three anti-correlated providers,
    and the tail widens in steps with its median unchanged."""
    earlier = _earlier(11)
    markets = _fresh_set(HELD_OUT_11, earlier, "ho11-", 12)
    assert 8 <= len(markets["ho11-many"].providers) <= 12 and len(markets["ho11-many"].providers) != 9
    outage = _outage_s(markets["ho11-outage"])
    assert 10 <= outage <= 50 and all(abs(outage - o) >= 3 for o in (17, 24, 29, 30, 32, 37))
    assert _flaky_share(markets["ho11-flaky"]) not in {p.error_rate for s in earlier for p in s.providers}
    assert markets["ho11-replicas"].replicas == 2
    agent = markets["ho11-agent"]
    assert agent.max_tokens is not None and agent.max_tokens >= 16384
    assert max(t for t, _ in agent.lengths) * 100 < agent.max_tokens  # short answers under a large ceiling
    assert agent.max_tokens not in {s.max_tokens for s in earlier}
    down_market = markets["ho11-down-at-start"]
    (started_down,) = [p for p in down_market.providers if p.error_rate == 1.0]
    slow, back = [c.profile for c in down_market.changes if c.name == started_down.name]
    assert slow == replace(back, ttft_s=slow.ttft_s) and slow.ttft_s > back.ttft_s  # back slow to start, then best
    assert back == replace(started_down, error_rate=0.0)
    for name in ("g2", "g4"):  # each drift goes one way, in steps of uneven size
        ttfts = [c.profile.ttft_s for c in markets["ho11-drift"].changes if c.name == name]
        steps = [later - before for before, later in zip(ttfts, ttfts[1:], strict=False)]
        assert len(steps) >= 15 and (all(d > 0 for d in steps) or all(d < 0 for d in steps))
        assert max(map(abs, steps)) > 2 * min(map(abs, steps))
    cold = sorted(markets["ho11-cold"].providers, key=lambda p: p.ttft_s)
    assert len(cold) == 3 and [p.tps for p in cold] == sorted(p.tps for p in cold)  # anti-correlated
    tail = markets["ho11-tail"]
    before = next(p for p in tail.providers if p.name == tail.changes[0].name)
    assert {c.name for c in tail.changes} == {before.name}
    *widening, narrow = [c.profile for c in tail.changes]
    assert all(p == replace(before, ttft_sigma=p.ttft_sigma) for p in widening)  # only the first-token spread moves
    sigmas = [before.ttft_sigma, *(p.ttft_sigma for p in widening)]
    assert sigmas == sorted(sigmas) and len(set(sigmas)) == len(sigmas) >= 4 and sigmas[-1] >= 1.0
    assert narrow == before


def _set_12_shapes(markets: dict[str, Scenario]) -> None:
    """The shapes set twelve's markets are new in: the drift moves every provider at once, each one way, and eases at
    once; the oscillation trades speeds only; the resellers slow together and come back together; the first token
    creeps up in steps and drops back at once; the down provider relapses; the agent's two quickest starters trade
    first tokens three times."""
    drift = markets["ho12-drift"]
    *wave, eased = sorted({c.at_s for c in drift.changes})
    for p in drift.providers:
        moves = [c for c in drift.changes if c.name == p.name]
        assert [c.at_s for c in moves] == [*wave, eased] and moves[-1].profile == p  # all at once, back at once
        ttfts = [p.ttft_s, *(c.profile.ttft_s for c in moves[:-1])]
        assert len(ttfts) >= 15 and ttfts == sorted(ttfts) and len(set(ttfts)) == len(ttfts)  # one way, in steps
    oscillate = markets["ho12-oscillate"]
    before = {p.name: p for p in oscillate.providers}
    assert all(c.profile == replace(before[c.name], tps=c.profile.tps) for c in oscillate.changes)  # speeds only
    assert len({c.at_s for c in oscillate.changes}) >= 5
    many = markets["ho12-many"]
    slowed, back = sorted({c.at_s for c in many.changes})
    resellers = {c.name for c in many.changes}
    quickest = {p.name for p in sorted(many.providers, key=lambda p: p.ttft_s)[: len(resellers)]}
    assert 2 <= len(resellers) <= 4 and resellers == quickest  # the quickest few, one upstream
    assert {c.name for c in many.changes if c.at_s == slowed} == {c.name for c in many.changes if c.at_s == back}
    ttft = markets["ho12-ttft"]
    (creeping,) = {c.name for c in ttft.changes}
    *creep, dropped = ttft.changes
    start = next(p for p in ttft.providers if p.name == creeping)
    assert all(c.profile == replace(start, ttft_s=c.profile.ttft_s) for c in creep) and dropped.profile == start
    rises = [start.ttft_s, *(c.profile.ttft_s for c in creep)]
    assert len(creep) >= 10 and rises == sorted(rises) and rises[-1] > 3 * rises[0]
    down = markets["ho12-down-at-start"]
    (started_down,) = [p for p in down.providers if p.error_rate == 1.0]
    assert [c.profile.error_rate for c in down.changes if c.name == started_down.name] == [0.0, 1.0, 0.0]  # relapses
    agent = markets["ho12-agent"]
    first, second = sorted(agent.providers, key=lambda p: p.ttft_s)[:2]
    traded = {first.name: replace(first, ttft_s=second.ttft_s), second.name: replace(second, ttft_s=first.ttft_s)}
    times = sorted({c.at_s for c in agent.changes})
    by_time = [{c.name: c.profile for c in agent.changes if c.at_s == at} for at in times]
    assert by_time == [traded, {first.name: first, second.name: second}, traded]  # three trades of first tokens only


def test_the_twelfth_held_out_set_names_new_markets_that_move_their_best() -> None:
    """Set twelve holds every behaviour the gate names and those later sets added, each in a shape no earlier set
    holds, under names and parameters of its own: every market moves its best, and none copies an earlier set's outage
    length, flaky share, agent ceiling or (set ten's or eleven's) provider count."""
    assert routing_simulate.MARKETS[12] is HELD_OUT_12  # --held-out-12 runs this set
    markets = _fresh_set(HELD_OUT_12, earlier := _earlier(12), "ho12-", 12)
    _set_12_shapes(markets)
    assert 8 <= len(markets["ho12-many"].providers) <= 12 and len(markets["ho12-many"].providers) not in {9, 10}
    outage = markets["ho12-outage"]  # one region: two providers down a few seconds apart, each for the drawn length
    downs = [c for c in outage.changes if c.profile.error_rate == 1.0]
    ups = [c for c in outage.changes if c.profile.error_rate == 0.0]
    assert len(downs) == len(ups) == 2 and [c.name for c in downs] == [c.name for c in ups]
    (length,) = {up.at_s - down.at_s for down, up in zip(downs, ups, strict=True)}
    assert 10 <= length <= 50 and all(abs(length - o) >= 3 for o in (11, 17, 24, 29, 30, 32, 37))
    assert 0 < downs[1].at_s - downs[0].at_s < 5
    flaky = markets["ho12-flaky"]  # the quickest turns flaky mid-run, then mends
    quickest = min(flaky.providers, key=lambda p: p.ttft_s)
    shares = [c.profile.error_rate for c in flaky.changes if c.name == quickest.name]
    assert quickest.error_rate == 0.0 and len(shares) == 2 and shares[1] == 0.0 and 0.2 <= shares[0] <= 0.4
    assert shares[0] not in {p.error_rate for s in earlier for p in s.providers}
    replicas = markets["ho12-replicas"]
    assert replicas.replicas == 2 and any(c.profile.error_rate == 1.0 for c in replicas.changes)
    agent = markets["ho12-agent"]
    assert agent.max_tokens is not None and agent.max_tokens >= 16384
    assert max(t for t, _ in agent.lengths) * 100 < agent.max_tokens  # short answers under a large ceiling
    assert agent.max_tokens not in {s.max_tokens for s in earlier}
    mixed = markets["ho12-mixed"]
    longest, weight = max(mixed.lengths)
    assert longest >= 100 * min(t for t, _ in mixed.lengths) and weight / sum(w for _, w in mixed.lengths) < 0.1
    cold = sorted(markets["ho12-cold"].providers, key=lambda p: p.ttft_s)
    speeds = [p.tps for p in cold]
    assert len(cold) >= 4 and speeds not in (sorted(speeds), sorted(speeds, reverse=True))  # neither order
    tail = markets["ho12-tail"]
    before = next(p for p in tail.providers if p.name == tail.changes[0].name)
    assert {c.name for c in tail.changes} == {before.name}
    *narrowing, back = [c.profile for c in tail.changes]
    assert all(p == replace(before, ttft_s=p.ttft_s, ttft_sigma=p.ttft_sigma) for p in narrowing)
    assert (
        narrowing[0].ttft_s < before.ttft_s < before.mean_ttft() < narrowing[0].mean_ttft()
    )  # median better, mean worse
    sigmas = [p.ttft_sigma for p in narrowing]
    assert sigmas == sorted(sigmas, reverse=True) and len(sigmas) >= 3 and sigmas[0] >= 1.0
    assert back == before


def test_each_schedule_draws_anew_and_seed_one_as_it_always_did() -> None:
    """The fakes draw a request's speeds from its ``draw_seed``: were it the index alone, every seed of the real-time
    benchmark would replay the same draws (request 0 of the recovery among five streamed 18 s in all three)."""
    scenario = STRESS[0]
    first, second = scenario.schedule(1), scenario.schedule(2)
    assert [p.draw_seed for p in first] == [p.index for p in first]  # seed 1's runs stay comparable with older ones
    assert not {p.draw_seed for p in first} & {p.draw_seed for p in second}
    assert scenario.schedule(2) == second  # and each strategy of one seed replays the same


@pytest.mark.parametrize("name", ["outage", "swap"])
def test_the_stress_markets_run_in_simulated_time(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert routing_simulate.main(["--stress", "--only", name, "--seeds", "1"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(name) and "failed 0" in line, line
    assert "on best from +15 s" in line


def test_the_real_time_benchmark_runs_its_scenarios_or_the_markets_named() -> None:
    assert routing.chosen(None) == list(SCENARIOS)
    assert [s.name for s in routing.chosen(["outage", "recovery"])] == ["recovery", "outage"]
    with pytest.raises(SystemExit) as refused:
        routing.main(["--only", "no-such-market", "--no-write"])
    assert refused.value.code == 2  # argparse's usage error, before anything runs
