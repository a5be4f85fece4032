"""The sixth held-out set of routing markets: written before the next round's changes, run on the routers once, last.

Sets one (``routing_scenarios.HELD_OUT``), two (``routing_held_out.HELD_OUT_2``), three
(``routing_held_out_3.HELD_OUT_3``), four (``routing_held_out_4.HELD_OUT_4``) and five
(``routing_held_out_5.HELD_OUT_5``) have each been looked at once and hold nothing out any more. These markets name
the same behaviours again, and two more (a short outage of the leader mid-run, a stable market at a low rate), with
fresh schedules, rates, lengths, provider counts, spreads and prices, the prices differing as real ones do
(``routing_simulate --held-out-6``). Never tune anything on them.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario


def _creep(start: Profile, end: Profile, from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """``start`` creeps to ``end`` in ``steps`` geometric steps of first token and speed between ``from_s`` and
    ``to_s``, both moving at once: a slow drift no step of which looks like a change on its own."""
    return tuple(
        Change(
            from_s + (to_s - from_s) * i / steps,
            start.name,
            replace(
                start,
                ttft_s=start.ttft_s * (end.ttft_s / start.ttft_s) ** (i / steps),
                tps=start.tps * (end.tps / start.tps) ** (i / steps),
            ),
        )
        for i in range(1, steps + 1)
    )


_S1 = Profile("s1", ttft_s=0.31, tps=217.0, price=0.66, ttft_sigma=0.35)
_S2 = Profile("s2", ttft_s=0.52, tps=164.0, price=0.41)

_FRONT = Profile("front", ttft_s=0.33, tps=207.0, price=0.0, tps_sigma=0.25)
_REAR = Profile("rear", ttft_s=0.82, tps=124.0, price=0.0, tps_sigma=0.25)
_T_PRICES = {"t1": 0.59, "t2": 0.38}


def _irregular_swaps(turns_s: tuple[float, ...]) -> tuple[Change, ...]:
    """``t1`` leads first; at the end of each turn in ``turns_s`` the lead passes to the other of ``t1`` and ``t2``,
    each keeping its own price."""
    changes = []
    at, first_leads = 0.0, True
    for turn in turns_s:
        at += turn
        first_leads = not first_leads
        lead, lag = ("t1", "t2") if first_leads else ("t2", "t1")
        changes.append(Change(at, lead, replace(_FRONT, name=lead, price=_T_PRICES[lead])))
        changes.append(Change(at, lag, replace(_REAR, name=lag, price=_T_PRICES[lag])))
    return tuple(changes)


_NINE = tuple(
    Profile(f"p{i}", ttft_s=ttft, tps=tps, price=price, ttft_sigma=ttft_sigma)
    for i, (ttft, tps, price, ttft_sigma) in enumerate(
        (
            (0.27, 232.0, 0.84, 0.25),
            (0.36, 198.0, 0.57, 0.3),
            (0.43, 221.0, 0.69, 0.45),
            (0.56, 176.0, 0.44, 0.3),
            (0.64, 152.0, 0.36, 0.35),
            (0.77, 139.0, 0.39, 0.3),
            (1.15, 88.0, 0.26, 0.4),
            (1.28, 71.0, 0.17, 0.5),
            (1.7, 58.0, 0.09, 0.55),
        )
    )
)

_J = (
    Profile("j1", ttft_s=0.26, tps=172.0, price=0.63),
    Profile("j2", ttft_s=0.44, tps=188.0, price=0.47),
    Profile("j3", ttft_s=0.61, tps=143.0, price=0.31),
    Profile("j4", ttft_s=0.93, tps=212.0, price=0.23),
)

_BLINK = Profile("blink", ttft_s=0.19, tps=48.0, price=0.71, ttft_sigma=0.2)
_SURGE = Profile("surge", ttft_s=1.1, tps=380.0, price=0.42, ttft_sigma=0.45)
_MEDIAN = Profile("median", ttft_s=0.52, tps=142.0, price=0.54)

_L1 = Profile("l1", ttft_s=0.34, tps=224.0, price=0.63)
_L3 = Profile("l3", ttft_s=0.71, tps=133.0, price=0.34)

_O1 = Profile("o1", ttft_s=0.29, tps=238.0, price=0.77, tps_sigma=0.15)

HELD_OUT_6: tuple[Scenario, ...] = (
    Scenario(
        "ho6-drift",
        "gradual drift, the leader and the runner-up slide past each other slowly",
        "four providers at 2.2 requests/s; from 18 s to 172 s the leader (0.31 s, 217 tok/s, the dearest) creeps "
        "to 0.74 s and 118 tok/s, first token and speed together, while from 33 s to 178 s the runner-up (0.52 s, "
        "164 tok/s) creeps to 0.29 s and 226 tok/s; answers of 110 or 520 tokens",
        (
            _S1,
            _S2,
            Profile("s3", ttft_s=0.63, tps=186.0, price=0.53, ttft_sigma=0.4),
            Profile("s4", ttft_s=1.05, tps=92.0, price=0.19),
        ),
        lengths=((110, 3), (520, 2)),
        duration_s=190,
        rate_per_s=2.2,
        changes=(
            *_creep(_S1, replace(_S1, ttft_s=0.74, tps=118.0), 18, 172, 30),
            *_creep(_S2, replace(_S2, ttft_s=0.29, tps=226.0), 33, 178, 28),
        ),
    ),
    Scenario(
        "ho6-oscillate",
        "oscillating leaders, irregular turns of tens of seconds, a dear leader and a cheap one",
        "two providers of different prices trade the lead (0.33 s, 207 tok/s against 0.82 s, 124 tok/s) in turns "
        "of 23, 34, 19, 41, 27, 16 and 31 s, then hold; a steady third (0.57 s, 158 tok/s) and a cheap slow fourth "
        "(1.3 s, 66 tok/s); 3.8 requests/s, answers of 88 or 330 tokens",
        (
            replace(_FRONT, name="t1", price=_T_PRICES["t1"]),
            replace(_REAR, name="t2", price=_T_PRICES["t2"]),
            Profile("t3", ttft_s=0.57, tps=158.0, price=0.49),
            Profile("t4", ttft_s=1.3, tps=66.0, price=0.14),
        ),
        lengths=((88, 2), (330, 1)),
        duration_s=200,
        rate_per_s=3.8,
        changes=_irregular_swaps((23, 34, 19, 41, 27, 16, 31)),
    ),
    Scenario(
        "ho6-many",
        "nine providers, a cheap slow one becomes the quickest mid-run",
        "nine providers at 4.6 requests/s, prices 0.09 to 0.84 and first-token spreads 0.25 to 0.55; the seventh "
        "(1.15 s, 88 tok/s, the third cheapest) becomes the quickest (0.24 s, 312 tok/s) 58 s in; answers of 36, "
        "270 or 840 tokens",
        _NINE,
        lengths=((36, 3), (270, 2), (840, 1)),
        duration_s=124,
        rate_per_s=4.6,
        changes=(Change(58, "p6", replace(_NINE[6], ttft_s=0.24, tps=312.0)),),
    ),
    Scenario(
        "ho6-ttft",
        "first-token spikes (the leader's, then the runner-up's) and their ends",
        "answers of 9, 28 or 70 tokens over four providers of different speeds and prices, 2.9 requests/s: the "
        "leader's first token goes 0.26 s → 1.37 s from 38 s to 66 s, and the runner-up's 0.44 s → 2.35 s from "
        "92 s to 104 s (while the leader is back ahead of it); each then is as before, and no speed changes",
        _J,
        lengths=((9, 3), (28, 2), (70, 1)),
        duration_s=132,
        rate_per_s=2.9,
        changes=(
            Change(38, "j1", replace(_J[0], ttft_s=1.37)),
            Change(66, "j1", _J[0]),
            Change(92, "j2", replace(_J[1], ttft_s=2.35)),
            Change(104, "j2", _J[1]),
        ),
    ),
    Scenario(
        "ho6-down-at-start",
        "the best provider down at start, recovering 52 s in",
        "five providers at 2.1 requests/s, answers of 155 or 380 tokens; the best (0.21 s, 285 tok/s, the dearest) "
        "fails every request until 52 s, then is healthy and the quickest",
        (
            Profile("b1", ttft_s=0.21, tps=285.0, price=0.74, error_rate=1.0),
            Profile("b2", ttft_s=0.48, tps=196.0, price=0.51),
            Profile("b3", ttft_s=0.66, tps=147.0, price=0.28),
            Profile("b4", ttft_s=0.59, tps=128.0, price=0.46, ttft_sigma=0.4),
            Profile("b5", ttft_s=1.22, tps=79.0, price=0.16),
        ),
        lengths=((155, 2), (380, 1)),
        duration_s=117,
        rate_per_s=2.1,
        changes=(Change(52, "b1", Profile("b1", ttft_s=0.21, tps=285.0, price=0.74)),),
    ),
    Scenario(
        "ho6-agent",
        "agent traffic: max_tokens 32000, short answers, the middle streams slower a while, then the quick starter "
        "starts slower a while",
        "every request asks for max_tokens 32000 and is answered in 3 to 130 tokens, at 1.3 requests/s; a quick "
        "starter that streams slowly (0.19 s, 48 tok/s), a slow starter that streams fast (1.1 s, 380 tok/s), a "
        "middle (0.52 s, 142 tok/s) and a cheap one (0.88 s, 97 tok/s); the middle streams at 62 tok/s from 44 s "
        "to 96 s, and the quick starter's first token rises to 0.78 s from 104 s to 126 s",
        (_BLINK, _SURGE, _MEDIAN, Profile("frugal", ttft_s=0.88, tps=97.0, price=0.13)),
        lengths=((3, 2), (14, 3), (34, 3), (130, 1)),
        duration_s=138,
        rate_per_s=1.3,
        max_tokens=32000,
        changes=(
            Change(44, "median", replace(_MEDIAN, tps=62.0)),
            Change(96, "median", _MEDIAN),
            Change(104, "blink", replace(_BLINK, ttft_s=0.78)),
            Change(126, "blink", _BLINK),
        ),
    ),
    Scenario(
        "ho6-replicas",
        "two replicas sharing a window, the leader slows, a cheap one overtakes",
        "two gateway replicas over one stats window, 3.3 requests/s between them; four providers, the leader "
        "(0.34 s, 224 tok/s) streams at 96 tok/s from 38 s on, and the third (0.71 s, 133 tok/s, the cheapest "
        "but one) becomes the quickest (0.23 s, 305 tok/s) 78 s in; answers of 230 or 610 tokens",
        (
            _L1,
            Profile("l2", ttft_s=0.47, tps=178.0, price=0.48),
            _L3,
            Profile("l4", ttft_s=1.08, tps=84.0, price=0.21),
        ),
        lengths=((230, 2), (610, 1)),
        duration_s=118,
        rate_per_s=3.3,
        changes=(
            Change(38, "l1", replace(_L1, tps=96.0)),
            Change(78, "l3", replace(_L3, ttft_s=0.23, tps=305.0)),
        ),
        replicas=2,
    ),
    Scenario(
        "ho6-outage",
        "a short outage of the leader mid-run, and its end",
        "five providers at 3.1 requests/s, answers of 75, 260 or 640 tokens; the leader (0.29 s, 238 tok/s, the "
        "dearest) fails every request from 57 s to 86 s, then is as before",
        (
            _O1,
            Profile("o2", ttft_s=0.49, tps=183.0, price=0.52),
            Profile("o3", ttft_s=0.68, tps=161.0, price=0.43, ttft_sigma=0.4),
            Profile("o4", ttft_s=0.87, tps=112.0, price=0.24),
            Profile("o5", ttft_s=1.45, tps=64.0, price=0.11),
        ),
        lengths=((75, 2), (260, 2), (640, 1)),
        duration_s=142,
        rate_per_s=3.1,
        changes=(Change(57, "o1", replace(_O1, error_rate=1.0)), Change(86, "o1", _O1)),
    ),
    Scenario(
        "ho6-slow-rate",
        "stable market of near-equal providers, sparse traffic",
        "four near-equal providers (0.39 to 0.45 s, 168 to 182 tok/s) at prices 0.33 to 0.58, 0.8 requests/s; "
        "nothing changes; answers of 165 or 470 tokens",
        (
            Profile("n1", ttft_s=0.41, tps=176.0, price=0.47),
            Profile("n2", ttft_s=0.43, tps=171.0, price=0.39),
            Profile("n3", ttft_s=0.39, tps=182.0, price=0.58),
            Profile("n4", ttft_s=0.45, tps=168.0, price=0.33),
        ),
        lengths=((165, 2), (470, 1)),
        duration_s=210,
        rate_per_s=0.8,
    ),
)
