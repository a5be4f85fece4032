"""One belief per deployment: what its first token and its seconds per token are now, and how sure that is.

The model, in one pass:

- A deployment's answers are log-normal: ``log ttft`` and ``log seconds-per-token`` are its current level plus noise
  of a spread ``s`` (the deployment's own, learned, starting from ``SPREAD``, with change points of its own:
  ``gateway.routing.belief_scatter``). First token and speed come as a pair from one answer and are judged together.
- The level moves in two ways. It drifts: while nothing is heard, the level's variance grows by ``DRIFT`` per second,
  so an estimate nobody refreshed becomes uncertain again and a draw from it (``gateway.routing.choose``) sometimes
  favours it. And it jumps: a provider changes about once every ``Hazard.every_s`` seconds, learned per model
  (``gateway.routing.belief_hazard``). Jumps are found by Bayesian online change-point detection: a few run-length
  hypotheses ("the level has been the same since answer k"), each with its own normal posterior on the level,
  weighted by how well it predicted each answer under a Student-t (``TAIL_NU`` degrees of freedom) so one wild answer
  neither triggers a change nor drags the level far. A new run starts from the prior.
- The prior is pooled from the model's other deployments (their levels' mean, widened by their spread), counting as
  ``PRIOR_WEIGHT`` answers' worth of certainty at most. Other replicas' answers are not a prior: each is heard as an
  answer, at the time it ended (``gateway.routing.belief_others``).
- Censored evidence is one rule: "the value is at least t" (a race lost, an attempt overdue, a stream slower than
  believed). Each hypothesis is weighted by the probability it gave that; its posterior is moment-matched to it.
- Prefill is a small regression beside it (``gateway.routing.belief_prefill``): first token = base + uncached
  prompt tokens × seconds per prompt token; the base is what the level describes, and it hears an answer's base
  through the slope's uncertainty besides the answers' noise (a cold prompt's at an unlearned slope tells little).
- Failures: the failure chance with the same change points (``gateway.routing.belief_failures``): a long run of
  failures is not held against a deployment that has answered again since.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from gateway.routing.belief_failures import FAIL_PRIOR, Failures, change_chance
from gateway.routing.belief_hazard import Hazard, born_after, found
from gateway.routing.belief_noise import Scatter
from gateway.routing.belief_prefill import SLOPE, Prefill, at_most_its_answer
from gateway.routing.belief_runs import (
    DEFAULT_LEVEL,
    METRICS,
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
from gateway.routing.belief_scatter import collapsed, hear_both, reprior_scatters
from gateway.routing.draws import Draw, Sampling, new_tuple, sample
from gateway.routing.priors import DRIFT, SPREAD, Prior, log_of
from gateway.routing.student import likelihoods, update_all

NO_PRIOR = Prior()

Branches = tuple[tuple[float, tuple[float, float], tuple[float, float], bool], ...]
"""(chance, log means, log variances, changed) per hypothesis: each run (stayed, drifted), each place a change lands."""


@dataclass(slots=True)
class Belief:
    """The posterior for one deployment of one model."""

    runs: list[Run] = field(default_factory=list)
    heard_at: float | None = None
    noise: list[float] = field(default_factory=lambda: [SPREAD**2, SPREAD**2])
    scatters: list[list[Scatter]] = field(default_factory=lambda: [[Scatter(1.0)], [Scatter(1.0)]])
    """Per metric, the scatter's own change points (``belief_scatter``): ``noise``, ``spread2`` are the likeliest's."""
    spread2: list[float] = field(default_factory=lambda: [SPREAD**2, SPREAD**2])
    """The answers' plain log variance around the level (for means and quantiles; ``noise`` is the t's scale)."""
    answers: int = 0
    """Answers (or censored bounds) heard: 0 means measured never."""
    prefill: Prefill | None = None
    """First token on uncached prompt tokens (None: no answer with a known prompt yet)."""
    failures: Failures = field(default_factory=Failures)
    """The failure chance, with change points as the level has (``gateway.routing.belief_failures``)."""
    before: tuple[float, float] | None = None
    """The level it held before its latest change: where a change may return to (a dip's end, a swap back)."""
    leading: tuple[float, tuple[float, float]] | None = None
    """The most likely run's birth and level, as of the last answer."""
    mixture: tuple[tuple[float, float], tuple[float, float]] | None = None
    """The runs' mixture (mean, variance) per metric as of the last answer (drift is added when read)."""
    gap_s: float | None = None
    """The time between its last two answers: how long, by its traffic of late, until it is heard again."""
    spread_prior: list[float] = field(default_factory=lambda: [SPREAD**2] * 4)
    """The prior counted in ``noise`` and ``spread2`` (noise per metric, then spread per metric): the siblings' as
    of the last answer (``reprior``)."""
    plan_copy: bool = False
    """A plan's copy (``copy``): its scatter is the belief's likeliest alone, with no change points."""
    hazard: Hazard = field(default_factory=Hazard)
    """How often its model's deployments change (shared: ``BeliefRouter.belief``); hears answers, not a plan copy's."""

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
        """One answer's pair (either may be missing), or lower bounds on them (``at_least``); ``uncached_tokens``:
        its prompt tokens not found cached (None: not known, the prefill regression does not hear it). Without
        ``mixed`` the runs' mixture is left as it was, for the caller to find once after several answers (``bounded``):
        nothing here reads it where ``uncached_tokens`` is None."""
        answered, unsure = None, 0.0
        if ttft_s is not None and uncached_tokens is not None:
            answered = log_of(ttft_s)  # read only where a prefill was taken out (``unsure``)
            fit = self.prefill = (self.prefill or Prefill.start(math.exp(self.level(now, TTFT)[0]))).observe(
                now, uncached_tokens, ttft_s
            )
            # The base: the answer less its prefill at the slope believed, as unsure as that slope (the level, its
            # change points and the answers' spread hear it through that much more noise), at most the answer.
            ttft_s, unsure = fit.unprefilled(uncached_tokens, ttft_s)
        values = (log_of(ttft_s), log_of(s_per_token))
        bounds = (log_of(at_least[0]), log_of(at_least[1]))
        if values[0] is None and values[1] is None and bounds[0] is None and bounds[1] is None:
            return
        self._age(now, prior)
        self.reprior(prior)
        noise = self.noise if not unsure > 0.0 else [self.noise[TTFT] + unsure, self.noise[SPT]]
        heard, runs = self.heard_at, self.runs
        hazard = change_chance(now - heard, self.hazard.every_s) if heard is not None else 0.0
        total = weight_of(runs)
        kept = len(runs)
        # No chance of a change since last heard (a plan's streams, told one after another at one time): the new runs
        # would weigh exactly 0.0 and be pruned, so they are not made (``unborn_weigh_nothing``); where every weight
        # vanished they are made after all (the newest is what is kept then).
        unborn = unborn_weigh_nothing(runs, self.before, noise, hazard, total, values, prior)
        if not unborn:
            runs.extend(self._new_runs(prior))
        before = born_after(runs, kept)  # the changes expected so far; the fresh runs' path is one more
        # Every run's likelihood at once (the noise is the one before this answer), then the stayed and the fresh.
        fits = likelihoods(runs, values, bounds, noise)
        stayed, changed = 1.0 - hazard, hazard * total
        # Each level run's chance before this answer: what the scatter's hypotheses marginalise the level over.
        chances = [(stayed if i < kept else changed) * runs[i].weight for i in range(len(runs))]
        for i in range(kept):
            runs[i].weight *= stayed * fits[i]
        for i in range(kept, len(runs)):
            run = runs[i]
            run.born = now
            run.weight = changed * run.weight * fits[i]
        if not self.plan_copy and heard is not None:  # for good, not a copy's: the time watched, the changes found
            self.hazard.heard(now - heard, found(runs) - before)
        levels = (chances, runs, heaviest(runs))
        scattered = 0.0 if self.plan_copy else hazard  # the scatter's chance of a change: none in a plan's copy
        hear_both(self.scatters, (self.noise, self.spread2), levels, (values, bounds), prior, scattered, unsure)
        if unsure > 0.0:  # the noise as this answer left it (``self.noise`` is updated in place), plus its own
            noise = [self.noise[TTFT] + unsure, self.noise[SPT]]
        update_all(runs, values, bounds, noise)
        at_most_its_answer(runs, values[TTFT], unsure, answered, self.noise[TTFT])
        if unborn and not 0.0 < weight_of(runs) < math.inf:
            fresh = self._new_runs(prior)
            for run in fresh:
                run.born, run.weight, run.changes = now, 0.0, before + 1.0  # as if born (``changed × weight × fit``)
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
        """An attempt's health: failed (after ``after_s``), or answered."""
        self.failures.observe(now, failed, self.hazard.every_s, after_s)

    def failure(self, now: float) -> tuple[float, float]:
        """The failure chance now as one beta posterior (failures, successes), a change since last heard included."""
        return self.failures.counts(now, self.hazard.every_s)

    def bounded(
        self,
        now: float,
        prior: Prior,
        ttft_at_least: float | None,
        spt_at_least: float | None = None,
        *,
        streaming: tuple[tuple[float, float | None], ...] = (),
        base: Belief | None = None,
    ) -> Belief:
        """A copy told the first token is at least ``ttft_at_least`` (an attempt still waiting for it), the seconds
        per token at least ``spt_at_least`` (a stream running slow), and the pairs of ``streaming`` (streams begun
        since it was last heard: their first token, and their pace so far): for one plan only. ``base``: the belief
        as heard, where this one is a copy told the streams already (``belief_running``): its time, gap and spread."""
        base = self if base is None else base
        copy = self.copy()
        # Attempts still running are a length-biased sample: a slow one stays in flight longer, in proportion to its
        # value, and a log-normal biased by its value is the same shifted up by its variance. Shift the bound back.
        bounds = (
            ttft_at_least * math.exp(-base.spread2[TTFT]) if ttft_at_least is not None else None,
            spt_at_least * math.exp(-base.spread2[SPT]) if spt_at_least is not None else None,
        )
        copy.observe(now, prior, at_least=bounds, uncached_tokens=None, mixed=False)
        for ttft_s, s_per_token in streaming:
            copy.observe(now, prior, ttft_s, s_per_token, uncached_tokens=None, mixed=False)
        if copy.answers != base.answers:  # told something: the mixture of its runs as they are now, found once
            copy.mixture = (mix(copy.runs, TTFT), mix(copy.runs, SPT))
        # Never heard: what its attempts say now is all there is of it (read as "changed since", the prior again).
        copy.heard_at = base.heard_at if base.heard_at is not None else copy.heard_at
        copy.gap_s = base.gap_s
        return copy

    def copy(self) -> Belief:
        """A copy to tell what holds for one plan or while attempts run (its failures shared: never told there). Its
        scatter is the likeliest alone (``belief_scatter.collapsed``): the few streams a plan is told would rarely tell
        a change of the scatter apart, and each would cost a change-point step per scatter."""
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
            self.spread_prior,  # replaced, never changed in place (``reprior``)
            True,
            self.hazard,
        )

    def reprior(self, prior: Prior) -> None:
        """Count the siblings' scatter now (``prior.noise``, ``prior.spread2``) as the prior of its own, in place of
        the one counted so far (``belief_scatter.reprior_scatters``)."""
        was = self.spread_prior
        now = [prior.noise[0], prior.noise[1], prior.spread2[0], prior.spread2[1]]
        if now == was:
            return
        reprior_scatters(self.scatters, self.noise, self.spread2, was, now)
        self.spread_prior = now

    # -- reading ----------------------------------------------------------------------------

    def level(self, now: float, metric: int) -> tuple[float, float]:
        """The log level's mixture mean and variance now (drift included)."""
        if not self.runs:
            return DEFAULT_LEVEL[metric], UNKNOWN**2
        age = DRIFT * (now - self.heard_at) if self.heard_at is not None else 0.0
        mean, var = self.mixture[metric] if self.mixture is not None else mix(self.runs, metric)
        return mean, var + age

    def expected(self, now: float, prior: Prior | None = None) -> Draw:
        """The posterior predictive, for the leader and for explaining (no randomness): the belief's own level,
        mixed with ``prior`` (when given) by the chance it changed since last heard (never heard: the prior alone),
        and the answers' spread widened by how unsure that level is. The leader and the fallbacks read a belief that
        has heard with no prior: as heard (``choose.mean_costs``).

        Read for every deployment of every plan: ``level`` and ``changed`` are written out for both metrics at once
        (``predicted``: the same arithmetic)."""
        m0, m1, v0, v1 = self.predicted(now, prior)
        # Never heard: its answers will scatter as its siblings' do.
        spread2 = self.spread2 if self.runs or prior is None else prior.spread2
        failures = self.failures
        fails, oks = failures.counts(now, self.hazard.every_s)
        spread = (math.sqrt(v0 + spread2[TTFT]), math.sqrt(v1 + spread2[SPT]))
        draw = (math.exp(m0), math.exp(m1), fails / (fails + oks), spread, failures.failure_s, False, (0.0, 0.0))
        return new_tuple(Draw, draw)  # ``Draw(*draw)``, without its ``__new__``'s Python frame

    def predicted(self, now: float, prior: Prior | None = None) -> tuple[float, float, float, float]:
        """``expected``'s log level now: the means of first token and seconds per token, then their variances (an
        answer that came whole is split by their medians alone: ``belief_attempts.tell``)."""
        runs, heard = self.runs, self.heard_at
        if runs:
            mixture = self.mixture if self.mixture is not None else (mix(runs, TTFT), mix(runs, SPT))
            (m0, v0), (m1, v1) = mixture
            age = DRIFT * (now - heard) if heard is not None else 0.0
            v0, v1 = v0 + age, v1 + age
            every = self.hazard.every_s
            changed = 0.0 if prior is None else 1.0 if heard is None else change_chance(now - heard, every)
        else:
            (m0, m1), v0, v1 = DEFAULT_LEVEL, UNKNOWN**2, UNKNOWN**2
            changed = 1.0 if prior is not None else 0.0
        if changed and prior is not None:
            # Never heard: its level among its siblings (of its price); changed: where a change lands.
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
        """The chance the level has jumped since it was last heard (``Hazard.every_s``)."""
        return 1.0 if self.heard_at is None else change_chance(now - self.heard_at, self.hazard.every_s)

    def draw(self, now: float, rng: random.Random, prior: Prior, changed: bool | None = None) -> Draw:
        """One sample of the present from the posterior: a run by its weight, then its level with drift; or, with
        the chance it changed since last heard, a new level from the prior (a stale belief is looked at again).
        ``changed`` given: that branch only (for expectations over both, weighted by ``changed(now)``)."""
        if changed is None:
            changed = rng.random() < self.changed(now)
        changed = changed or not self.runs
        ttft, spt, failure = sample(self.sampling(self._new_runs(prior) if changed else self.runs, now, changed), rng)
        return Draw(ttft, spt, failure, self.spread(), self.failures.failure_s, changed, (ttft, spt))

    def sampling(self, runs: list[Run], now: float, changed: bool = False) -> Sampling:
        """What ``draw`` draws from, for ``runs`` (``self.runs``, or ``_new_runs``) now: each run's weight and its
        level's normal with drift, and the failure chance's (a look's, written out: ``belief_look.levels_of``)."""
        age = DRIFT * (now - self.heard_at) if self.heard_at is not None else 0.0
        levels = [(r.weight, r.mean0, math.sqrt(r.var0 + age), r.mean1, math.sqrt(r.var1 + age)) for r in runs]
        # The beta posterior of the failure chance, drawn by its moments (cheaper than two gamma draws).
        a, b = FAIL_PRIOR if changed else self.failure(now)  # a provider that changed may have recovered too
        mean = a / (a + b)
        return levels, mean, math.sqrt(mean * (1 - mean) / (a + b + 1))

    def branches(self, now: float, prior: Prior) -> Branches:
        """The level now as one normal per hypothesis: each run (stayed, drift included; ``(1 − p) ×`` its weight) and
        each place a change may land (``p ×`` its share; ``p`` the hazard's chance since last heard). One answer
        re-weights them as well as moving each: what a look would tell apart (``choose.gain`` reads the same written
        out: ``belief_look.look_terms``)."""
        p = self.changed(now) if self.runs else 1.0
        age = DRIFT * (now - self.heard_at) if self.heard_at is not None else 0.0
        stayed = tuple(
            ((1.0 - p) * r.weight, (r.mean0, r.mean1), (r.var0 + age, r.var1 + age), False) for r in self.runs
        )
        changed = tuple((p * r.weight, (r.mean0, r.mean1), (r.var0, r.var1), True) for r in self._new_runs(prior))
        return stayed + changed

    def uncertainty(self, now: float, prior: Prior) -> float:
        """How unsure the present level is (first token and speed, log variance summed): its own posterior,
        mixed with the prior by the chance it changed since last heard. What a look at it would teach."""
        p = self.changed(now) if self.runs else 1.0
        total = 0.0
        for metric in METRICS:
            mean, var = self.level(now, metric)
            pooled = prior.mean[metric]
            other = mean if pooled is None else pooled
            total += (1 - p) * var + p * prior.var[metric] + p * (1 - p) * (mean - other) ** 2
        return total

    def prefill_s(self) -> float:
        """Seconds of first token per uncached prompt token (the regression's slope; ``SLOPE`` before it hears)."""
        return self.prefill.s_per_token if self.prefill is not None else SLOPE

    def spread(self) -> tuple[float, float]:
        """The answers' log standard deviation around the level."""
        return math.sqrt(self.spread2[TTFT]), math.sqrt(self.spread2[SPT])

    # -- inside -----------------------------------------------------------------------------

    def _new_runs(self, prior: Prior) -> list[Run]:
        """Where a level that changed may now be (``belief_runs.landings``)."""
        return landings(bool(self.runs), self.before, prior)

    def _remember(self) -> None:
        """When a newer run becomes the most likely, the level the older one held is what it changed from."""
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
        if not grow:  # heard at this very time (a plan's streams, one by one): x + 0.0 is x, no variance is -0.0
            return
        for run in self.runs:
            run.var0 += grow
            run.var1 += grow
