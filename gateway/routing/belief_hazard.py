"""How often a model's deployments change: the hazard of change-point detection, learned per model.

A Gamma posterior on the change rate, pooled over the model's deployments, from a weak prior of one change in
``HAZARD_S`` of watching. Each answer adds the time its deployment was watched and the further changes its
history is expected to hold; the evidence fades over ``MEMORY`` changes' worth of watching, so a burst after a
long quiet is heard. See docs/routing.md ("What the router knows").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from gateway.routing.belief_runs import Run, finite
from gateway.routing.priors import MEMORY

HAZARD_S: Final = 120.0
"""The prior: a provider changes (its first token or its speed jumps) about once every this many seconds."""


@dataclass(slots=True)
class Hazard:
    """The change rate of one model's deployments: a Gamma posterior (``changes`` its shape, ``watched_s`` its rate),
    shared by the model's beliefs and their copies."""

    changes: float = 1.0
    watched_s: float = HAZARD_S
    """The prior counts as one change seen in ``HAZARD_S`` of watching; it never fades."""
    every_s: float = HAZARD_S
    """A change about once every this many seconds: the inverse of the posterior mean rate."""

    def heard(self, watched_s: float, found: float) -> None:
        """One answer's evidence: ``watched_s`` since its deployment was last heard, and ``found`` more changes
        expected in its history (negative where it took one back). The evidence beyond the prior fades first."""
        if not (watched_s >= 0.0 and finite(found)):
            return
        memory_s = MEMORY * HAZARD_S  # the evidence's time constant: ``MEMORY`` changes' worth at the prior's rate
        faded = -math.expm1(-watched_s / memory_s)  # 1 - e^(-w/τ), accurate for a short w
        changes = 1.0 + (self.changes - 1.0) * (1.0 - faded) + found
        self.changes = max(changes, 1e-9)
        self.watched_s = HAZARD_S + (self.watched_s - HAZARD_S) * (1.0 - faded) + memory_s * faded
        self.every_s = self.watched_s / self.changes


def born_after(runs: list[Run], kept: int) -> float:
    """The changes the history is expected to hold before this answer (the weighted mean over ``runs[:kept]``);
    the new runs ``runs[kept:]`` are given one more."""
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
    """The changes the history is expected to hold now: the runs' weighted mean (NaN where none weighs)."""
    total = changes = 0.0
    for run in runs:
        total += run.weight
    for run in runs:
        changes += run.weight * run.changes
    return changes / total if 0.0 < total < math.inf else math.nan
