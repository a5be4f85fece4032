"""The fourth held-out set of routing markets: written before this round's tuning, run on the routers once, at the end.

Sets one (``routing_scenarios.HELD_OUT``), two (``routing_held_out.HELD_OUT_2``) and three
(``routing_held_out_3.HELD_OUT_3``) have each been looked at once and hold nothing out any more. These markets name
the same behaviours again with fresh schedules, rates, lengths, provider counts and prices
(``routing_simulate --held-out-4``). Never tune anything on them.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario, linear_steps

_G1 = Profile("g1", ttft_s=0.35, tps=260.0, price=0.55)
_G3 = Profile("g3", ttft_s=1.2, tps=190.0, price=0.45)

_UP = Profile("up", ttft_s=0.5, tps=180.0, price=0.5)
_DOWN = Profile("down", ttft_s=0.9, tps=110.0, price=0.5)


def _shortening_swaps(turns_s: tuple[float, ...]) -> tuple[Change, ...]:
    """``k1`` leads first; at the end of each turn in ``turns_s`` the lead passes to the other of ``k1`` and ``k2``."""
    changes = []
    at, first_leads = 0.0, True
    for turn in turns_s:
        at += turn
        first_leads = not first_leads
        lead, lag = ("k1", "k2") if first_leads else ("k2", "k1")
        changes.append(Change(at, lead, replace(_UP, name=lead)))
        changes.append(Change(at, lag, replace(_DOWN, name=lag)))
    return tuple(changes)


_EIGHT = tuple(
    Profile(f"e{i}", ttft_s=ttft, tps=tps, price=price)
    for i, (ttft, tps, price) in enumerate(
        (
            (0.3, 240.0, 0.6),
            (0.42, 225.0, 0.5),
            (0.5, 180.0, 0.45),
            (0.65, 160.0, 0.5),
            (0.75, 130.0, 0.35),
            (1.0, 100.0, 0.3),
            (1.3, 80.0, 0.25),
            (1.8, 55.0, 0.15),
        )
    )
)

_H = tuple(Profile(f"h{i}", ttft_s=ttft, tps=120.0, price=0.4) for i, ttft in enumerate((0.35, 0.5, 0.6, 0.9), 1))

_EAGER = Profile("eager", ttft_s=0.2, tps=55.0, price=0.5)
_EVEN = Profile("even", ttft_s=0.5, tps=130.0, price=0.5)

_C1 = Profile("c1", ttft_s=0.3, tps=240.0, price=0.6)
_C3 = Profile("c3", ttft_s=0.9, tps=100.0, price=0.4)

HELD_OUT_4: tuple[Scenario, ...] = (
    Scenario(
        "ho4-drift",
        "gradual drift, two providers in opposite directions",
        "four providers at 2.5 requests/s; from 15 s to 135 s the leader's speed falls linearly 260 → 70 tok/s (its "
        "first token stays 0.35 s), while from 30 s to 150 s the third's first token falls 1.2 s → 0.3 s (its speed "
        "stays 190 tok/s); answers of 150 or 450 tokens",
        (
            _G1,
            Profile("g2", ttft_s=0.6, tps=150.0, price=0.4),
            _G3,
            Profile("g4", ttft_s=0.8, tps=95.0, price=0.25),
        ),
        lengths=((150, 2), (450, 1)),
        duration_s=165,
        rate_per_s=2.5,
        changes=(
            *linear_steps(_G1, replace(_G1, tps=70.0), 15, 135, 24),
            *linear_steps(_G3, replace(_G3, ttft_s=0.3), 30, 150, 18),
        ),
    ),
    Scenario(
        "ho4-oscillate",
        "oscillating leaders, turns that shorten",
        "two providers trade the lead (0.5 s, 180 tok/s against 0.9 s, 110 tok/s) in turns of 25, 20, 15, 12, 10, "
        "8, 8, 6, 6 and 6 s, then hold; a steady third (0.6 s, 150 tok/s) at a higher price and a cheap slow "
        "fourth (1.4 s, 60 tok/s); 4.5 requests/s, answers of 120 or 360 tokens",
        (
            replace(_UP, name="k1"),
            replace(_DOWN, name="k2"),
            Profile("k3", ttft_s=0.6, tps=150.0, price=0.65),
            Profile("k4", ttft_s=1.4, tps=60.0, price=0.2),
        ),
        lengths=((120, 3), (360, 1)),
        duration_s=150,
        rate_per_s=4.5,
        changes=_shortening_swaps((25, 20, 15, 12, 10, 8, 8, 6, 6, 6)),
    ),
    Scenario(
        "ho4-many",
        "eight providers, the second turns flaky, a slow one takes the lead, the leader's first token rises",
        "eight providers at 3.5 requests/s; the second (0.42 s, 225 tok/s) fails 40% of requests from 35 s on, the "
        "sixth (1.0 s, 100 tok/s) becomes the quickest (0.22 s, 300 tok/s) 65 s in, and the leader's first token "
        "goes 0.3 s → 1.5 s 95 s in; answers of 64, 256 or 768 tokens",
        _EIGHT,
        lengths=((64, 3), (256, 2), (768, 1)),
        duration_s=130,
        rate_per_s=3.5,
        changes=(
            Change(35, "e1", replace(_EIGHT[1], error_rate=0.4)),
            Change(65, "e5", replace(_EIGHT[5], ttft_s=0.22, tps=300.0)),
            Change(95, "e0", replace(_EIGHT[0], ttft_s=1.5)),
        ),
    ),
    Scenario(
        "ho4-ttft",
        "first-token shifts that last, and their ends",
        "answers of 8, 32 or 64 tokens over four providers of equal speed (120 tok/s): the leader's first token "
        "goes 0.35 s → 1.1 s from 25 s to 70 s, then is as before; the fourth's falls 0.9 s → 0.2 s from 85 s to "
        "125 s, then is as before; 3.5 requests/s",
        _H,
        lengths=((8, 2), (32, 2), (64, 1)),
        duration_s=145,
        rate_per_s=3.5,
        changes=(
            Change(25, "h1", replace(_H[0], ttft_s=1.1)),
            Change(70, "h1", _H[0]),
            Change(85, "h4", replace(_H[3], ttft_s=0.2)),
            Change(125, "h4", _H[3]),
        ),
    ),
    Scenario(
        "ho4-down-at-start",
        "the best provider down at start for long, a cheap one down briefly",
        "five providers at 2.5 requests/s, answers of 64 or 256 tokens; the best (0.25 s, 280 tok/s) fails every "
        "request until 70 s and the cheapest (0.7 s, 140 tok/s) until 25 s; then both are healthy",
        (
            Profile("b1", ttft_s=0.25, tps=280.0, price=0.65, error_rate=1.0),
            Profile("b2", ttft_s=0.55, tps=170.0, price=0.5),
            Profile("b3", ttft_s=0.7, tps=140.0, price=0.2, error_rate=1.0),
            Profile("b4", ttft_s=0.9, tps=120.0, price=0.4),
            Profile("b5", ttft_s=1.6, tps=65.0, price=0.3),
        ),
        lengths=((64, 1), (256, 1)),
        duration_s=120,
        rate_per_s=2.5,
        changes=(
            Change(25, "b3", Profile("b3", ttft_s=0.7, tps=140.0, price=0.2)),
            Change(70, "b1", Profile("b1", ttft_s=0.25, tps=280.0, price=0.65)),
        ),
    ),
    Scenario(
        "ho4-agent",
        "agent traffic: max_tokens 64000, very short answers, the quick starter slows, the middle goes down a while",
        "every request asks for max_tokens 64000 and is answered in 2 to 120 tokens, at 2 requests/s; a quick "
        "starter that streams slowly (0.2 s, 55 tok/s), a slow starter that streams fast (1.0 s, 350 tok/s), a "
        "middle (0.5 s, 130 tok/s) and a cheap one (0.8 s, 90 tok/s); the quick starter's first token rises to "
        "0.9 s from 55 s to 105 s, and the middle fails every request from 80 s to 115 s",
        (
            _EAGER,
            Profile("burst", ttft_s=1.0, tps=350.0, price=0.5),
            _EVEN,
            Profile("cheap", ttft_s=0.8, tps=90.0, price=0.2),
        ),
        lengths=((2, 2), (10, 3), (40, 3), (120, 1)),
        duration_s=140,
        rate_per_s=2.0,
        max_tokens=64000,
        changes=(
            Change(55, "eager", replace(_EAGER, ttft_s=0.9)),
            Change(80, "even", replace(_EVEN, error_rate=1.0)),
            Change(105, "eager", _EAGER),
            Change(115, "even", _EVEN),
        ),
    ),
    Scenario(
        "ho4-replicas",
        "three replicas sharing a window, the leader slows, the third overtakes",
        "three gateway replicas over one stats window, 4.5 requests/s between them; three providers, the "
        "leader's speed (0.3 s, 240 tok/s) falls to 60 tok/s 40 s in, and the third (0.9 s, 100 tok/s) becomes "
        "the quickest (0.3 s, 280 tok/s) 85 s in; answers of 220 tokens",
        (_C1, Profile("c2", ttft_s=0.5, tps=170.0, price=0.5), _C3),
        lengths=((220, 1),),
        duration_s=125,
        rate_per_s=4.5,
        changes=(
            Change(40, "c1", replace(_C1, tps=60.0)),
            Change(85, "c3", replace(_C3, ttft_s=0.3, tps=280.0)),
        ),
        replicas=3,
    ),
)
