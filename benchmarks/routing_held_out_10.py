"""The tenth held-out set of routing markets: written before any tuning, run on the routers once, last.

Sets one (``routing_scenarios.HELD_OUT``) to eight (``routing_held_out_8.HELD_OUT_8``) have each been looked at once;
set nine (``routing_held_out_9.HELD_OUT_9``) was still unrun when this one was written, and nothing here was taken
from a run of it. These markets name the same behaviours again (gradual drift, oscillating leaders, many providers,
first-token-only changes and their end, a provider down at start, agent traffic with a large fixed ``max_tokens`` and
short answers, two replicas sharing a window, an outage and its end, answers of very different lengths, a cold start,
a flaky quickest provider) and one kind no earlier set holds: the leader's first-token spread widening mid-run while
its median stays, so that only the tail (and the mean it drags up) says it is no longer the best, and narrowing again
(``ho10-tail``).

The new random choices were drawn with ``random.Random("routing-held-out-10")``, in this order: the cold start's kind
(``"quick-starter/slow-streamer"`` or ``"correlated"``: correlated came up, so its three providers are quick or slow
all round, first token and speed together) and its size (2 or 3: three), the many-provider count (8-12: nine), the
flaky share (0.2-0.4: 0.36), the outage's length (10-50 s: 32 s), then per market a duration (105-230 s), a rate
(1.4-4.3 requests/s) and four change times (12-140 s, sorted), the agent's ceiling (24576), and the oscillation's turns
(31, 27, 17 and 11 s are used; the market is 106 s long). Those drawn figures are used as drawn; the provider profiles
(first tokens, speeds, spreads, prices, the prices differing as real ones do) are fresh, written for each market so
that its behaviour holds (``routing_simulate --held-out-10``). Never tune anything on them.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario, lead_passes


def _halting(start: Profile, end: Profile, legs: tuple[tuple[float, float], ...], steps: int) -> tuple[Change, ...]:
    """``start`` moves to ``end`` in ``steps`` even steps of first token and speed per leg, each leg a (from_s, to_s),
    an equal share of the way in each and the market still between legs: a drift that halts and resumes."""
    total = steps * len(legs)
    changes = []
    for leg, (from_s, to_s) in enumerate(legs):
        for i in range(1, steps + 1):
            share = (leg * steps + i) / total
            changes.append(
                Change(
                    from_s + (to_s - from_s) * i / steps,
                    start.name,
                    replace(
                        start,
                        ttft_s=start.ttft_s + (end.ttft_s - start.ttft_s) * share,
                        tps=start.tps + (end.tps - start.tps) * share,
                    ),
                )
            )
    return tuple(changes)


_E1 = Profile("e1", ttft_s=0.31, tps=246.0, price=0.63, ttft_sigma=0.34)
_E4 = Profile("e4", ttft_s=1.13, tps=96.0, price=0.22, tps_sigma=0.27)

_LEAD = Profile("lead", ttft_s=0.23, tps=268.0, price=0.0, ttft_sigma=0.32, tps_sigma=0.19)
_TRAIL = Profile("trail", ttft_s=0.91, tps=118.0, price=0.0, ttft_sigma=0.43, tps_sigma=0.25)
_W_PRICES = {"w1": 0.58, "w2": 0.29}


_NINE = tuple(
    Profile(f"m{i}", ttft_s=ttft, tps=tps, price=price, ttft_sigma=ttft_sigma, tps_sigma=tps_sigma)
    for i, (ttft, tps, price, ttft_sigma, tps_sigma) in enumerate(
        (
            (0.26, 257.0, 0.84, 0.3, 0.18),
            (0.34, 229.0, 0.61, 0.43, 0.21),
            (0.45, 201.0, 0.55, 0.25, 0.24),
            (0.51, 186.0, 0.71, 0.37, 0.17),
            (0.63, 150.0, 0.42, 0.48, 0.22),
            (0.75, 139.0, 0.32, 0.3, 0.27),
            (1.13, 98.0, 0.23, 0.47, 0.25),
            (0.91, 126.0, 0.15, 0.27, 0.2),
            (1.54, 64.0, 0.05, 0.54, 0.3),
        )
    )
)

_TT = (
    Profile("tt1", ttft_s=0.17, tps=171.0, price=0.66, ttft_sigma=0.26),
    Profile("tt2", ttft_s=0.36, tps=212.0, price=0.48),
    Profile("tt3", ttft_s=0.53, tps=159.0, price=0.29, ttft_sigma=0.46),
    Profile("tt4", ttft_s=0.88, tps=281.0, price=0.37),
    Profile("tt5", ttft_s=0.69, tps=131.0, price=0.19),
    Profile("tt6", ttft_s=1.25, tps=74.0, price=0.07),
)

_DN2 = Profile("dn2", ttft_s=0.2, tps=296.0, price=0.61, tps_sigma=0.17)

_PIP = Profile("pip", ttft_s=0.15, tps=52.0, price=0.59, ttft_sigma=0.22)
_TORRENT = Profile("torrent", ttft_s=1.25, tps=330.0, price=0.41, ttft_sigma=0.48)
_MID = Profile("mid", ttft_s=0.51, tps=158.0, price=0.46, ttft_sigma=0.31)

_RR1 = Profile("rr1", ttft_s=0.27, tps=252.0, price=0.55)
_RR3 = Profile("rr3", ttft_s=0.63, tps=150.0, price=0.32, ttft_sigma=0.4)

_OU1 = Profile("ou1", ttft_s=0.25, tps=263.0, price=0.15, ttft_sigma=0.29)

_TICK = Profile("tick", ttft_s=0.13, tps=46.0, price=0.57, ttft_sigma=0.2)
_RIVER = Profile("river", ttft_s=1.53, tps=372.0, price=0.38, ttft_sigma=0.42)

_BRISK = Profile("brisk", ttft_s=0.21, tps=289.0, price=0.61, ttft_sigma=0.27)
_DRAG = Profile("drag", ttft_s=1.13, tps=104.0, price=0.19, ttft_sigma=0.45, tps_sigma=0.24)

_FY4 = Profile("fy4", ttft_s=0.75, tps=139.0, price=0.23)

_TL1 = Profile("tl1", ttft_s=0.33, tps=236.0, price=0.52, ttft_sigma=0.24)

HELD_OUT_10: tuple[Scenario, ...] = (
    Scenario(
        "ho10-drift",
        "gradual drift that halts and resumes: the leader wears out in two legs while a cheap one improves in two",
        "five providers at 3.86 requests/s; the leader (0.31 s, 246 tok/s, the second dearest) drifts evenly half "
        "way (0.68 s, 169 tok/s) from 14 s to 79 s, holds until 90 s, then drifts on to 1.05 s and 91 tok/s by "
        "115 s, while the second cheapest (1.13 s, 96 tok/s) drifts to 0.27 s and 259 tok/s over the same two legs, "
        "half way (0.70 s, 178 tok/s) at the halt; "
        "answers of 70, 310 or 960 tokens",
        (
            _E1,
            Profile("e2", ttft_s=0.48, tps=197.0, price=0.84, tps_sigma=0.23),
            Profile("e3", ttft_s=0.69, tps=162.0, price=0.41, ttft_sigma=0.47),
            _E4,
            Profile("e5", ttft_s=1.54, tps=72.0, price=0.15),
        ),
        lengths=((70, 2), (310, 3), (960, 1)),
        duration_s=229,
        rate_per_s=3.86,
        changes=(
            *_halting(_E1, replace(_E1, ttft_s=1.05, tps=91.0), ((14, 79), (90, 115)), 12),
            *_halting(_E4, replace(_E4, ttft_s=0.27, tps=259.0), ((14, 79), (90, 115)), 12),
        ),
    ),
    Scenario(
        "ho10-oscillate",
        "oscillating leaders, two providers of two prices trading the lead in shortening turns, a steady third and a "
        "cheap fourth",
        "two providers of different prices trade the lead (0.23 s, 268 tok/s against 0.91 s, 118 tok/s for the one "
        "trailing): w1 leads 31 s, then w2 27 s, w1 17 s, w2 11 s, then w1 holds it; a steady third (0.57 s, "
        "177 tok/s) and a cheap fourth (1.25 s, 88 tok/s); 3.08 requests/s, answers of 40, 230 or 690 tokens",
        (
            replace(_LEAD, name="w1", price=_W_PRICES["w1"]),
            replace(_TRAIL, name="w2", price=_W_PRICES["w2"]),
            Profile("w3", ttft_s=0.57, tps=177.0, price=0.42, ttft_sigma=0.37),
            Profile("w4", ttft_s=1.25, tps=88.0, price=0.19),
        ),
        lengths=((40, 2), (230, 3), (690, 1)),
        duration_s=106,
        rate_per_s=3.08,
        changes=lead_passes(((31, "w2"), (27, "w1"), (17, "w2"), (11, "w1")), _LEAD, _TRAIL, _W_PRICES),
    ),
    Scenario(
        "ho10-many",
        "nine providers, a cheap slow one becomes the quickest a while, then is as before",
        "nine providers at 3.37 requests/s, prices 0.05 to 0.84 (not in order of speed), first-token spreads 0.25 "
        "to 0.54 and speed spreads 0.17 to 0.3; the seventh (1.13 s, 98 tok/s, priced 0.23, the third cheapest) is "
        "the quickest (0.19 s, 297 tok/s) from 101 s to 134 s, ahead of the dearest (0.26 s, 257 tok/s); answers of "
        "45, 220 or 780 tokens",
        _NINE,
        lengths=((45, 2), (220, 3), (780, 1)),
        duration_s=186,
        rate_per_s=3.37,
        changes=(Change(101, "m6", replace(_NINE[6], ttft_s=0.19, tps=297.0)), Change(134, "m6", _NINE[6])),
    ),
    Scenario(
        "ho10-ttft",
        "the short answers' leader's first token rises for long and comes back; then a cheap fast streamer's first "
        "token falls a while",
        "answers of 2, 8, 31 or 66 tokens over six providers of different speeds and prices, 2.13 requests/s: the "
        "short answers' leader's (0.17 s, 171 tok/s, the dearest) first token goes to 1.08 s from 18 s to 89 s; the "
        "fourth's (0.88 s, 281 tok/s, priced 0.37) falls to 0.11 s from 95 s to 114 s; no speed changes",
        _TT,
        lengths=((2, 2), (8, 3), (31, 2), (66, 1)),
        duration_s=146,
        rate_per_s=2.13,
        changes=(
            Change(18, "tt1", replace(_TT[0], ttft_s=1.08)),
            Change(89, "tt1", _TT[0]),
            Change(95, "tt4", replace(_TT[3], ttft_s=0.11)),
            Change(114, "tt4", _TT[3]),
        ),
    ),
    Scenario(
        "ho10-down-at-start",
        "the best provider (the second dearest) down at start for long, back at its best in one step",
        "five providers at 4.07 requests/s, answers of 160, 470 or 1130 tokens; the best (0.2 s, 296 tok/s, priced "
        "0.61 between 0.12 and 0.78) fails every request until 79 s, then is healthy and the quickest",
        (
            Profile("dn1", ttft_s=0.41, tps=207.0, price=0.78, ttft_sigma=0.36),
            replace(_DN2, error_rate=1.0),
            Profile("dn3", ttft_s=0.58, tps=181.0, price=0.44),
            Profile("dn4", ttft_s=0.81, tps=133.0, price=0.31, tps_sigma=0.26),
            Profile("dn5", ttft_s=1.16, tps=87.0, price=0.12),
        ),
        lengths=((160, 2), (470, 2), (1130, 1)),
        duration_s=154,
        rate_per_s=4.07,
        changes=(Change(79, "dn2", _DN2),),
    ),
    Scenario(
        "ho10-agent",
        "agent traffic: max_tokens 24576, short answers, the middle starts quickest a while, and overlapping it the "
        "fast streamer starts sooner a while",
        "every request asks for max_tokens 24576 and is answered in 2 to 230 tokens, at 2.24 requests/s; a quick "
        "starter that streams slowly (0.15 s, 52 tok/s), a slow starter that streams fast (1.25 s, 330 tok/s), a "
        "middle (0.51 s, 158 tok/s) and a cheap one (1.08 s, 91 tok/s); the middle's first token falls to 0.11 s "
        "from 52 s to 99 s, and the fast streamer's to 0.21 s from 56 s to 114 s",
        (
            _PIP,
            _TORRENT,
            _MID,
            Profile("cheap", ttft_s=1.08, tps=91.0, price=0.08),
        ),
        lengths=((2, 2), (7, 3), (21, 3), (55, 2), (130, 1), (230, 1)),
        duration_s=152,
        rate_per_s=2.24,
        max_tokens=24576,
        changes=(
            Change(52, "mid", replace(_MID, ttft_s=0.11)),
            Change(56, "torrent", replace(_TORRENT, ttft_s=0.21)),
            Change(99, "mid", _MID),
            Change(114, "torrent", _TORRENT),
        ),
    ),
    Scenario(
        "ho10-replicas",
        "two replicas sharing a window, the leader slows all round a while, a cheap one overtakes for good meanwhile",
        "two gateway replicas over one stats window, 2.92 requests/s between them; five providers, the leader "
        "(0.27 s, 252 tok/s, the second dearest) answers at 0.88 s and 131 tok/s from 41 s to 119 s, and the third "
        "(0.63 s, 150 tok/s, the second cheapest) becomes the quickest (0.22 s, 281 tok/s) 77 s in and stays so; "
        "answers of 140, 410 or 870 tokens",
        (
            _RR1,
            Profile("rr2", ttft_s=0.44, tps=203.0, price=0.69, ttft_sigma=0.33),
            _RR3,
            Profile("rr4", ttft_s=0.72, tps=146.0, price=0.47, tps_sigma=0.26),
            Profile("rr5", ttft_s=1.31, tps=71.0, price=0.09),
        ),
        lengths=((140, 2), (410, 3), (870, 1)),
        duration_s=208,
        rate_per_s=2.92,
        changes=(
            Change(41, "rr1", replace(_RR1, ttft_s=0.88, tps=131.0)),
            Change(77, "rr3", replace(_RR3, ttft_s=0.22, tps=281.0)),
            Change(119, "rr1", _RR1),
        ),
        replicas=2,
    ),
    Scenario(
        "ho10-outage",
        "an outage of the leader (the cheapest) mid-run, and its end",
        "six providers at 3.32 requests/s, answers of 85, 270 or 930 tokens; the leader (0.25 s, 263 tok/s, priced "
        "0.15, the cheapest) fails every request from 48 s to 80 s, then is as before",
        (
            _OU1,
            Profile("ou2", ttft_s=0.39, tps=219.0, price=0.63),
            Profile("ou3", ttft_s=0.52, tps=187.0, price=0.81, ttft_sigma=0.41),
            Profile("ou4", ttft_s=0.68, tps=152.0, price=0.34),
            Profile("ou5", ttft_s=0.93, tps=118.0, price=0.26, tps_sigma=0.29),
            Profile("ou6", ttft_s=1.27, tps=81.0, price=0.22),
        ),
        lengths=((85, 2), (270, 3), (930, 1)),
        duration_s=160,
        rate_per_s=3.32,
        changes=(Change(48, "ou1", replace(_OU1, error_rate=1.0)), Change(80, "ou1", _OU1)),
    ),
    Scenario(
        "ho10-mixed",
        "answers of very different lengths over a quick starter, a fast streamer, a middling third and a cheap one",
        "answers of 2, 9, 480 or 3100 tokens at 2.65 requests/s over a quick starter that streams slowly (0.13 s, "
        "46 tok/s), a slow starter that streams fast (1.53 s, 372 tok/s), a middling third (0.62 s, 194 tok/s) and a "
        "cheap fourth (1.04 s, 121 tok/s); the fast streamer streams at 158 tok/s from 26 s to 72 s, then the quick "
        "starter's first token rises to 0.86 s from 72 s to 123 s",
        (
            _TICK,
            _RIVER,
            Profile("middling", ttft_s=0.62, tps=194.0, price=0.49),
            Profile("frugal", ttft_s=1.04, tps=121.0, price=0.14, ttft_sigma=0.39),
        ),
        lengths=((2, 3), (9, 2), (480, 2), (3100, 1)),
        duration_s=230,
        rate_per_s=2.65,
        changes=(
            Change(26, "river", replace(_RIVER, tps=158.0)),
            Change(72, "river", _RIVER),
            Change(72, "tick", replace(_TICK, ttft_s=0.86)),
            Change(123, "tick", _TICK),
        ),
    ),
    Scenario(
        "ho10-cold",
        "a cold start over three correlated providers (quick or slow all round), all new; the slow one becomes the "
        "quickest a while",
        "three providers only, none measured at the start, first token and speed going together: one quick all round "
        "(0.21 s, 289 tok/s, the dearest), a middle (0.55 s, 196 tok/s) and one slow all round (1.13 s, 104 tok/s, "
        "the cheapest); answers of 4, 40, 380 or 1500 tokens at 1.96 requests/s; the slow one is quick all round "
        "(0.17 s, 318 tok/s) from 58 s to 108 s",
        (_BRISK, Profile("even", ttft_s=0.55, tps=196.0, price=0.42, tps_sigma=0.23), _DRAG),
        lengths=((4, 2), (40, 3), (380, 2), (1500, 1)),
        duration_s=139,
        rate_per_s=1.96,
        changes=(Change(58, "drag", replace(_DRAG, ttft_s=0.17, tps=318.0)), Change(108, "drag", _DRAG)),
    ),
    Scenario(
        "ho10-flaky",
        "the quickest provider fails 36% of requests instantly, all through; a cheap reliable one overtakes a while",
        "six providers at 2.26 requests/s, answers of 90, 360 or 1310 tokens; the quickest (0.16 s, 301 tok/s) fails "
        "36% of its requests at once from start to end, and the fourth (0.75 s, 139 tok/s, the second cheapest) is "
        "quicker than it (0.14 s, 334 tok/s) from 35 s to 109 s",
        (
            Profile("fy1", ttft_s=0.16, tps=301.0, price=0.53, error_rate=0.36),
            Profile("fy2", ttft_s=0.35, tps=224.0, price=0.72, ttft_sigma=0.38),
            Profile("fy3", ttft_s=0.54, tps=183.0, price=0.45, tps_sigma=0.28),
            _FY4,
            Profile("fy5", ttft_s=0.97, tps=109.0, price=0.36),
            Profile("fy6", ttft_s=1.39, tps=70.0, price=0.11),
        ),
        lengths=((90, 2), (360, 2), (1310, 1)),
        duration_s=161,
        rate_per_s=2.26,
        changes=(Change(35, "fy4", replace(_FY4, ttft_s=0.14, tps=334.0)), Change(109, "fy4", _FY4)),
    ),
    Scenario(
        "ho10-tail",
        "the leader's first-token tail widens a while, its median unchanged: only the tail says it is no longer best",
        "four providers at 1.92 requests/s, answers of 24, 90 or 260 tokens; the leader (0.33 s median first token, "
        "spread 0.24, 236 tok/s) has a first-token spread of 1.15 (p95 2.2 s, its mean near twice its median) from "
        "60 s to 108 s, its median and speed unchanged, then is as before; the runner-up (0.47 s, 214 tok/s) is then "
        "the best",
        (
            _TL1,
            Profile("tl2", ttft_s=0.47, tps=214.0, price=0.58, ttft_sigma=0.28),
            Profile("tl3", ttft_s=0.71, tps=167.0, price=0.33, tps_sigma=0.26),
            Profile("tl4", ttft_s=1.18, tps=93.0, price=0.13),
        ),
        lengths=((24, 2), (90, 3), (260, 1)),
        duration_s=128,
        rate_per_s=1.92,
        changes=(Change(60, "tl1", replace(_TL1, ttft_sigma=1.15)), Change(108, "tl1", _TL1)),
    ),
)
