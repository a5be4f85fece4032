"""The twelfth held-out set of routing markets: written before the next routing change, run on the routers once, last.

Sets one (``routing_scenarios.HELD_OUT``) to ten (``routing_held_out_10.HELD_OUT_10``) have each been looked at once;
set eleven (``routing_held_out_11.HELD_OUT_11``) was still unrun when this one was written, and nothing here was taken
from a run of it. These markets name the behaviours the gate names and those later sets added, each in a shape no
earlier set holds: the whole market slowing together (one load wave, each provider at its own rate) and easing at
once, two providers trading only their speeds, four resellers of one upstream slowing together among twelve, a first
token creeping up in small steps and dropping back at once, the best down at start and again after its return, the
agent traffic's quickest starter changing hands three times, an outage seen from two replicas, one region's outage
taking the leader and the runner-up two seconds apart, long answers rare (one in eighteen) over a quick starter and a
fast streamer, a cold start over five providers whose first-token and speed orders are unrelated, the quickest
turning flaky mid-run and mending, and a tail that widens at once while the median improves (the median says better,
the mean worse) and narrows in steps. Some prices are a first party's, several times the others', as real ones are.

The new random choices were drawn with ``random.Random("routing-held-out-12")`` (whole numbers by ``randint``, shares
and rates by ``uniform`` rounded to two places), in this order: the cold start's size (4 or 5: five) and its speed
order (the speed ranks, 0 the fastest, of its providers taken quickest starter first: ``range(5)`` shuffled, and
reshuffled while in order either way: 3, 2, 1, 4, 0), the many-provider count (8-12, redrawn while set ten's or
eleven's, 9 or 10: 10 came up, then twelve), the resellers among them (2-4: four), the flaky share (0.2-0.4, redrawn
while an earlier set's: 0.24), the outage's length (10-50 s, redrawn while within 3 s of an earlier set's, 11, 17, 24,
29, 30, 32 or 37 s: 12, 23, 32, 34 and 16 came up, then 41 s), the replicas (2 or 3: two), the agent's ceiling (20000,
40000 or 100000: 100000), then per market in the order below a duration (105-230 s), a rate (1.4-4.3 requests/s) and
four change times (from 12 s to 85% of the duration, sorted), and the oscillation's turns (8-40 s each until they pass
230 s: 35, 38, 38, 40, 23 and 15 s fit in its 203 s). A market uses the change times it needs, as drawn. The provider
profiles (first tokens, speeds, spreads, prices) and the answer lengths are fresh, written for each market so that its
behaviour holds (``routing_simulate --held-out-12``). Never tune anything on them.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario, linear_steps


def _wave(moves: tuple[tuple[Profile, Profile], ...], from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """Each (start, end) of ``moves`` goes from start to end in ``steps`` even steps of first token and speed, all at
    the same times between ``from_s`` and ``to_s``: one load wave over every provider it names, each at its own
    rate."""
    return tuple(change for start, end in moves for change in linear_steps(start, end, from_s, to_s, steps))


def _speed_passes(
    turns: tuple[tuple[float, str], ...], fast_tps: float, slow_tps: float, providers: tuple[Profile, ...]
) -> tuple[Change, ...]:
    """The fast stream passing between ``providers`` (the first has it at first): each (turn, next) in ``turns`` lasts
    ``turn`` seconds, after which ``next`` streams at ``fast_tps`` and the others at ``slow_tps``, each keeping its own
    first token, spreads and price: the long answers' leader moves, first tokens never do."""
    changes = []
    at = 0.0
    for turn, lead in turns:
        at += turn
        for p in providers:
            changes.append(Change(at, p.name, replace(p, tps=fast_tps if p.name == lead else slow_tps)))
    return tuple(changes)


_WAVE = (
    (Profile("w1", ttft_s=0.25, tps=246.0, price=0.71, ttft_sigma=0.32), 0.71, 92.0),
    (Profile("w2", ttft_s=0.37, tps=214.0, price=0.48, tps_sigma=0.29), 0.45, 188.0),
    (Profile("w3", ttft_s=0.52, tps=181.0, price=1.9, ttft_sigma=0.41), 0.66, 150.0),
    (Profile("w4", ttft_s=0.83, tps=126.0, price=0.23, tps_sigma=0.34), 0.97, 108.0),
    (Profile("w5", ttft_s=1.31, tps=74.0, price=0.08, ttft_sigma=0.46), 1.52, 61.0),
)

_V1 = Profile("v1", ttft_s=0.21, tps=262.0, price=0.64, ttft_sigma=0.27)
_V2 = Profile("v2", ttft_s=0.58, tps=118.0, price=0.37, tps_sigma=0.31)

_RESELLERS = (
    Profile("u1", ttft_s=0.23, tps=264.0, price=0.57, ttft_sigma=0.31, tps_sigma=0.24),
    Profile("u2", ttft_s=0.26, tps=257.0, price=0.43, ttft_sigma=0.34, tps_sigma=0.22),
    Profile("u3", ttft_s=0.28, tps=251.0, price=0.96, ttft_sigma=0.29, tps_sigma=0.26),
    Profile("u4", ttft_s=0.31, tps=246.0, price=1.45, ttft_sigma=0.33, tps_sigma=0.23),
)
_SATURATED = ((0.61, 104.0), (0.66, 98.0), (0.7, 97.0), (0.74, 94.0))
_MANY = (
    *_RESELLERS,
    Profile("u5", ttft_s=0.35, tps=229.0, price=0.68, ttft_sigma=0.37, tps_sigma=0.21),
    Profile("u6", ttft_s=0.44, tps=206.0, price=2.7, ttft_sigma=0.26, tps_sigma=0.18),
    Profile("u7", ttft_s=0.53, tps=188.0, price=0.38, ttft_sigma=0.43, tps_sigma=0.32),
    Profile("u8", ttft_s=0.64, tps=163.0, price=0.52, ttft_sigma=0.31, tps_sigma=0.27),
    Profile("u9", ttft_s=0.81, tps=139.0, price=0.21, ttft_sigma=0.48, tps_sigma=0.24),
    Profile("u10", ttft_s=0.97, tps=112.0, price=0.16, ttft_sigma=0.35, tps_sigma=0.39),
    Profile("u11", ttft_s=1.26, tps=87.0, price=0.09, ttft_sigma=0.53, tps_sigma=0.28),
    Profile("u12", ttft_s=1.72, tps=61.0, price=0.03, ttft_sigma=0.61, tps_sigma=0.34),
)

_C1 = Profile("c1", ttft_s=0.18, tps=171.0, price=0.93, ttft_sigma=0.22)

_D1 = Profile("d1", ttft_s=0.19, tps=296.0, price=1.35, tps_sigma=0.23)

_A1 = Profile("a1", ttft_s=0.15, tps=88.0, price=0.61, ttft_sigma=0.23)
_A2 = Profile("a2", ttft_s=0.29, tps=81.0, price=0.29, ttft_sigma=0.31)

_P1 = Profile("p1", ttft_s=0.24, tps=253.0, price=0.76, ttft_sigma=0.29)
_P2 = Profile("p2", ttft_s=0.38, tps=219.0, price=0.51, tps_sigma=0.34)

_Q1 = Profile("q1", ttft_s=0.2, tps=281.0, price=0.93, ttft_sigma=0.26)
_Q2 = Profile("q2", ttft_s=0.31, tps=243.0, price=0.13, tps_sigma=0.27)

_NIP = Profile("nip", ttft_s=0.12, tps=49.0, price=0.67, ttft_sigma=0.24)
_TORRENT = Profile("torrent", ttft_s=1.38, tps=362.0, price=0.31, ttft_sigma=0.51)

_K1 = Profile("k1", ttft_s=0.14, tps=118.0, price=0.84, ttft_sigma=0.25)
_K3 = Profile("k3", ttft_s=0.47, tps=224.0, price=0.62, tps_sigma=0.27)

_Z1 = Profile("z1", ttft_s=0.17, tps=301.0, price=0.55)
_Z3 = Profile("z3", ttft_s=1.21, tps=81.0, price=0.07, ttft_sigma=0.38)

_L1 = Profile("l1", ttft_s=0.26, tps=243.0, price=0.58, ttft_sigma=0.28)

HELD_OUT_12: tuple[Scenario, ...] = (
    Scenario(
        "ho12-drift",
        "gradual drift of the whole market together: one load wave slows every provider, each at its own rate, the "
        "leader most, and eases at once",
        "five providers at 3.23 requests/s; from 51 s to 146 s, in 19 even steps, every provider slows: the leader "
        "(0.25 s, 246 tok/s) to 0.71 s and 92 tok/s, the runner-up (0.37 s, 214 tok/s, cheaper) only to 0.45 s and "
        "188 tok/s, the others (a first party's priced 1.9 among them) a little; at 154 s all are as before; answers "
        "of 95, 360 or 1010 tokens",
        tuple(p for p, _, _ in _WAVE),
        lengths=((95, 2), (360, 3), (1010, 1)),
        duration_s=198,
        rate_per_s=3.23,
        changes=(
            *_wave(tuple((p, replace(p, ttft_s=ttft, tps=tps)) for p, ttft, tps in _WAVE), 51, 146, 19),
            *(Change(154, p.name, p) for p, _, _ in _WAVE),
        ),
    ),
    Scenario(
        "ho12-oscillate",
        "oscillating leaders that trade only their speeds, first tokens fixed: a quick starter and a slow one pass "
        "the fast stream between them every 15-40 s",
        "two providers keep their first tokens (0.21 s and 0.58 s) and trade their speeds (262 and 118 tok/s): the "
        "quick starter streams fast at first, the other from 35 s, then the quick starter from 73 s, the other from "
        "111 s, the quick starter from 151 s, the other from 174 s and the quick starter from 189 s; a steady first "
        "party's (0.44 s, 176 tok/s, 2.6) and a cheap one (1.03 s, 97 tok/s); 2.15 requests/s, answers of 150, 420 "
        "or 1180 tokens",
        (
            _V1,
            _V2,
            Profile("v3", ttft_s=0.44, tps=176.0, price=2.6, tps_sigma=0.24),
            Profile("v4", ttft_s=1.03, tps=97.0, price=0.12, ttft_sigma=0.44),
        ),
        lengths=((150, 2), (420, 3), (1180, 1)),
        duration_s=203,
        rate_per_s=2.15,
        changes=_speed_passes(
            ((35, "v2"), (38, "v1"), (38, "v2"), (40, "v1"), (23, "v2"), (15, "v1")), 262.0, 118.0, (_V1, _V2)
        ),
    ),
    Scenario(
        "ho12-many",
        "twelve providers, four of them resellers of one upstream (the quickest, at four prices) that slow together "
        "and come back together",
        "twelve providers at 1.61 requests/s, prices 0.03 to 2.7; the four quickest (0.23-0.31 s, 246-264 tok/s, "
        "priced 0.43 to 1.45) resell one upstream, and from 71 s to 142 s all four answer at 0.61-0.74 s and "
        "94-104 tok/s; the fifth (0.35 s, 229 tok/s, priced 0.68) leads meanwhile; answers of 52, 265 or 905 tokens",
        _MANY,
        lengths=((52, 2), (265, 3), (905, 1)),
        duration_s=185,
        rate_per_s=1.61,
        changes=(
            *(
                Change(71, p.name, replace(p, ttft_s=ttft, tps=tps))
                for p, (ttft, tps) in zip(_RESELLERS, _SATURATED, strict=True)
            ),
            *(Change(142, p.name, p) for p in _RESELLERS),
        ),
    ),
    Scenario(
        "ho12-ttft",
        "the leader's first token creeps up in small steps, its speed fixed, holds, and drops back at once",
        "answers of 2, 9, 26 or 71 tokens over five providers at 1.67 requests/s: the leader's first token (0.18 s, "
        "171 tok/s, the dearest) rises in 15 even steps from 14 s to 73 s to 0.86 s, stays there until 142 s, then "
        "is 0.18 s again; the runner-up (0.31 s, 196 tok/s) leads from early in the creep; no speed changes",
        (
            _C1,
            Profile("c2", ttft_s=0.31, tps=196.0, price=0.44, ttft_sigma=0.36),
            Profile("c3", ttft_s=0.49, tps=283.0, price=0.32),
            Profile("c4", ttft_s=0.77, tps=142.0, price=0.27, ttft_sigma=0.41),
            Profile("c5", ttft_s=1.18, tps=76.0, price=0.08),
        ),
        lengths=((2, 2), (9, 3), (26, 3), (71, 1)),
        duration_s=172,
        rate_per_s=1.67,
        changes=(*_wave(((_C1, replace(_C1, ttft_s=0.86)),), 14, 73, 15), Change(142, "c1", _C1)),
    ),
    Scenario(
        "ho12-down-at-start",
        "the best provider (the dearest) down at start, back at its best, then down again a while and back",
        "five providers at 1.95 requests/s, answers of 170, 490 or 1210 tokens; the best (0.19 s, 296 tok/s, priced "
        "1.35 against up to 0.62) fails every request until 69 s, is the quickest from then, fails every request "
        "again from 95 s to 113 s, and is the quickest after",
        (
            replace(_D1, error_rate=1.0),
            Profile("d2", ttft_s=0.33, tps=237.0, price=0.62, ttft_sigma=0.39),
            Profile("d3", ttft_s=0.48, tps=201.0, price=0.45),
            Profile("d4", ttft_s=0.72, tps=153.0, price=0.24, tps_sigma=0.36),
            Profile("d5", ttft_s=1.09, tps=96.0, price=0.11),
        ),
        lengths=((170, 2), (490, 2), (1210, 1)),
        duration_s=165,
        rate_per_s=1.95,
        changes=(Change(69, "d1", _D1), Change(95, "d1", replace(_D1, error_rate=1.0)), Change(113, "d1", _D1)),
    ),
    Scenario(
        "ho12-agent",
        "agent traffic: max_tokens 100000, short answers, the two quickest starters trade first tokens three times",
        "every request asks for max_tokens 100000 and is answered in 1 to 290 tokens, at 2.67 requests/s; two quick "
        "starters that stream slowly (0.15 s, 88 tok/s, and 0.29 s, 81 tok/s, the cheaper) trade first tokens at "
        "63 s, back at 77 s and again at 93 s for good; a fast streamer (1.06 s, 331 tok/s), a first party's "
        "(0.36 s, 212 tok/s, priced 3.4) and a cheap one (1.22 s, 71 tok/s)",
        (
            _A1,
            _A2,
            Profile("surge", ttft_s=1.06, tps=331.0, price=0.34, ttft_sigma=0.48),
            Profile("house", ttft_s=0.36, tps=212.0, price=3.4, ttft_sigma=0.3),
            Profile("cent", ttft_s=1.22, tps=71.0, price=0.05),
        ),
        lengths=((1, 2), (5, 3), (17, 3), (44, 2), (120, 1), (290, 1)),
        duration_s=219,
        rate_per_s=2.67,
        max_tokens=100000,
        changes=(
            Change(63, "a1", replace(_A1, ttft_s=_A2.ttft_s)),
            Change(63, "a2", replace(_A2, ttft_s=_A1.ttft_s)),
            Change(77, "a1", _A1),
            Change(77, "a2", _A2),
            Change(93, "a1", replace(_A1, ttft_s=_A2.ttft_s)),
            Change(93, "a2", replace(_A2, ttft_s=_A1.ttft_s)),
        ),
    ),
    Scenario(
        "ho12-replicas",
        "two replicas sharing a window, the leader down a while and back, the runner-up streaming slowly for part "
        "of it",
        "two gateway replicas over one stats window, 1.71 requests/s between them; five providers, the leader "
        "(0.24 s, 253 tok/s) fails every request from 26 s to 49 s, then is as before, and the runner-up (0.38 s, "
        "219 tok/s) streams at 104 tok/s from 40 s to 53 s; a first party's (0.49 s, 192 tok/s, priced 1.95) leads "
        "while both are out; answers of 230, 520 or 1090 tokens",
        (
            _P1,
            _P2,
            Profile("p3", ttft_s=0.49, tps=192.0, price=1.95, ttft_sigma=0.37),
            Profile("p4", ttft_s=0.71, tps=148.0, price=0.26),
            Profile("p5", ttft_s=1.15, tps=83.0, price=0.1, tps_sigma=0.3),
        ),
        lengths=((230, 3), (520, 2), (1090, 1)),
        duration_s=217,
        rate_per_s=1.71,
        changes=(
            Change(26, "p1", replace(_P1, error_rate=1.0)),
            Change(40, "p2", replace(_P2, tps=104.0)),
            Change(49, "p1", _P1),
            Change(53, "p2", _P2),
        ),
        replicas=2,
    ),
    Scenario(
        "ho12-outage",
        "one region's outage mid-run: the leader and the runner-up down two seconds apart, each for 41 s, and back",
        "five providers at 3.02 requests/s, answers of 57, 330 or 1020 tokens; the leader (0.2 s, 281 tok/s, the "
        "second dearest) fails every request from 60 s to 101 s and the runner-up (0.31 s, 243 tok/s, the "
        "cheapest) from 62 s to 103 s; the third (0.44 s, 207 tok/s, wide spreads) leads meanwhile",
        (
            _Q1,
            _Q2,
            Profile("q3", ttft_s=0.44, tps=207.0, price=0.58, ttft_sigma=0.44, tps_sigma=0.31),
            Profile("q4", ttft_s=0.63, tps=171.0, price=1.7),
            Profile("q5", ttft_s=0.92, tps=124.0, price=0.22),
        ),
        lengths=((57, 3), (330, 2), (1020, 1)),
        duration_s=179,
        rate_per_s=3.02,
        changes=(
            Change(60, "q1", replace(_Q1, error_rate=1.0)),
            Change(62, "q2", replace(_Q2, error_rate=1.0)),
            Change(101, "q1", _Q1),
            Change(103, "q2", _Q2),
        ),
    ),
    Scenario(
        "ho12-mixed",
        "mixed answer lengths, the long ones rare (one in eighteen), over a quick starter and a fast streamer: the "
        "fast streamer halves its speed a while (only the rare long answers see it), and the quick starter starts "
        "slowly for 10 s of it",
        "answers of 4 or 15 tokens and, one in eighteen, 2400 tokens, at 2.04 requests/s over a quick starter that "
        "streams slowly (0.12 s, 49 tok/s), a slow starter that streams fast (1.38 s, 362 tok/s), a middling third "
        "(0.51 s, 183 tok/s) and a cheap fourth (1.16 s, 104 tok/s); the fast streamer streams at 181 tok/s from "
        "108 s to 173 s (the middling third then the best for long answers), and the quick starter's first token is "
        "0.74 s from 117 s to 127 s (the middling third then the best for short ones)",
        (
            _NIP,
            _TORRENT,
            Profile("mid", ttft_s=0.51, tps=183.0, price=0.49),
            Profile("thrift", ttft_s=1.16, tps=104.0, price=0.09, tps_sigma=0.33),
        ),
        lengths=((4, 10), (15, 7), (2400, 1)),
        duration_s=204,
        rate_per_s=2.04,
        changes=(
            Change(108, "torrent", replace(_TORRENT, tps=181.0)),
            Change(117, "nip", replace(_NIP, ttft_s=0.74)),
            Change(127, "nip", _NIP),
            Change(173, "torrent", _TORRENT),
        ),
    ),
    Scenario(
        "ho12-cold",
        "a cold start over five providers whose first-token and speed orders are unrelated, all new; the best for "
        "middle lengths slows a while, and the quickest starter starts slowly for 9 s",
        "five providers, none measured at the start; taken quickest starter first (0.14, 0.29, 0.47, 0.76 and "
        "1.34 s) their speeds rank fourth, third, second, fifth and first (118, 167, 224, 73 and 338 tok/s); answers "
        "of 3, 30, 520 or 1750 tokens at 3.45 requests/s; the third streams at 121 tok/s from 30 s to 91 s, and the "
        "quickest starter's first token is 0.62 s from 45 s to 54 s",
        (
            _K1,
            Profile("k2", ttft_s=0.29, tps=167.0, price=0.47, ttft_sigma=0.34),
            _K3,
            Profile("k4", ttft_s=0.76, tps=73.0, price=0.19, ttft_sigma=0.42),
            Profile("k5", ttft_s=1.34, tps=338.0, price=0.28, ttft_sigma=0.36),
        ),
        lengths=((3, 2), (30, 3), (520, 2), (1750, 1)),
        duration_s=176,
        rate_per_s=3.45,
        changes=(
            Change(30, "k3", replace(_K3, tps=121.0)),
            Change(45, "k1", replace(_K1, ttft_s=0.62)),
            Change(54, "k1", _K1),
            Change(91, "k3", _K3),
        ),
    ),
    Scenario(
        "ho12-flaky",
        "the quickest provider turns flaky mid-run (fails 24% of requests instantly) and mends; a cheap reliable one "
        "is quicker still for most of it",
        "five providers at 2.07 requests/s, answers of 78, 345 or 1380 tokens; the quickest (0.17 s, 301 tok/s) "
        "fails 24% of its requests at once from 28 s to 100 s, and is still the best from 88 s to 100 s; the "
        "cheapest (1.21 s, 81 tok/s) is quicker than it (0.14 s, 322 tok/s) from 31 s to 88 s",
        (
            _Z1,
            Profile("z2", ttft_s=0.32, tps=238.0, price=0.74, ttft_sigma=0.37),
            _Z3,
            Profile("z4", ttft_s=0.58, tps=178.0, price=0.39, tps_sigma=0.36),
            Profile("z5", ttft_s=0.44, tps=209.0, price=2.05, ttft_sigma=0.28),
        ),
        lengths=((78, 2), (345, 3), (1380, 1)),
        duration_s=173,
        rate_per_s=2.07,
        changes=(
            Change(28, "z1", replace(_Z1, error_rate=0.24)),
            Change(31, "z3", replace(_Z3, ttft_s=0.14, tps=322.0)),
            Change(88, "z3", _Z3),
            Change(100, "z1", _Z1),
        ),
    ),
    Scenario(
        "ho12-tail",
        "the leader's first-token tail widens at once while its median improves (the median says better, the mean "
        "worse), then narrows in three steps",
        "four providers at 3.17 requests/s, answers of 11, 58 or 270 tokens; the leader (0.26 s median first token, "
        "spread 0.28, 243 tok/s) answers at a 0.19 s median with a spread of 1.35 (its mean 0.47 s) from 81 s, at "
        "0.21 s and 0.97 from 113 s, at 0.24 s and 0.62 from 120 s, and as before from 123 s, its speed unchanged; "
        "the runner-up (0.37 s, 221 tok/s) is the best for short and middle answers at the widest",
        (
            _L1,
            Profile("l2", ttft_s=0.37, tps=221.0, price=0.41, ttft_sigma=0.24),
            Profile("l3", ttft_s=0.59, tps=183.0, price=1.15, tps_sigma=0.31),
            Profile("l4", ttft_s=0.98, tps=104.0, price=0.14),
        ),
        lengths=((11, 2), (58, 3), (270, 1)),
        duration_s=204,
        rate_per_s=3.17,
        changes=(
            Change(81, "l1", replace(_L1, ttft_s=0.19, ttft_sigma=1.35)),
            Change(113, "l1", replace(_L1, ttft_s=0.21, ttft_sigma=0.97)),
            Change(120, "l1", replace(_L1, ttft_s=0.24, ttft_sigma=0.62)),
            Change(123, "l1", _L1),
        ),
    ),
)
