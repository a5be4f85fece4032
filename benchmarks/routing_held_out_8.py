"""The eighth held-out set of routing markets: written before the next round's changes, run on the routers once, last.

Sets one (``routing_scenarios.HELD_OUT``) to seven (``routing_held_out_7.HELD_OUT_7``) have each been looked at once
and hold nothing out any more. These markets name the same behaviours again (gradual drift, oscillating leaders, many
providers one of which changes, first-token-only changes and their end, a provider down at start, agent traffic with a
large fixed ``max_tokens``, replicas sharing a window, a short outage of the leader, answers of very different lengths,
a flaky quickest provider) with fresh schedules, rates, lengths, provider counts, change times, spreads and prices, the
prices differing as real ones do (``routing_simulate --held-out-8``). Never tune anything on them.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario, lead_passes


def _bend(start: Profile, end: Profile, from_s: float, to_s: float, steps: int, power: float) -> tuple[Change, ...]:
    """``start`` moves to ``end`` in ``steps`` steps of first token and speed between ``from_s`` and ``to_s``, both
    at once, the share done after step *i* being (i / steps) ** ``power``: below one the drift is quickest at first
    and slows, above one it starts slowly and quickens, so the two drifts of one market do not move alike."""
    return tuple(
        Change(
            from_s + (to_s - from_s) * i / steps,
            start.name,
            replace(
                start,
                ttft_s=start.ttft_s + (end.ttft_s - start.ttft_s) * (i / steps) ** power,
                tps=start.tps + (end.tps - start.tps) * (i / steps) ** power,
            ),
        )
        for i in range(1, steps + 1)
    )


_A1 = Profile("a1", ttft_s=0.33, tps=224.0, price=0.58, ttft_sigma=0.31)
_A4 = Profile("a4", ttft_s=1.02, tps=104.0, price=0.24)

_AHEAD = Profile("ahead", ttft_s=0.28, tps=214.0, price=0.0, ttft_sigma=0.36)
_ASTERN = Profile("astern", ttft_s=0.77, tps=128.0, price=0.0, ttft_sigma=0.36, tps_sigma=0.23)
_X_PRICES = {"x1": 0.71, "x2": 0.39, "x3": 0.52, "x4": 0.18}


_SEVEN = tuple(
    Profile(f"i{i}", ttft_s=ttft, tps=tps, price=price, ttft_sigma=ttft_sigma, tps_sigma=tps_sigma)
    for i, (ttft, tps, price, ttft_sigma, tps_sigma) in enumerate(
        (
            (0.41, 203.0, 0.88, 0.29, 0.21),
            (0.27, 251.0, 0.74, 0.34, 0.19),
            (0.36, 219.0, 0.61, 0.38, 0.23),
            (0.52, 177.0, 0.47, 0.27, 0.25),
            (0.69, 143.0, 0.38, 0.44, 0.2),
            (0.91, 112.0, 0.19, 0.33, 0.22),
            (1.37, 72.0, 0.11, 0.57, 0.28),
        )
    )
)

_FT = (
    Profile("ft1", ttft_s=0.21, tps=148.0, price=0.62),
    Profile("ft2", ttft_s=0.34, tps=227.0, price=0.55),
    Profile("ft3", ttft_s=0.46, tps=166.0, price=0.31, ttft_sigma=0.47),
    Profile("ft4", ttft_s=0.71, tps=259.0, price=0.28),
    Profile("ft5", ttft_s=0.58, tps=121.0, price=0.42),
    Profile("ft6", ttft_s=1.09, tps=88.0, price=0.1),
)

_DS2 = Profile("ds2", ttft_s=0.24, tps=277.0, price=0.41)

_DART = Profile("dart", ttft_s=0.15, tps=44.0, price=0.61, ttft_sigma=0.21)
_BARGE = Profile("barge", ttft_s=1.19, tps=338.0, price=0.35, ttft_sigma=0.46)

_RP1 = Profile("rp1", ttft_s=0.32, tps=231.0, price=0.61)
_RP4 = Profile("rp4", ttft_s=0.83, tps=118.0, price=0.23)

_OT1 = Profile("ot1", ttft_s=0.26, tps=246.0, price=0.38, tps_sigma=0.16)

_LEVEL = Profile("level", ttft_s=0.57, tps=171.0, price=0.46)
_HAULER = Profile("hauler", ttft_s=1.48, tps=297.0, price=0.37, ttft_sigma=0.39)

_FK4 = Profile("fk4", ttft_s=0.86, tps=131.0, price=0.29)

HELD_OUT_8: tuple[Scenario, ...] = (
    Scenario(
        "ho8-drift",
        "gradual drift, the leader wearing out quickly then slowly while a cheap one improves slowly then quickly",
        "six providers at 1.7 requests/s; from 21 s to 158 s the leader (0.33 s, 224 tok/s, the second dearest) "
        "drifts to 0.93 s and 94 tok/s, most of the way early, while from 47 s to 171 s the second cheapest (1.02 s, "
        "104 tok/s) drifts to 0.29 s and 233 tok/s, most of the way late; answers of 95, 380 or 820 tokens",
        (
            _A1,
            Profile("a2", ttft_s=0.52, tps=172.0, price=0.81, tps_sigma=0.26),
            Profile("a3", ttft_s=0.61, tps=181.0, price=0.44, ttft_sigma=0.41),
            _A4,
            Profile("a5", ttft_s=0.79, tps=127.0, price=0.36),
            Profile("a6", ttft_s=1.47, tps=66.0, price=0.09),
        ),
        lengths=((95, 3), (380, 2), (820, 1)),
        duration_s=198,
        rate_per_s=1.7,
        changes=(
            *_bend(_A1, replace(_A1, ttft_s=0.93, tps=94.0), 21, 158, 26, 0.6),
            *_bend(_A4, replace(_A4, ttft_s=0.29, tps=233.0), 47, 171, 31, 1.7),
        ),
    ),
    Scenario(
        "ho8-oscillate",
        "oscillating leaders, the lead handed round four providers of four prices in no fixed order",
        "four providers of different prices take the lead in turn (0.28 s, 214 tok/s against 0.77 s, 128 tok/s for "
        "the three trailing): x1 leads 27 s, then x3 18 s, x2 34 s, x4 22 s, x1 39 s, x3 16 s, x4 29 s and x2 24 s, "
        "then x1 holds it; 3.2 requests/s, answers of 52, 240 or 610 tokens",
        (
            replace(_AHEAD, name="x1", price=_X_PRICES["x1"]),
            replace(_ASTERN, name="x2", price=_X_PRICES["x2"]),
            replace(_ASTERN, name="x3", price=_X_PRICES["x3"]),
            replace(_ASTERN, name="x4", price=_X_PRICES["x4"]),
        ),
        lengths=((52, 3), (240, 2), (610, 1)),
        duration_s=226,
        rate_per_s=3.2,
        changes=lead_passes(
            ((27, "x3"), (18, "x2"), (34, "x4"), (22, "x1"), (39, "x3"), (16, "x4"), (29, "x2"), (24, "x1")),
            _AHEAD,
            _ASTERN,
            _X_PRICES,
        ),
    ),
    Scenario(
        "ho8-many",
        "seven providers, the leader (second dearest) becomes one of the slowest mid-run",
        "seven providers at 4.0 requests/s, prices 0.11 to 0.88, first-token spreads 0.27 to 0.57 and speed spreads "
        "0.19 to 0.28; the leader (0.27 s, 251 tok/s, priced 0.74) slows to 1.06 s and 81 tok/s 61 s in, leaving "
        "the lead to the third dearest (0.36 s, 219 tok/s); answers of 38, 190 or 740 tokens",
        _SEVEN,
        lengths=((38, 2), (190, 3), (740, 1)),
        duration_s=129,
        rate_per_s=4.0,
        changes=(Change(61, "i1", replace(_SEVEN[1], ttft_s=1.06, tps=81.0)),),
    ),
    Scenario(
        "ho8-ttft",
        "the short answers' leader's first token spikes and comes back; later a cheap fast streamer's first token "
        "falls a while",
        "answers of 4, 13, 36 or 81 tokens over six providers of different speeds and prices, 2.5 requests/s: the "
        "short answers' leader's (0.21 s, 148 tok/s, the dearest) first token goes 0.21 s → 1.27 s from 33 s to 58 s, "
        "then is as before; the fourth's (0.71 s, "
        "259 tok/s, the second cheapest) falls to 0.12 s from 84 s to 109 s; no speed changes",
        _FT,
        lengths=((4, 2), (13, 3), (36, 2), (81, 1)),
        duration_s=133,
        rate_per_s=2.5,
        changes=(
            Change(33, "ft1", replace(_FT[0], ttft_s=1.27)),
            Change(58, "ft1", _FT[0]),
            Change(84, "ft4", replace(_FT[3], ttft_s=0.12)),
            Change(109, "ft4", _FT[3]),
        ),
    ),
    Scenario(
        "ho8-down-at-start",
        "the best provider (second cheapest) down at start, back first slow to start, then at its best",
        "four providers at 2.6 requests/s, answers of 135, 415 or 960 tokens; the best (0.24 s, 277 tok/s, priced "
        "0.41 between 0.14 and 0.67) fails every request until 46 s, then answers with a 0.74 s first token until "
        "71 s, then is the quickest",
        (
            Profile("ds1", ttft_s=0.43, tps=196.0, price=0.67),
            replace(_DS2, error_rate=1.0),
            Profile("ds3", ttft_s=0.66, tps=151.0, price=0.29, ttft_sigma=0.42),
            Profile("ds4", ttft_s=1.18, tps=84.0, price=0.14),
        ),
        lengths=((135, 2), (415, 1), (960, 1)),
        duration_s=113,
        rate_per_s=2.6,
        changes=(Change(46, "ds2", replace(_DS2, ttft_s=0.74)), Change(71, "ds2", _DS2)),
    ),
    Scenario(
        "ho8-agent",
        "agent traffic: max_tokens 32000, short answers, the quick starter starts slower a while, then the fast "
        "streamer starts sooner a while",
        "every request asks for max_tokens 32000 and is answered in 2 to 210 tokens, at 1.55 requests/s; a quick "
        "starter that streams slowly (0.15 s, 44 tok/s), a slow starter that streams fast (1.19 s, 338 tok/s), a "
        "middle (0.48 s, 151 tok/s), a second middle (0.64 s, 119 tok/s) and a cheap one (0.97 s, 86 tok/s); the "
        "quick starter's first token rises to 0.67 s from 33 s to 71 s, and the fast streamer's falls to 0.27 s from "
        "88 s to 124 s",
        (
            _DART,
            _BARGE,
            Profile("core", ttft_s=0.48, tps=151.0, price=0.53),
            Profile("spare", ttft_s=0.64, tps=119.0, price=0.27, ttft_sigma=0.38),
            Profile("mite", ttft_s=0.97, tps=86.0, price=0.12),
        ),
        lengths=((2, 1), (9, 3), (23, 3), (49, 2), (96, 1), (210, 1)),
        duration_s=137,
        rate_per_s=1.55,
        max_tokens=32000,
        changes=(
            Change(33, "dart", replace(_DART, ttft_s=0.67)),
            Change(71, "dart", _DART),
            Change(88, "barge", replace(_BARGE, ttft_s=0.27)),
            Change(124, "barge", _BARGE),
        ),
    ),
    Scenario(
        "ho8-replicas",
        "two replicas sharing a window, the leader streams slower a while, a cheap one overtakes meanwhile",
        "two gateway replicas over one stats window, 4.1 requests/s between them; five providers, the leader "
        "(0.32 s, 231 tok/s, the second dearest) streams at 104 tok/s from 36 s to 92 s, and the fourth (0.83 s, "
        "118 tok/s, the second cheapest) becomes the quickest (0.24 s, 289 tok/s) 64 s in; answers of 170, 430 or "
        "820 tokens",
        (
            _RP1,
            Profile("rp2", ttft_s=0.49, tps=187.0, price=0.79, ttft_sigma=0.37),
            Profile("rp3", ttft_s=0.57, tps=163.0, price=0.44),
            _RP4,
            Profile("rp5", ttft_s=1.24, tps=77.0, price=0.13),
        ),
        lengths=((170, 3), (430, 2), (820, 1)),
        duration_s=129,
        rate_per_s=4.1,
        changes=(
            Change(36, "rp1", replace(_RP1, tps=104.0)),
            Change(64, "rp4", replace(_RP4, ttft_s=0.24, tps=289.0)),
            Change(92, "rp1", _RP1),
        ),
        replicas=2,
    ),
    Scenario(
        "ho8-outage",
        "a short outage of the leader (the second cheapest) mid-run, and its end",
        "four providers at 2.9 requests/s, answers of 62, 285 or 790 tokens; the leader (0.26 s, 246 tok/s, priced "
        "0.38, under half the runner-up's 0.81) fails every request from 49 s to 73 s, then is as before",
        (
            _OT1,
            Profile("ot2", ttft_s=0.44, tps=208.0, price=0.81),
            Profile("ot3", ttft_s=0.71, tps=139.0, price=0.52, ttft_sigma=0.44),
            Profile("ot4", ttft_s=1.13, tps=93.0, price=0.17),
        ),
        lengths=((62, 2), (285, 2), (790, 1)),
        duration_s=139,
        rate_per_s=2.9,
        changes=(Change(49, "ot1", replace(_OT1, error_rate=1.0)), Change(73, "ot1", _OT1)),
    ),
    Scenario(
        "ho8-mixed",
        "answers of very different lengths over a quick starter, a fast streamer, a middling third and a cheap one",
        "answers of 4, 13, 640 or 2100 tokens at 2.2 requests/s over a quick starter that streams slowly (0.14 s, "
        "41 tok/s), a slow starter that streams fast (1.48 s, 297 tok/s), a middling third (0.57 s, 171 tok/s) and a "
        "cheap fourth (0.95 s, 118 tok/s); the middling third's first token falls to 0.11 s from 61 s to 96 s, and "
        "the fast streamer streams at 141 tok/s from 108 s to 137 s",
        (
            Profile("flick", ttft_s=0.14, tps=41.0, price=0.58, ttft_sigma=0.26),
            _HAULER,
            _LEVEL,
            Profile("lean", ttft_s=0.95, tps=118.0, price=0.16),
        ),
        lengths=((4, 3), (13, 2), (640, 2), (2100, 1)),
        duration_s=149,
        rate_per_s=2.2,
        changes=(
            Change(61, "level", replace(_LEVEL, ttft_s=0.11)),
            Change(96, "level", _LEVEL),
            Change(108, "hauler", replace(_HAULER, tps=141.0)),
            Change(137, "hauler", _HAULER),
        ),
    ),
    Scenario(
        "ho8-flaky",
        "the quickest provider fails 31% of requests instantly, all through; a cheap reliable one overtakes a while",
        "five providers at 2.75 requests/s, answers of 74, 300 or 1180 tokens; the quickest (0.19 s, 272 tok/s) "
        "fails 31% of its requests at once from start to end, and the fourth (0.86 s, 131 tok/s, the second "
        "cheapest) is quicker than it (0.17 s, 301 tok/s) from 64 s to 109 s",
        (
            Profile("fk1", ttft_s=0.19, tps=272.0, price=0.66, error_rate=0.31),
            Profile("fk2", ttft_s=0.41, tps=209.0, price=0.48),
            Profile("fk3", ttft_s=0.58, tps=174.0, price=0.57, ttft_sigma=0.41),
            _FK4,
            Profile("fk5", ttft_s=1.31, tps=79.0, price=0.12),
        ),
        lengths=((74, 2), (300, 2), (1180, 1)),
        duration_s=152,
        rate_per_s=2.75,
        changes=(Change(64, "fk4", replace(_FK4, ttft_s=0.17, tps=301.0)), Change(109, "fk4", _FK4)),
    ),
)
