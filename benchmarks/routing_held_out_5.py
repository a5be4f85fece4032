"""The fifth held-out set of routing markets: written before the next tuning round, run on the routers once, at the end.

Sets one (``routing_scenarios.HELD_OUT``), two (``routing_held_out.HELD_OUT_2``), three
(``routing_held_out_3.HELD_OUT_3``) and four (``routing_held_out_4.HELD_OUT_4``) have each been looked at once and hold
nothing out any more. These markets name the same behaviours again with fresh schedules, rates, lengths, provider
counts and prices, and providers whose prices differ as real ones do (``routing_simulate --held-out-5``). Never tune
anything on them.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario, linear_steps

_Q1 = Profile("q1", ttft_s=0.32, tps=250.0, price=0.7)
_Q4 = Profile("q4", ttft_s=0.85, tps=135.0, price=0.28)

_AHEAD = Profile("ahead", ttft_s=0.28, tps=165.0, price=0.0)
_BEHIND = Profile("behind", ttft_s=0.75, tps=130.0, price=0.0)
_V_PRICES = {"v1": 0.7, "v2": 0.35}


def _lengthening_swaps(turns_s: tuple[float, ...]) -> tuple[Change, ...]:
    """``v1`` leads first; at the end of each turn in ``turns_s`` the lead passes to the other of ``v1`` and ``v2``,
    each keeping its own price."""
    changes = []
    at, first_leads = 0.0, True
    for turn in turns_s:
        at += turn
        first_leads = not first_leads
        lead, lag = ("v1", "v2") if first_leads else ("v2", "v1")
        changes.append(Change(at, lead, replace(_AHEAD, name=lead, price=_V_PRICES[lead])))
        changes.append(Change(at, lag, replace(_BEHIND, name=lag, price=_V_PRICES[lag])))
    return tuple(changes)


_ELEVEN = tuple(
    Profile(f"m{i}", ttft_s=ttft, tps=tps, price=price)
    for i, (ttft, tps, price) in enumerate(
        (
            (0.3, 245.0, 0.75),
            (0.38, 205.0, 0.62),
            (0.46, 215.0, 0.52),
            (0.52, 185.0, 0.48),
            (0.58, 165.0, 0.4),
            (0.68, 145.0, 0.42),
            (0.82, 125.0, 0.33),
            (0.9, 105.0, 0.27),
            (1.1, 85.0, 0.22),
            (1.5, 60.0, 0.12),
            (1.9, 50.0, 0.1),
        )
    )
)

_F = (
    Profile("f1", ttft_s=0.28, tps=150.0, price=0.65),
    Profile("f2", ttft_s=0.42, tps=180.0, price=0.45),
    Profile("f3", ttft_s=0.55, tps=135.0, price=0.38),
    Profile("f4", ttft_s=1.0, tps=160.0, price=0.25),
    Profile("f5", ttft_s=1.35, tps=95.0, price=0.15),
)

_SNAP = Profile("snap", ttft_s=0.18, tps=45.0, price=0.6)
_GUSH = Profile("gush", ttft_s=1.2, tps=420.0, price=0.35)
_STEADY = Profile("steady", ttft_s=0.45, tps=150.0, price=0.5)

_Z1 = Profile("z1", ttft_s=0.35, tps=230.0, price=0.68)
_Z4 = Profile("z4", ttft_s=0.8, tps=115.0, price=0.3)

HELD_OUT_5: tuple[Scenario, ...] = (
    Scenario(
        "ho5-drift",
        "gradual drift, the leader wears out while a cheap one improves",
        "five providers at 1.75 requests/s; from 10 s to 110 s the leader (0.32 s, 250 tok/s, the dearest) drifts "
        "linearly to 0.95 s and 105 tok/s, first token and speed together, while from 60 s to 160 s the cheapest "
        "(0.85 s, 135 tok/s) drifts to 0.4 s and 235 tok/s; answers of 180 or 700 tokens",
        (
            _Q1,
            Profile("q2", ttft_s=0.55, tps=175.0, price=0.5),
            Profile("q3", ttft_s=0.48, tps=150.0, price=0.6),
            _Q4,
            Profile("q5", ttft_s=1.25, tps=75.0, price=0.32),
        ),
        lengths=((180, 3), (700, 1)),
        duration_s=170,
        rate_per_s=1.75,
        changes=(
            *linear_steps(_Q1, replace(_Q1, ttft_s=0.95, tps=105.0), 10, 110, 20),
            *linear_steps(_Q4, replace(_Q4, ttft_s=0.4, tps=235.0), 60, 160, 25),
        ),
    ),
    Scenario(
        "ho5-oscillate",
        "oscillating leaders, turns that lengthen, a dear leader and a cheap one",
        "two providers of different prices trade the lead (0.28 s, 165 tok/s against 0.75 s, 130 tok/s) in turns of "
        "5, 7, 9, 12, 16, 21, 28 and 35 s, then hold; a steady third (0.5 s, 150 tok/s) in between on price; "
        "5.5 requests/s, answers of 56 or 210 tokens",
        (
            replace(_AHEAD, name="v1", price=_V_PRICES["v1"]),
            replace(_BEHIND, name="v2", price=_V_PRICES["v2"]),
            Profile("v3", ttft_s=0.5, tps=150.0, price=0.45),
        ),
        lengths=((56, 2), (210, 1)),
        duration_s=155,
        rate_per_s=5.5,
        changes=_lengthening_swaps((5, 7, 9, 12, 16, 21, 28, 35)),
    ),
    Scenario(
        "ho5-many",
        "eleven providers, the leader's speed halves, the cheapest slow one takes the lead, the third turns flaky",
        "eleven providers at 4.25 requests/s, prices 0.1 to 0.75; the leader (0.3 s, 245 tok/s) streams at 110 tok/s "
        "from 40 s on, the tenth (1.5 s, 60 tok/s, the second cheapest) becomes the quickest (0.27 s, 290 tok/s) "
        "75 s in, and the third (0.46 s, 215 tok/s) fails 25% of requests from 95 s on; answers of 40, 300 or 900 "
        "tokens",
        _ELEVEN,
        lengths=((40, 2), (300, 2), (900, 1)),
        duration_s=115,
        rate_per_s=4.25,
        changes=(
            Change(40, "m0", replace(_ELEVEN[0], tps=110.0)),
            Change(75, "m9", replace(_ELEVEN[9], ttft_s=0.27, tps=290.0)),
            Change(95, "m2", replace(_ELEVEN[2], error_rate=0.25)),
        ),
    ),
    Scenario(
        "ho5-ttft",
        "first-token rises (one of them not the best's) and a first-token fall, and their ends",
        "answers of 6, 20 or 50 tokens over five providers of different speeds and prices, 3.25 requests/s: the "
        "leader's first token goes 0.28 s → 0.9 s from 20 s to 50 s, the second's 0.42 s → 1.6 s from 60 s to "
        "75 s (while the leader is back ahead of it), and the fourth's falls 1.0 s → 0.16 s from 90 s to 120 s; "
        "each then is as before",
        _F,
        lengths=((6, 2), (20, 3), (50, 2)),
        duration_s=135,
        rate_per_s=3.25,
        changes=(
            Change(20, "f1", replace(_F[0], ttft_s=0.9)),
            Change(50, "f1", _F[0]),
            Change(60, "f2", replace(_F[1], ttft_s=1.6)),
            Change(75, "f2", _F[1]),
            Change(90, "f4", replace(_F[3], ttft_s=0.16)),
            Change(120, "f4", _F[3]),
        ),
    ),
    Scenario(
        "ho5-down-at-start",
        "the best and the cheapest down at start, the second failing for a while mid-run",
        "six providers at 2.75 requests/s, answers of 100 or 500 tokens; the best (0.22 s, 300 tok/s, the dearest) "
        "fails every request until 60 s and the cheapest (0.6 s, 160 tok/s) until 15 s; the second (0.4 s, "
        "210 tok/s) fails every request from 20 s to 45 s; each is healthy after",
        (
            Profile("u1", ttft_s=0.22, tps=300.0, price=0.8, error_rate=1.0),
            Profile("u2", ttft_s=0.4, tps=210.0, price=0.45),
            Profile("u3", ttft_s=0.6, tps=160.0, price=0.15, error_rate=1.0),
            Profile("u4", ttft_s=0.7, tps=150.0, price=0.55),
            Profile("u5", ttft_s=0.95, tps=110.0, price=0.3),
            Profile("u6", ttft_s=1.45, tps=70.0, price=0.2),
        ),
        lengths=((100, 1), (500, 1)),
        duration_s=105,
        rate_per_s=2.75,
        changes=(
            Change(15, "u3", Profile("u3", ttft_s=0.6, tps=160.0, price=0.15)),
            Change(20, "u2", Profile("u2", ttft_s=0.4, tps=210.0, price=0.45, error_rate=1.0)),
            Change(45, "u2", Profile("u2", ttft_s=0.4, tps=210.0, price=0.45)),
            Change(60, "u1", Profile("u1", ttft_s=0.22, tps=300.0, price=0.8)),
        ),
    ),
    Scenario(
        "ho5-agent",
        "agent traffic: max_tokens 128000, very short answers, the middle starts sooner a while, the quick starter "
        "goes down a while",
        "every request asks for max_tokens 128000 and is answered in 1 to 90 tokens, at 1.6 requests/s; a quick "
        "starter that streams slowly (0.18 s, 45 tok/s), a slow starter that streams fast (1.2 s, 420 tok/s), a "
        "middle (0.45 s, 150 tok/s) and a cheap one (0.7 s, 80 tok/s); the middle's first token falls to 0.15 s "
        "from 40 s to 85 s, and the quick starter fails every request from 95 s to 120 s",
        (_SNAP, _GUSH, _STEADY, Profile("thrift", ttft_s=0.7, tps=80.0, price=0.18)),
        lengths=((1, 1), (6, 3), (18, 3), (45, 2), (90, 1)),
        duration_s=128,
        rate_per_s=1.6,
        max_tokens=128000,
        changes=(
            Change(40, "steady", replace(_STEADY, ttft_s=0.15)),
            Change(85, "steady", _STEADY),
            Change(95, "snap", replace(_SNAP, error_rate=1.0)),
            Change(120, "snap", _SNAP),
        ),
    ),
    Scenario(
        "ho5-replicas",
        "two replicas sharing a window, the leader's first token rises, a cheap one overtakes",
        "two gateway replicas over one stats window, 5.75 requests/s between them; five providers, the leader's "
        "first token (0.35 s, 230 tok/s) rises to 1.4 s 30 s in, and the fourth (0.8 s, 115 tok/s, the second "
        "cheapest) becomes the quickest (0.35 s, 270 tok/s) 70 s in; answers of 140 or 420 tokens",
        (
            _Z1,
            Profile("z2", ttft_s=0.5, tps=190.0, price=0.52),
            Profile("z3", ttft_s=0.62, tps=200.0, price=0.58),
            _Z4,
            Profile("z5", ttft_s=1.15, tps=80.0, price=0.22),
        ),
        lengths=((140, 2), (420, 1)),
        duration_s=112,
        rate_per_s=5.75,
        changes=(
            Change(30, "z1", replace(_Z1, ttft_s=1.4)),
            Change(70, "z4", replace(_Z4, ttft_s=0.35, tps=270.0)),
        ),
        replicas=2,
    ),
)
