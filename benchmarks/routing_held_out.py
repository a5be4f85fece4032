"""The second held-out set of routing markets: written before the belief router's tuning, run on it once, at the end.

The first held-out set (``routing_scenarios.HELD_OUT``) has been looked at once and no longer holds anything
out. These markets name the same behaviours with other schedules, rates, lengths and provider counts
(``routing_simulate --held-out-2``). Never tune anything on them.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.routing_scenarios import Change, Profile, Scenario

_P = Profile("p", ttft_s=0.3, tps=250.0, price=0.5)
_Q = Profile("q", ttft_s=0.6, tps=160.0, price=0.5)
_R = Profile("r", ttft_s=0.9, tps=110.0, price=0.5)
_S = Profile("s", ttft_s=1.5, tps=60.0, price=0.5)

_LEAD = Profile("lead", ttft_s=0.3, tps=240.0, price=0.5)
_BACK = Profile("back", ttft_s=1.0, tps=90.0, price=0.5)


def _steps(name: str, start: Profile, end: Profile, from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """``name`` goes from ``start`` to ``end`` in ``steps`` equal geometric steps between ``from_s`` and ``to_s``."""
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


def _rotation(names: tuple[str, ...], period_s: float, until_s: float) -> tuple[Change, ...]:
    """The lead passes from one of ``names`` to the next every ``period_s``; the one it leaves falls back."""
    changes = []
    k = 1
    while k * period_s < until_s:
        for i, name in enumerate(names):
            profile = _LEAD if i == k % len(names) else _BACK
            changes.append(Change(k * period_s, name, replace(profile, name=name)))
        k += 1
    return tuple(changes)


_MANY = tuple(
    Profile(f"m{i}", ttft_s=ttft, tps=tps, price=price)
    for i, (ttft, tps, price) in enumerate(
        (
            (0.45, 150.0, 0.5),
            (0.5, 170.0, 0.6),
            (0.6, 140.0, 0.4),
            (0.7, 120.0, 0.45),
            (0.8, 130.0, 0.7),
            (0.9, 100.0, 0.35),
            (1.1, 80.0, 0.3),
            (1.3, 260.0, 0.8),
            (1.6, 60.0, 0.3),
            (2.0, 50.0, 0.25),
        )
    )
)

HELD_OUT_2: tuple[Scenario, ...] = (
    Scenario(
        "ho2-drift",
        "gradual drift, two at once",
        "four providers at 2 requests/s; from 30 s to 130 s the leader's tokens/s fall smoothly 250 → 60, while "
        "from 60 s to 140 s the third's first token and speed improve smoothly (0.9 s, 110 tok/s → 0.25 s, "
        "280 tok/s); answers of 128 or 512 tokens",
        (_P, _Q, _R, _S),
        lengths=((128, 2), (512, 1)),
        duration_s=160,
        rate_per_s=2.0,
        changes=(
            *_steps("p", _P, replace(_P, tps=60.0), 30, 130, 25),
            *_steps("r", _R, replace(_R, ttft_s=0.25, tps=280.0), 60, 140, 16),
        ),
    ),
    Scenario(
        "ho2-rotate",
        "oscillating leaders, three in turn",
        "three providers pass the lead (0.3 s, 240 tok/s) round every 25 s, the other two lagging (1.0 s, "
        "90 tok/s), at 3 requests/s; answers of 160 tokens",
        tuple(replace(_LEAD if name == "x" else _BACK, name=name) for name in ("x", "y", "z")),
        lengths=((160, 1),),
        duration_s=175,
        rate_per_s=3.0,
        changes=_rotation(("x", "y", "z"), 25, 175),
    ),
    Scenario(
        "ho2-many",
        "ten providers, a middle one becomes the best",
        "ten providers of different first tokens, speeds and prices at 5 requests/s; the fifth by first token "
        "(0.8 s, 130 tok/s) becomes the quickest (0.2 s, 350 tok/s) 60 s in; answers of 64 or 384 tokens",
        _MANY,
        lengths=((64, 1), (384, 1)),
        duration_s=120,
        rate_per_s=5.0,
        changes=(Change(60, "m4", replace(_MANY[4], ttft_s=0.2, tps=350.0)),),
    ),
    Scenario(
        "ho2-ttft",
        "first-token changes and their ends",
        "short answers (24 tokens) over three providers: the leader's first token triples (0.3 s → 0.9 s) from "
        "30 s to 75 s, then is as before; the second's halves (0.5 s → 0.2 s) from 100 s to 130 s, then is "
        "as before; no speed changes",
        (
            Profile("f1", ttft_s=0.3, tps=150.0, price=0.5),
            Profile("f2", ttft_s=0.5, tps=150.0, price=0.5),
            Profile("f3", ttft_s=0.8, tps=150.0, price=0.5),
        ),
        lengths=((24, 1),),
        duration_s=150,
        rate_per_s=3.0,
        changes=(
            Change(30, "f1", Profile("f1", ttft_s=0.9, tps=150.0, price=0.5)),
            Change(75, "f1", Profile("f1", ttft_s=0.3, tps=150.0, price=0.5)),
            Change(100, "f2", Profile("f2", ttft_s=0.2, tps=150.0, price=0.5)),
            Change(130, "f2", Profile("f2", ttft_s=0.5, tps=150.0, price=0.5)),
        ),
    ),
    Scenario(
        "ho2-down-at-start",
        "the best provider down at start, then flaky",
        "four providers at 2 requests/s; the best fails every request for the first 25 s, one in ten from 25 s "
        "to 60 s, then none; answers of 200 tokens",
        (replace(_P, error_rate=1.0), _Q, _R, _S),
        lengths=((200, 1),),
        duration_s=120,
        rate_per_s=2.0,
        changes=(Change(25, "p", replace(_P, error_rate=0.1)), Change(60, "p", _P)),
    ),
    Scenario(
        "ho2-agent",
        "agent traffic: max_tokens 16384, short answers, a change",
        "every request asks for max_tokens 16384 and is answered in 8 to 240 tokens, at 2 requests/s; a quick "
        "starter that streams slowly (0.3 s, 50 tok/s), a slow starter that streams fast (1.8 s, 320 tok/s) and "
        "a middle (0.9 s, 140 tok/s); the quick starter's first token goes to 1.5 s 60 s in",
        (
            Profile("starter", ttft_s=0.3, tps=50.0, price=0.5),
            Profile("fast", ttft_s=1.8, tps=320.0, price=0.5),
            Profile("mid", ttft_s=0.9, tps=140.0, price=0.5),
        ),
        lengths=((8, 2), (40, 3), (120, 2), (240, 1)),
        duration_s=120,
        rate_per_s=2.0,
        max_tokens=16384,
        changes=(Change(60, "starter", Profile("starter", ttft_s=1.5, tps=50.0, price=0.5)),),
    ),
    Scenario(
        "ho2-replicas",
        "two replicas sharing a window, the leader slows",
        "two gateway replicas over one stats window, 4 requests/s between them; the leader (0.35 s, 230 tok/s) "
        "streams 4x slower from 45 s on; two others (0.5 s, 180 tok/s; 0.8 s, 120 tok/s); answers of 300 tokens",
        (
            Profile("u", ttft_s=0.35, tps=230.0, price=0.5),
            Profile("v", ttft_s=0.5, tps=180.0, price=0.5),
            Profile("w", ttft_s=0.8, tps=120.0, price=0.5),
        ),
        lengths=((300, 1),),
        duration_s=100,
        rate_per_s=4.0,
        changes=(Change(45, "u", Profile("u", ttft_s=0.35, tps=230.0 / 4, price=0.5)),),
        replicas=2,
    ),
)
