"""Where a belief starts: a prior pooled from the model's other deployments.

A model's deployments are believed to lie around a common level (a hierarchical normal): a deployment
never heard from borrows the others' mean, as uncertain as they lie apart (``BETWEEN`` until they are
measured). Every replica's answers are evidence like this replica's own, heard one by one from the stats
store's log (``gateway.routing.belief_others``), not a prior of their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

PRIOR_WEIGHT: Final = 2.0
"""What the defaults below count as: ``SPREAD`` as this many answers, ``BETWEEN`` as this many deployments."""
BETWEEN: Final = 1.0
"""How far (log sd) a model's deployments' levels lie apart before they are measured: a factor e."""
SPREAD: Final = 0.4
"""An answer's log spread around its level before the deployment's own is learned (p95 ≈ 1.9× the median)."""
DRIFT: Final = 0.002
"""Variance of a log level gained per second unheard: unheard for 1/DRIFT s, it is e-fold uncertain."""
MEMORY: Final = 50
"""Answers a running average remembers (the older fade): the answers' spread around a level, and an answer length
per request shape, are the last ~50 answers'."""


@dataclass(slots=True, unsafe_hash=True)
class Prior:
    """Where a new run's level starts, per metric: mean and variance of the log level (None: unknown).

    Never changed in place (hashed by its fields, as a frozen one is). Not frozen for its ``__init__``: written out,
    compiled, a native method, where a frozen dataclass's generated one stays interpreted and sets each field through
    ``object.__setattr__`` (a model's every other deployment's prior is made after each answer)."""

    mean: tuple[float | None, float | None] = (None, None)
    var: tuple[float, float] = (BETWEEN**2, BETWEEN**2)
    noise: tuple[float, float] = (SPREAD**2, SPREAD**2)
    """How far (log variance, per metric) a deployment's answers scatter around its level before its own scatter is
    learned: the model's deployments' (a t's scale), which answer alike more than ``SPREAD`` says once measured."""
    spread2: tuple[float, float] = (SPREAD**2, SPREAD**2)
    """The same as a plain log variance (``Belief.spread2``)."""
    centre: tuple[float | None, float | None] = (None, None)
    """Where the siblings' levels lie blind to price (their mean; None: the same as ``mean``, no price regression)."""
    centre_var: tuple[float, float] = (BETWEEN**2, BETWEEN**2)

    def __init__(
        self,
        mean: tuple[float | None, float | None] = (None, None),
        var: tuple[float, float] = (BETWEEN**2, BETWEEN**2),
        noise: tuple[float, float] = (SPREAD**2, SPREAD**2),
        spread2: tuple[float, float] = (SPREAD**2, SPREAD**2),
        centre: tuple[float | None, float | None] = (None, None),
        centre_var: tuple[float, float] = (BETWEEN**2, BETWEEN**2),
    ) -> None:
        self.mean = mean
        self.var = var
        self.noise = noise
        self.spread2 = spread2
        self.centre = centre
        self.centre_var = centre_var

    def landing(self, metric: int) -> tuple[float | None, float]:
        """Where a level that changed lands (mean, variance of the log level): as likely among the siblings of its
        price (``mean``) as anywhere among them (``centre``): a change may break what its price says (a cheap one
        becoming the quickest) or keep to it (a middling dear one rising); nothing tells which."""
        # ``self.mean[metric]`` and the like by constant index: compiled, a pair field is kept unboxed, and indexing
        # it by a variable boxes it into a tuple first.
        if metric == 0:
            mean, var, centre, centre_var = self.mean[0], self.var[0], self.centre[0], self.centre_var[0]
        else:
            mean, var, centre, centre_var = self.mean[1], self.var[1], self.centre[1], self.centre_var[1]
        if centre is None or mean is None:
            return mean, var
        mid = (mean + centre) / 2
        return mid, (var + centre_var) / 2 + math.pow(mean - mid, 2.0)


class Levels(Protocol):
    """What the prior reads of a belief: whether it heard anything, its answers' scatter, and its level now."""

    @property
    def answers(self) -> int: ...

    @property
    def noise(self) -> list[float]: ...

    @property
    def spread2(self) -> list[float]: ...

    def level(self, now: float, metric: int) -> tuple[float, float]: ...


def log_of(value: float | None) -> float | None:
    return math.log(value) if value is not None and value > 0 else None


def pooled(
    others: Sequence[Levels], now: float, price: float | None = None, prices: Sequence[float | None] = ()
) -> Prior:
    """The prior of a deployment at ``price`` from the model's ``others`` (at ``prices``, by ``others``): a
    ``Pool`` of them and it."""
    n = len(others)
    pool = Pool([prices[i] if i < len(prices) else None for i in range(n)] + [price])
    for i, other in enumerate(others):
        pool.hear(i, other, now)
    return pool.prior_of(n)


class Pool:
    """A model's deployments, each one's prior pooled from the others' beliefs as last heard (``BeliefRouter._pool``
    pools every sibling after each answer). An entry's belief is read once, again only when it heard: what is read
    of it (its answers, noise, scatter and levels' means, no drift in them) moves only then."""

    def __init__(self, prices: list[float | None]) -> None:
        n = len(prices)
        self.prices = prices
        self.beliefs: list[Levels | None] = [None] * n
        self.answers = [0] * n
        self.measured = [False] * n
        self.ttft, self.spt = [0.0] * n, [0.0] * n
        self.noise0, self.noise1, self.spread0, self.spread1 = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
        # Each log price (0.0 where it has none: read only where every sibling pooled has one).
        self.priced = [(p or 0) > 0 for p in prices]
        self.x = [math.log(p) if p is not None and ok else 0.0 for p, ok in zip(prices, self.priced, strict=True)]

    def hear(self, i: int, belief: Levels, now: float) -> None:
        """Entry ``i`` as ``belief`` says now, unless it is the one read last and has heard nothing since."""
        if self.beliefs[i] is belief and self.answers[i] == belief.answers:
            return
        self.beliefs[i], self.answers[i] = belief, belief.answers
        self.measured[i] = belief.answers > 0
        if belief.answers:  # the levels of a belief never heard are never read
            self.ttft[i] = belief.level(now, 0)[0]
            self.spt[i] = belief.level(now, 1)[0]
        self.noise0[i] = belief.noise[0]
        self.noise1[i] = belief.noise[1]
        self.spread0[i] = belief.spread2[0]
        self.spread1[i] = belief.spread2[1]

    def pooled(self, skip: int = -1) -> list[Prior | None]:
        """Each entry's prior (``prior_of``), None in place of ``skip``'s."""
        return [None if i == skip else self.prior_of(i) for i in range(len(self.prices))]

    def prior_of(self, i: int) -> Prior:
        """Entry ``i``'s prior, a hierarchical normal over the measured others: their levels' mean, the spread between
        them (``BETWEEN`` counted as ``PRIOR_WEIGHT`` deployments) and that mean's own uncertainty, regressed on log
        price where all are priced (``_on_price``: a cheap one is believed where its price puts it), and their answers'
        scatter (``SPREAD`` counted as ``PRIOR_WEIGHT`` deployments), so a deployment's first answers are read as
        sharply as its siblings'. See docs/routing.md ("What the router knows")."""
        others = [j for j in range(len(self.measured)) if j != i and self.measured[j]]
        k = len(others)
        count = PRIOR_WEIGHT + k
        base = PRIOR_WEIGHT * SPREAD**2
        n0, n1, s0, s1 = 0.0, 0.0, 0.0, 0.0
        for j in others:  # four sums, each over the others in order
            n0 += self.noise0[j]
            n1 += self.noise1[j]
            s0 += self.spread0[j]
            s1 += self.spread1[j]
        noise = ((base + n0) / count, (base + n1) / count)
        spread2 = ((base + s0) / count, (base + s1) / count)
        if not k:
            return Prior((None, None), (BETWEEN**2, BETWEEN**2), noise, spread2)
        price = self.prices[i]
        # Regressed on price only where every measured sibling is priced.
        priced = price is not None and price > 0 and all(self.priced[j] for j in others)
        at = math.log(price) if priced and price is not None else 0.0
        mean0, var0, centre0, centre_var0 = _pooled_level(self.ttft, others, count, priced, self.x, at)
        mean1, var1, centre1, centre_var1 = _pooled_level(self.spt, others, count, priced, self.x, at)
        return Prior((mean0, mean1), (var0, var1), noise, spread2, (centre0, centre1), (centre_var0, centre_var1))


def _pooled_level(
    y: list[float], others: list[int], count: float, priced: bool, x: list[float], at: float
) -> tuple[float, float, float | None, float]:
    """One metric of ``pooled``'s prior from the levels ``y`` of ``others`` (at least one): mean, variance,
    centre (None: no price regression told anything) and its variance."""
    k = len(others)
    total = 0.0
    for j in others:
        total += y[j]
    mean = total / k
    squares = 0.0
    for j in others:
        squares += math.pow(y[j] - mean, 2.0)
    between = (PRIOR_WEIGHT * BETWEEN**2 + squares) / count
    if not priced:
        return mean, between * (1 + 1 / k), None, BETWEEN**2
    plain = between * (1 + 1 / k)
    moved, between, far = _on_price(x, y, others, mean, between, at)
    if moved or far:  # the price tells something: a change lands also blind to it
        return mean + moved, between * (1 + 1 / k) + far, mean, plain
    return mean + moved, between * (1 + 1 / k) + far, None, BETWEEN**2


def _on_price(
    x: list[float], levels: list[float], of: list[int], mean: float, between: float, at: float
) -> tuple[float, float, float]:
    """The levels' regression on log price over the entries ``of`` (sums in their order), for a deployment at log
    price ``at``: how far its level lies from the siblings' mean, the spread between deployments the price leaves
    unexplained, and the slope's own uncertainty there. The slope's prior is none, ``BETWEEN`` wide (an e-fold of
    price moves the level by about an e-fold at most): siblings of near-equal prices, or few, give no slope, and a
    slope is believed only as far as it fits."""
    k = len(of)
    total = 0.0
    for j in of:
        total += x[j]
    centre = total / k
    sxx, sxy = 0.0, 0.0
    for j in of:
        sxx += math.pow(x[j] - centre, 2.0)
    for j in of:
        sxy += (x[j] - centre) * (levels[j] - mean)
    slope = sxy / (sxx + between / BETWEEN**2)
    residuals = 0.0
    for j in of:
        residuals += math.pow(levels[j] - mean - slope * (x[j] - centre), 2.0)
    unexplained = (PRIOR_WEIGHT * BETWEEN**2 + residuals) / (PRIOR_WEIGHT + k)
    slope_var = unexplained / (sxx + unexplained / BETWEEN**2)
    return slope * (at - centre), unexplained, slope_var * math.pow(at - centre, 2.0)
