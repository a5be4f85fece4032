"""The ninth held-out set of routing markets: written before the next round's changes, run on the routers once, last.

Sets one (``routing_scenarios.HELD_OUT``) to eight (``routing_held_out_8.HELD_OUT_8``) have each been looked at once
and hold nothing out any more. These markets name the same behaviours again (gradual drift, oscillating leaders, many
providers one of which changes, first-token-only changes and their end, a provider down at start, agent traffic with a
large fixed ``max_tokens``, replicas sharing a window, a short outage of the leader, answers of very different lengths,
a flaky quickest provider) and one more (a cold start over a quick starter and a fast streamer alone, both new), with
fresh schedules, rates, lengths, provider counts, change times, spreads and prices, the prices differing as real ones
do (``routing_simulate --held-out-9``). Never tune anything on them.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario, lead_passes


def _glide(start: Profile, end: Profile, from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """``start`` glides to ``end`` in ``steps`` even steps between ``from_s`` and ``to_s``, first token in the first
    half of the steps and speed in the second: a drift whose two halves each look like a different change."""
    half = steps // 2

    def at(i: int) -> Profile:
        ttft_share = min(i, half) / half
        tps_share = max(0, i - half) / (steps - half)
        return replace(
            start,
            ttft_s=start.ttft_s + (end.ttft_s - start.ttft_s) * ttft_share,
            tps=start.tps + (end.tps - start.tps) * tps_share,
        )

    return tuple(Change(from_s + (to_s - from_s) * i / steps, start.name, at(i)) for i in range(1, steps + 1))


_D2 = Profile("d2", ttft_s=0.35, tps=217.0, price=0.54, ttft_sigma=0.33)
_D4 = Profile("d4", ttft_s=0.97, tps=112.0, price=0.21)

_FRONT = Profile("front", ttft_s=0.26, tps=231.0, price=0.0, ttft_sigma=0.29, tps_sigma=0.18)
_REAR = Profile("rear", ttft_s=0.82, tps=119.0, price=0.0, ttft_sigma=0.39, tps_sigma=0.26)
_V_PRICES = {"v1": 0.47, "v2": 0.83, "v3": 0.26}


_EIGHT = tuple(
    Profile(f"n{i}", ttft_s=ttft, tps=tps, price=price, ttft_sigma=ttft_sigma, tps_sigma=tps_sigma)
    for i, (ttft, tps, price, ttft_sigma, tps_sigma) in enumerate(
        (
            (0.29, 238.0, 0.97, 0.31, 0.17),
            (0.38, 209.0, 0.69, 0.36, 0.23),
            (0.44, 196.0, 0.76, 0.28, 0.19),
            (0.56, 161.0, 0.52, 0.4, 0.24),
            (0.78, 128.0, 0.44, 0.35, 0.21),
            (0.88, 109.0, 0.29, 0.48, 0.26),
            (1.04, 97.0, 0.17, 0.32, 0.22),
            (1.56, 61.0, 0.06, 0.55, 0.29),
        )
    )
)

_TF = (
    Profile("tf1", ttft_s=0.19, tps=162.0, price=0.71),
    Profile("tf2", ttft_s=0.31, tps=188.0, price=0.39, ttft_sigma=0.42),
    Profile("tf3", ttft_s=0.49, tps=243.0, price=0.58),
    Profile("tf4", ttft_s=0.62, tps=134.0, price=0.22),
    Profile("tf5", ttft_s=0.83, tps=207.0, price=0.33, ttft_sigma=0.37),
    Profile("tf6", ttft_s=1.21, tps=79.0, price=0.08),
)

_UP3 = Profile("up3", ttft_s=0.22, tps=284.0, price=0.46, tps_sigma=0.15)

_SPARK = Profile("spark", ttft_s=0.13, tps=49.0, price=0.66, ttft_sigma=0.19)
_SURGE = Profile("surge", ttft_s=1.07, tps=361.0, price=0.31, ttft_sigma=0.51)

_RQ1 = Profile("rq1", ttft_s=0.29, tps=226.0, price=0.76)
_RQ5 = Profile("rq5", ttft_s=0.91, tps=107.0, price=0.19)

_OG2 = Profile("og2", ttft_s=0.24, tps=259.0, price=0.47, ttft_sigma=0.27)

_BLINK = Profile("blink", ttft_s=0.16, tps=39.0, price=0.53, ttft_sigma=0.23)
_SLUICE = Profile("sluice", ttft_s=1.39, tps=327.0, price=0.42, ttft_sigma=0.41)

_NIP = Profile("nip", ttft_s=0.12, tps=47.0, price=0.63, ttft_sigma=0.25)
_FLOOD = Profile("flood", ttft_s=1.31, tps=322.0, price=0.34, ttft_sigma=0.44)

_FL3 = Profile("fl3", ttft_s=0.64, tps=158.0, price=0.51)

HELD_OUT_9: tuple[Scenario, ...] = (
    Scenario(
        "ho9-drift",
        "gradual drift, the leader's first token wearing first and its speed after, while a cheap one improves evenly",
        "five providers at 1.8 requests/s; from 18 s to 152 s the leader (0.35 s, 217 tok/s, middle-priced) drifts "
        "to 0.88 s first token by 85 s, then to 98 tok/s by 152 s, while from 52 s to 176 s the second cheapest "
        "(0.97 s, 112 tok/s) drifts to 0.31 s by 114 s, then to 238 tok/s; answers of 110, 350 or 880 tokens",
        (
            Profile("d1", ttft_s=0.47, tps=183.0, price=0.79, tps_sigma=0.24),
            _D2,
            Profile("d3", ttft_s=0.58, tps=166.0, price=0.38, ttft_sigma=0.43),
            _D4,
            Profile("d5", ttft_s=1.42, tps=69.0, price=0.07),
        ),
        lengths=((110, 2), (350, 3), (880, 1)),
        duration_s=191,
        rate_per_s=1.8,
        changes=(
            *_glide(_D2, replace(_D2, ttft_s=0.88, tps=98.0), 18, 152, 28),
            *_glide(_D4, replace(_D4, ttft_s=0.31, tps=238.0), 52, 176, 22),
        ),
    ),
    Scenario(
        "ho9-oscillate",
        "oscillating leaders, the lead passed among three providers of three prices, with a steady fourth and a "
        "cheap fifth",
        "three providers of different prices take the lead in turn (0.26 s, 231 tok/s against 0.82 s, 119 tok/s for "
        "the two trailing): v1 leads 31 s, then v3 14 s, v2 26 s, v3 41 s, v1 19 s, v2 33 s, v1 21 s and v3 28 s, "
        "then v2 holds it; a steady fourth (0.51 s, 174 tok/s) and a cheap fifth (1.28 s, 71 tok/s); 3.3 requests/s, "
        "answers of 44, 205 or 530 tokens",
        (
            replace(_FRONT, name="v1", price=_V_PRICES["v1"]),
            replace(_REAR, name="v2", price=_V_PRICES["v2"]),
            replace(_REAR, name="v3", price=_V_PRICES["v3"]),
            Profile("v4", ttft_s=0.51, tps=174.0, price=0.61),
            Profile("v5", ttft_s=1.28, tps=71.0, price=0.12),
        ),
        lengths=((44, 3), (205, 3), (530, 1)),
        duration_s=219,
        rate_per_s=3.3,
        changes=lead_passes(
            ((31, "v3"), (14, "v2"), (26, "v3"), (41, "v1"), (19, "v2"), (33, "v1"), (21, "v3"), (28, "v2")),
            _FRONT,
            _REAR,
            _V_PRICES,
        ),
    ),
    Scenario(
        "ho9-many",
        "eight providers, the third cheapest becomes the quickest mid-run",
        "eight providers at 4.1 requests/s, prices 0.06 to 0.97 (not in order of speed), first-token spreads 0.28 "
        "to 0.55 and speed spreads 0.17 to 0.29; the sixth (0.88 s, 109 tok/s, priced 0.29, the third cheapest) "
        "becomes the quickest (0.2 s, 276 tok/s) 57 s in, taking the lead from the dearest (0.29 s, 238 tok/s); "
        "answers of 33, 170 or 810 tokens",
        _EIGHT,
        lengths=((33, 2), (170, 3), (810, 1)),
        duration_s=126,
        rate_per_s=4.1,
        changes=(Change(57, "n5", replace(_EIGHT[5], ttft_s=0.2, tps=276.0)),),
    ),
    Scenario(
        "ho9-ttft",
        "two first tokens move at overlapping times: the short answers' leader's rises, a cheaper one's falls, and "
        "both come back",
        "answers of 3, 9, 28 or 70 tokens over six providers of different speeds and prices, 2.4 requests/s: the "
        "short answers' leader's (0.19 s, 162 tok/s, the dearest) first token goes to 0.96 s from 38 s to 81 s; the "
        "second's (0.31 s, 188 tok/s, priced 0.39) falls to 0.09 s from 52 s to 104 s; no speed changes",
        _TF,
        lengths=((3, 3), (9, 2), (28, 2), (70, 1)),
        duration_s=136,
        rate_per_s=2.4,
        changes=(
            Change(38, "tf1", replace(_TF[0], ttft_s=0.96)),
            Change(52, "tf2", replace(_TF[1], ttft_s=0.09)),
            Change(81, "tf1", _TF[0]),
            Change(104, "tf2", _TF[1]),
        ),
    ),
    Scenario(
        "ho9-down-at-start",
        "the best provider (middle-priced) down at start, back at its best in one step",
        "five providers at 2.7 requests/s, answers of 150, 440 or 1020 tokens; the best (0.22 s, 284 tok/s, priced "
        "0.46 between 0.13 and 0.74) fails every request until 52 s, then is healthy and the quickest",
        (
            Profile("up1", ttft_s=0.39, tps=203.0, price=0.74, ttft_sigma=0.34),
            Profile("up2", ttft_s=0.53, tps=177.0, price=0.58),
            replace(_UP3, error_rate=1.0),
            Profile("up4", ttft_s=0.74, tps=139.0, price=0.27, tps_sigma=0.27),
            Profile("up5", ttft_s=1.09, tps=91.0, price=0.13),
        ),
        lengths=((150, 2), (440, 2), (1020, 1)),
        duration_s=108,
        rate_per_s=2.7,
        changes=(Change(52, "up3", _UP3),),
    ),
    Scenario(
        "ho9-agent",
        "agent traffic: max_tokens 32768, short answers, the fast streamer starts sooner a while, then the quick "
        "starter starts slower a while",
        "every request asks for max_tokens 32768 and is answered in 1 to 240 tokens, at 1.6 requests/s; a quick "
        "starter that streams slowly (0.13 s, 49 tok/s), a slow starter that streams fast (1.07 s, 361 tok/s), a "
        "middle (0.44 s, 163 tok/s) and a cheap one (1.16 s, 82 tok/s); the fast streamer's first token falls to "
        "0.23 s from 29 s to 66 s, and the quick starter's rises to 0.79 s from 94 s to 128 s",
        (
            _SPARK,
            _SURGE,
            Profile("hub", ttft_s=0.44, tps=163.0, price=0.57, ttft_sigma=0.35),
            Profile("scrap", ttft_s=1.16, tps=82.0, price=0.09),
        ),
        lengths=((1, 1), (6, 2), (18, 3), (41, 3), (88, 2), (240, 1)),
        duration_s=141,
        rate_per_s=1.6,
        max_tokens=32768,
        changes=(
            Change(29, "surge", replace(_SURGE, ttft_s=0.23)),
            Change(66, "surge", _SURGE),
            Change(94, "spark", replace(_SPARK, ttft_s=0.79)),
            Change(128, "spark", _SPARK),
        ),
    ),
    Scenario(
        "ho9-replicas",
        "three replicas sharing a window, the leader starts slower a while, the second cheapest overtakes meanwhile",
        "three gateway replicas over one stats window, 4.0 requests/s between them; six providers, the leader "
        "(0.29 s, 226 tok/s, the dearest) starts at 1.14 s from 41 s to 88 s, and the fifth (0.91 s, 107 tok/s, the "
        "second cheapest) becomes the quickest (0.21 s, 268 tok/s) 73 s in; answers of 120, 390 or 940 tokens",
        (
            _RQ1,
            Profile("rq2", ttft_s=0.42, tps=198.0, price=0.64, ttft_sigma=0.38),
            Profile("rq3", ttft_s=0.55, tps=171.0, price=0.41),
            Profile("rq4", ttft_s=0.67, tps=152.0, price=0.49, tps_sigma=0.25),
            _RQ5,
            Profile("rq6", ttft_s=1.37, tps=66.0, price=0.11),
        ),
        lengths=((120, 2), (390, 2), (940, 1)),
        duration_s=132,
        rate_per_s=4.0,
        changes=(
            Change(41, "rq1", replace(_RQ1, ttft_s=1.14)),
            Change(73, "rq5", replace(_RQ5, ttft_s=0.21, tps=268.0)),
            Change(88, "rq1", _RQ1),
        ),
        replicas=3,
    ),
    Scenario(
        "ho9-outage",
        "a short outage of the leader (middle-priced) mid-run, and its end",
        "five providers at 2.8 requests/s, answers of 58, 260 or 870 tokens; the leader (0.24 s, 259 tok/s, priced "
        "0.47, below the runner-up's 0.59 and above the third's 0.36) fails every request from 57 s to 94 s, then is "
        "as before",
        (
            Profile("og1", ttft_s=0.41, tps=212.0, price=0.59),
            _OG2,
            Profile("og3", ttft_s=0.63, tps=158.0, price=0.36, ttft_sigma=0.46),
            Profile("og4", ttft_s=0.87, tps=121.0, price=0.72, tps_sigma=0.28),
            Profile("og5", ttft_s=1.26, tps=84.0, price=0.14),
        ),
        lengths=((58, 2), (260, 3), (870, 1)),
        duration_s=143,
        rate_per_s=2.8,
        changes=(Change(57, "og2", replace(_OG2, error_rate=1.0)), Change(94, "og2", _OG2)),
    ),
    Scenario(
        "ho9-mixed",
        "answers of very different lengths over a quick starter, a fast streamer, a middling third and a cheap one",
        "answers of 6, 17, 720 or 2400 tokens at 2.25 requests/s over a quick starter that streams slowly (0.16 s, "
        "39 tok/s), a slow starter that streams fast (1.39 s, 327 tok/s), a middling third (0.52 s, 183 tok/s) and a "
        "cheap fourth (1.02 s, 104 tok/s); the quick starter's first token rises to 0.74 s from 52 s to 91 s, and "
        "the fast streamer's rises to 2.15 s from 103 s to 131 s",
        (
            _BLINK,
            _SLUICE,
            Profile("plain", ttft_s=0.52, tps=183.0, price=0.61),
            Profile("thrift", ttft_s=1.02, tps=104.0, price=0.18, ttft_sigma=0.36),
        ),
        lengths=((6, 3), (17, 2), (720, 2), (2400, 1)),
        duration_s=146,
        rate_per_s=2.25,
        changes=(
            Change(52, "blink", replace(_BLINK, ttft_s=0.74)),
            Change(91, "blink", _BLINK),
            Change(103, "sluice", replace(_SLUICE, ttft_s=2.15)),
            Change(131, "sluice", _SLUICE),
        ),
    ),
    Scenario(
        "ho9-cold",
        "a cold start over a quick starter and a fast streamer alone, both new, answers of very different lengths",
        "two providers only, neither measured at the start: a quick starter that streams slowly (0.12 s, 47 tok/s, "
        "the dearer) and a slow starter that streams fast (1.31 s, 322 tok/s); answers of 3, 11, 560 or 1700 tokens "
        "at 2.4 requests/s; the fast streamer's first token falls to 0.16 s from 66 s to 97 s",
        (_NIP, _FLOOD),
        lengths=((3, 3), (11, 2), (560, 2), (1700, 1)),
        duration_s=118,
        rate_per_s=2.4,
        changes=(Change(66, "flood", replace(_FLOOD, ttft_s=0.16)), Change(97, "flood", _FLOOD)),
    ),
    Scenario(
        "ho9-flaky",
        "the quickest provider fails 23% of requests instantly, all through; a middle-priced reliable one overtakes "
        "a while",
        "six providers at 2.65 requests/s, answers of 68, 330 or 1240 tokens; the quickest (0.21 s, 266 tok/s) fails "
        "23% of its requests at once from start to end, and the third (0.64 s, 158 tok/s, priced 0.51) is quicker "
        "than it (0.18 s, 293 tok/s) from 71 s to 118 s",
        (
            Profile("fl1", ttft_s=0.21, tps=266.0, price=0.57, error_rate=0.23),
            Profile("fl2", ttft_s=0.37, tps=217.0, price=0.68, ttft_sigma=0.35),
            _FL3,
            Profile("fl4", ttft_s=0.72, tps=141.0, price=0.32),
            Profile("fl5", ttft_s=0.96, tps=113.0, price=0.44, tps_sigma=0.26),
            Profile("fl6", ttft_s=1.44, tps=73.0, price=0.1),
        ),
        lengths=((68, 2), (330, 2), (1240, 1)),
        duration_s=155,
        rate_per_s=2.65,
        changes=(Change(71, "fl3", replace(_FL3, ttft_s=0.18, tps=293.0)), Change(118, "fl3", _FL3)),
    ),
)
