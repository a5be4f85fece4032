"""The eleventh held-out set of routing markets: written before the next routing change, run on the routers once, last.

Sets one (``routing_scenarios.HELD_OUT``) to nine (``routing_held_out_9.HELD_OUT_9``) have each been looked at once;
set ten (``routing_held_out_10.HELD_OUT_10``) was still unrun when this one was written, and nothing here was taken
from a run of it. These markets name the behaviours the gate names (gradual drift, oscillating leaders, many providers,
first-token-only changes and their end, a provider down at start, agent traffic with a large fixed ``max_tokens`` and
short answers, two replicas sharing a window) and those later sets added (an outage mid-run and its end, answers of
very different lengths over a quick starter and a fast streamer, a flaky quickest provider, a cold start, a widening
first-token tail), each in a shape of its own: a drift taken in uneven steps, the lead passed round three providers,
two first tokens rising together (one region's incident) and coming back apart, the best provider down at start and
back slow to start a while, an eleven-second outage, a cold start over three anti-correlated providers, a tail that
widens in steps and narrows at once. Some prices are a first party's, several times the others', as real ones are.

The new random choices were drawn with ``random.Random("routing-held-out-11")``, in this order: the cold start's kind
(``"anti-correlated"`` or ``"correlated"``: anti-correlated came up, so the quickest starter streams slowest) and its
size (2 or 3: three), the many-provider count (8-12: ten), the flaky share (0.2-0.4, redrawn while an earlier set's:
0.39), the outage's length (10-50 s, redrawn while within 3 s of an earlier set's: 11 s), the replicas (2 or 3: two),
the agent's ceiling (20000, 40000 or 48000: 48000), then per market in the order below a duration (105-230 s), a rate
(1.4-4.3 requests/s) and four change times (from 12 s to 85% of the duration, sorted), and the oscillation's turns
(8-40 s each until they pass 200 s: 36, 24, 31, 32 and 30 s fit in its 171 s). A market uses the change times it
needs, as drawn. The drift's uneven steps are drawn by ``_jagged`` from a seed named for each provider. The provider
profiles (first tokens, speeds, spreads, prices) are fresh, written for each market so that its behaviour holds
(``routing_simulate --held-out-11``). Never tune anything on them.
"""

from __future__ import annotations

import random
from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario, lead_passes


def _jagged(start: Profile, end: Profile, from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """``start`` moves to ``end`` in ``steps`` steps at even times between ``from_s`` and ``to_s``, first token and
    speed together, each step an uneven share of the way (weights drawn from 0.2 to 1.8 with a seed of the provider's
    own) and every step in the same direction: wear as real load makes it, never smooth."""
    rng = random.Random(f"routing-held-out-11:{start.name}")
    weights = [rng.uniform(0.2, 1.8) for _ in range(steps)]
    total = sum(weights)
    changes = []
    done = 0.0
    for i, weight in enumerate(weights, start=1):
        done += weight
        share = done / total
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


_G2 = Profile("g2", ttft_s=0.27, tps=238.0, price=0.62, ttft_sigma=0.31, tps_sigma=0.33)
_G4 = Profile("g4", ttft_s=1.07, tps=99.0, price=0.19, ttft_sigma=0.49)

_AHEAD = Profile("ahead", ttft_s=0.28, tps=241.0, price=0.0, ttft_sigma=0.33, tps_sigma=0.22)
_BEHIND = Profile("behind", ttft_s=0.97, tps=103.0, price=0.0, ttft_sigma=0.45, tps_sigma=0.31)
_O_PRICES = {"o1": 0.74, "o2": 0.33, "o3": 0.51}


_TEN = tuple(
    Profile(f"s{i}", ttft_s=ttft, tps=tps, price=price, ttft_sigma=ttft_sigma, tps_sigma=tps_sigma)
    for i, (ttft, tps, price, ttft_sigma, tps_sigma) in enumerate(
        (
            (0.24, 262.0, 2.85, 0.29, 0.21),
            (0.33, 233.0, 0.93, 0.38, 0.26),
            (0.41, 214.0, 0.61, 0.27, 0.34),
            (0.47, 197.0, 0.77, 0.44, 0.19),
            (0.58, 168.0, 0.48, 0.33, 0.29),
            (0.66, 152.0, 0.27, 0.51, 0.23),
            (0.79, 131.0, 0.39, 0.36, 0.42),
            (0.94, 117.0, 0.18, 0.29, 0.27),
            (1.21, 86.0, 0.11, 0.47, 0.31),
            (1.67, 58.0, 0.04, 0.58, 0.36),
        )
    )
)

_TK = (
    Profile("tk1", ttft_s=0.16, tps=183.0, price=0.88, ttft_sigma=0.24),
    Profile("tk2", ttft_s=0.27, tps=205.0, price=0.57, ttft_sigma=0.37),
    Profile("tk3", ttft_s=0.44, tps=262.0, price=0.31),
    Profile("tk4", ttft_s=0.71, tps=139.0, price=0.24, ttft_sigma=0.42),
    Profile("tk5", ttft_s=1.12, tps=81.0, price=0.09),
)

_F5 = Profile("f5", ttft_s=0.21, tps=287.0, price=0.14, tps_sigma=0.24)

_JOT = Profile("jot", ttft_s=0.14, tps=57.0, price=0.69, ttft_sigma=0.21)
_CORE = Profile("core", ttft_s=0.47, tps=172.0, price=0.52, ttft_sigma=0.33)

_RP1 = Profile("rp1", ttft_s=0.26, tps=247.0, price=0.83, tps_sigma=0.22)
_RP4 = Profile("rp4", ttft_s=0.86, tps=128.0, price=0.28, tps_sigma=0.35)

_OB1 = Profile("ob1", ttft_s=0.22, tps=274.0, price=1.38, ttft_sigma=0.28)

_DAB = Profile("dab", ttft_s=0.11, tps=44.0, price=0.72, ttft_sigma=0.23)
_CASCADE = Profile("cascade", ttft_s=1.44, tps=356.0, price=0.33, ttft_sigma=0.52)

_TEMPO = Profile("tempo", ttft_s=0.56, tps=169.0, price=0.41, tps_sigma=0.36)
_DELUGE = Profile("deluge", ttft_s=1.47, tps=341.0, price=0.29, ttft_sigma=0.49)

_FZ3 = Profile("fz3", ttft_s=0.53, tps=189.0, price=0.46, tps_sigma=0.38)
_FZ5 = Profile("fz5", ttft_s=1.29, tps=77.0, price=0.13)

_TW1 = Profile("tw1", ttft_s=0.24, tps=251.0, price=0.64, ttft_sigma=0.27)

HELD_OUT_11: tuple[Scenario, ...] = (
    Scenario(
        "ho11-drift",
        "gradual drift in uneven steps: the leader wears out while a cheap one improves, the two drifts overlapping",
        "five providers at 1.86 requests/s; the leader (0.27 s, 238 tok/s, the second dearest) wears in 20 uneven "
        "steps from 34 s to 84 s to 0.83 s and 109 tok/s and stays so, while the second cheapest (1.07 s, 99 tok/s) "
        "improves in 17 uneven steps from 38 s to 72 s to 0.29 s and 226 tok/s and stays so; the dearest (0.43 s, "
        "204 tok/s, priced twice the leader) leads between; answers of 125, 440 or 1070 tokens",
        (
            Profile("g1", ttft_s=0.43, tps=204.0, price=1.24, ttft_sigma=0.36),
            _G2,
            Profile("g3", ttft_s=0.61, tps=171.0, price=0.44, tps_sigma=0.41),
            _G4,
            Profile("g5", ttft_s=1.48, tps=66.0, price=0.06),
        ),
        lengths=((125, 2), (440, 3), (1070, 1)),
        duration_s=156,
        rate_per_s=1.86,
        changes=(
            *_jagged(_G2, replace(_G2, ttft_s=0.83, tps=109.0), 34, 84, 20),
            *_jagged(_G4, replace(_G4, ttft_s=0.29, tps=226.0), 38, 72, 17),
        ),
    ),
    Scenario(
        "ho11-oscillate",
        "oscillating leaders, the lead passed round three providers of three prices every 24-36 s, a steady fourth",
        "three providers of different prices take the lead in turn (0.28 s, 241 tok/s against 0.97 s, 103 tok/s for "
        "the two trailing): o1 leads 36 s, then o2 24 s, o3 31 s, o1 32 s, o2 30 s, then o3 holds it; a steady "
        "fourth priced as a first party (0.52 s, 176 tok/s, 2.4); 1.67 requests/s, answers of 35, 185 or 620 tokens",
        (
            replace(_AHEAD, name="o1", price=_O_PRICES["o1"]),
            replace(_BEHIND, name="o2", price=_O_PRICES["o2"]),
            replace(_BEHIND, name="o3", price=_O_PRICES["o3"]),
            Profile("o4", ttft_s=0.52, tps=176.0, price=2.4, ttft_sigma=0.29),
        ),
        lengths=((35, 2), (185, 3), (620, 1)),
        duration_s=171,
        rate_per_s=1.67,
        changes=lead_passes(((36, "o2"), (24, "o3"), (31, "o1"), (32, "o2"), (30, "o3")), _AHEAD, _BEHIND, _O_PRICES),
    ),
    Scenario(
        "ho11-many",
        "ten providers: the dearest leader slows for good, and a middle-priced one is the quickest a while",
        "ten providers at 2.45 requests/s, prices 0.04 to 2.85 (a first party's at the top, the rest not in order of "
        "speed), first-token spreads 0.27 to 0.58 and speed spreads 0.19 to 0.42; the leader (0.24 s, 262 tok/s, "
        "priced 2.85) answers at 0.62 s and 158 tok/s from 35 s on; the seventh (0.79 s, 131 tok/s, priced 0.39) is "
        "the quickest (0.19 s, 284 tok/s) from 40 s to 94 s; the second (0.33 s, 233 tok/s) leads otherwise; answers "
        "of 42, 235 or 860 tokens",
        _TEN,
        lengths=((42, 2), (235, 3), (860, 1)),
        duration_s=151,
        rate_per_s=2.45,
        changes=(
            Change(35, "s0", replace(_TEN[0], ttft_s=0.62, tps=158.0)),
            Change(40, "s6", replace(_TEN[6], ttft_s=0.19, tps=284.0)),
            Change(94, "s6", _TEN[6]),
        ),
    ),
    Scenario(
        "ho11-ttft",
        "the two quickest starters' first tokens rise together (one region's incident) and come back apart",
        "answers of 1, 6, 22 or 57 tokens over five providers of different speeds and prices, 4.18 requests/s: the "
        "leader's (0.16 s, 183 tok/s, the dearest) first token goes to 0.94 s from 23 s to 54 s, the runner-up's "
        "(0.27 s, 205 tok/s) to 0.78 s from 25 s to 77 s; the third (0.44 s, 262 tok/s, priced 0.31) leads between; "
        "no speed changes",
        _TK,
        lengths=((1, 3), (6, 2), (22, 3), (57, 1)),
        duration_s=132,
        rate_per_s=4.18,
        changes=(
            Change(23, "tk1", replace(_TK[0], ttft_s=0.94)),
            Change(25, "tk2", replace(_TK[1], ttft_s=0.78)),
            Change(54, "tk1", _TK[0]),
            Change(77, "tk2", _TK[1]),
        ),
    ),
    Scenario(
        "ho11-down-at-start",
        "the best provider (the cheapest) down at start, back slow to start a while, then at its best",
        "five providers at 1.43 requests/s, answers of 190, 520 or 1280 tokens; the best (0.21 s, 287 tok/s, priced "
        "0.14, the cheapest, against up to 1.65) fails every request until 56 s, then answers with a 1.35 s first "
        "token at its full speed until 101 s (the best for the longest answers only), then is the quickest",
        (
            Profile("f1", ttft_s=0.38, tps=211.0, price=1.65, ttft_sigma=0.34),
            Profile("f2", ttft_s=0.52, tps=186.0, price=0.57),
            Profile("f3", ttft_s=0.69, tps=154.0, price=0.41, tps_sigma=0.37),
            Profile("f4", ttft_s=0.98, tps=117.0, price=0.26),
            replace(_F5, error_rate=1.0),
        ),
        lengths=((190, 2), (520, 2), (1280, 1)),
        duration_s=203,
        rate_per_s=1.43,
        changes=(Change(56, "f5", replace(_F5, ttft_s=1.35)), Change(101, "f5", _F5)),
    ),
    Scenario(
        "ho11-agent",
        "agent traffic: max_tokens 48000, short answers, the quick starter starts slower a while, and overlapping it "
        "the middle starts quickest a while",
        "every request asks for max_tokens 48000 and is answered in 1 to 190 tokens, at 2.65 requests/s; a quick "
        "starter that streams slowly (0.14 s, 57 tok/s), a slow starter that streams fast (1.18 s, 348 tok/s), a "
        "middle (0.47 s, 172 tok/s), a cheap one (1.09 s, 84 tok/s) and a first party's (0.31 s, 204 tok/s, priced "
        "3.6); the quick starter's first token rises to 0.84 s from 13 s to 62 s, and the middle's falls to 0.12 s "
        "from 41 s to 161 s",
        (
            _JOT,
            Profile("gush", ttft_s=1.18, tps=348.0, price=0.36, ttft_sigma=0.47),
            _CORE,
            Profile("penny", ttft_s=1.09, tps=84.0, price=0.07),
            Profile("prime", ttft_s=0.31, tps=204.0, price=3.6, ttft_sigma=0.26),
        ),
        lengths=((1, 2), (4, 3), (15, 3), (38, 2), (105, 1), (190, 1)),
        duration_s=226,
        rate_per_s=2.65,
        max_tokens=48000,
        changes=(
            Change(13, "jot", replace(_JOT, ttft_s=0.84)),
            Change(41, "core", replace(_CORE, ttft_s=0.12)),
            Change(62, "jot", _JOT),
            Change(161, "core", _CORE),
        ),
    ),
    Scenario(
        "ho11-replicas",
        "two replicas sharing a window, the leader streams slowly a while, a cheap one is the quickest for 14 s of it",
        "two gateway replicas over one stats window, 1.96 requests/s between them; five providers, the leader "
        "(0.26 s, 247 tok/s) streams at 96 tok/s, its first token unchanged, from 33 s to 81 s, and the fourth "
        "(0.86 s, 128 tok/s, the second cheapest) is the quickest (0.2 s, 276 tok/s) from 38 s to 52 s; the "
        "runner-up (0.39 s, 216 tok/s) leads otherwise meanwhile; a first party's is priced 2.2 at 0.57 s and "
        "178 tok/s; answers of 210, 480 or 1150 tokens",
        (
            _RP1,
            Profile("rp2", ttft_s=0.39, tps=216.0, price=0.59, ttft_sigma=0.41),
            Profile("rp3", ttft_s=0.57, tps=178.0, price=2.2),
            _RP4,
            Profile("rp5", ttft_s=1.24, tps=79.0, price=0.12),
        ),
        lengths=((210, 3), (480, 2), (1150, 1)),
        duration_s=132,
        rate_per_s=1.96,
        changes=(
            Change(33, "rp1", replace(_RP1, tps=96.0)),
            Change(38, "rp4", replace(_RP4, ttft_s=0.2, tps=276.0)),
            Change(52, "rp4", _RP4),
            Change(81, "rp1", _RP1),
        ),
        replicas=2,
    ),
    Scenario(
        "ho11-outage",
        "a brief outage (11 s) of the leader (the dearest) late in a long run, and its end",
        "five providers at 2.79 requests/s, answers of 48, 310 or 1150 tokens; the leader (0.22 s, 274 tok/s, priced "
        "1.38, the dearest) fails every request from 128 s to 139 s, then is as before",
        (
            _OB1,
            Profile("ob2", ttft_s=0.36, tps=228.0, price=0.54),
            Profile("ob3", ttft_s=0.49, tps=195.0, price=0.67, ttft_sigma=0.47, tps_sigma=0.33),
            Profile("ob4", ttft_s=0.74, tps=149.0, price=0.31),
            Profile("ob5", ttft_s=1.19, tps=88.0, price=0.16),
        ),
        lengths=((48, 3), (310, 2), (1150, 1)),
        duration_s=229,
        rate_per_s=2.79,
        changes=(Change(128, "ob1", replace(_OB1, error_rate=1.0)), Change(139, "ob1", _OB1)),
    ),
    Scenario(
        "ho11-mixed",
        "answers of very different lengths over a quick starter, a fast streamer, a middling third and a cheap one; "
        "the fast streamer slows a while, and the quick starter trades its quick start for a fast stream a while",
        "answers of 3, 12, 950 or 2700 tokens at 2.03 requests/s over a quick starter that streams slowly (0.11 s, "
        "44 tok/s), a slow starter that streams fast (1.44 s, 356 tok/s), a middling third (0.57 s, 176 tok/s) and a "
        "cheap fourth (1.11 s, 112 tok/s); the fast streamer streams at 131 tok/s from 69 s to 124 s, and the quick "
        "starter starts at 0.68 s and streams at 236 tok/s from 90 s to 125 s (the middling third then the best for "
        "short answers, the quick starter for long ones)",
        (
            _DAB,
            _CASCADE,
            Profile("median", ttft_s=0.57, tps=176.0, price=0.55),
            Profile("scrimp", ttft_s=1.11, tps=112.0, price=0.11, ttft_sigma=0.38, tps_sigma=0.31),
        ),
        lengths=((3, 2), (12, 3), (950, 2), (2700, 1)),
        duration_s=158,
        rate_per_s=2.03,
        changes=(
            Change(69, "cascade", replace(_CASCADE, tps=131.0)),
            Change(90, "dab", replace(_DAB, ttft_s=0.68, tps=236.0)),
            Change(124, "cascade", _CASCADE),
            Change(125, "dab", _DAB),
        ),
    ),
    Scenario(
        "ho11-cold",
        "a cold start over three anti-correlated providers (the quickest starter streams slowest), all new; the fast "
        "streamer slows a while, and the middle starts quickest a while",
        "three providers only, none measured at the start, first token and speed opposed: a quick starter that streams "
        "slowly (0.13 s, 61 tok/s, the dearest), a middle (0.56 s, 169 tok/s) and a slow starter that streams fast "
        "(1.47 s, 341 tok/s, the cheapest); answers of 2, 25, 430 or 1900 tokens at 2.51 requests/s; the fast "
        "streamer streams at 183 tok/s from 35 s to 92 s, and the middle's first token is 0.09 s from 54 s to 115 s",
        (Profile("flick", ttft_s=0.13, tps=61.0, price=0.58, ttft_sigma=0.26), _TEMPO, _DELUGE),
        lengths=((2, 3), (25, 2), (430, 2), (1900, 1)),
        duration_s=148,
        rate_per_s=2.51,
        changes=(
            Change(35, "deluge", replace(_DELUGE, tps=183.0)),
            Change(54, "tempo", replace(_TEMPO, ttft_s=0.09)),
            Change(92, "deluge", _DELUGE),
            Change(115, "tempo", _TEMPO),
        ),
    ),
    Scenario(
        "ho11-flaky",
        "the quickest provider fails 39% of requests instantly, all through; a reliable one overtakes a while, and "
        "later the cheapest for good",
        "five providers at 2.03 requests/s, answers of 64, 390 or 1450 tokens; the quickest (0.17 s, 292 tok/s) fails "
        "39% of its requests at once from start to end; the third (0.53 s, 189 tok/s, priced 0.46) is quicker than it "
        "(0.15 s, 318 tok/s) from 45 s to 111 s, and the cheapest (1.29 s, 77 tok/s) is (0.16 s, 305 tok/s) from "
        "122 s on",
        (
            Profile("fz1", ttft_s=0.17, tps=292.0, price=0.49, error_rate=0.39),
            Profile("fz2", ttft_s=0.34, tps=226.0, price=0.86, ttft_sigma=0.35),
            _FZ3,
            Profile("fz4", ttft_s=0.81, tps=134.0, price=0.27),
            _FZ5,
        ),
        lengths=((64, 2), (390, 3), (1450, 1)),
        duration_s=197,
        rate_per_s=2.03,
        changes=(
            Change(45, "fz3", replace(_FZ3, ttft_s=0.15, tps=318.0)),
            Change(111, "fz3", _FZ3),
            Change(122, "fz5", replace(_FZ5, ttft_s=0.16, tps=305.0)),
        ),
    ),
    Scenario(
        "ho11-tail",
        "the leader's first-token tail widens in three steps, its median unchanged, and narrows at once: only the "
        "tail says it is no longer best",
        "four providers at 2.97 requests/s, answers of 14, 65 or 310 tokens; the leader (0.24 s median first token, "
        "spread 0.27, 251 tok/s) has a first-token spread of 0.48 from 16 s, 0.74 from 26 s and 1.22 (p95 1.8 s, its "
        "mean twice its median) from 65 s to 171 s, its median and speed unchanged, then is as before; the runner-up "
        "(0.36 s, 228 tok/s) is the best at the widest",
        (
            _TW1,
            Profile("tw2", ttft_s=0.36, tps=228.0, price=0.47, ttft_sigma=0.25),
            Profile("tw3", ttft_s=0.62, tps=176.0, price=0.95, tps_sigma=0.33),
            Profile("tw4", ttft_s=1.07, tps=97.0, price=0.17),
        ),
        lengths=((14, 2), (65, 3), (310, 1)),
        duration_s=209,
        rate_per_s=2.97,
        changes=(
            Change(16, "tw1", replace(_TW1, ttft_sigma=0.48)),
            Change(26, "tw1", replace(_TW1, ttft_sigma=0.74)),
            Change(65, "tw1", replace(_TW1, ttft_sigma=1.22)),
            Change(171, "tw1", _TW1),
        ),
    ),
)
