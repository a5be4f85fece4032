"""The thirteenth held-out set of routing markets: written before the next routing change, run on routers once, last.

Sets one (``routing_scenarios.HELD_OUT``) to eleven (``routing_held_out_11.HELD_OUT_11``) have each been looked at once;
set twelve (``routing_held_out_12.HELD_OUT_12``) was still unrun when this one was written, and nothing here was taken
from a run of it. Each market is one behaviour the gate names, or one a real market shows, in a shape no earlier set
holds: a drift that wanders on its way, two leaders in a smooth load cycle, two resellers of one upstream speeding up
and failing together among nine, a first-token spike draining back in steps, the best down at start and back as its
failure share falls in steps, the agent traffic's lead passing gradually, two replicas over the leader's overload, an
outage and a slow recovery, rate-limit bursts, a heavy first-token tail narrowing for good, lengths in bands each with
its own best, and two near-equal leaders a small slowdown separates. Some prices are a first party's, several times the
others'. Left out, as the simulator cannot put them fairly: a price change (the router is given the market's starting
prices; a change would reach only the bill and the policy oracle) and a speed that depends on the answer's length (one
speed per provider).

The new random choices were drawn with ``random.Random("routing-held-out-13")`` (whole numbers by ``randint``, shares
and rates by ``uniform`` rounded to two places, the ceiling by ``choice``), in this order: the many-provider count
(8-12, redrawn while set eleven's or twelve's, 10 or 12: 12 came up, then nine), the resellers among them (2-4, redrawn
while set twelve's four: two), the replicas' failure share (0.2-0.4, redrawn while any earlier market's: 0.26), the
outage's length (10-50 s, redrawn while within 3 s of an earlier set's, 11, 17, 24, 29, 30, 32, 37 or 41 s: 16, 25 and
43 came up, then 44 s), the agent's ceiling (20000, 40000 or 80000: 80000), the load cycle's period (30-70 s: 60 s),
then per market in the order below a duration (105-230 s), a rate (1.4-4.3 requests/s) and four change times (from 12 s
to 85% of the duration, sorted), and last the bursts (a gap of 10-30 s, then a length of 3-8 s, in turn until a burst
would end past 85% of its market: six fit). A market uses the change times it needs, as drawn (the drift's walks start
at 6 s and end at its fourth; the cycle and the bursts use none); the replicas are two, as the gate names them. The
drift's walks are drawn by ``_bridge`` from a seed named for each provider. The provider profiles (first tokens, speeds,
spreads, prices) and the answer lengths are fresh, written for each market so that its behaviour holds by the time
oracle alone (``oracle_choice``, no router; ``routing_simulate --held-out-13``). Never tune anything on them.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario, linear_steps


def _towards(start: Profile, end: Profile, share: float, at_s: float) -> Change:
    """At ``at_s``, ``start`` moved ``share`` of the way to ``end`` in first token and speed, nothing else."""
    ttft_s = round(start.ttft_s + (end.ttft_s - start.ttft_s) * share, 3)
    return Change(
        at_s, start.name, replace(start, ttft_s=ttft_s, tps=round(start.tps + (end.tps - start.tps) * share, 1))
    )


def _bridge(start: Profile, end: Profile, from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """``start`` wanders to ``end`` in ``steps`` steps at even times from ``from_s`` to ``to_s``: each an even share
    of the way plus a random walk pinned to zero at both ends (a Brownian bridge of N(0, 0.12) steps, seeded by the
    provider's name), kept within -0.2 and 1.2 of the way. Real wear wanders and still ends where it was going."""
    rng = random.Random(f"routing-held-out-13:{start.name}")
    walk = list(itertools.accumulate(rng.gauss(0.0, 0.12) for _ in range(steps)))
    return tuple(
        _towards(
            start,
            end,
            min(max(i / steps + wander - walk[-1] * i / steps, -0.2), 1.2),
            from_s + (to_s - from_s) * i / steps,
        )
        for i, wander in enumerate(walk, start=1)
    )


def _cycle(
    best: Profile, worst: Profile, behind: bool, period_s: float, every_s: float, until_s: float
) -> tuple[Change, ...]:
    """A load cycle: every ``every_s`` seconds until ``until_s`` the provider sits ``(1 + cos(2πt / period_s)) / 2``
    of the way from ``worst`` to ``best`` (at its best at the start), or half a period ``behind`` (at its worst at the
    start), first token and speed together: smooth, not a switch, two providers half a period apart trading the lead
    at each crossing."""
    return tuple(
        _towards(worst, best, (1 + math.cos(2 * math.pi * at / period_s + (math.pi if behind else 0.0))) / 2, at)
        for at in itertools.takewhile(lambda t: t < until_s, itertools.count(every_s, every_s))
    )


def _drain(p: Profile, peak_s: float, at_s: float, every_s: float, keep: float, back_s: float) -> tuple[Change, ...]:
    """A queue filling at once and draining: at ``at_s`` ``p``'s first token is ``peak_s``, then every ``every_s``
    seconds the excess over its own is ``keep`` of what it was, until ``back_s``, when it is ``p`` again; its speed,
    spreads and price never move."""
    changes = [Change(at_s, p.name, replace(p, ttft_s=peak_s))]
    excess = peak_s - p.ttft_s
    for at in itertools.takewhile(lambda t: t < back_s, itertools.count(at_s + every_s, every_s)):
        excess *= keep
        changes.append(Change(at, p.name, replace(p, ttft_s=round(p.ttft_s + excess, 3))))
    changes.append(Change(back_s, p.name, p))
    return tuple(changes)


def _timed(*changes: Change) -> tuple[Change, ...]:
    """Several providers' changes in the order of their times, as ``Scenario.profiles_at`` reads them."""
    return tuple(sorted(changes, key=lambda c: c.at_s))


_E1 = Profile("e1", ttft_s=0.22, tps=243.0, price=0.66, ttft_sigma=0.29)
_E3 = Profile("e3", ttft_s=0.79, tps=118.0, price=0.19, tps_sigma=0.33)

_O1 = Profile("o1", ttft_s=0.19, tps=274.0, price=2.8, ttft_sigma=0.27)
_O2 = Profile("o2", ttft_s=0.2, tps=266.0, price=0.36, tps_sigma=0.26)
_O2_WORST = replace(_O2, ttft_s=0.48, tps=122.0)

_N3 = Profile("n3", ttft_s=0.37, tps=208.0, price=0.44, ttft_sigma=0.31)
_N5 = Profile("n5", ttft_s=0.41, tps=201.0, price=0.83, ttft_sigma=0.34)
_FAST = (replace(_N3, ttft_s=0.19, tps=318.0), replace(_N5, ttft_s=0.23, tps=309.0))
"""The two resellers once their upstream speeds up."""

_T1 = Profile("t1", ttft_s=0.21, tps=214.0, price=0.74, ttft_sigma=0.26)

_D1 = Profile("d1", ttft_s=0.18, tps=279.0, price=0.52, tps_sigma=0.24)

_G1 = Profile("g1", ttft_s=0.17, tps=93.0, price=0.71, ttft_sigma=0.22)
_G2 = Profile("g2", ttft_s=0.46, tps=74.0, price=0.09)

_P1 = Profile("p1", ttft_s=0.23, tps=262.0, price=0.58, ttft_sigma=0.28)

_Q1 = Profile("q1", ttft_s=0.2, tps=288.0, price=0.48, ttft_sigma=0.27)
_Q1_COLD = replace(_Q1, ttft_s=1.35, tps=72.0)

_B1 = Profile("b1", ttft_s=0.19, tps=297.0, price=0.21, tps_sigma=0.23)
_BURSTS = ((11, 18), (39, 43), (70, 73), (103, 109), (134, 140), (150, 153))

_L1 = Profile("l1", ttft_s=0.19, tps=236.0, price=0.62, ttft_sigma=1.25)

_X3 = Profile("x3", ttft_s=0.88, tps=258.0, price=0.27, ttft_sigma=0.36)

_C1 = Profile("c1", ttft_s=0.27, tps=231.0, price=3.1, ttft_sigma=0.25)

HELD_OUT_13: tuple[Scenario, ...] = (
    Scenario(
        "ho13-drift",
        "gradual drift as a random walk: the leader wears and a cheap one improves, each wandering back and forth on "
        "its way, crossing late",
        "five providers at 2.76 requests/s, answers of 70, 310 or 880 tokens; every 3 s from 9 s to 84 s the leader "
        "(0.22 s, 243 tok/s) wanders to 0.58 s and 121 tok/s and the second cheapest (0.79 s, 118 tok/s) to 0.27 s "
        "and 259 tok/s, each giving back ground more than once, and stay so; the second cheapest is the quickest "
        "from 60 s (70-token answers: not 63-66 s); a first party's (0.37 s, 204 tok/s, priced 2.7)",
        (
            _E1,
            Profile("e2", ttft_s=0.37, tps=204.0, price=2.7, ttft_sigma=0.33),
            _E3,
            Profile("e4", ttft_s=0.55, tps=163.0, price=0.41, ttft_sigma=0.38),
            Profile("e5", ttft_s=1.3, tps=70.0, price=0.05),
        ),
        lengths=((70, 2), (310, 3), (880, 1)),
        duration_s=111,
        rate_per_s=2.76,
        changes=_timed(
            *_bridge(_E1, replace(_E1, ttft_s=0.58, tps=121.0), 6, 84, 26),
            *_bridge(_E3, replace(_E3, ttft_s=0.27, tps=259.0), 6, 84, 26),
        ),
    ),
    Scenario(
        "ho13-oscillate",
        "oscillating leaders in a smooth load cycle: two providers half a 60 s period apart, each at its best when "
        "the other is at its worst, the lead changing hands at each crossing",
        "two providers swing every 3 s along a 60 s cosine between their best (0.19 s, 274 tok/s, a first party's "
        "priced 2.8; 0.2 s, 266 tok/s, priced 0.36) and worst (0.46 s, 128 tok/s; 0.48 s, 122 tok/s), half a period "
        "apart: the first is the quickest until 18 s, from 45 s to 78 s and from 105 s, the second between; a steady "
        "third (0.35 s, 183 tok/s); 2.94 requests/s, answers of 120, 450 or 1300 tokens",
        (
            _O1,
            _O2_WORST,
            Profile("o3", ttft_s=0.35, tps=183.0, price=0.52, tps_sigma=0.29),
            Profile("o4", ttft_s=1.05, tps=92.0, price=0.08, ttft_sigma=0.41),
        ),
        lengths=((120, 2), (450, 3), (1300, 1)),
        duration_s=117,
        rate_per_s=2.94,
        changes=_timed(
            *_cycle(_O1, replace(_O1, ttft_s=0.46, tps=128.0), False, 60, 3, 117),
            *_cycle(_O2, _O2_WORST, True, 60, 3, 117),
        ),
    ),
    Scenario(
        "ho13-many",
        "nine providers, two of them resellers of one upstream (at two prices) that speed up together, fail together "
        "a while, and come back together",
        "nine providers at 1.69 requests/s, prices 0.04 to 3.2, answers of 40, 220 or 760 tokens; a first party's "
        "(0.24 s, 251 tok/s, priced 3.2) leads until 37 s, when the third and fourth quickest (0.37 s, 208 tok/s, "
        "priced 0.44; 0.41 s, 201 tok/s, priced 0.83), resellers of one upstream, speed up to 0.19 s, 318 tok/s and "
        "0.23 s, 309 tok/s; both fail every request from 75 s to 100 s (the first party's leads again), then fast",
        (
            Profile("n1", ttft_s=0.24, tps=251.0, price=3.2, ttft_sigma=0.24),
            Profile("n2", ttft_s=0.3, tps=233.0, price=0.61, ttft_sigma=0.36, tps_sigma=0.25),
            _N3,
            Profile("n4", ttft_s=0.45, tps=189.0, price=0.52, tps_sigma=0.31),
            _N5,
            Profile("n6", ttft_s=0.6, tps=161.0, price=0.29, ttft_sigma=0.42),
            Profile("n7", ttft_s=0.78, tps=137.0, price=0.22, tps_sigma=0.28),
            Profile("n8", ttft_s=1.05, tps=104.0, price=0.12, ttft_sigma=0.47),
            Profile("n9", ttft_s=1.6, tps=66.0, price=0.04, ttft_sigma=0.55, tps_sigma=0.3),
        ),
        lengths=((40, 2), (220, 3), (760, 1)),
        duration_s=131,
        rate_per_s=1.69,
        changes=(
            *(
                Change(at, p.name, replace(p, error_rate=e))
                for at, e in ((37, 0.0), (75, 1.0), (100, 0.0))
                for p in _FAST
            ),
        ),
    ),
    Scenario(
        "ho13-ttft",
        "a first-token spike that ends slowly: the leader's first token jumps at once and drains back step by step "
        "(a queue emptying), its speed fixed",
        "answers of 3, 12, 40 or 110 tokens over five providers at 4.29 requests/s: at 47 s the leader's first token "
        "(0.21 s, 214 tok/s) jumps to 1.45 s, then every 6 s keeps 60% of its excess (0.95 s at 53 s, 0.48 s at 65 "
        "s, 0.27 s at 83 s) and is 0.21 s again at 137 s; the runner-up (0.33 s, 188 tok/s) leads from 47 s to 77 s "
        "(the 110-token answers: a first party's, 0.45 s, 251 tok/s, priced 3.3, to 71 s); no speed changes",
        (
            _T1,
            Profile("t2", ttft_s=0.33, tps=188.0, price=0.41, ttft_sigma=0.31),
            Profile("t3", ttft_s=0.45, tps=251.0, price=3.3),
            Profile("t4", ttft_s=0.68, tps=141.0, price=0.23, ttft_sigma=0.39),
            Profile("t5", ttft_s=1.2, tps=79.0, price=0.07),
        ),
        lengths=((3, 2), (12, 3), (40, 2), (110, 1)),
        duration_s=177,
        rate_per_s=4.29,
        changes=_drain(_T1, 1.45, 47, 6, 0.6, 137),
    ),
    Scenario(
        "ho13-down-at-start",
        "the best provider (the second cheapest) down at start, coming back as its failure share falls in steps: "
        "all, 70%, 40%, 15%, none",
        "five providers at 2.24 requests/s, answers of 140, 410 or 960 tokens; the best (0.18 s, 279 tok/s, priced "
        "0.52) fails every request until 13 s, 70% of them to 21 s, 40% to 24 s, 15% to 53 s, none after; a failure "
        "costs a retry at once, so the oracle takes it from 13 s, a first party's (0.29 s, 236 tok/s, priced 3.4) "
        "before",
        (
            replace(_D1, error_rate=1.0),
            Profile("d2", ttft_s=0.29, tps=236.0, price=3.4, ttft_sigma=0.3),
            Profile("d3", ttft_s=0.43, tps=197.0, price=0.61, ttft_sigma=0.37),
            Profile("d4", ttft_s=0.7, tps=148.0, price=0.83),
            Profile("d5", ttft_s=1.15, tps=88.0, price=0.09, tps_sigma=0.32),
        ),
        lengths=((140, 2), (410, 3), (960, 1)),
        duration_s=109,
        rate_per_s=2.24,
        changes=(
            Change(13, "d1", replace(_D1, error_rate=0.7)),
            Change(21, "d1", replace(_D1, error_rate=0.4)),
            Change(24, "d1", replace(_D1, error_rate=0.15)),
            Change(53, "d1", _D1),
        ),
    ),
    Scenario(
        "ho13-agent",
        "agent traffic: max_tokens 80000, short answers, the quickest starter starting later in small steps while a "
        "cheap slow streamer starts sooner: the shortest answers' lead passes gradually",
        "every request asks for max_tokens 80000 and is answered in 1 to 240 tokens, at 3.86 requests/s; the "
        "quickest starter (0.17 s, 93 tok/s) starts later every 3 s from 36 s to 87 s, to 0.52 s, and a cheap slow "
        "streamer (0.46 s, 74 tok/s) sooner every second from 47 s to 59 s, to 0.23 s, for good: the best for 1 and "
        "4 tokens passes to it at 56 s, for 13 tokens at 48 s to a first party's (0.33 s, 231 tok/s, priced 3.6), "
        "the best for 38 and more throughout; a fast streamer (1.12 s, 347 tok/s), a cheap one (1.38 s, 61 tok/s)",
        (
            _G1,
            _G2,
            Profile("house", ttft_s=0.33, tps=231.0, price=3.6, ttft_sigma=0.28),
            Profile("spate", ttft_s=1.12, tps=347.0, price=0.31, ttft_sigma=0.47),
            Profile("penny", ttft_s=1.38, tps=61.0, price=0.04),
        ),
        lengths=((1, 2), (4, 3), (13, 3), (38, 2), (95, 1), (240, 1)),
        duration_s=157,
        rate_per_s=3.86,
        max_tokens=80000,
        changes=_timed(
            *linear_steps(_G1, replace(_G1, ttft_s=0.52), 33, 87, 18),
            *linear_steps(_G2, replace(_G2, ttft_s=0.23), 46, 59, 13),
        ),
    ),
    Scenario(
        "ho13-replicas",
        "two replicas sharing a window; the leader, overloaded a while, fails 26% of requests at once and answers "
        "the rest slower, then is as before",
        "two gateway replicas over one stats window, 2.37 requests/s between them; five providers, answers of 180, "
        "460 or 1150 tokens; from 16 s to 84 s the leader (0.23 s, 262 tok/s) fails 26% of requests and answers the "
        "rest at 0.61 s and 188 tok/s, and the second cheapest (0.36 s, 219 tok/s, priced 0.27) leads meanwhile; a "
        "first party's (0.41 s, 205 tok/s, priced 2.9)",
        (
            _P1,
            Profile("p2", ttft_s=0.36, tps=219.0, price=0.27, tps_sigma=0.3),
            Profile("p3", ttft_s=0.41, tps=205.0, price=2.9, ttft_sigma=0.33),
            Profile("p4", ttft_s=0.74, tps=143.0, price=0.44),
            Profile("p5", ttft_s=1.2, tps=84.0, price=0.08, ttft_sigma=0.45),
        ),
        lengths=((180, 3), (460, 2), (1150, 1)),
        duration_s=127,
        rate_per_s=2.37,
        changes=(Change(16, "p1", replace(_P1, ttft_s=0.61, tps=188.0, error_rate=0.26)), Change(84, "p1", _P1)),
        replicas=2,
    ),
    Scenario(
        "ho13-outage",
        "an outage of the leader (44 s) and a slow recovery: back slow, it regains its first token and speed in even "
        "steps over 46 s",
        "five providers at 3.01 requests/s, answers of 65, 290 or 940 tokens; the leader (0.2 s, 288 tok/s, priced "
        "0.48) fails every request from 52 s to 96 s, then answers at 1.35 s and 72 tok/s, better every 2 s to its "
        "best at 142 s; a first party's (0.3 s, 241 tok/s, priced 2.9) leads from 52 s to 134-138 s",
        (
            _Q1,
            Profile("q2", ttft_s=0.3, tps=241.0, price=2.9, ttft_sigma=0.31),
            Profile("q3", ttft_s=0.41, tps=213.0, price=0.55, tps_sigma=0.32),
            Profile("q4", ttft_s=0.66, tps=158.0, price=0.26),
            Profile("q5", ttft_s=1.1, tps=93.0, price=0.07, ttft_sigma=0.44),
        ),
        lengths=((65, 3), (290, 2), (940, 1)),
        duration_s=176,
        rate_per_s=3.01,
        changes=(
            Change(52, "q1", replace(_Q1, error_rate=1.0)),
            Change(96, "q1", _Q1_COLD),
            *linear_steps(_Q1_COLD, _Q1, 96, 142, 23)[:-1],
            Change(142, "q1", _Q1),
        ),
    ),
    Scenario(
        "ho13-bursts",
        "rate-limit bursts: the quickest (and cheap) provider fails every request for 3-7 s at a time, six times, "
        "and is the best between",
        "five providers at 3.36 requests/s, answers of 33, 150 or 620 tokens; the quickest (0.19 s, 297 tok/s, "
        "priced 0.21) fails every request from 11 s to 18 s, 39-43 s, 70-73 s, 103-109 s, 134-140 s and 150-153 s, "
        "and answers as ever between; a first party's (0.27 s, 246 tok/s, priced 3.1) is the best during each burst",
        (
            _B1,
            Profile("b2", ttft_s=0.27, tps=246.0, price=3.1, ttft_sigma=0.29),
            Profile("b3", ttft_s=0.38, tps=221.0, price=0.47, ttft_sigma=0.35),
            Profile("b4", ttft_s=0.62, tps=166.0, price=0.29, tps_sigma=0.34),
            Profile("b5", ttft_s=1.0, tps=109.0, price=0.11),
        ),
        lengths=((33, 2), (150, 3), (620, 1)),
        duration_s=198,
        rate_per_s=3.36,
        changes=tuple(
            change
            for down, up in _BURSTS
            for change in (Change(down, "b1", replace(_B1, error_rate=1.0)), Change(up, "b1", _B1))
        ),
    ),
    Scenario(
        "ho13-tail",
        "a heavy first-token tail narrows at once and for good, its median unchanged: only the mean says the "
        "provider passed over is now the best",
        "four providers at 4.26 requests/s, answers of 6, 35 or 190 tokens; the quickest median first token (0.19 s, "
        "236 tok/s) has a spread of 1.25 (its mean 0.42 s) until 85 s and 0.3 after (0.2 s); a steady one (0.29 s, "
        "spread 0.2, 219 tok/s) is the best for short and middle answers before, a first party's (0.41 s, 262 tok/s, "
        "priced 2.4) for the long ones, and the narrowed one for all after",
        (
            _L1,
            Profile("l2", ttft_s=0.29, tps=219.0, price=0.45, ttft_sigma=0.2),
            Profile("l3", ttft_s=0.41, tps=262.0, price=2.4, ttft_sigma=0.25),
            Profile("l4", ttft_s=0.93, tps=112.0, price=0.12, tps_sigma=0.36),
        ),
        lengths=((6, 2), (35, 3), (190, 1)),
        duration_s=180,
        rate_per_s=4.26,
        changes=(Change(85, "l1", replace(_L1, ttft_sigma=0.3)),),
    ),
    Scenario(
        "ho13-mixed",
        "a spread of answer lengths over four providers each the best for its band: the middle band's leader streams "
        "slower a while, and its band splits between its neighbours",
        "answers of 3, 9, 27, 80, 240, 700, 1400 or 3200 tokens, equally likely, at 1.97 requests/s over a quick "
        "starter (0.15 s, 61 tok/s: the best up to 27 tokens), a second (0.4 s, 142 tok/s: 80), a third (0.88 s, 258 "
        "tok/s: 240 and 700) and a first party's streamer (1.85 s, 388 tok/s, priced 2.2: 1400 and 3200); from 15 s "
        "to 56 s the third streams at 150 tok/s, the second takes its 240 tokens, the streamer its 700",
        (
            Profile("x1", ttft_s=0.15, tps=61.0, price=0.58, ttft_sigma=0.22),
            Profile("x2", ttft_s=0.4, tps=142.0, price=0.34, tps_sigma=0.27),
            _X3,
            Profile("x4", ttft_s=1.85, tps=388.0, price=2.2, ttft_sigma=0.33),
        ),
        lengths=((3, 1), (9, 1), (27, 1), (80, 1), (240, 1), (700, 1), (1400, 1), (3200, 1)),
        duration_s=201,
        rate_per_s=1.97,
        changes=(Change(15, "x3", replace(_X3, tps=150.0)), Change(56, "x3", _X3)),
    ),
    Scenario(
        "ho13-close",
        "two near-equal leaders (3% apart) at prices five times apart; the dearer one streams an eighth slower a "
        "while, and the cheaper is the quicker meanwhile",
        "four providers at 1.58 requests/s, answers of 90, 380 or 1050 tokens; a first party's (0.27 s, 231 tok/s, "
        "priced 3.1) is a little quicker than a reseller (0.28 s, 224 tok/s, priced 0.57) until 85 s and from 138 s; "
        "between, it streams at 204 tok/s and the reseller is the quicker",
        (
            _C1,
            Profile("c2", ttft_s=0.28, tps=224.0, price=0.57),
            Profile("c3", ttft_s=0.46, tps=183.0, price=0.33, tps_sigma=0.31),
            Profile("c4", ttft_s=0.9, tps=112.0, price=0.11, ttft_sigma=0.43),
        ),
        lengths=((90, 2), (380, 3), (1050, 1)),
        duration_s=191,
        rate_per_s=1.58,
        changes=(Change(85, "c1", replace(_C1, tps=204.0)), Change(138, "c1", _C1)),
    ),
)
