"""Held-out set 14 (``benchmarks/routing_held_out_14.py``) as its docstring says it is, read without running a router.

Every market builds, is new and fresh, keeps realistic profiles and ordered changes; the drawn figures replay from
``random.Random("routing-held-out-14")`` in the order the docstring lists; the time oracle's best provider at every
half second, per answer length, is what each market's description says; each shape is the one named. Nothing here
plans a request or reads a router's result: the set is for one later judgement, never for tuning.
"""

from __future__ import annotations

import random
from dataclasses import replace

from benchmarks import routing_simulate
from benchmarks.routing_held_out_14 import HELD_OUT_14
from benchmarks.routing_scenarios import SCENARIOS, STRESS
from tests.support import markets

KINDS = ("drift", "oscillate", "many", "ttft", "down-at-start", "agent", "replicas", "outage", "flaky", "mixed")
"""The ten markets, in the docstring's (and the draws') order."""

MARKETS = {s.name: s for s in HELD_OUT_14}
EARLIER = (*SCENARIOS, *STRESS, *(s for n in range(1, 14) for s in routing_simulate.MARKETS[n]))
TURNS = tuple(16 * k for k in range(12))
RING = ("ro1", "ro2", "ro3")

LEADS: dict[str, dict[int, list[tuple[float, str]]]] = {
    "ho14-drift": {
        25: [(0, "dr1"), (84, "dr3")],
        240: [(0, "dr1"), (42, "dr2"), (68, "dr3")],
        1100: [(0, "dr1"), (26, "dr3")],
    },
    "ho14-oscillate": {n: [(at, RING[k % 3]) for k, at in enumerate(TURNS)] for n in (60, 520, 1700)},
    "ho14-many": {n: [(0, "mp1"), (41, "mp2"), (97, "mp9")] for n in (45, 280, 900)},
    "ho14-ttft": {
        **{n: [(0, "tq1"), (40, "tq2"), (128, "tq1")] for n in (5, 20, 60)},
        180: [(0, "tq1"), (37, "tq3"), (128, "tq1")],
    },
    "ho14-down-at-start": {n: [(0, "dw2"), (17, "dw1")] for n in (110, 360, 1250)},
    "ho14-agent": {
        **{n: [(0, "ag1"), (57, "ag3"), (168, "ag1")] for n in (2, 7, 18)},
        **{n: [(0, "ag3")] for n in (50, 150)},
    },
    "ho14-replicas": {n: [(0, "rx1"), (50, "rx2"), (85, "rx1")] for n in (130, 390, 1400)},
    "ho14-outage": {n: [(0, "ox1"), (109, "ox2"), (156, "ox1")] for n in (80, 330, 1000)},
    "ho14-flaky": {n: [(0, "fx1")] for n in (35, 170, 640)},
    "ho14-mixed": {
        **{n: [(0, "mx1")] for n in (4, 15)},
        **{n: [(0, "mx3"), (30, "mx2"), (114, "mx3")] for n in (1500, 4000)},
    },
}
"""The time oracle's best per answer length as each description says: (from when, who) runs, to the market's end."""


def test_the_set_is_wired_to_its_switch_and_named_as_written() -> None:
    assert routing_simulate.MARKETS[14] is HELD_OUT_14  # --held-out-14 runs this set
    assert routing_simulate.HELD_OUT_SETS[13] == ("fourteenth", "routing_held_out_14.HELD_OUT_14")
    assert [s.name for s in HELD_OUT_14] == [f"ho14-{kind}" for kind in KINDS]
    assert not {s.name for s in EARLIER} & set(MARKETS)


def test_every_market_builds_with_realistic_profiles_and_changes_in_order() -> None:
    earlier_profiles = markets.profiles(EARLIER)
    for market in HELD_OUT_14:
        markets.check_fresh(market, earlier_profiles)
        earlier_lengths = {s.lengths for s in EARLIER}
        assert market.lengths not in earlier_lengths, market.name


def test_the_drawn_figures_replay_in_the_order_the_docstring_lists() -> None:
    rng = random.Random("routing-held-out-14")
    many = [rng.randint(8, 14)]
    while many[-1] in (9, 10, 12):
        many.append(rng.randint(8, 14))
    turn = rng.randint(10, 30)
    ceilings = (16000, 32000, 64000, 100000, 128000, 200000)
    earlier_ceilings = {s.max_tokens for s in EARLIER} - {None}
    ceiling = [rng.choice(ceilings)]
    while ceiling[-1] in earlier_ceilings:
        ceiling.append(rng.choice(ceilings))
    outages = [rng.randint(10, 50)]
    while any(abs(outages[-1] - o) < 3 for o in (11, 17, 24, 29, 30, 32, 37, 41, 44)):
        outages.append(rng.randint(10, 50))
    share = round(rng.uniform(0.1, 0.3), 2)
    shares = {p.error_rate for s in EARLIER for p in (*s.providers, *(c.profile for c in s.changes))}
    assert (many, turn, ceiling, outages, share) == ([14], 16, [64000, 200000], [33, 10, 43, 31, 15, 43, 47], 0.11)
    assert share not in shares
    drawn: dict[str, tuple[int, float, list[int]]] = {}
    for kind in KINDS:
        duration = rng.randint(105, 230)
        rate = round(rng.uniform(1.4, 4.3), 2)
        drawn[kind] = (duration, rate, sorted(rng.randint(12, int(0.85 * duration)) for _ in range(4)))
        assert (MARKETS[f"ho14-{kind}"].duration_s, MARKETS[f"ho14-{kind}"].rate_per_s) == (duration, rate), kind
    # Each market's change times, as drawn, where it uses them (the oscillation uses the turn, not these).
    used = {
        "drift": {16, 50, 89, 114},
        "many": {41, 97},
        "ttft": {34, 85, 128},
        "down-at-start": {17, 69},
        "agent": {57, 168},
        "replicas": {50, 56, 85},
        "outage": {109},
        "flaky": {13, 80},
        "mixed": {30, 114},
    }
    for kind, times in used.items():
        assert times <= set(drawn[kind][2]), kind
    ends = {
        "drift": {114, 89},  # the two drifts' last steps; they start one step after 16 s and 50 s
        "many": {41, 97},
        "ttft": {85, 128},
        "down-at-start": {17, 69},
        "agent": {57, 168},
        "replicas": {50, 56, 85},
        "outage": {109},
        "flaky": {13, 80},
        "mixed": {30, 114},
    }
    for kind, times in ends.items():
        assert times <= {c.at_s for c in MARKETS[f"ho14-{kind}"].changes}, kind
    assert len(MARKETS["ho14-many"].providers) == many[-1]
    assert MARKETS["ho14-agent"].max_tokens == ceiling[-1] and MARKETS["ho14-replicas"].replicas == 2
    down, up = markets.moves(MARKETS["ho14-outage"], "ox1")
    assert down.profile.error_rate == 1.0 and up.at_s - down.at_s == outages[-1]
    assert {c.profile.error_rate for c in MARKETS["ho14-flaky"].changes} == {share, 0.0}
    oscillate = MARKETS["ho14-oscillate"]
    assert sorted({c.at_s for c in oscillate.changes}) == [turn * k for k in range(1, 12)]


def test_the_drifts_move_one_axis_each_in_even_steps() -> None:
    drift = MARKETS["ho14-drift"]
    dr1, dr3 = markets.start(drift, "dr1"), markets.start(drift, "dr3")
    wear, improve = markets.moves(drift, "dr1"), markets.moves(drift, "dr3")
    assert all(c.profile == replace(dr1, tps=c.profile.tps) for c in wear) and wear[-1].profile.tps == 118.0
    assert (
        all(c.profile == replace(dr3, ttft_s=c.profile.ttft_s) for c in improve) and improve[-1].profile.ttft_s == 0.25
    )
    speeds = [dr1.tps, *(c.profile.tps for c in wear)]
    assert len(wear) == 49 and all(b < a for a, b in zip(speeds, speeds[1:], strict=False))
    assert len(improve) == 13 and [c.at_s for c in improve] == [50 + 3 * i for i in range(1, 14)]


def test_the_three_leaders_take_turns_fast_and_slow_at_once() -> None:
    oscillate = MARKETS["ho14-oscillate"]
    for at in TURNS[1:]:
        now = oscillate.profiles_at(at + 1)
        leader = RING[(at // 16) % 3]
        fast = {n for n in RING if now[n].tps > 200}
        assert fast == {leader}, at
        assert all(now[n] == replace(markets.start(oscillate, n), ttft_s=now[n].ttft_s, tps=now[n].tps) for n in RING)
    assert oscillate.profiles_at(oscillate.duration_s - 1)["ro3"].tps > 200  # the last leader keeps it


def test_the_first_token_changes_end_and_the_failures_come_and_go() -> None:
    ttft = MARKETS["ho14-ttft"]
    tq1 = markets.start(ttft, "tq1")
    *climb, back = markets.moves(ttft, "tq1")
    assert all(c.profile == replace(tq1, ttft_s=c.profile.ttft_s) for c in climb) and back.profile == tq1
    ttfts = [c.profile.ttft_s for c in climb]
    assert ttfts == sorted(ttfts) and ttfts[-1] == 1.6 and back.at_s == 128
    agent = MARKETS["ho14-agent"]
    ag1 = markets.start(agent, "ag1")
    late, again = markets.moves(agent, "ag1")
    assert late.profile == replace(ag1, ttft_s=0.55) and again.profile == ag1  # the first token only, and its end
    assert agent.max_tokens is not None and max(t for t, _ in agent.lengths) * 1000 < agent.max_tokens
    down = MARKETS["ho14-down-at-start"]
    assert [p.name for p in down.providers if p.error_rate == 1.0] == ["dw1", "dw3"]
    assert [(c.at_s, c.name, c.profile.error_rate) for c in down.changes] == [(17, "dw1", 0.0), (69, "dw3", 0.0)]
    replicas = MARKETS["ho14-replicas"]
    assert [c.profile.error_rate for c in replicas.changes] == [0.0, 0.0, 0.0]
    assert replicas.changes[-1].profile == markets.start(replicas, "rx1")
    many = MARKETS["ho14-many"]
    ranks = [p.name for p in sorted(many.providers, key=lambda p: p.expected_e2e(280))]
    assert ranks.index("mp9") == 8  # the ninth quickest before it speeds up


def test_the_flaky_leader_stays_the_best_and_the_mixed_bands_split() -> None:
    flaky = MARKETS["ho14-flaky"]
    fx1 = markets.start(flaky, "fx1")
    failing, healed = markets.moves(flaky, "fx1")
    assert failing.profile == replace(fx1, error_rate=0.11) and healed.profile == fx1
    mixed = MARKETS["ho14-mixed"]
    assert len({w for _, w in mixed.lengths}) == 1 and [t for t, _ in mixed.lengths] == [4, 15, 1500, 4000]


def test_the_time_oracle_leads_as_each_description_says() -> None:
    for name, by_length in LEADS.items():
        market = MARKETS[name]
        assert set(by_length) <= {t for t, _ in market.lengths}, name
        for tokens, runs in by_length.items():
            assert markets.leads(market, tokens) == runs, (name, tokens)
    assert LEADS.keys() == MARKETS.keys()


def test_every_market_runs_in_the_simulation_under_the_oracle_alone() -> None:
    """Each market executes end to end as ``--held-out-14`` would run it, under the oracle's order only (no router
    chooses, and no figure is read): every scheduled request is answered or counted failed."""
    for market in HELD_OUT_14:
        result = routing_simulate.simulate(market, 1, "oracle")
        assert len(result.times) + result.failed == len(market.schedule(1)), market.name
