"""Held-out set 13 (``benchmarks/routing_held_out_13.py``) as its docstring says it is, read without running a router.

Every market builds, is new and fresh, keeps realistic profiles and ordered changes; the drawn figures replay from
``random.Random("routing-held-out-13")`` in the order the docstring lists; the time oracle's best provider at every
half second, per answer length, is what each market's description says; each shape is the one named. Nothing here
plans a request or reads a router's result: the set is for one later judgement, never for tuning.
"""

from __future__ import annotations

import random
from dataclasses import replace

from benchmarks import routing_simulate
from benchmarks.routing_held_out_13 import HELD_OUT_13
from benchmarks.routing_scenarios import SCENARIOS, STRESS
from tests.support import markets

KINDS = (
    "drift",
    "oscillate",
    "many",
    "ttft",
    "down-at-start",
    "agent",
    "replicas",
    "outage",
    "bursts",
    "tail",
    "mixed",
    "close",
)
"""The twelve markets, in the docstring's (and the draws') order."""

MARKETS = {s.name: s for s in HELD_OUT_13}
EARLIER = (*SCENARIOS, *STRESS, *(s for n in range(1, 13) for s in routing_simulate.MARKETS[n]))
BURSTS = ((11, 18), (39, 43), (70, 73), (103, 109), (134, 140), (150, 153))

LEADS: dict[str, dict[int, list[tuple[float, str]]]] = {
    "ho13-drift": {70: [(0, "e1"), (60, "e3"), (63, "e1"), (66, "e3")], 310: [(0, "e1"), (60, "e3")]},
    "ho13-oscillate": {n: [(0, "o1"), (18, "o2"), (45, "o1"), (78, "o2"), (105, "o1")] for n in (120, 450, 1300)},
    "ho13-many": {n: [(0, "n1"), (37, "n3"), (75, "n1"), (100, "n3")] for n in (40, 220, 760)},
    "ho13-ttft": {
        **{n: [(0, "t1"), (47, "t2"), (77, "t1")] for n in (3, 12, 40)},
        110: [(0, "t1"), (47, "t3"), (71, "t1")],
    },
    "ho13-down-at-start": {n: [(0, "d2"), (13, "d1")] for n in (140, 410, 960)},
    "ho13-agent": {
        **{n: [(0, "g1"), (56, "g2")] for n in (1, 4)},
        13: [(0, "g1"), (48, "house")],
        **{n: [(0, "house")] for n in (38, 95, 240)},
    },
    "ho13-replicas": {n: [(0, "p1"), (16, "p2"), (84, "p1")] for n in (180, 460, 1150)},
    "ho13-outage": {n: [(0, "q1"), (52, "q2"), (back, "q1")] for n, back in ((65, 138), (290, 136), (940, 134))},
    "ho13-bursts": {
        n: [(0, "b1"), *((at, name) for down, up in BURSTS for at, name in ((down, "b2"), (up, "b1")))]
        for n in (33, 150, 620)
    },
    "ho13-tail": {6: [(0, "l2"), (85, "l1")], 35: [(0, "l2"), (85, "l1")], 190: [(0, "l3"), (85, "l1")]},
    "ho13-mixed": {
        **{n: [(0, "x1")] for n in (3, 9, 27)},
        80: [(0, "x2")],
        240: [(0, "x3"), (15, "x2"), (56, "x3")],
        700: [(0, "x3"), (15, "x4"), (56, "x3")],
        **{n: [(0, "x4")] for n in (1400, 3200)},
    },
    "ho13-close": {n: [(0, "c1"), (85, "c2"), (138, "c1")] for n in (90, 380, 1050)},
}
"""The time oracle's best per answer length as each description says: (from when, who) runs, to the market's end."""


def test_the_set_is_wired_to_its_switch_and_named_as_written() -> None:
    assert routing_simulate.MARKETS[13] is HELD_OUT_13  # --held-out-13 runs this set
    assert routing_simulate.HELD_OUT_SETS[12] == ("thirteenth", "routing_held_out_13.HELD_OUT_13")
    assert [s.name for s in HELD_OUT_13] == [f"ho13-{kind}" for kind in KINDS]
    assert not {s.name for s in EARLIER} & set(MARKETS)


def test_every_market_builds_with_realistic_profiles_and_changes_in_order() -> None:
    earlier_profiles = markets.profiles(EARLIER)
    for market in HELD_OUT_13:
        markets.check_fresh(market, earlier_profiles)


def test_the_drawn_figures_replay_in_the_order_the_docstring_lists() -> None:
    rng = random.Random("routing-held-out-13")
    many = [rng.randint(8, 12)]
    while many[-1] in (10, 12):
        many.append(rng.randint(8, 12))
    resellers = [rng.randint(2, 4)]
    while resellers[-1] == 4:
        resellers.append(rng.randint(2, 4))
    shares = {p.error_rate for s in EARLIER for p in (*s.providers, *(c.profile for c in s.changes))} - {0.0, 1.0}
    share = round(rng.uniform(0.2, 0.4), 2)
    while share in shares:
        share = round(rng.uniform(0.2, 0.4), 2)
    outages = [rng.randint(10, 50)]
    while any(abs(outages[-1] - o) < 3 for o in (11, 17, 24, 29, 30, 32, 37, 41)):
        outages.append(rng.randint(10, 50))
    assert (many, resellers, share, outages) == ([12, 9], [2], 0.26, [16, 25, 43, 44])
    assert (rng.choice((20000, 40000, 80000)), rng.randint(30, 70)) == (80000, 60)
    drawn: dict[str, tuple[int, float, list[int]]] = {}
    for kind in KINDS:
        duration = rng.randint(105, 230)
        rate = round(rng.uniform(1.4, 4.3), 2)
        drawn[kind] = (duration, rate, sorted(rng.randint(12, int(0.85 * duration)) for _ in range(4)))
        assert (MARKETS[f"ho13-{kind}"].duration_s, MARKETS[f"ho13-{kind}"].rate_per_s) == (duration, rate), kind
    bursts: list[tuple[int, int]] = []
    at = 0
    while at + (gap := rng.randint(10, 30)) + (length := rng.randint(3, 8)) <= 0.85 * drawn["bursts"][0]:
        bursts.append((at + gap, at + gap + length))
        at += gap + length
    assert tuple(bursts) == BURSTS
    # Each market's change times, as drawn, where it uses them.
    used = {
        "drift": {84},
        "many": {37, 75, 100},
        "ttft": {47, 137},
        "down-at-start": {13, 21, 24, 53},
        "agent": {59, 87},  # the steps' ends; they start one step after 33 s and 46 s
        "replicas": {16, 84},
        "outage": {52, 142},
        "tail": {85},
        "mixed": {15, 56},
        "close": {85, 138},
    }
    for kind, times in used.items():
        assert times <= set(drawn[kind][2]) and times <= {c.at_s for c in MARKETS[f"ho13-{kind}"].changes}, kind
    agent_starts = [markets.moves(MARKETS["ho13-agent"], name)[0].at_s for name in ("g1", "g2")]
    assert agent_starts == [33 + 3, 46 + 1] and {33, 46} <= set(drawn["agent"][2])
    assert len(MARKETS["ho13-many"].providers) == many[-1]
    assert {c.name for c in MARKETS["ho13-many"].changes} == {"n3", "n5"}  # the resellers
    assert {c.profile.error_rate for c in MARKETS["ho13-replicas"].changes} == {share, 0.0}
    assert MARKETS["ho13-agent"].max_tokens == 80000 and MARKETS["ho13-replicas"].replicas == 2
    (down,) = [c for c in MARKETS["ho13-outage"].changes if c.profile.error_rate == 1.0]
    assert markets.moves(MARKETS["ho13-outage"], "q1")[1].at_s - down.at_s == outages[-1]


def test_the_time_oracle_leads_as_each_description_says() -> None:
    for name, by_length in LEADS.items():
        market = MARKETS[name]
        assert set(by_length) <= {t for t, _ in market.lengths}, name
        for tokens, runs in by_length.items():
            assert markets.leads(market, tokens) == runs, (name, tokens)
    assert LEADS.keys() == MARKETS.keys()


def test_the_drift_wanders_and_ends_where_it_was_going() -> None:
    drift = MARKETS["ho13-drift"]
    for name, end in (("e1", (0.58, 121.0)), ("e3", (0.27, 259.0))):
        moves = markets.moves(drift, name)
        speeds = [markets.start(drift, name).tps, *(c.profile.tps for c in moves)]
        steps = [later - before for before, later in zip(speeds, speeds[1:], strict=False)]
        assert len(moves) == 26 and [c.at_s for c in moves] == [9 + 3 * i for i in range(26)]
        assert (moves[-1].profile.ttft_s, moves[-1].profile.tps) == end
        assert min(sum(d > 0 for d in steps), sum(d < 0 for d in steps)) >= 2  # it gives back ground, more than once


def test_the_cycle_and_the_spike_move_what_they_say_only() -> None:
    oscillate = MARKETS["ho13-oscillate"]
    best = {"o1": (0.19, 274.0), "o2": (0.2, 266.0)}
    for change in oscillate.changes:
        start = markets.start(oscillate, change.name)
        assert change.profile == replace(start, ttft_s=change.profile.ttft_s, tps=change.profile.tps)
    at_60 = oscillate.profiles_at(60)  # a whole period: the first at its best again, the second at its worst
    assert (at_60["o1"].ttft_s, at_60["o1"].tps) == best["o1"] and at_60["o2"] == markets.start(oscillate, "o2")
    at_30 = oscillate.profiles_at(30)
    assert (at_30["o2"].ttft_s, at_30["o2"].tps) == best["o2"]
    ttft = MARKETS["ho13-ttft"]
    t1 = markets.start(ttft, "t1")
    *draining, back = markets.moves(ttft, "t1")
    assert all(c.profile == replace(t1, ttft_s=c.profile.ttft_s) for c in draining) and back.profile == t1
    excess = [c.profile.ttft_s - t1.ttft_s for c in draining]
    assert abs(excess[0] - 1.24) < 1e-9 and all(
        abs(b - 0.6 * a) < 0.001 for a, b in zip(excess, excess[1:], strict=False)
    )


def test_the_failures_fall_in_steps_come_in_bursts_and_end_in_a_slow_recovery() -> None:
    down = MARKETS["ho13-down-at-start"]
    assert markets.start(down, "d1").error_rate == 1.0
    assert [c.profile.error_rate for c in markets.moves(down, "d1")] == [0.7, 0.4, 0.15, 0.0]
    bursts = MARKETS["ho13-bursts"]
    assert [(c.at_s, c.profile.error_rate) for c in bursts.changes] == [
        (at, rate) for down_s, up_s in BURSTS for at, rate in ((down_s, 1.0), (up_s, 0.0))
    ]
    outage = MARKETS["ho13-outage"]
    q1 = markets.start(outage, "q1")
    failed, *recovering = markets.moves(outage, "q1")
    assert failed.profile == replace(q1, error_rate=1.0) and recovering[-1].profile == q1
    ttfts = [c.profile.ttft_s for c in recovering]
    assert ttfts == sorted(ttfts, reverse=True) and len(set(ttfts)) == len(ttfts) == 24  # better every 2 s
    many = MARKETS["ho13-many"]
    assert {p.name for p in sorted(many.providers, key=lambda p: p.ttft_s)[2:4]} == {"n3", "n5"}  # third, fourth
    for at in (37, 75, 100):  # the resellers move together
        assert {c.name for c in many.changes if c.at_s == at} == {"n3", "n5"}


def test_the_agent_tail_mixed_and_close_markets_keep_their_shapes() -> None:
    agent = MARKETS["ho13-agent"]
    assert agent.max_tokens is not None and max(t for t, _ in agent.lengths) * 100 < agent.max_tokens
    assert agent.max_tokens not in {s.max_tokens for s in EARLIER}
    for name, end in (("g1", 0.52), ("g2", 0.23)):  # first tokens only, in small steps, one way
        start = markets.start(agent, name)
        moves = [c.profile for c in markets.moves(agent, name)]
        assert all(p == replace(start, ttft_s=p.ttft_s) for p in moves) and abs(moves[-1].ttft_s - end) < 1e-9
    tail = MARKETS["ho13-tail"]
    (narrowed,) = tail.changes
    l1 = markets.start(tail, "l1")
    assert narrowed.profile == replace(l1, ttft_sigma=0.3) and l1.ttft_sigma >= 1.0  # only the spread moves
    mixed = MARKETS["ho13-mixed"]
    assert len(mixed.lengths) == 8 and len({w for _, w in mixed.lengths}) == 1
    close = MARKETS["ho13-close"]
    c1, c2 = markets.start(close, "c1"), markets.start(close, "c2")
    (tokens, _), *_ = close.lengths
    assert 1 < c2.expected_e2e(tokens) / c1.expected_e2e(tokens) < 1.05 and c1.price > 5 * c2.price


def test_every_market_runs_in_the_simulation_under_the_oracle_alone() -> None:
    """Each market executes end to end as ``--held-out-13`` would run it, under the oracle's order only (no router
    chooses, and no figure is read): every scheduled request is answered or counted failed."""
    for market in HELD_OUT_13:
        result = routing_simulate.simulate(market, 1, "oracle")
        assert len(result.times) + result.failed == len(market.schedule(1)), market.name
