"""The routing benchmark's markets: fake providers whose behaviour is known exactly, and how it moves.

Each scenario is one market a router must keep up with, 60–120 s of open-loop Poisson streaming
traffic. Providers are shaped on ``gateway/fakes/provider-profiles.csv`` (median and tail tokens/s,
first-token latency, price), in real time (no scaling), so that a wrong choice costs what it
would cost in production: an 800-token answer sent to a 40 tokens/s streamer takes 20 s.

The oracle knows every profile at every moment and picks, per request, the provider with the
lowest expected end-to-end time (a failure costs a fallback to the best healthy other), ties to
the cheaper; that is what "the truly best provider" means in the report.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

Z95 = 1.645


@dataclass(frozen=True)
class Profile:
    """A fake provider: medians and log-normal spreads of TTFT and tokens/s, a price, a failure rate."""

    name: str
    ttft_s: float
    tps: float
    price: float
    """USD per 1M tokens, prompt and output alike."""
    ttft_sigma: float = 0.3
    tps_sigma: float = 0.2
    error_rate: float = 0.0

    def mean_ttft(self) -> float:
        return self.ttft_s * math.exp(self.ttft_sigma**2 / 2)

    def expected_e2e(self, tokens: int) -> float:
        """The mean time of an answer of ``tokens`` tokens (log-normal means: E[1/X] = exp(σ²/2) / median)."""
        stream = max(0, tokens - 1) / self.tps * math.exp(self.tps_sigma**2 / 2)
        return self.mean_ttft() + stream

    def behavior(self) -> dict[str, Any]:
        return {
            "ttft_s": self.ttft_s,
            "ttft_jitter": self.ttft_sigma,
            "tokens_per_s": self.tps,
            "tps_jitter": self.tps_sigma,
            "output_tokens": 4000,
            "chunk_tokens": 2,
            "status": 503 if self.error_rate > 0 else 200,
            "error_rate": self.error_rate if self.error_rate > 0 else 1.0,
        }


def from_p95(
    name: str, tps_p50: float, tps_p95_floor: float, ttft_p50: float, ttft_p95: float, price: float
) -> Profile:
    """A profile from published percentiles: sigma = ln(p50 / p5) / 1.645 (tokens/s), ln(p95 / p50) / 1.645 (TTFT)."""
    return Profile(
        name,
        ttft_s=ttft_p50,
        tps=tps_p50,
        price=price,
        ttft_sigma=math.log(ttft_p95 / ttft_p50) / Z95,
        tps_sigma=math.log(tps_p50 / tps_p95_floor) / Z95,
    )


@dataclass(frozen=True)
class Change:
    """At ``at_s`` seconds into the run, provider ``name`` starts behaving as ``profile``."""

    at_s: float
    name: str
    profile: Profile


DRAWS_PER_SCHEDULE = 1_000_000
"""Apart by this many, two schedules' requests never share the fakes' draws (a schedule holds far fewer)."""


@dataclass(frozen=True)
class Planned:
    """One request of the schedule: when it is sent and how long an answer it asks for."""

    index: int
    at_s: float
    tokens: int
    draw_seed: int = 0
    """What the fakes draw this request's first token, speed and failure from (``FakeBehavior.draw_seed``): the
    same under every strategy of one schedule, different across schedules (seed 1's is the index)."""
    max_tokens: int | None = None
    """The request's ``max_tokens`` when it is not its answer's length (an agent's fixed ceiling); None: ``tokens``."""

    @property
    def ceiling(self) -> int:
        """What the request sends as ``max_tokens``."""
        return self.max_tokens if self.max_tokens is not None else self.tokens


@dataclass(frozen=True)
class Scenario:
    name: str
    behaviour: str
    """The routing behaviour the scenario exercises (the report's first column)."""
    description: str
    providers: tuple[Profile, ...]
    lengths: tuple[tuple[int, float], ...]
    """(max_tokens, weight): each request's answer length is drawn from these."""
    duration_s: float
    rate_per_s: float = 4.0
    changes: tuple[Change, ...] = ()
    max_tokens: int | None = None
    """Every request's ``max_tokens`` when fixed whatever its answer (an agent sends 32,000); None: the answer's
    length, as the lengths above were written."""
    replicas: int = 1
    """Gateway replicas sharing one stats window; request *i* is planned by replica *i* mod ``replicas``."""
    blur_s: float = 0.0
    """How far (sd, seconds) the meter's clock strays at an answer's first and last token (the network's jitter,
    the provider's batching, scheduling): its tokens/s is read over a window off by the two strays' difference."""

    def schedule(self, seed: int) -> list[Planned]:
        """Poisson arrivals at ``rate_per_s`` over ``duration_s``; the same for every strategy of one seed."""
        rng = random.Random(f"{self.name}:{seed}")
        tokens = [t for t, _ in self.lengths]
        weights = [w for _, w in self.lengths]
        planned: list[Planned] = []
        at = rng.expovariate(self.rate_per_s)
        while at < self.duration_s:
            index = len(planned)
            draw_seed = index + (seed - 1) * DRAWS_PER_SCHEDULE
            planned.append(Planned(index, at, rng.choices(tokens, weights)[0], draw_seed, self.max_tokens))
            at += rng.expovariate(self.rate_per_s)
        return planned

    def profiles_at(self, at_s: float) -> dict[str, Profile]:
        """Every provider's behaviour at ``at_s`` seconds into the run."""
        current = {p.name: p for p in self.providers}
        for change in self.changes:
            if change.at_s <= at_s:
                current[change.name] = replace(change.profile, name=change.name)
        return current


def linear_steps(start: Profile, end: Profile, from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """``start`` moves to ``end`` in ``steps`` equal (linear) steps of first token and speed at even times between
    ``from_s`` and ``to_s``, both at once: a drift no step of which looks like a change on its own."""
    return tuple(
        Change(
            from_s + (to_s - from_s) * i / steps,
            start.name,
            replace(
                start,
                ttft_s=start.ttft_s + (end.ttft_s - start.ttft_s) * i / steps,
                tps=start.tps + (end.tps - start.tps) * i / steps,
            ),
        )
        for i in range(1, steps + 1)
    )


def lead_passes(
    turns: tuple[tuple[float, str], ...], ahead: Profile, behind: Profile, prices: dict[str, float]
) -> tuple[Change, ...]:
    """The lead passing between the providers named in ``prices`` (the first leads at first): each (turn, next) in
    ``turns`` lasts ``turn`` seconds, after which ``next`` takes ``ahead``'s shape and the others ``behind``'s, each
    keeping its own price."""
    changes = []
    at = 0.0
    for turn, lead in turns:
        at += turn
        for name, price in prices.items():
            shape = ahead if name == lead else behind
            changes.append(Change(at, name, replace(shape, name=name, price=price)))
    return tuple(changes)


def oracle_choice(tokens: int, profiles: Sequence[Profile], price_weight: float = 0.0) -> str:
    """The provider with the lowest expected time for this request (a failure costs a fallback to the best other);
    with ``price_weight`` (a policy's, its time weight taken as 1), the lowest ``log2 time + price_weight × log2
    price``: the provider the policy's score would pick, knowing every provider's truth. A failure is billed nothing
    and its fallback's answer at the fallback's price, so a provider failing every request costs what its fallback
    does, in time and in money."""

    def fallback(p: Profile) -> Profile:
        others = [q for q in profiles if q is not p and q.error_rate == 0]
        return min(others, key=lambda q: q.expected_e2e(tokens), default=p)

    def score(p: Profile) -> float:
        other = fallback(p)
        time = (1 - p.error_rate) * p.expected_e2e(tokens) + p.error_rate * other.expected_e2e(tokens)
        if not price_weight:
            return round(time, 6)
        price = (1 - p.error_rate) * p.price + p.error_rate * other.price
        return round(math.log2(time) + price_weight * math.log2(max(price, 1e-9)), 9)

    # Ties go to the more reliable, then the cheaper: a provider failing every request ties with its own fallback.
    return min(profiles, key=lambda p: (score(p), p.error_rate, p.price)).name


# Source A of provider-profiles.csv: one model, 600 requests per provider. TTFT p50 is not
# published there; it is taken as p95 / 2.5. Prices: source B's medians where the provider appears.
MODAL = from_p95("modal", 222.2, 84.7, 1.09 / 2.5, 1.09, 0.55)
BASETEN = from_p95("baseten", 240.5, 61.6, 1.16 / 2.5, 1.16, 0.60)
TELNYX = from_p95("telnyx", 184.3, 67.5, 1.34 / 2.5, 1.34, 0.50)
TOGETHER = from_p95("together", 151.6, 34.0, 2.26 / 2.5, 2.26, 0.534)
DEEPINFRA = from_p95("deepinfra", 69.4, 9.0, 6.41 / 2.5, 6.41, 0.37)
NOVITA = from_p95("novita", 60.6, 29.6, 3.41 / 2.5, 3.41, 0.448)

NOVITA_RECOVERED = replace(NOVITA, ttft_s=0.3, tps=300.0, ttft_sigma=0.3, tps_sigma=0.2)
"""The slowest provider after its recovery: the fastest of the recovery markets."""

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "stable",
        "stable market",
        "five providers of source A, nothing changes; answers of 64, 256 or 512 tokens",
        (BASETEN, MODAL, TELNYX, TOGETHER, DEEPINFRA),
        lengths=((64, 1), (256, 2), (512, 1)),
        duration_s=90,
    ),
    Scenario(
        "recovery",
        "recovery",
        "the slowest of three providers (novita-like: 1.4 s, 61 tok/s) becomes the fastest 40 s in",
        (TELNYX, TOGETHER, NOVITA),
        lengths=((256, 1),),
        duration_s=90,
        changes=(Change(40, "novita", NOVITA_RECOVERED),),
    ),
    Scenario(
        "mixed-lengths",
        "mixed 8/800-token answers",
        "answers of 8 or 800 tokens over a low-latency slow streamer (0.25 s, 40 tok/s) and a "
        "high-latency fast one (1.2 s, 260 tok/s)",
        (
            Profile("snappy", ttft_s=0.25, tps=40.0, price=0.45),
            Profile("bulk", ttft_s=1.2, tps=260.0, price=0.45),
        ),
        lengths=((8, 1), (800, 1)),
        duration_s=90,
    ),
    Scenario(
        "throughput-drop",
        "throughput-only degradation",
        "the best provider's tokens/s fall 5x 40 s in; its first token stays the same",
        (BASETEN, TELNYX, TOGETHER),
        lengths=((256, 1),),
        duration_s=90,
        changes=(Change(40, "baseten", replace(BASETEN, tps=BASETEN.tps / 5)),),
    ),
    Scenario(
        "heavy-tail",
        "heavy-tail first tokens",
        "the best provider by mean (first token p50 0.25 s) has a heavy tail (sigma 1.0: p99 2.6 s); "
        "the other is steady (0.6 s, sigma 0.2); short answers",
        (
            Profile("spiky", ttft_s=0.25, tps=200.0, price=0.5, ttft_sigma=1.0),
            Profile("steady", ttft_s=0.6, tps=200.0, price=0.5, ttft_sigma=0.2),
        ),
        lengths=((32, 1),),
        duration_s=75,
    ),
    Scenario(
        "flaky",
        "fast provider failing 30%",
        "the fastest provider fails 30% of requests with an instant 503 (each failure costs a fallback)",
        (
            Profile("fast-flaky", ttft_s=0.3, tps=250.0, price=0.5, error_rate=0.3),
            Profile("steady", ttft_s=0.6, tps=150.0, price=0.5),
            Profile("slow", ttft_s=1.5, tps=60.0, price=0.5),
        ),
        lengths=((256, 1),),
        duration_s=75,
    ),
    Scenario(
        "equal-speed",
        "equal speed, different prices",
        "two providers with the same speed, one cheaper (source B: Parasail vs Together prices)",
        (
            Profile("together", ttft_s=0.45, tps=89.0, price=0.534),
            Profile("parasail", ttft_s=0.45, tps=89.0, price=0.29),
        ),
        lengths=((128, 1),),
        duration_s=60,
    ),
)

# Markets beside the benchmark's own, run in simulated time only (``routing_simulate --stress``): other
# rates, more providers, other kinds of change. Nothing was tuned on them; they are where a change to the
# router shows whether it holds for behaviours, not for the seven scenarios above.
_FAST = Profile("a", ttft_s=0.4, tps=200.0, price=0.5)
_MIDDLE = Profile("b", ttft_s=0.8, tps=120.0, price=0.5)
_SLOW = Profile("c", ttft_s=1.5, tps=60.0, price=0.5)
STRESS: tuple[Scenario, ...] = (
    Scenario(
        "recovery-5",
        "recovery among five",
        "five providers of source A; the slowest (novita-like) becomes the fastest 30 s in",
        (BASETEN, MODAL, TELNYX, TOGETHER, NOVITA),
        lengths=((256, 1),),
        duration_s=90,
        changes=(Change(30, "novita", replace(NOVITA_RECOVERED, ttft_s=0.2, tps=400.0)),),
    ),
    Scenario(
        "ttft-degrade",
        "first-token-only degradation",
        "the best provider's first token goes from 0.4 s to 3 s 40 s in; its tokens/s stays",
        (_FAST, _MIDDLE, _SLOW),
        lengths=((128, 1),),
        duration_s=90,
        changes=(Change(40, "a", replace(_FAST, ttft_s=3.0)),),
    ),
    Scenario(
        "outage",
        "an outage and its end",
        "the best provider fails every request from 30 s to 60 s, then is as before",
        (_FAST, _MIDDLE, _SLOW),
        lengths=((128, 1),),
        duration_s=90,
        changes=(Change(30, "a", replace(_FAST, error_rate=1.0)), Change(60, "a", _FAST)),
    ),
    Scenario(
        "dip",
        "a slowdown and its end",
        "the best of three streams 5x slower from 30 s to 60 s (its first token unchanged), then as before",
        (_FAST, _MIDDLE, _SLOW),
        lengths=((256, 1),),
        duration_s=100,
        changes=(Change(30, "a", replace(_FAST, tps=40.0)), Change(60, "a", _FAST)),
    ),
    Scenario(
        "stable-1rps",
        "stable market, sparse traffic",
        "the stable market at 1 request/s: a quarter of the answers to learn from",
        (BASETEN, MODAL, TELNYX, TOGETHER, DEEPINFRA),
        lengths=((64, 1), (256, 2), (512, 1)),
        duration_s=120,
        rate_per_s=1.0,
    ),
    Scenario(
        "recovery-10rps",
        "recovery, dense traffic",
        "the recovery scenario at 10 requests/s, the change 30 s in",
        (TELNYX, TOGETHER, NOVITA),
        lengths=((256, 1),),
        duration_s=60,
        rate_per_s=10.0,
        changes=(Change(30, "novita", NOVITA_RECOVERED),),
    ),
    Scenario(
        "recovery-1rps",
        "recovery, sparse traffic",
        "the recovery scenario at 1 request/s, the change 50 s in: 5% of requests is one probe every 20 s",
        (TELNYX, TOGETHER, NOVITA),
        lengths=((256, 1),),
        duration_s=150,
        rate_per_s=1.0,
        changes=(Change(50, "novita", NOVITA_RECOVERED),),
    ),
    Scenario(
        "long-recovery",
        "recovery seen only on long answers",
        "1,024-token answers only; the slow one of two becomes the faster 40 s in",
        (_FAST, _SLOW),
        lengths=((1024, 1),),
        duration_s=120,
        changes=(Change(40, "c", replace(_SLOW, ttft_s=0.3, tps=400.0)),),
    ),
    Scenario(
        "swap",
        "two providers trade places",
        "the faster of two becomes the slower, and the other the faster, at the same moment (30 s in)",
        (_FAST, _MIDDLE),
        lengths=((200, 1),),
        duration_s=90,
        changes=(
            Change(30, "a", replace(_FAST, ttft_s=0.8, tps=120.0)),
            Change(30, "b", replace(_MIDDLE, ttft_s=0.4, tps=200.0)),
        ),
    ),
    Scenario(
        "oscillate",
        "two leaders trading places",
        "the faster of two (0.4 s, 200 tok/s) and the slower (0.8 s, 120 tok/s) trade profiles every 30 s",
        (_FAST, _MIDDLE),
        lengths=((200, 1),),
        duration_s=120,
        changes=tuple(
            change
            for k in range(1, 4)
            for change in (
                Change(30 * k, "a", replace(_FAST if k % 2 == 0 else _MIDDLE, name="a")),
                Change(30 * k, "b", replace(_MIDDLE if k % 2 == 0 else _FAST, name="b")),
            )
        ),
    ),
    Scenario(
        "gradual",
        "a gradual slowdown",
        "the faster of two loses 20% of its tokens/s every 5 s from 20 s to 70 s (6x slower in all)",
        (_FAST, _MIDDLE),
        lengths=((200, 1),),
        duration_s=90,
        changes=tuple(Change(20 + 5 * i, "a", replace(_FAST, tps=200.0 / 1.2 ** (i + 1))) for i in range(10)),
    ),
)

# The held-out set: written before the belief-based router (``gateway.routing.belief``) was built, and run on it
# once, at the end (``routing_simulate --held-out``). Never tune anything on these. Each names a behaviour the
# benchmark's markets and the stress markets do not hold, or hold in another form.
_QUICK = Profile("a", ttft_s=0.35, tps=220.0, price=0.5)
_LAGGING = Profile("b", ttft_s=1.2, tps=70.0, price=0.5)
_STEADY = Profile("c", ttft_s=0.7, tps=130.0, price=0.5)


def _drift(name: str, start: Profile, end: Profile, from_s: float, to_s: float, steps: int) -> tuple[Change, ...]:
    """``name`` moves from ``start`` to ``end`` in ``steps`` geometric steps between ``from_s`` and ``to_s``."""
    changes = []
    for i in range(1, steps + 1):
        f = i / steps
        changes.append(
            Change(
                from_s + (to_s - from_s) * f,
                name,
                replace(
                    start,
                    ttft_s=start.ttft_s * (end.ttft_s / start.ttft_s) ** f,
                    tps=start.tps * (end.tps / start.tps) ** f,
                ),
            )
        )
    return tuple(changes)


def _oscillation(period_s: float, until_s: float) -> tuple[Change, ...]:
    """``a`` and ``b`` trade the quick and the lagging profile every ``period_s``."""
    changes = []
    k = 1
    while k * period_s < until_s:
        quick, lagging = ("b", "a") if k % 2 else ("a", "b")
        changes.append(Change(k * period_s, quick, _QUICK))
        changes.append(Change(k * period_s, lagging, _LAGGING))
        k += 1
    return tuple(changes)


HELD_OUT: tuple[Scenario, ...] = (
    Scenario(
        "ho-drift",
        "gradual drift, crossing",
        "over 100 s the quickest of three slows step by step (0.35 s, 220 tok/s → 1.2 s, 90 tok/s) while the "
        "laggard improves (1.2 s, 70 tok/s → 0.4 s, 210 tok/s); the third stays",
        (_QUICK, _LAGGING, _STEADY),
        lengths=((256, 1),),
        duration_s=120,
        changes=(
            *_drift("a", _QUICK, replace(_QUICK, ttft_s=1.2, tps=90.0), 10, 110, 20),
            *_drift("b", _LAGGING, replace(_LAGGING, ttft_s=0.4, tps=210.0), 10, 110, 20),
        ),
    ),
    Scenario(
        "ho-oscillate",
        "oscillating leaders",
        "two providers trade the quick (0.35 s, 220 tok/s) and the lagging (1.2 s, 70 tok/s) profile every 20 s; "
        "a third stays in the middle (0.7 s, 130 tok/s)",
        (_QUICK, _LAGGING, _STEADY),
        lengths=((200, 1),),
        duration_s=150,
        changes=_oscillation(20, 150),
    ),
    Scenario(
        "ho-many",
        "eight providers, one slows",
        "the six providers of source A and two more; the fastest (0.25 s, 400 tok/s) streams at 100 tok/s from "
        "50 s on; answers of 64, 256 or 512 tokens",
        (
            BASETEN,
            MODAL,
            TELNYX,
            TOGETHER,
            DEEPINFRA,
            NOVITA,
            Profile("fireworks", ttft_s=0.3, tps=180.0, price=0.6),
            Profile("groq", ttft_s=0.25, tps=400.0, price=0.8),
        ),
        lengths=((64, 1), (256, 2), (512, 1)),
        duration_s=110,
        changes=(Change(50, "groq", Profile("groq", ttft_s=0.25, tps=100.0, price=0.8)),),
    ),
    Scenario(
        "ho-ttft-spike",
        "a first-token spike and its end",
        "the quickest of three answers its first token in 2.5 s instead of 0.35 s from 35 s to 70 s, then as "
        "before; its tokens/s never change",
        (_QUICK, _LAGGING, _STEADY),
        lengths=((128, 1),),
        duration_s=110,
        changes=(Change(35, "a", replace(_QUICK, ttft_s=2.5)), Change(70, "a", _QUICK)),
    ),
    Scenario(
        "ho-down-at-start",
        "a provider down at start",
        "the quickest of three fails every request for the first 40 s, then is the quickest",
        (replace(_QUICK, error_rate=1.0), _LAGGING, _STEADY),
        lengths=((128, 1),),
        duration_s=100,
        changes=(Change(40, "a", _QUICK),),
    ),
    Scenario(
        "ho-agent",
        "agent traffic: max_tokens 32000, short answers",
        "every request asks for max_tokens 32000 and is answered in 16 to 400 tokens; a quick starter that "
        "streams slowly (0.45 s, 70 tok/s), a slow starter that streams fast (2.4 s, 280 tok/s), and a middle",
        (
            Profile("quick", ttft_s=0.45, tps=70.0, price=0.5),
            Profile("streamer", ttft_s=2.4, tps=280.0, price=0.5),
            Profile("middle", ttft_s=1.2, tps=130.0, price=0.5),
        ),
        lengths=((16, 3), (60, 3), (150, 2), (400, 1)),
        duration_s=90,
        rate_per_s=3.0,
        max_tokens=32000,
    ),
    Scenario(
        "ho-replicas",
        "two replicas sharing a window",
        "two gateway replicas over one stats window, 6 requests/s between them; two near-equal leaders "
        "(0.5 s, 180 tok/s and 0.55 s, 170 tok/s) and a slow third; the second becomes clearly the fastest "
        "(0.3 s, 260 tok/s) 40 s in",
        (
            Profile("a", ttft_s=0.5, tps=180.0, price=0.5),
            Profile("b", ttft_s=0.55, tps=170.0, price=0.5),
            Profile("c", ttft_s=1.0, tps=90.0, price=0.5),
        ),
        lengths=((256, 1),),
        duration_s=90,
        rate_per_s=6.0,
        changes=(Change(40, "b", Profile("b", ttft_s=0.3, tps=260.0, price=0.5)),),
        replicas=2,
    ),
)
