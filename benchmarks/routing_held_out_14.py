"""The fourteenth held-out set of routing markets: written before the next routing change, run on routers once, last.

Sets one (``routing_scenarios.HELD_OUT``) to twelve (``routing_held_out_12.HELD_OUT_12``) have each been looked at
once; set thirteen (``routing_held_out_13.HELD_OUT_13``) was still unrun when this one was written, and nothing here
was taken from a run of it. Each market is one behaviour the gate names, or one a real market shows, in a shape no
earlier set holds: the leader's speed wearing while a cheap one's first token improves (two drifts on two axes), three
leaders taking turns, fourteen providers whose new leader is one hardly heard, a first token climbing for a minute and
its end at once, two providers down at start and back at different times, agent traffic at a ceiling of 200,000
tokens whose quick starter starts late a while, two replicas over a leader slowing in two steps, a long outage at a
low rate, a leader that fails one request in nine and stays the best, and lengths in two bands whose long band's
streamer slows a while. Some prices are a first party's, several times the others'. Left out, as the simulator cannot
put them fairly: a price change and a speed that depends on the answer's length.

The new random choices were drawn with ``random.Random("routing-held-out-14")`` (whole numbers by ``randint``, shares
and rates by ``uniform`` rounded to two places, the ceiling by ``choice``), in this order: the many-provider count
(8-14, redrawn while an earlier set's 9, 10 or 12: 14), the turn of the three leaders (10-30 s: 16 s), the agent's
ceiling (16000, 32000, 64000, 100000, 128000 or 200000, redrawn while an earlier market's: 64000, then 200000), the
outage's length (10-50 s, redrawn while within 3 s of an earlier set's, 11, 17, 24, 29, 30, 32, 37, 41 or 44 s: 33,
10, 43, 31, 15 and 43 came up, then 47 s), the flaky leader's failure share (0.1-0.3: 0.11, no earlier market's),
then per market in the order below a duration (105-230 s), a rate (1.4-4.3 requests/s) and four change times (from
12 s to 85% of the duration, sorted). A market uses the change times it needs, as drawn. The provider profiles (first
tokens, speeds, spreads, prices) and the answer lengths are fresh, written for each market so that its behaviour holds
by the time oracle alone (``oracle_choice``, no router). Never tune anything on them.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario


def _first_token_steps(start: Profile, end_s: float, from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """``start``'s first token moves to ``end_s`` in ``steps`` even steps from ``from_s`` to ``to_s``, nothing else."""
    return tuple(
        Change(
            from_s + (to_s - from_s) * i / steps,
            start.name,
            replace(start, ttft_s=round(start.ttft_s + (end_s - start.ttft_s) * i / steps, 3)),
        )
        for i in range(1, steps + 1)
    )


def _speed_steps(start: Profile, end_tps: float, from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """``start``'s speed moves to ``end_tps`` in ``steps`` even steps from ``from_s`` to ``to_s``, nothing else."""
    return tuple(
        Change(
            from_s + (to_s - from_s) * i / steps,
            start.name,
            replace(start, tps=round(start.tps + (end_tps - start.tps) * i / steps, 1)),
        )
        for i in range(1, steps + 1)
    )


def _turns(fast: tuple[Profile, ...], slow: tuple[Profile, ...], turn_s: float, until_s: float) -> tuple[Change, ...]:
    """Leaders taking turns: the first of ``fast`` leads at the start; every ``turn_s`` seconds until ``until_s`` the
    one leading falls to its ``slow`` self and the next in the ring rises to its ``fast`` self, at once."""
    changes: list[Change] = []
    for k, at in enumerate(itertools.takewhile(lambda t: t <= until_s, itertools.count(turn_s, turn_s))):
        was, now = k % len(fast), (k + 1) % len(fast)
        changes += [Change(at, slow[was].name, slow[was]), Change(at, fast[now].name, fast[now])]
    return tuple(changes)


def _timed(*changes: Change) -> tuple[Change, ...]:
    """Several providers' changes in the order of their times, as ``Scenario.profiles_at`` reads them."""
    return tuple(sorted(changes, key=lambda c: c.at_s))


_DR1 = Profile("dr1", ttft_s=0.24, tps=232.0, price=0.57, ttft_sigma=0.28)
_DR3 = Profile("dr3", ttft_s=0.52, tps=240.0, price=0.16, tps_sigma=0.27)

_RO_FAST = (
    Profile("ro1", ttft_s=0.2, tps=262.0, price=0.49, ttft_sigma=0.26),
    Profile("ro2", ttft_s=0.22, tps=251.0, price=0.31, tps_sigma=0.24),
    Profile("ro3", ttft_s=0.19, tps=269.0, price=2.6, ttft_sigma=0.29),
)
_RO_SLOW = (
    replace(_RO_FAST[0], ttft_s=0.53, tps=117.0),
    replace(_RO_FAST[1], ttft_s=0.57, tps=109.0),
    replace(_RO_FAST[2], ttft_s=0.49, tps=124.0),
)

_MP1 = Profile("mp1", ttft_s=0.21, tps=257.0, price=0.38, ttft_sigma=0.27)
_MP9 = Profile("mp9", ttft_s=0.66, tps=151.0, price=0.2, tps_sigma=0.29)

_TQ1 = Profile("tq1", ttft_s=0.22, tps=205.0, price=0.63, ttft_sigma=0.25)

_DW1 = Profile("dw1", ttft_s=0.18, tps=266.0, price=0.42, ttft_sigma=0.27)
_DW3 = Profile("dw3", ttft_s=0.36, tps=214.0, price=0.23, tps_sigma=0.26)

_AG1 = Profile("ag1", ttft_s=0.16, tps=84.0, price=0.68, ttft_sigma=0.23)

_RX1 = Profile("rx1", ttft_s=0.22, tps=271.0, price=0.54, ttft_sigma=0.26)

_OX1 = Profile("ox1", ttft_s=0.21, tps=278.0, price=0.35, tps_sigma=0.22)

_FX1 = Profile("fx1", ttft_s=0.2, tps=283.0, price=0.44, ttft_sigma=0.27)

_MX3 = Profile("mx3", ttft_s=1.4, tps=396.0, price=2.3, ttft_sigma=0.31)

HELD_OUT_14: tuple[Scenario, ...] = (
    Scenario(
        "ho14-drift",
        "gradual drift on two axes: the leader's speed wears away while a cheap one's first token improves, the two "
        "crossing at different times for different lengths",
        "five providers at 3.69 requests/s, answers of 25, 240 or 1100 tokens; from 16 s to 114 s the leader (0.24 s, "
        "232 tok/s) slows in 49 even steps to 118 tok/s, its first token unchanged, and from 50 s to 89 s the second "
        "cheapest (0.52 s, 240 tok/s) starts sooner in 13 steps, to 0.25 s, its speed unchanged, and stays so: it is "
        "the best for 1100 tokens from 26 s, for 240 from 68 s (a first party's, 0.33 s, 221 tok/s, priced 2.9, from "
        "42 s to 68 s) and for 25 from 84 s",
        (
            _DR1,
            Profile("dr2", ttft_s=0.33, tps=221.0, price=2.9, ttft_sigma=0.32),
            _DR3,
            Profile("dr4", ttft_s=0.61, tps=158.0, price=0.39, ttft_sigma=0.36),
            Profile("dr5", ttft_s=1.25, tps=77.0, price=0.06),
        ),
        lengths=((25, 2), (240, 3), (1100, 1)),
        duration_s=150,
        rate_per_s=3.69,
        changes=_timed(*_speed_steps(_DR1, 118.0, 16, 114, 49), *_first_token_steps(_DR3, 0.25, 50, 89, 13)),
    ),
    Scenario(
        "ho14-oscillate",
        "oscillating leaders: three providers take the lead in turn, every 16 s, the one leaving it falling at once "
        "to half its speed",
        "three providers (0.2 s, 262 tok/s; 0.22 s, 251 tok/s; a first party's 0.19 s, 269 tok/s, priced 2.6) each "
        "fast for 16 s in turn from the start to 176 s, slow between (0.49-0.57 s, 109-124 tok/s); the first party's, "
        "leading from 176 s, keeps it; a steady fourth (0.37 s, 176 tok/s) is never the best; 2.41 requests/s, answers "
        "of 60, 520 or 1700 tokens",
        (
            _RO_FAST[0],
            _RO_SLOW[1],
            _RO_SLOW[2],
            Profile("ro4", ttft_s=0.37, tps=176.0, price=0.27, tps_sigma=0.3),
            Profile("ro5", ttft_s=1.1, tps=86.0, price=0.07, ttft_sigma=0.44),
        ),
        lengths=((60, 2), (520, 3), (1700, 1)),
        duration_s=211,
        rate_per_s=2.41,
        changes=_turns(_RO_FAST, _RO_SLOW, 16, 178),
    ),
    Scenario(
        "ho14-many",
        "fourteen providers: the leader slows for good, the runner-up leads, then one of the pack hardly ever heard "
        "speeds up past both",
        "fourteen providers at 2.33 requests/s, prices 0.03 to 3.5, answers of 45, 280 or 900 tokens; at 41 s the "
        "leader (0.21 s, 257 tok/s) answers at 0.62 s and 139 tok/s for good and the runner-up (0.27 s, 238 tok/s) "
        "leads; at 97 s the ninth quickest (0.66 s, 151 tok/s, priced 0.2) answers at 0.19 s and 301 tok/s and "
        "leads to the end",
        (
            _MP1,
            Profile("mp2", ttft_s=0.27, tps=238.0, price=0.71, ttft_sigma=0.31),
            Profile("mp3", ttft_s=0.31, tps=229.0, price=3.5, ttft_sigma=0.24),
            Profile("mp4", ttft_s=0.35, tps=214.0, price=0.48, tps_sigma=0.26),
            Profile("mp5", ttft_s=0.4, tps=203.0, price=0.33, ttft_sigma=0.35),
            Profile("mp6", ttft_s=0.46, tps=188.0, price=0.62, tps_sigma=0.3),
            Profile("mp7", ttft_s=0.52, tps=174.0, price=0.26, ttft_sigma=0.38),
            Profile("mp8", ttft_s=0.58, tps=163.0, price=0.41),
            _MP9,
            Profile("mp10", ttft_s=0.75, tps=138.0, price=0.15, ttft_sigma=0.41),
            Profile("mp11", ttft_s=0.86, tps=124.0, price=0.12, tps_sigma=0.33),
            Profile("mp12", ttft_s=0.99, tps=109.0, price=0.09, ttft_sigma=0.45),
            Profile("mp13", ttft_s=1.18, tps=93.0, price=0.05),
            Profile("mp14", ttft_s=1.45, tps=71.0, price=0.03, ttft_sigma=0.52, tps_sigma=0.31),
        ),
        lengths=((45, 2), (280, 3), (900, 1)),
        duration_s=171,
        rate_per_s=2.33,
        changes=(
            Change(41, "mp1", replace(_MP1, ttft_s=0.62, tps=139.0)),
            Change(97, "mp9", replace(_MP9, ttft_s=0.19, tps=301.0)),
        ),
    ),
    Scenario(
        "ho14-ttft",
        "a first-token-only climb and its end: the leader's first token rises step by step for 51 s, holds, then is "
        "its own again at once; its speed never moves",
        "answers of 5, 20, 60 or 180 tokens over five providers at 3.01 requests/s: from 34 s to 85 s the leader's "
        "first token (0.22 s, 205 tok/s) climbs every 3 s to 1.6 s, holds to 128 s, and is 0.22 s again at 128 s; "
        "the runner-up (0.3 s, 176 tok/s) leads from 40 s to 128 s, for the 180-token answers a first party's (0.41 "
        "s, 263 tok/s, priced 3.2) from 37 s",
        (
            _TQ1,
            Profile("tq2", ttft_s=0.3, tps=176.0, price=0.35, ttft_sigma=0.3),
            Profile("tq3", ttft_s=0.41, tps=263.0, price=3.2),
            Profile("tq4", ttft_s=0.63, tps=133.0, price=0.21, ttft_sigma=0.4),
            Profile("tq5", ttft_s=1.05, tps=82.0, price=0.06, tps_sigma=0.29),
        ),
        lengths=((5, 2), (20, 3), (60, 2), (180, 1)),
        duration_s=229,
        rate_per_s=3.01,
        changes=(*_first_token_steps(_TQ1, 1.6, 34, 85, 17), Change(128, "tq1", _TQ1)),
    ),
    Scenario(
        "ho14-down-at-start",
        "two providers down at start: the best back at 17 s, the third quickest (and cheapest of the three) at 69 s",
        "five providers at 3.42 requests/s, answers of 110, 360 or 1250 tokens; the best (0.18 s, 266 tok/s, priced "
        "0.42) fails every request until 17 s, the third (0.36 s, 214 tok/s, priced 0.23) until 69 s; before 17 s a "
        "first party's (0.26 s, 244 tok/s, priced 3.1) is the best",
        (
            replace(_DW1, error_rate=1.0),
            Profile("dw2", ttft_s=0.26, tps=244.0, price=3.1, ttft_sigma=0.29),
            replace(_DW3, error_rate=1.0),
            Profile("dw4", ttft_s=0.55, tps=171.0, price=0.37, ttft_sigma=0.37),
            Profile("dw5", ttft_s=1.0, tps=96.0, price=0.08),
        ),
        lengths=((110, 2), (360, 3), (1250, 1)),
        duration_s=143,
        rate_per_s=3.42,
        changes=(Change(17, "dw1", _DW1), Change(69, "dw3", _DW3)),
    ),
    Scenario(
        "ho14-agent",
        "agent traffic: max_tokens 200000, short answers; the quickest starter starts late from 57 s to 168 s, then "
        "is itself again",
        "every request asks for max_tokens 200000 and is answered in 2 to 150 tokens, at 3.51 requests/s; the quickest "
        "starter (0.16 s, 84 tok/s) starts at 0.55 s from 57 s to 168 s; a first party's (0.31 s, 209 tok/s, priced "
        "3.4) is the best for 50 and 150 tokens throughout and for all lengths while the starter is late; a fast "
        "streamer that starts late (0.95 s, 334 tok/s), a cheap middling one (0.38 s, 118 tok/s, priced 0.19)",
        (
            _AG1,
            Profile("ag2", ttft_s=0.95, tps=334.0, price=0.29, ttft_sigma=0.45),
            Profile("ag3", ttft_s=0.31, tps=209.0, price=3.4, ttft_sigma=0.27),
            Profile("ag4", ttft_s=0.38, tps=118.0, price=0.19, tps_sigma=0.3),
            Profile("ag5", ttft_s=1.3, tps=58.0, price=0.03),
        ),
        lengths=((2, 3), (7, 3), (18, 2), (50, 2), (150, 1)),
        duration_s=203,
        rate_per_s=3.51,
        max_tokens=200000,
        changes=(Change(57, "ag1", replace(_AG1, ttft_s=0.55)), Change(168, "ag1", _AG1)),
    ),
    Scenario(
        "ho14-replicas",
        "two replicas sharing a window; the leader slows in two steps, six seconds apart, and is itself again at 85 s",
        "two gateway replicas over one stats window, 3.02 requests/s between them; five providers, answers of 130, 390 "
        "or 1400 tokens; at 50 s the leader (0.22 s, 271 tok/s) answers at 0.36 s and 205 tok/s, at 56 s at 0.58 s and "
        "131 tok/s, at 85 s as before; the runner-up (0.29 s, 236 tok/s, priced 0.24) leads from 50 s to 85 s; a "
        "first party's (0.33 s, 226 tok/s, priced 3.0)",
        (
            _RX1,
            Profile("rx2", ttft_s=0.29, tps=236.0, price=0.24, tps_sigma=0.28),
            Profile("rx3", ttft_s=0.33, tps=226.0, price=3.0, ttft_sigma=0.3),
            Profile("rx4", ttft_s=0.69, tps=152.0, price=0.41),
            Profile("rx5", ttft_s=1.15, tps=91.0, price=0.05, ttft_sigma=0.43),
        ),
        lengths=((130, 3), (390, 2), (1400, 1)),
        duration_s=107,
        rate_per_s=3.02,
        changes=(
            Change(50, "rx1", replace(_RX1, ttft_s=0.36, tps=205.0)),
            Change(56, "rx1", replace(_RX1, ttft_s=0.58, tps=131.0)),
            Change(85, "rx1", _RX1),
        ),
        replicas=2,
    ),
    Scenario(
        "ho14-outage",
        "a long outage (47 s) of the leader at a low request rate, and its return at once, whole",
        "five providers at 1.56 requests/s, answers of 80, 330 or 1000 tokens; the leader (0.21 s, 278 tok/s, priced "
        "0.35) fails every request from 109 s to 156 s, then answers as before; a first party's (0.28 s, 249 tok/s, "
        "priced 3.3) leads meanwhile",
        (
            _OX1,
            Profile("ox2", ttft_s=0.28, tps=249.0, price=3.3, ttft_sigma=0.3),
            Profile("ox3", ttft_s=0.39, tps=216.0, price=0.46, ttft_sigma=0.34),
            Profile("ox4", ttft_s=0.64, tps=161.0, price=0.22, tps_sigma=0.31),
            Profile("ox5", ttft_s=1.2, tps=87.0, price=0.05),
        ),
        lengths=((80, 3), (330, 2), (1000, 1)),
        duration_s=227,
        rate_per_s=1.56,
        changes=(Change(109, "ox1", replace(_OX1, error_rate=1.0)), Change(156, "ox1", _OX1)),
    ),
    Scenario(
        "ho14-flaky",
        "a leader that fails one request in nine a while and stays the best: a failure costs little, the quicker "
        "answers of the rest more",
        "five providers at 3.76 requests/s, answers of 35, 170 or 640 tokens; the leader (0.2 s, 283 tok/s) fails 11% "
        "of requests, at once, from 13 s to 80 s, and is still the best by expected time throughout; the runner-up "
        "(0.3 s, 227 tok/s, priced 0.28); a first party's (0.35 s, 241 tok/s, priced 2.8)",
        (
            _FX1,
            Profile("fx2", ttft_s=0.3, tps=227.0, price=0.28, tps_sigma=0.27),
            Profile("fx3", ttft_s=0.35, tps=241.0, price=2.8, ttft_sigma=0.31),
            Profile("fx4", ttft_s=0.71, tps=139.0, price=0.17, ttft_sigma=0.39),
            Profile("fx5", ttft_s=1.1, tps=92.0, price=0.04),
        ),
        lengths=((35, 2), (170, 3), (640, 1)),
        duration_s=123,
        rate_per_s=3.76,
        changes=(Change(13, "fx1", replace(_FX1, error_rate=0.11)), Change(80, "fx1", _FX1)),
    ),
    Scenario(
        "ho14-mixed",
        "lengths in two bands, short and long, each with its own best; the long band's streamer slows a while and a "
        "middling provider takes the long band",
        "answers of 4, 15, 1500 or 4000 tokens, equally likely, at 3.35 requests/s over a quick starter (0.17 s, 72 "
        "tok/s: the best for 4 and 15 tokens), a middling one (0.45 s, 241 tok/s), a first party's streamer (1.4 s, "
        "396 tok/s, priced 2.3: 1500 and 4000) and a cheap slow one; from 30 s to 114 s the streamer streams at 205 "
        "tok/s and the middling one takes both long lengths",
        (
            Profile("mx1", ttft_s=0.17, tps=72.0, price=0.52, ttft_sigma=0.24),
            Profile("mx2", ttft_s=0.45, tps=241.0, price=0.36, tps_sigma=0.26),
            _MX3,
            Profile("mx4", ttft_s=0.8, tps=104.0, price=0.1, ttft_sigma=0.37),
        ),
        lengths=((4, 1), (15, 1), (1500, 1), (4000, 1)),
        duration_s=208,
        rate_per_s=3.35,
        changes=(Change(30, "mx3", replace(_MX3, tps=205.0)), Change(114, "mx3", _MX3)),
    ),
)
"""The fourteenth held-out set (``routing_simulate --held-out-14``): ten markets, never run before the judgement."""
