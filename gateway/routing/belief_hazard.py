"""How often a model's deployments change: the hazard of change-point detection, learned (``gateway.routing.belief``).

A provider changes (its first token or its speed jumps) at some rate. That rate is a Gamma posterior, one per model,
pooled over its deployments: a market's providers share how often things move, and one deployment alone is heard too
seldom to learn it. The prior says a change comes about once every ``HAZARD_S`` seconds, and counts as one change seen
in that much watching of one deployment (a Gamma of shape 1, the weakest that holds its mean: the model's deployments
heard for a minute each, three of them, outweigh it). Each answer heard for good adds its evidence: the time its
deployment was watched since it was last heard, and how many more changes its change-point posterior now expects in its
history. That count is kept with the runs: each run carries the changes expected before it given that it is the true one
(one more than the runs it followed had, as they were weighed when it was born; segments apart are independent given a
change between them), so the expected count is the runs' weighted mean of theirs. A change that one answer only hints at
and the next ones confirm is counted as it is confirmed: the weight the answer put on "a change happened here" alone
would miss most of them (a Student-t reads one jumped answer as a wild one). A market where nothing moves makes changes
rarer, so a near-equal provider is looked at less often; one whose providers keep jumping makes them likelier, so each
answer's new runs weigh more and unheard beliefs grow uncertain sooner.

The evidence is a running memory, as the model's other running averages are (``priors.MEMORY``): markets move by the
hour, and a posterior that counted every hour alike would, after a long quiet, hardly hear a burst of changes (looks
would all but stop just when they matter). What the answers added beyond the prior (their changes, their watched
seconds) fades exponentially in watched time, with a time constant of ``MEMORY`` changes' worth of watching at the
prior's rate (``MEMORY × HAZARD_S`` seconds): at most that much watching is remembered, so a quiet market expects a
change at most about every ``(1 + MEMORY) × HAZARD_S`` seconds, and a burst is heard within a part of that time. The
watched seconds fade within an interval too (an interval of ``w`` adds ``τ(1 − e^(−w/τ))``), so one long interval and
the same time heard in pieces count alike; a change found is counted at the answer that found it and fades from there.

Everything that reads a hazard reads ``Hazard.every_s``: the change-point prior of each answer, the chance an unheard
belief changed since (its drift to where a change lands, the failure chance's change points) and a look's horizon
(``gateway.routing.worth``). Three floats per model and one per run, updated once per answer: no history is kept."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from gateway.routing.belief_runs import Run
from gateway.routing.priors import MEMORY

HAZARD_S: Final = 120.0
"""The prior: a provider changes (its first token or its speed jumps) about once every this many seconds."""

_PRIOR_CHANGES: Final = 1.0
"""The prior counts as one change seen in ``HAZARD_S`` of watching (the model's deployments' watching adds up)."""
_MEMORY_S: Final = MEMORY * HAZARD_S
"""The evidence's time constant, in seconds of watching: ``MEMORY`` changes' worth at the prior's rate."""


@dataclass(slots=True)
class Hazard:
    """The change rate of one model's deployments: a Gamma posterior (``changes`` its shape, ``watched_s`` its rate),
    shared by the model's beliefs and by every copy of them."""

    changes: float = _PRIOR_CHANGES
    """The changes counted: the prior's, plus the expected changes the answers found (faded: ``heard``)."""
    watched_s: float = HAZARD_S
    """The seconds of watching counted: the prior's, plus the time between each deployment's answers (faded)."""
    every_s: float = HAZARD_S
    """A change about once every this many seconds: the posterior mean rate's inverse (kept, read per belief)."""

    def heard(self, watched_s: float, found: float) -> None:
        """One answer's evidence: ``watched_s`` seconds since its deployment was heard before, and ``found`` the
        changes its history is expected to hold now less before it (less than zero where it unsaid a suspected one).
        The evidence so far beyond the prior fades by ``watched_s`` of watching first (``_MEMORY_S``)."""
        if not (watched_s >= 0.0 and math.isfinite(found)):
            return
        faded = -math.expm1(-watched_s / _MEMORY_S)  # 1 - e^(-w/τ), exact for a short w
        changes = _PRIOR_CHANGES + (self.changes - _PRIOR_CHANGES) * (1.0 - faded) + found
        self.changes = max(changes, 1e-9)
        self.watched_s = HAZARD_S + (self.watched_s - HAZARD_S) * (1.0 - faded) + _MEMORY_S * faded
        self.every_s = self.watched_s / self.changes


def born_after(runs: list[Run], kept: int) -> float:
    """The changes a belief's history is expected to hold before this answer (the weighted mean over ``runs[:kept]``,
    as weighed after the last one), and each run a change would start now (``runs[kept:]``) given one more."""
    total = changes = 0.0
    for i in range(kept):
        run = runs[i]
        total += run.weight
        changes += run.weight * run.changes
    before = changes / total if total > 0.0 else 0.0
    for i in range(kept, len(runs)):
        runs[i].changes = before + 1.0
    return before


def found(runs: list[Run]) -> float:
    """The changes the history is expected to hold now (the runs' weighted mean; not a number where none weighs)."""
    total = changes = 0.0  # ``sum`` over lists written out: the same floats (left to right, ``0 + x`` is ``0.0 + x``)
    for run in runs:
        total += run.weight
    for run in runs:
        changes += run.weight * run.changes
    return changes / total if 0.0 < total < math.inf else math.nan
