"""A plan's beliefs made cheaper, still the numbers they were (``Belief.observe``, ``Belief.bounded``, ``choose``).

A plan tells each deployment's belief (a copy: ``belief_running``) every stream begun there since it was last heard,
one after another at one time, then the bounds (``Belief.bounded``). After the first, no change can have happened
since (the hazard's chance is 0.0), so the runs a change would start weigh 0.0 and are pruned: ``observe`` no longer
makes them (``belief_runs.unborn_weigh_nothing``), and the copy finds the runs' mixture once, at its end, not after
each. ``_reference_observe`` and ``_reference_bounded`` below are the former code, kept here to hold the new to it
exactly: after every answer, bound and plan's copy, every float of the belief is the same (``repr``)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from gateway.routing.belief import Belief
from gateway.routing.belief_failures import FAIL_PRIOR, Failures, change_chance
from gateway.routing.belief_hazard import HAZARD_S
from gateway.routing.belief_look import Hypothesis, look_terms, posterior_mean
from gateway.routing.belief_prefill import Prefill
from gateway.routing.belief_runs import RUNS, SPT, TTFT, Run, heaviest, mix, unborn_weigh_nothing
from gateway.routing.belief_scatter import collapsed, hear_both
from gateway.routing.priors import DRIFT, Prior, log_of
from gateway.routing.student import likelihoods, update_all
from tests.support.belief_streams import told

_WEIGHT = lambda run: run.weight  # noqa: E731
MET = [0]
"""Answers at which the new code leaves the change's runs unmade (counted by the reference, for the test below)."""


def _reference_prune(runs: list[Run]) -> list[Run]:
    total = sum([r.weight for r in runs])
    if total <= 0 or not math.isfinite(total):
        keep = runs[-1]
        keep.weight = 1.0
        return [keep]
    for run in runs:
        run.weight /= total
    if len(runs) > RUNS:
        runs.sort(key=_WEIGHT, reverse=True)
        del runs[RUNS:]
        total = sum([r.weight for r in runs])
        for run in runs:
            run.weight /= total
    return runs


def _reference_observe(
    self: Belief,
    now: float,
    prior: Prior,
    ttft_s: float | None = None,
    s_per_token: float | None = None,
    *,
    at_least: tuple[float | None, float | None] = (None, None),
    uncached_tokens: int | None = 0,
    learn: bool = True,
) -> None:
    if ttft_s is not None and uncached_tokens is not None:
        fit = self.prefill or Prefill.start(math.exp(self.level(now, TTFT)[0]))
        self.prefill = fit.observe(now, uncached_tokens, ttft_s)
    if ttft_s is not None and uncached_tokens:
        ttft_s = max(ttft_s - self.prefill_s() * uncached_tokens, 0.2 * ttft_s)
    values = (log_of(ttft_s), log_of(s_per_token))
    bounds = (log_of(at_least[0]), log_of(at_least[1]))
    if values[0] is None and values[1] is None and bounds[0] is None and bounds[1] is None:
        return
    self._age(now, prior)
    self.reprior(prior)
    heard, runs = self.heard_at, self.runs
    hazard = change_chance(now - heard, self.hazard.every_s) if heard is not None else 0.0
    total = sum([r.weight for r in runs])
    MET[0] += unborn_weigh_nothing(runs, self.before, self.noise, hazard, total, values, prior)
    fresh = self._new_runs(prior)
    kept = len(runs)
    before = sum([r.weight * r.changes for r in runs]) / total if total > 0.0 else 0.0
    for run in fresh:
        run.changes = before + 1.0
    runs.extend(fresh)
    likelihoods(runs, values, bounds, self.noise)  # each run's ``fit`` (and squared residuals)
    fits = [r.fit for r in runs]
    stayed, changed = 1.0 - hazard, hazard * total
    chances = [(stayed if i < kept else changed) * runs[i].weight for i in range(len(runs))]
    for run, chance in zip(runs, chances, strict=True):
        run.chance = chance  # what the scatters marginalise over
    for i in range(kept):
        runs[i].weight *= stayed * fits[i]
    for i in range(kept, len(runs)):
        run = runs[i]
        run.born = now
        run.weight = changed * run.weight * fits[i]
    weights = sum([r.weight for r in runs])
    if learn and heard is not None and 0.0 < weights < math.inf:  # the changes expected now, less before
        self.hazard.heard(now - heard, sum([r.weight * r.changes for r in runs]) / weights - before)
    levels = (runs, heaviest(runs))
    scattered = 0.0 if self.plan_copy else hazard
    hear_both(self.scatters, (self.noise, self.spread2), levels, (values, bounds), prior, scattered, 0.0)
    update_all(runs, values, bounds, self.noise)
    self.runs = _reference_prune(self.runs)
    self._remember()
    self.mixture = (mix(self.runs, TTFT), mix(self.runs, SPT))
    if self.heard_at is not None:
        self.gap_s = now - self.heard_at
    self.heard_at = now
    self.answers += 1


def _copy(belief: Belief) -> Belief:
    return Belief(
        [Run(r.weight, r.mean0, r.mean1, r.var0, r.var1, r.born, r.changes) for r in belief.runs],
        belief.heard_at,
        list(belief.noise),
        [[collapsed(scatters)] for scatters in belief.scatters],
        list(belief.spread2),
        belief.answers,
        belief.prefill,
        belief.failures,
        belief.before,
        belief.leading,
        belief.mixture,
        belief.gap_s,
        belief.spread_prior,
        True,
        belief.hazard,
    )


def _reference_bounded(
    self: Belief,
    now: float,
    prior: Prior,
    ttft_at_least: float | None,
    spt_at_least: float | None,
    streaming: tuple[tuple[float, float | None], ...],
) -> Belief:
    copy = _copy(self)
    heard = copy.heard_at
    for ttft_s, s_per_token in streaming:
        _reference_observe(copy, now, prior, ttft_s, s_per_token, uncached_tokens=None, learn=False)
    bounds = (
        ttft_at_least * math.exp(-self.spread2[TTFT]) if ttft_at_least is not None else None,
        spt_at_least * math.exp(-self.spread2[SPT]) if spt_at_least is not None else None,
    )
    _reference_observe(copy, now, prior, at_least=bounds, learn=False)
    copy.heard_at = heard if heard is not None else copy.heard_at
    copy.gap_s = self.gap_s
    return copy


def _prior(rng: random.Random) -> Prior:
    if rng.random() < 0.2:
        return Prior()
    mean = (rng.gauss(-0.5, 1.0), rng.gauss(-4.0, 1.0))
    centre = (rng.gauss(-0.5, 1.0), rng.gauss(-4.0, 1.0)) if rng.random() < 0.5 else (None, None)
    noise = (rng.uniform(0.01, 0.5), rng.uniform(0.01, 0.5))
    return Prior(mean, (rng.uniform(0.1, 2), rng.uniform(0.1, 2)), noise, noise, centre)


def _life(seed: int) -> list[str]:
    """A belief and its reference twin fed one random life (answers, lost races, quiet gaps, jumps, wild answers), and
    a plan's copy of each with a few bounds and streams after each step: every state as ``repr``, for both."""
    rng = random.Random(seed)
    new, old = Belief(), Belief()
    now, level = 0.0, (rng.uniform(0.1, 3.0), rng.uniform(0.002, 0.05))
    out: list[str] = []
    for _ in range(60):
        now += rng.choice((0.0, 0.01, 0.3, 2.0, 40.0, 300.0))
        prior = _prior(rng)
        if rng.random() < 0.1:
            level = (rng.uniform(0.1, 3.0), rng.uniform(0.002, 0.05))  # the provider changed
        wild = 20.0 if rng.random() < 0.05 else 1.0
        ttft = level[0] * math.exp(rng.gauss(0, 0.4)) * wild
        spt = level[1] * math.exp(rng.gauss(0, 0.3)) if rng.random() < 0.9 else None
        kind, uncached = rng.random(), rng.choice((0, None))
        for belief, observe in ((new, Belief.observe), (old, _reference_observe)):
            if kind < 0.8:
                observe(belief, now, prior, ttft, spt, uncached_tokens=uncached)
            else:
                observe(belief, now, prior, at_least=(ttft, None))
        assert repr(new) == repr(old)
        later = now + rng.choice((0.0, 0.5, 5.0))
        ttft_bound = rng.choice((None, 2.0 * level[0]))
        spt_bound = rng.choice((None, 1.5 * level[1]))
        streams = tuple(
            (level[0] * math.exp(rng.gauss(0, 0.5)), rng.choice((None, level[1] * math.exp(rng.gauss(0, 0.3)))))
            for _ in range(rng.choice((0, 1, 2, 5, 9)))
        )
        plan = told(new, later, prior, streams, ttft_bound, spt_bound)
        reference = _reference_bounded(old, later, prior, ttft_bound, spt_bound, streams)
        out.append(repr(plan))
        assert repr(plan) == repr(reference)
    return out


def test_a_plans_copy_and_every_answer_are_the_former_floats_exactly() -> None:
    for seed in range(40):
        _life(seed)


def test_the_lives_reach_the_runs_a_change_would_start_unmade() -> None:
    """The test above means something: the skipped runs are met (a copy with ``RUNS`` runs told a second stream)."""
    MET[0] = 0
    for seed in range(5):
        _life(seed)
    assert MET[0] > 50


def _full(seed: int) -> Belief:
    belief = Belief()
    rng = random.Random(seed)
    now = 0.0
    while len(belief.runs) < RUNS:
        now += 30.0
        belief.observe(now, Prior(), rng.uniform(0.1, 3.0), rng.uniform(0.002, 0.05))
    return belief


def test_where_every_weight_vanished_the_newest_unmade_run_is_kept_as_before() -> None:
    """All of ``RUNS`` runs at weight 0.0 and an answer at the time last heard: pruning keeps the newest run, which
    is one the change would have started: it is made after all, the same as before."""
    for seed in range(6):
        new, old = _full(seed), _full(seed)
        for belief in (new, old):
            for run in belief.runs:
                run.weight = 0.0
        at = new.heard_at
        assert at is not None
        prior = Prior((0.2, -3.5), (0.5, 0.5))
        new.observe(at, prior, 0.7, 0.01, uncached_tokens=None)
        _reference_observe(old, at, prior, 0.7, 0.01, uncached_tokens=None)
        assert len(new.runs) == 1 and new.runs[0].born == at
        assert repr(new) == repr(old)


def test_no_run_is_left_unmade_where_a_weight_or_a_value_is_not_finite() -> None:
    belief = _full(1)
    prior = Prior((0.2, -3.5), (0.5, 0.5))
    total = sum(r.weight for r in belief.runs)
    values = (math.log(0.5), math.log(0.01))
    assert unborn_weigh_nothing(belief.runs, belief.before, belief.noise, 0.0, total, values, prior)
    assert not unborn_weigh_nothing(belief.runs, belief.before, belief.noise, 1e-9, total, values, prior)
    assert not unborn_weigh_nothing(belief.runs, belief.before, belief.noise, 0.0, math.nan, values, prior)
    assert not unborn_weigh_nothing(belief.runs, belief.before, belief.noise, 0.0, total, (math.inf, None), prior)
    assert not unborn_weigh_nothing(belief.runs, belief.before, [math.nan, 0.1], 0.0, total, values, prior)
    assert not unborn_weigh_nothing(belief.runs[:-1], belief.before, belief.noise, 0.0, total, values, prior)
    wild = Prior((math.inf, -3.5), (0.5, 0.5))
    assert not unborn_weigh_nothing(belief.runs, belief.before, belief.noise, 0.0, total, values, wild)


def _reference_posterior_mean(branches: Sequence[tuple[float, ...]], a0: float, a1: float) -> tuple[float, float]:
    logs = [t[0] - 0.5 * ((a0 - t[1]) ** 2 / t[3] + t[5]) - 0.5 * ((a1 - t[2]) ** 2 / t[4] + t[6]) for t in branches]
    top = max(logs)
    odds = [math.exp(x - top) for x in logs]
    total = sum(odds)
    value0 = value1 = 0.0
    for i, w in enumerate(odds):
        _, m0, m1, _, _, _, _, learn0, learn1 = branches[i]
        share = w / total
        value0 += share * (m0 + learn0 * (a0 - m0))
        value1 += share * (m1 + learn1 * (a1 - m1))
    return math.exp(value0), math.exp(value1)


def test_a_looks_posterior_mean_is_the_former_arithmetic_exactly() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        branches = []
        for _ in range(rng.choice((1, 2, 6, 7))):
            v0, v1 = rng.uniform(0.01, 3.0), rng.uniform(0.01, 3.0)
            weight = rng.choice((1e-12, rng.random()))
            terms = (math.log(weight), rng.gauss(-1, 1), rng.gauss(-4, 1), v0, v1, math.log(v0), math.log(v1))
            branches.append((*terms, rng.random(), rng.random()))
        if rng.random() < 0.1:
            branches.append(branches[0])  # a tie for the greatest: the first is kept, as ``max`` keeps it
        a0, a1 = rng.gauss(-1, 1.5), rng.gauss(-4, 1.5)
        hypotheses = [Hypothesis(*t) for t in branches]
        assert posterior_mean(hypotheses, a0, a1) == _reference_posterior_mean(branches, a0, a1)


Branches = list[tuple[float, tuple[float, float], tuple[float, float], bool]]
"""(chance, log means, log variances, changed) per hypothesis: each run (stayed, drifted), each place a change lands."""


def branches(belief: Belief, now: float, prior: Prior) -> Branches:
    """The level now as one normal per hypothesis, the plain form of ``belief_look.look_terms``: each run as heard
    (weighted ``1 − p``) and each place a change may land (weighted ``p``, the chance of a change since last heard)."""
    p = belief.changed(now) if belief.runs else 1.0
    age = DRIFT * (now - belief.heard_at) if belief.heard_at is not None else 0.0
    stayed = [((1.0 - p) * r.weight, (r.mean0, r.mean1), (r.var0 + age, r.var1 + age), False) for r in belief.runs]
    return stayed + [(p * r.weight, (r.mean0, r.mean1), (r.var0, r.var1), True) for r in belief._new_runs(prior)]


def branch_terms(branches: Branches, spread2: list[float]) -> list[tuple[float, ...]]:
    """Each branch's ``Hypothesis`` fields, as a look weighs it."""
    result: list[tuple[float, ...]] = []
    for weight, means, variances, _ in branches:
        v0, v1 = variances[0] + spread2[0], variances[1] + spread2[1]
        learn0, learn1 = variances[0] / (variances[0] + spread2[0]), variances[1] / (variances[1] + spread2[1])
        log_weight = math.log(max(weight, 1e-12))
        result.append((log_weight, means[0], means[1], v0, v1, math.log(v0), math.log(v1), learn0, learn1))
    return result


def fields(h: Hypothesis) -> tuple[float, ...]:
    return (h.log_weight, h.mean0, h.mean1, h.var0, h.var1, h.log_var0, h.log_var1, h.learn0, h.learn1)


def test_a_looks_terms_are_its_branches_terms_exactly() -> None:
    """``choose.gain`` reads each hypothesis's terms written out (``belief_look.look_terms``), the plain form's
    floats."""
    for seed in range(12):
        rng = random.Random(seed)
        belief = _full(seed) if seed % 4 else Belief()
        prior = _prior(rng)
        heard = belief.heard_at or 0.0
        for now in (heard, heard + 5.0, heard + 500.0):
            plain = branches(belief, now, prior)
            spread2 = [s * s for s in belief.spread()]
            chance = (sum(c[0] for c in plain if not c[3]), sum(c[0] for c in plain if c[3]))
            got, hypotheses = look_terms(belief, now, belief._new_runs(prior), spread2)
            assert repr((got, [fields(h) for h in hypotheses])) == repr(
                ((float(chance[0]), chance[1]), branch_terms(plain, spread2))
            )


def _reference_counts(failures: Failures, now: float, hazard_s: float) -> tuple[float, float]:
    """``Failures.counts`` as it was: its two sums over lists (``sum`` of floats from 0, left to right)."""
    heard = failures.heard_at
    p = 0.0 if heard is None else 1.0 - math.exp(-max(0.0, now - heard) / hazard_s)
    a0, b0 = FAIL_PRIOR
    s0 = a0 + b0
    m0 = a0 / s0
    v0 = m0 * (b0 / s0) / (s0 + 1)
    terms = []
    for r in failures.runs:
        s = r.fails + r.oks
        m = r.fails / s
        terms.append((r.weight, r.fails, s, m, m * (r.oks / s) / (s + 1)))
    stayed = 1.0 - p
    mean = sum([stayed * t[0] * t[1] / t[2] for t in terms] + [p * a0 / s0])
    var = sum([stayed * t[0] * (t[4] + (t[3] - mean) ** 2) for t in terms] + [p * (v0 + (m0 - mean) ** 2)])
    mean = min(max(mean, 1e-6), 1 - 1e-6)
    n = max(mean * (1 - mean) / max(var, 1e-12) - 1.0, 1e-3)
    return mean * n, (1 - mean) * n


def test_the_failure_chance_read_is_the_former_sums_exactly() -> None:
    """``Failures.counts`` adds in plain loops (read for every deployment of every plan): the same floats as the sums
    over lists it replaced, over failure histories with quiet gaps, recoveries and long runs of either outcome."""
    for seed in range(40):
        rng = random.Random(seed)
        failures, now = Failures(), 0.0
        for _ in range(rng.randint(0, 60)):
            now += rng.choice((0.0, 0.01, rng.expovariate(0.2), 300.0))
            failures.observe(now, rng.random() < rng.choice((0.05, 0.5, 0.95)), HAZARD_S, rng.uniform(0.1, 3.0))
            if rng.random() < 0.03:
                failures.recovered(now)
            for later in (now, now + rng.uniform(0.0, 50.0), now + 1e4):
                failures.read = None
                assert failures.counts(later, HAZARD_S) == _reference_counts(failures, later, HAZARD_S)
