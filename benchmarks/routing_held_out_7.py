"""The seventh held-out set of routing markets: written before the next round's changes, run on the routers once, last.

Sets one (``routing_scenarios.HELD_OUT``) to six (``routing_held_out_6.HELD_OUT_6``) have each been looked at once and
hold nothing out any more. These markets name the same behaviours again, and two more (answers of very different
lengths over a quick starter, a fast streamer and a middling third; the quickest provider failing a share of its
requests all through), with fresh schedules, rates, lengths, provider counts, change times, spreads and prices, the
prices differing as real ones do (``routing_simulate --held-out-7``). Never tune anything on them.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario


def _ease(start: Profile, end: Profile, from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """``start`` eases to ``end`` in ``steps`` steps of first token and speed between ``from_s`` and ``to_s``, both
    moving at once along a smoothstep (slow, then quicker, then slow again): a drift whose first and last steps are
    too small to look like a change, and whose middle ones are not large either."""

    def eased(i: int) -> float:
        x = i / steps
        return x * x * (3 - 2 * x)

    return tuple(
        Change(
            from_s + (to_s - from_s) * i / steps,
            start.name,
            replace(
                start,
                ttft_s=start.ttft_s + (end.ttft_s - start.ttft_s) * eased(i),
                tps=start.tps + (end.tps - start.tps) * eased(i),
            ),
        )
        for i in range(1, steps + 1)
    )


_G1 = Profile("g1", ttft_s=0.37, tps=206.0, price=0.72, ttft_sigma=0.28)
_G4 = Profile("g4", ttft_s=0.94, tps=109.0, price=0.27)

_HEAD = Profile("head", ttft_s=0.31, tps=193.0, price=0.0, ttft_sigma=0.33)
_PACK = Profile("pack", ttft_s=0.69, tps=141.0, price=0.0, ttft_sigma=0.33)
_R_PRICES = {"r1": 0.64, "r2": 0.43, "r3": 0.29}


def _rotation(turns_s: tuple[float, ...]) -> tuple[Change, ...]:
    """``r1`` leads first; at the end of each turn in ``turns_s`` the lead passes on round the three, ``r1`` to ``r2``
    to ``r3`` to ``r1``, the two others trailing, each keeping its own price."""
    names = ("r1", "r2", "r3")
    changes = []
    at = 0.0
    for i, turn in enumerate(turns_s):
        at += turn
        lead = names[(i + 1) % 3]
        for name in names:
            shape = _HEAD if name == lead else _PACK
            changes.append(Change(at, name, replace(shape, name=name, price=_R_PRICES[name])))
    return tuple(changes)


_TEN = tuple(
    Profile(f"k{i}", ttft_s=ttft, tps=tps, price=price, ttft_sigma=ttft_sigma, tps_sigma=tps_sigma)
    for i, (ttft, tps, price, ttft_sigma, tps_sigma) in enumerate(
        (
            (0.24, 246.0, 0.93, 0.32, 0.18),
            (0.33, 214.0, 0.78, 0.35, 0.22),
            (0.39, 189.0, 0.66, 0.26, 0.2),
            (0.47, 201.0, 0.58, 0.42, 0.24),
            (0.71, 131.0, 0.49, 0.31, 0.2),
            (0.62, 159.0, 0.41, 0.46, 0.27),
            (0.84, 117.0, 0.34, 0.3, 0.21),
            (0.99, 94.0, 0.23, 0.37, 0.2),
            (1.21, 77.0, 0.15, 0.52, 0.26),
            (1.63, 54.0, 0.07, 0.61, 0.3),
        )
    )
)

_E = (
    Profile("e1", ttft_s=0.23, tps=156.0, price=0.67),
    Profile("e2", ttft_s=0.37, tps=204.0, price=0.52),
    Profile("e3", ttft_s=0.53, tps=129.0, price=0.34, ttft_sigma=0.45),
    Profile("e4", ttft_s=0.76, tps=237.0, price=0.26),
    Profile("e5", ttft_s=1.17, tps=83.0, price=0.12),
)

_H3 = Profile("h3", ttft_s=0.25, tps=263.0, price=0.37)

_ZIP = Profile("zip", ttft_s=0.21, tps=53.0, price=0.68, ttft_sigma=0.22)
_TORRENT = Profile("torrent", ttft_s=1.26, tps=356.0, price=0.39, ttft_sigma=0.48)

_W1 = Profile("w1", ttft_s=0.36, tps=208.0, price=0.71)
_W3 = Profile("w3", ttft_s=0.64, tps=149.0, price=0.32)

_Y1 = Profile("y1", ttft_s=0.28, tps=229.0, price=0.56, tps_sigma=0.17)

_QUICK = Profile("quick", ttft_s=0.17, tps=37.0, price=0.57, ttft_sigma=0.24)
_HEAVY = Profile("heavy", ttft_s=1.34, tps=311.0, price=0.44, ttft_sigma=0.43)

_C3 = Profile("c3", ttft_s=0.68, tps=162.0, price=0.33)

HELD_OUT_7: tuple[Scenario, ...] = (
    Scenario(
        "ho7-drift",
        "gradual drift along a smoothstep, the dear leader wears out while the second cheapest improves",
        "five providers at 1.9 requests/s; from 26 s to 146 s the leader (0.37 s, 206 tok/s, the dearest) eases to "
        "0.86 s and 101 tok/s, first token and speed together, slowly at first and last, while from 41 s to 163 s "
        "the second cheapest (0.94 s, 109 tok/s) eases to 0.27 s and 241 tok/s; answers of 145, 460 or 760 tokens",
        (
            _G1,
            Profile("g2", ttft_s=0.58, tps=157.0, price=0.46),
            Profile("g3", ttft_s=0.49, tps=169.0, price=0.61, tps_sigma=0.3),
            _G4,
            Profile("g5", ttft_s=1.38, tps=73.0, price=0.13),
        ),
        lengths=((145, 2), (460, 1), (760, 1)),
        duration_s=184,
        rate_per_s=1.9,
        changes=(
            *_ease(_G1, replace(_G1, ttft_s=0.86, tps=101.0), 26, 146, 24),
            *_ease(_G4, replace(_G4, ttft_s=0.27, tps=241.0), 41, 163, 33),
        ),
    ),
    Scenario(
        "ho7-oscillate",
        "oscillating leaders, the lead rotating round three providers of three prices in irregular turns",
        "three providers of different prices take the lead in turn, r1 to r2 to r3 to r1 (0.31 s, 193 tok/s against "
        "0.69 s, 141 tok/s for the two trailing), in turns of 23, 39, 25, 19, 36, 22 and 34 s, then hold; a steady "
        "fourth (0.54 s, 166 tok/s) and a cheap slow fifth (1.41 s, 63 tok/s); 3.4 requests/s, answers of 66 or 290 "
        "tokens",
        (
            replace(_HEAD, name="r1", price=_R_PRICES["r1"]),
            replace(_PACK, name="r2", price=_R_PRICES["r2"]),
            replace(_PACK, name="r3", price=_R_PRICES["r3"]),
            Profile("r4", ttft_s=0.54, tps=166.0, price=0.53),
            Profile("r5", ttft_s=1.41, tps=63.0, price=0.11),
        ),
        lengths=((66, 3), (290, 2)),
        duration_s=214,
        rate_per_s=3.4,
        changes=_rotation((23, 39, 25, 19, 36, 22, 34)),
    ),
    Scenario(
        "ho7-many",
        "ten providers, a middle-priced one becomes the quickest mid-run",
        "ten providers at 3.7 requests/s, prices 0.07 to 0.93, first-token spreads 0.26 to 0.61 and speed spreads "
        "0.18 to 0.3; the fifth (0.71 s, 131 tok/s, priced 0.49, the fifth dearest of ten) becomes the quickest "
        "(0.22 s, 297 tok/s) 63 s in; answers of 46, 215 or 690 tokens",
        _TEN,
        lengths=((46, 2), (215, 3), (690, 1)),
        duration_s=131,
        rate_per_s=3.7,
        changes=(Change(63, "k4", replace(_TEN[4], ttft_s=0.22, tps=297.0)),),
    ),
    Scenario(
        "ho7-ttft",
        "the leader's first token rises in two steps and comes back; a fast streamer's first token falls a while",
        "answers of 5, 16, 42 or 94 tokens over five providers of different speeds and prices, 2.6 requests/s: the "
        "leader's first token goes 0.23 s → 0.81 s at 27 s, → 1.64 s at 41 s, and back to 0.23 s at 73 s; the "
        "fourth's (0.76 s, 237 tok/s, the second cheapest) falls to 0.14 s from 89 s to 113 s; no speed changes",
        _E,
        lengths=((5, 2), (16, 3), (42, 2), (94, 1)),
        duration_s=127,
        rate_per_s=2.6,
        changes=(
            Change(27, "e1", replace(_E[0], ttft_s=0.81)),
            Change(41, "e1", replace(_E[0], ttft_s=1.64)),
            Change(73, "e1", _E[0]),
            Change(89, "e4", replace(_E[3], ttft_s=0.14)),
            Change(113, "e4", _E[3]),
        ),
    ),
    Scenario(
        "ho7-down-at-start",
        "the best (middle-priced) provider down at start, recovering in two steps",
        "six providers at 2.4 requests/s, answers of 125, 345 or 905 tokens; the best (0.25 s, 263 tok/s, priced "
        "0.37 between 0.11 and 0.69) fails every request until 67 s, then 35% of them until 81 s, then is healthy "
        "and the quickest",
        (
            Profile("h1", ttft_s=0.34, tps=216.0, price=0.69),
            Profile("h2", ttft_s=0.51, tps=184.0, price=0.55, tps_sigma=0.25),
            replace(_H3, error_rate=1.0),
            Profile("h4", ttft_s=0.73, tps=148.0, price=0.44),
            Profile("h5", ttft_s=0.97, tps=116.0, price=0.21),
            Profile("h6", ttft_s=1.33, tps=69.0, price=0.11),
        ),
        lengths=((125, 3), (345, 1), (905, 1)),
        duration_s=121,
        rate_per_s=2.4,
        changes=(Change(67, "h3", replace(_H3, error_rate=0.35)), Change(81, "h3", _H3)),
    ),
    Scenario(
        "ho7-agent",
        "agent traffic: max_tokens 65536, short answers, the fast streamer starts sooner a while, then the quick "
        "starter streams slower a while",
        "every request asks for max_tokens 65536 and is answered in 3 to 170 tokens, at 1.45 requests/s; a quick "
        "starter that streams slowly (0.21 s, 53 tok/s), a slow starter that streams fast (1.26 s, 356 tok/s), a "
        "middle (0.57 s, 137 tok/s) and a cheap one (0.92 s, 91 tok/s); the fast streamer's first token falls to "
        "0.31 s from 37 s to 79 s, and the quick starter streams at 27 tok/s from 91 s to 117 s",
        (
            _ZIP,
            _TORRENT,
            Profile("mid", ttft_s=0.57, tps=137.0, price=0.51),
            Profile("budget", ttft_s=0.92, tps=91.0, price=0.16),
        ),
        lengths=((3, 2), (11, 3), (27, 3), (58, 2), (170, 1)),
        duration_s=134,
        rate_per_s=1.45,
        max_tokens=65536,
        changes=(
            Change(37, "torrent", replace(_TORRENT, ttft_s=0.31)),
            Change(79, "torrent", _TORRENT),
            Change(91, "zip", replace(_ZIP, tps=27.0)),
            Change(117, "zip", _ZIP),
        ),
    ),
    Scenario(
        "ho7-replicas",
        "three replicas sharing a window, the leader slows and recovers, a cheap one overtakes meanwhile",
        "three gateway replicas over one stats window, 4.4 requests/s between them; five providers, the leader "
        "(0.36 s, 208 tok/s, the dearest) streams at 87 tok/s from 43 s to 103 s, and the third (0.64 s, 149 tok/s, "
        "the second cheapest) becomes the quickest (0.26 s, 274 tok/s) 71 s in; answers of 190 or 570 tokens",
        (
            _W1,
            Profile("w2", ttft_s=0.45, tps=189.0, price=0.53, ttft_sigma=0.4),
            _W3,
            Profile("w4", ttft_s=1.02, tps=99.0, price=0.18),
            Profile("w5", ttft_s=0.79, tps=121.0, price=0.42),
        ),
        lengths=((190, 2), (570, 1)),
        duration_s=126,
        rate_per_s=4.4,
        changes=(
            Change(43, "w1", replace(_W1, tps=87.0)),
            Change(71, "w3", replace(_W3, ttft_s=0.26, tps=274.0)),
            Change(103, "w1", _W1),
        ),
        replicas=3,
    ),
    Scenario(
        "ho7-outage",
        "a short outage of the leader (not the dearest) mid-run, and its end",
        "six providers at 2.7 requests/s, answers of 55, 235 or 720 tokens; the leader (0.28 s, 229 tok/s, priced "
        "0.56 below the runner-up's 0.74) fails every request from 67 s to 84 s, then is as before",
        (
            _Y1,
            Profile("y2", ttft_s=0.46, tps=194.0, price=0.74),
            Profile("y3", ttft_s=0.61, tps=173.0, price=0.47, ttft_sigma=0.45),
            Profile("y4", ttft_s=0.79, tps=126.0, price=0.31),
            Profile("y5", ttft_s=1.12, tps=89.0, price=0.2),
            Profile("y6", ttft_s=1.52, tps=57.0, price=0.08),
        ),
        lengths=((55, 2), (235, 2), (720, 1)),
        duration_s=151,
        rate_per_s=2.7,
        changes=(Change(67, "y1", replace(_Y1, error_rate=1.0)), Change(84, "y1", _Y1)),
    ),
    Scenario(
        "ho7-mixed",
        "answers of very different lengths over a quick starter, a fast streamer and a middling third",
        "answers of 7, 19, 880 or 1600 tokens at 2.3 requests/s over a quick starter that streams slowly (0.17 s, "
        "37 tok/s), a slow starter that streams fast (1.34 s, 311 tok/s) and a middling third (0.61 s, 154 tok/s); "
        "the fast streamer streams at 126 tok/s from 56 s to 97 s, and the quick starter's first token rises to "
        "0.93 s from 114 s to 139 s",
        (_QUICK, _HEAVY, Profile("even", ttft_s=0.61, tps=154.0, price=0.49)),
        lengths=((7, 3), (19, 2), (880, 2), (1600, 1)),
        duration_s=152,
        rate_per_s=2.3,
        changes=(
            Change(56, "heavy", replace(_HEAVY, tps=126.0)),
            Change(97, "heavy", _HEAVY),
            Change(114, "quick", replace(_QUICK, ttft_s=0.93)),
            Change(139, "quick", _QUICK),
        ),
    ),
    Scenario(
        "ho7-flaky",
        "the quickest provider fails 27% of requests instantly, all through; a reliable one overtakes it",
        "four providers at 2.85 requests/s, answers of 82, 315 or 1050 tokens; the quickest (0.26 s, 254 tok/s) "
        "fails 27% of its requests at once from start to end, and the third (0.68 s, 162 tok/s, the second "
        "cheapest) becomes quicker than it (0.22 s, 281 tok/s) 83 s in",
        (
            Profile("c1", ttft_s=0.26, tps=254.0, price=0.62, error_rate=0.27),
            Profile("c2", ttft_s=0.43, tps=201.0, price=0.49),
            _C3,
            Profile("c4", ttft_s=1.06, tps=103.0, price=0.17),
        ),
        lengths=((82, 2), (315, 2), (1050, 1)),
        duration_s=147,
        rate_per_s=2.85,
        changes=(Change(83, "c3", replace(_C3, ttft_s=0.22, tps=281.0)),),
    ),
)
