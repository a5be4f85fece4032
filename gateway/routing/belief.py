"""One belief per deployment: its first token and seconds per token now, and how sure that is.

The model is described in docs/routing.md ("What the router knows"); each part lives in its own ``belief_*``
module (and ``priors``, ``student``), and ``Belief`` ties them together.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from gateway.routing.belief_failures import FAIL_PRIOR, Failures, change_chance
from gateway.routing.belief_hazard import Hazard, born_after, found
from gateway.routing.belief_prefill import SLOPE, Prefill, at_most_its_answer
from gateway.routing.belief_runs import (
    DEFAULT_LEVEL,
    SPT,
    TTFT,
    UNKNOWN,
    Run,
    first_runs,
    heaviest,
    landings,
    mix,
    prune,
    unborn_weigh_nothing,
    weight_of,
)
from gateway.routing.belief_scatter import Scatter, collapsed, hear_both, reprior_scatters
from gateway.routing.draws import Draw, Level, new_tuple, pick
from gateway.routing.priors import DRIFT, SPREAD, Prior, log_of
from gateway.routing.student import likelihoods, residuals, update_all

NO_PRIOR = Prior()


@dataclass(slots=True)
class Belief:
    """The posterior for one deployment of one model."""

    runs: list[Run] = field(default_factory=list)
    heard_at: float | None = None
    noise: list[float] = field(default_factory=lambda: [SPREAD**2, SPREAD**2])
    scatters: list[list[Scatter]] = field(default_factory=lambda: [[Scatter(1.0)], [Scatter(1.0)]])
    """Per metric, the scatter's change points; ``noise`` and ``spread2`` are the likeliest one's."""
    spread2: list[float] = field(default_factory=lambda: [SPREAD**2, SPREAD**2])
    """The answers' plain log variance around the level (``noise`` is the Student-t's scale)."""
    answers: int = 0
    """Answers and bounds heard; 0 means never measured."""
    prefill: Prefill | None = None
    """None until an answer with a known prompt size."""
    failures: Failures = field(default_factory=Failures)
    before: tuple[float, float] | None = None
    """The level held before the latest change: where a change may return to."""
    leading: tuple[float, tuple[float, float]] | None = None
    """The most likely run's birth and level, as of the last answer."""
    mixture: tuple[tuple[float, float], tuple[float, float]] | None = None
    """The runs' (mean, variance) per metric as of the last answer; drift is added when read."""
    gap_s: float | None = None
    """The time between its last two answers."""
    spread_prior: list[float] = field(default_factory=lambda: [SPREAD**2] * 4)
    """The siblings' noise and spread (per metric each) counted in ``noise`` and ``spread2`` (``reprior``)."""
    plan_copy: bool = False
    """A copy for one plan: one scatter, and the shared hazard is not told."""
    hazard: Hazard = field(default_factory=Hazard)
    """Shared by the model's beliefs."""

    def __init__(
        self,
        runs: list[Run] | None = None,
        heard_at: float | None = None,
        noise: list[float] | None = None,
        scatters: list[list[Scatter]] | None = None,
        spread2: list[float] | None = None,
        answers: int = 0,
        prefill: Prefill | None = None,
        failures: Failures | None = None,
        before: tuple[float, float] | None = None,
        leading: tuple[float, tuple[float, float]] | None = None,
        mixture: tuple[tuple[float, float], tuple[float, float]] | None = None,
        gap_s: float | None = None,
        spread_prior: list[float] | None = None,
        plan_copy: bool = False,
        hazard: Hazard | None = None,
    ) -> None:
        # Written out so that mypyc compiles it (each plan's copy makes one); the generated ``__init__`` stays
        # interpreted. A field left out (None) gets its ``default_factory``'s value, as the generated one gives it.
        self.runs = [] if runs is None else runs
        self.heard_at = heard_at
        self.noise = [SPREAD**2, SPREAD**2] if noise is None else noise
        self.scatters = [[Scatter(1.0)], [Scatter(1.0)]] if scatters is None else scatters
        self.spread2 = [SPREAD**2, SPREAD**2] if spread2 is None else spread2
        self.answers = answers
        self.prefill = prefill
        self.failures = Failures() if failures is None else failures
        self.before = before
        self.leading = leading
        self.mixture = mixture
        self.gap_s = gap_s
        self.spread_prior = [SPREAD**2] * 4 if spread_prior is None else spread_prior
        self.plan_copy = plan_copy
        self.hazard = Hazard() if hazard is None else hazard

    # -- evidence ---------------------------------------------------------------------------

    def observe(
        self,
        now: float,
        prior: Prior,
        ttft_s: float | None = None,
        s_per_token: float | None = None,
        *,
        at_least: tuple[float | None, float | None] = (None, None),
        uncached_tokens: int | None = 0,
        mixed: bool = True,
    ) -> None:
        """Hear one answer's pair (either may be missing) or lower bounds on them (``at_least``).

        ``uncached_tokens`` None: the prompt size is unknown and the prefill regression is not told. ``mixed`` False
        leaves the runs' mixture stale, for a caller that hears several answers to find it once (a plan's copy)."""
        answered, unsure = None, 0.0
        if ttft_s is not None and uncached_tokens is not None:
            answered = log_of(ttft_s)
            fit = self.prefill = (self.prefill or Prefill.start(math.exp(self.level(now, TTFT)[0]))).observe(
                now, uncached_tokens, ttft_s
            )
            # The level hears the base (the answer less its prefill), as unsure as the slope makes it.
            ttft_s, unsure = fit.unprefilled(uncached_tokens, ttft_s)
        # Typed as the callees take them: compiled, a fixed pair would be boxed into a new tuple at each call.
        values: tuple[float | None, ...] = (log_of(ttft_s), log_of(s_per_token))
        bounds: tuple[float | None, ...] = (log_of(at_least[0]), log_of(at_least[1]))
        if values[0] is None and values[1] is None and bounds[0] is None and bounds[1] is None:
            return
        self._age(now, prior)
        self.reprior(prior)
        noise = self.noise if not unsure > 0.0 else [self.noise[TTFT] + unsure, self.noise[SPT]]
        heard, runs = self.heard_at, self.runs
        hazard = change_chance(now - heard, self.hazard.every_s) if heard is not None else 0.0
        total = weight_of(runs)
        kept = len(runs)
        # With no chance of a change the new runs would weigh 0.0 and be pruned: skip making them
        # unless every weight vanishes (handled below).
        unborn = unborn_weigh_nothing(runs, self.before, noise, hazard, total, values, prior)
        if not unborn:
            runs.extend(self._new_runs(prior))
        before = born_after(runs, kept)
        likelihoods(runs, values, bounds, noise)
        stayed, changed = 1.0 - hazard, hazard * total
        # Each run's chance before this answer (``Run.chance``): the scatter's hypotheses marginalise the level
        # over these.
        for i in range(len(runs)):
            run = runs[i]
            if i < kept:
                run.chance = stayed * run.weight
                run.weight *= stayed * run.fit
            else:
                run.chance = changed * run.weight
                run.born = now
                run.weight = changed * run.weight * run.fit
        if not self.plan_copy and heard is not None:
            self.hazard.heard(now - heard, found(runs) - before)
        levels = (runs, heaviest(runs))
        scattered = 0.0 if self.plan_copy else hazard
        hear_both(self.scatters, (self.noise, self.spread2), levels, (values, bounds), prior, scattered, unsure)
        if unsure > 0.0:  # ``self.noise`` was just updated in place
            noise = [self.noise[TTFT] + unsure, self.noise[SPT]]
        update_all(runs, values, bounds, noise)
        at_most_its_answer(runs, values[TTFT], unsure, answered, self.noise[TTFT])
        if unborn and not 0.0 < weight_of(runs) < math.inf:
            fresh = self._new_runs(prior)
            for run in fresh:
                run.born, run.weight, run.changes = now, 0.0, before + 1.0
            residuals(fresh, values)
            update_all(fresh, values, bounds, noise)
            at_most_its_answer(fresh, values[TTFT], unsure, answered, self.noise[TTFT])
            runs.extend(fresh)
            unborn = False
        self.runs = prune(self.runs, cut=unborn)
        self._remember()
        if mixed:
            self.mixture = (mix(self.runs, TTFT), mix(self.runs, SPT))
        if self.heard_at is not None:
            self.gap_s = now - self.heard_at
        self.heard_at = now
        self.answers += 1

    def failed(self, now: float, failed: bool, after_s: float | None = None) -> None:
        """Hear an attempt's outcome: failed (after ``after_s``) or answered."""
        self.failures.observe(now, failed, self.hazard.every_s, after_s)

    def failure(self, now: float) -> tuple[float, float]:
        """The failure chance now as one beta (failures, successes)."""
        return self.failures.counts(now, self.hazard.every_s)

    def bounded(
        self,
        now: float,
        prior: Prior,
        ttft_at_least: float | None,
        spt_at_least: float | None = None,
        *,
        base: Belief | None = None,
    ) -> Belief:
        """A copy for one plan, told the lower bounds of attempts still running.

        ``base`` is the belief as heard when ``self`` is a copy already told the streams begun since
        (``belief_running``)."""
        base = self if base is None else base
        copy = self.copy()
        # Running attempts are length-biased (a slow one stays in flight longer), and a log-normal biased by its
        # value is shifted up by its variance: shift the bound back.
        bounds = (
            ttft_at_least * math.exp(-base.spread2[TTFT]) if ttft_at_least is not None else None,
            spt_at_least * math.exp(-base.spread2[SPT]) if spt_at_least is not None else None,
        )
        copy.observe(now, prior, at_least=bounds, uncached_tokens=None, mixed=False)
        if copy.answers != base.answers:
            copy.mixture = (mix(copy.runs, TTFT), mix(copy.runs, SPT))
        # Aged from its own last answer; a belief never heard is read as heard now (its attempts are all there is).
        copy.heard_at = base.heard_at if base.heard_at is not None else copy.heard_at
        copy.gap_s = base.gap_s
        return copy

    def copy(self) -> Belief:
        """A copy for one plan, sharing the failures (never told there), with only the likeliest scatter: a plan's few
        streams could hardly tell a change of scatter apart."""
        return Belief(
            [r.copy() for r in self.runs],
            self.heard_at,
            list(self.noise),
            [[collapsed(scatters)] for scatters in self.scatters],
            list(self.spread2),
            self.answers,
            self.prefill,
            self.failures,
            self.before,
            self.leading,
            self.mixture,
            self.gap_s,
            self.spread_prior,  # replaced, never changed in place
            True,
            self.hazard,
        )

    def reprior(self, prior: Prior) -> None:
        """Count the siblings' current scatter as its prior, in place of the one counted so far."""
        was = self.spread_prior
        noise, spread2 = prior.noise, prior.spread2
        if was[0] == noise[0] and was[1] == noise[1] and was[2] == spread2[0] and was[3] == spread2[1]:
            return  # ``now == was`` without a list of boxed floats made (the same answer where every item is equal)
        now = [noise[0], noise[1], spread2[0], spread2[1]]
        if now == was:  # what the floats' ``==`` left: a NaN the list's test finds equal by identity
            return
        reprior_scatters(self.scatters, self.noise, self.spread2, was, now)
        self.spread_prior = now

    # -- reading ----------------------------------------------------------------------------

    def level(self, now: float, metric: int) -> tuple[float, float]:
        """The log level's mixture mean and variance now (drift included)."""
        m0, m1, v0, v1 = self.predicted(now)
        return (m0, v0) if metric == TTFT else (m1, v1)

    def expected(self, now: float, prior: Prior | None = None) -> Draw:
        """The posterior predictive, without randomness: the level, mixed with ``prior`` (when given) by the chance
        it changed since last heard, and the answers' spread widened by how unsure the level is."""
        m0, m1, v0, v1 = self.predicted(now, prior)
        # Never heard: its answers will scatter as its siblings' do.
        spread2 = self.spread2 if self.runs or prior is None else prior.spread2
        failures = self.failures
        fails, oks = failures.counts(now, self.hazard.every_s)
        spread = (math.sqrt(v0 + spread2[TTFT]), math.sqrt(v1 + spread2[SPT]))
        draw = (math.exp(m0), math.exp(m1), fails / (fails + oks), spread, failures.failure_s, False, (0.0, 0.0))
        return new_tuple(Draw, draw)  # ``Draw(*draw)`` without a Python frame

    def predicted(self, now: float, prior: Prior | None = None) -> tuple[float, float, float, float]:
        """``expected``'s log level now: the means of first token and seconds per token, then their variances."""
        runs, heard = self.runs, self.heard_at
        if runs:
            mixture = self.mixture if self.mixture is not None else (mix(runs, TTFT), mix(runs, SPT))
            (m0, v0), (m1, v1) = mixture
            age = DRIFT * (now - heard) if heard is not None else 0.0
            v0, v1 = v0 + age, v1 + age
        else:
            (m0, m1), v0, v1 = DEFAULT_LEVEL, UNKNOWN**2, UNKNOWN**2
        changed = 0.0 if prior is None else self.changed(now) if runs else 1.0
        if changed and prior is not None:
            # Never heard: among its siblings; changed: where a change lands.
            if runs:
                (p0, w0), (p1, w1) = prior.landing(TTFT), prior.landing(SPT)
            else:
                (p0, p1), (w0, w1) = prior.mean, prior.var
            if p0 is not None:
                v0 = (1 - changed) * v0 + changed * w0 + changed * (1 - changed) * math.pow(m0 - p0, 2.0)
                m0 += changed * (p0 - m0)
            if p1 is not None:
                v1 = (1 - changed) * v1 + changed * w1 + changed * (1 - changed) * math.pow(m1 - p1, 2.0)
                m1 += changed * (p1 - m1)
        return m0, m1, v0, v1

    def changed(self, now: float) -> float:
        """The chance the level has jumped since it was last heard."""
        return 1.0 if self.heard_at is None else change_chance(now - self.heard_at, self.hazard.every_s)

    def draw(self, now: float, rng: random.Random, prior: Prior, changed: bool | None = None) -> Draw:
        """One sample of the present: a run by its weight and its level with drift, or, with the chance it changed
        since last heard, a level where a change lands. ``changed`` given: that branch only."""
        if changed is None:
            changed = rng.random() < self.changed(now)
        changed = changed or not self.runs
        levels, failure_mean, failure_sd = self.sampling(self._new_runs(prior) if changed else self.runs, now, changed)
        run = pick(levels, rng.random())
        ttft = math.exp(rng.gauss(run.mean0, run.sd0))
        spt = math.exp(rng.gauss(run.mean1, run.sd1))
        failure = min(0.99, max(0.0, rng.gauss(failure_mean, failure_sd)))
        return Draw(ttft, spt, failure, self.spread(), self.failures.failure_s, changed, (ttft, spt))

    def sampling(self, runs: list[Run], now: float, changed: bool = False) -> tuple[list[Level], float, float]:
        """What a draw draws from (``draw``, and a look's ``belief_look.gains``): each run's weight and its level's
        normal with drift, and the failure chance's mean and sd."""
        age = DRIFT * (now - self.heard_at) if self.heard_at is not None else 0.0
        levels = [Level(r.weight, r.mean0, math.sqrt(r.var0 + age), r.mean1, math.sqrt(r.var1 + age)) for r in runs]
        # The beta drawn by its moments: cheaper than two gamma draws.
        a, b = FAIL_PRIOR if changed else self.failure(now)  # a provider that changed may have recovered
        mean = a / (a + b)
        return levels, mean, math.sqrt(mean * (1 - mean) / (a + b + 1))

    def prefill_s(self) -> float:
        """Seconds of first token per uncached prompt token."""
        return self.prefill.s_per_token if self.prefill is not None else SLOPE

    def spread(self) -> tuple[float, float]:
        """The answers' log standard deviation around the level."""
        return math.sqrt(self.spread2[TTFT]), math.sqrt(self.spread2[SPT])

    # -- inside -----------------------------------------------------------------------------

    def _new_runs(self, prior: Prior) -> list[Run]:
        """Where a level that changed may now be."""
        return landings(bool(self.runs), self.before, prior)

    def _remember(self) -> None:
        """When a newer run becomes the most likely, remember the older one's level as ``before``."""
        top = heaviest(self.runs)
        if self.leading is not None and top.born > self.leading[0]:
            self.before = self.leading[1]
        self.leading = (top.born, (top.mean0, top.mean1))

    def _age(self, now: float, prior: Prior) -> None:
        if not self.runs:
            self.runs.extend(first_runs(prior))
            return
        if self.heard_at is None:
            return
        grow = DRIFT * max(0.0, now - self.heard_at)
        if not grow:  # adding 0.0 would turn a variance of -0.0 into 0.0
            return
        for run in self.runs:
            run.var0 += grow
            run.var1 += grow
