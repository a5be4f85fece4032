"""The third held-out set of routing markets: written before this round's tuning, run on the routers once, at the end.

Sets one (``routing_scenarios.HELD_OUT``) and two (``routing_held_out.HELD_OUT_2``) have each been looked at once
and hold nothing out any more. These markets name the same behaviours again with fresh schedules, rates, lengths,
provider counts and prices (``routing_simulate --held-out-3``). Never tune anything on them.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario


def _glide(name: str, start: Profile, end: Profile, from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """``name`` glides from ``start`` to ``end`` in ``steps`` geometric steps between ``from_s`` and ``to_s``."""
    return tuple(
        Change(
            from_s + (to_s - from_s) * i / steps,
            name,
            replace(
                start,
                name=name,
                ttft_s=start.ttft_s * (end.ttft_s / start.ttft_s) ** (i / steps),
                tps=start.tps * (end.tps / start.tps) ** (i / steps),
            ),
        )
        for i in range(1, steps + 1)
    )


_HIGH = Profile("hi", ttft_s=0.4, tps=210.0, price=0.5)
_LOW = Profile("lo", ttft_s=1.1, tps=85.0, price=0.5)


def _uneven_swaps(long_s: float, short_s: float, until_s: float) -> tuple[Change, ...]:
    """``o1`` leads for ``long_s``, then ``o2`` for ``short_s``, and again, until ``until_s``."""
    changes = []
    at, first_leads = long_s, False
    while at < until_s:
        lead, lag = ("o1", "o2") if first_leads else ("o2", "o1")
        changes.append(Change(at, lead, replace(_HIGH, name=lead)))
        changes.append(Change(at, lag, replace(_LOW, name=lag)))
        at += long_s if first_leads else short_s
        first_leads = not first_leads
    return tuple(changes)


_TWELVE = tuple(
    Profile(f"n{i}", ttft_s=ttft, tps=tps, price=price)
    for i, (ttft, tps, price) in enumerate(
        (
            (0.35, 230.0, 0.55),
            (0.4, 200.0, 0.5),
            (0.45, 210.0, 0.6),
            (0.55, 170.0, 0.45),
            (0.6, 150.0, 0.4),
            (0.7, 160.0, 0.5),
            (0.8, 120.0, 0.35),
            (0.95, 110.0, 0.3),
            (1.2, 90.0, 0.3),
            (1.4, 75.0, 0.25),
            (1.7, 65.0, 0.2),
            (2.2, 45.0, 0.2),
        )
    )
)

_T1 = Profile("t1", ttft_s=0.3, tps=140.0, price=0.5)
_T2 = Profile("t2", ttft_s=0.55, tps=140.0, price=0.5)
_T3 = Profile("t3", ttft_s=0.75, tps=140.0, price=0.5)

HELD_OUT_3: tuple[Scenario, ...] = (
    Scenario(
        "ho3-drift",
        "gradual drift, first token and speed apart",
        "five providers at 3 requests/s; from 20 s to 140 s the leader's first token rises smoothly 0.25 s → "
        "1.3 s (its speed stays), while from 40 s to 120 s the fourth's speed rises 90 → 320 tok/s; answers of "
        "96 or 320 tokens",
        (
            Profile("d1", ttft_s=0.25, tps=200.0, price=0.5),
            Profile("d2", ttft_s=0.5, tps=170.0, price=0.45),
            Profile("d3", ttft_s=0.65, tps=150.0, price=0.4),
            Profile("d4", ttft_s=0.45, tps=90.0, price=0.5),
            Profile("d5", ttft_s=1.0, tps=70.0, price=0.3),
        ),
        lengths=((96, 3), (320, 2)),
        duration_s=150,
        rate_per_s=3.0,
        changes=(
            *_glide("d1", Profile("d1", 0.25, 200.0, 0.5), Profile("d1", 1.3, 200.0, 0.5), 20, 140, 30),
            *_glide("d4", Profile("d4", 0.45, 90.0, 0.5), Profile("d4", 0.45, 320.0, 0.5), 40, 120, 20),
        ),
    ),
    Scenario(
        "ho3-oscillate",
        "oscillating leaders, uneven turns",
        "two providers trade the lead (0.4 s, 210 tok/s against 1.1 s, 85 tok/s): the first leads 30 s, the "
        "second 10 s, and again; a steady third (0.65 s, 140 tok/s) at a lower price; 5 requests/s, answers of "
        "72 or 240 tokens",
        (replace(_HIGH, name="o1"), replace(_LOW, name="o2"), Profile("o3", ttft_s=0.65, tps=140.0, price=0.35)),
        lengths=((72, 1), (240, 1)),
        duration_s=160,
        rate_per_s=5.0,
        changes=_uneven_swaps(30, 10, 160),
    ),
    Scenario(
        "ho3-many",
        "twelve providers, the leader halves, a slow one recovers",
        "twelve providers at 3 requests/s; the quickest (0.35 s, 230 tok/s) streams at half speed with a 0.8 s "
        "first token from 45 s on, and the ninth (1.2 s, 90 tok/s) becomes the quickest (0.25 s, 330 tok/s) 85 s "
        "in; answers of 48, 200 or 600 tokens",
        _TWELVE,
        lengths=((48, 2), (200, 2), (600, 1)),
        duration_s=140,
        rate_per_s=3.0,
        changes=(
            Change(45, "n0", replace(_TWELVE[0], ttft_s=0.8, tps=115.0)),
            Change(85, "n8", replace(_TWELVE[8], ttft_s=0.25, tps=330.0)),
        ),
    ),
    Scenario(
        "ho3-ttft",
        "first-token blips and a first-token gain, and their ends",
        "answers of 12 or 48 tokens over three providers of equal speed: the leader's first token goes 0.3 s → "
        "2.0 s for 12 s twice (30 s, 95 s); the third's falls 0.75 s → 0.15 s from 50 s to 80 s, then is as "
        "before; 4 requests/s",
        (_T1, _T2, _T3),
        lengths=((12, 1), (48, 1)),
        duration_s=130,
        rate_per_s=4.0,
        changes=(
            Change(30, "t1", replace(_T1, ttft_s=2.0)),
            Change(42, "t1", _T1),
            Change(50, "t3", replace(_T3, ttft_s=0.15)),
            Change(80, "t3", _T3),
            Change(95, "t1", replace(_T1, ttft_s=2.0)),
            Change(107, "t1", _T1),
        ),
    ),
    Scenario(
        "ho3-down-at-start",
        "the two best providers down at start, back at different times",
        "four providers at 3 requests/s, answers of 300 tokens; the best (0.3 s, 260 tok/s) fails every request "
        "until 50 s, the second (0.45 s, 200 tok/s) until 20 s; then both are healthy",
        (
            Profile("w1", ttft_s=0.3, tps=260.0, price=0.6, error_rate=1.0),
            Profile("w2", ttft_s=0.45, tps=200.0, price=0.5, error_rate=1.0),
            Profile("w3", ttft_s=0.8, tps=120.0, price=0.4),
            Profile("w4", ttft_s=1.3, tps=70.0, price=0.3),
        ),
        lengths=((300, 1),),
        duration_s=110,
        rate_per_s=3.0,
        changes=(
            Change(20, "w2", Profile("w2", ttft_s=0.45, tps=200.0, price=0.5)),
            Change(50, "w1", Profile("w1", ttft_s=0.3, tps=260.0, price=0.6)),
        ),
    ),
    Scenario(
        "ho3-agent",
        "agent traffic: max_tokens 32000, very short answers, the streamer starts sooner",
        "every request asks for max_tokens 32000 and is answered in 4 to 160 tokens, at 1.5 requests/s; a quick "
        "starter that streams slowly (0.25 s, 40 tok/s), a slow starter that streams fast (1.4 s, 400 tok/s) and "
        "a middle (0.7 s, 110 tok/s); the fast streamer's first token falls to 0.3 s 50 s in",
        (
            Profile("starter", ttft_s=0.25, tps=40.0, price=0.5),
            Profile("streamer", ttft_s=1.4, tps=400.0, price=0.5),
            Profile("middle", ttft_s=0.7, tps=110.0, price=0.5),
        ),
        lengths=((4, 3), (24, 3), (80, 2), (160, 1)),
        duration_s=130,
        rate_per_s=1.5,
        max_tokens=32000,
        changes=(Change(50, "streamer", Profile("streamer", ttft_s=0.3, tps=400.0, price=0.5)),),
    ),
    Scenario(
        "ho3-replicas",
        "two replicas sharing a window, the third overtakes",
        "two gateway replicas over one stats window, 2 requests/s between them; four providers, the third "
        "(0.6 s, 140 tok/s) becomes the quickest (0.3 s, 300 tok/s) 35 s in; answers of 180 tokens",
        (
            Profile("r1", ttft_s=0.4, tps=210.0, price=0.5),
            Profile("r2", ttft_s=0.5, tps=190.0, price=0.45),
            Profile("r3", ttft_s=0.6, tps=140.0, price=0.5),
            Profile("r4", ttft_s=1.0, tps=80.0, price=0.3),
        ),
        lengths=((180, 1),),
        duration_s=110,
        rate_per_s=2.0,
        changes=(Change(35, "r3", Profile("r3", ttft_s=0.3, tps=300.0, price=0.5)),),
        replicas=2,
    ),
)
