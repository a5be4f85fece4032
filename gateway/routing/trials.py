"""How long a deployment's learned refusal is believed, and the one request that then tries the deployment again.

A refusal (a stated context window, input it does not accept) says what the deployment was when it answered; what
is served behind its URL may change, as its speed may. So it is believed while no change since is more likely than
one: the model's hazard's half-life (``believed_s``). Then the next request it would keep away plans the deployment
again (a trial) while the refusal is believed a half-life more: refused again, it is learned again; answered, it
is forgotten; never reached, the deployment is tried a half-life later. See docs/routing.md ("Context windows").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.routing.belief_hazard import HAZARD_S, Hazard
from gateway.types import DeploymentKey, InputKind


def believed_s(hazard: Hazard | None) -> float:
    """How long what was learned of one of the hazard's deployments is believed: until a change since is as likely
    as none (``1 - e^(-t / every_s) = 1/2``). None: the model's deployments were never heard (the prior's)."""
    return (hazard.every_s if hazard is not None else HAZARD_S) * math.log(2.0)


@dataclass(slots=True)
class Trial:
    """What one request tries a deployment again for: the kinds of input it refused, its learned window."""

    kinds: frozenset[InputKind] = frozenset()
    window: bool = False


@dataclass
class Trials:
    """The trials under way, by candidate (its ``id``, as the router keys its attempts): what each one's answer
    unlearns. Per router state; not thread-safe."""

    running: dict[int, tuple[DeploymentKey, Trial]] = field(default_factory=dict)

    def planned(self, model: str, candidates: Sequence[object], names: Sequence[str], trials: dict[str, Trial]) -> None:
        """Note the plan's candidates (``names``: their deployments) that try a deployment again."""
        if len(self.running) > 10_000:
            self.running.clear()  # trials planned whose candidates were never tried
        for candidate, name in zip(candidates, names, strict=True):
            trial = trials.get(name)
            if trial is not None:
                self.running[id(candidate)] = ((model, name), trial)

    def ended(self, candidate: object) -> tuple[DeploymentKey, Trial] | None:
        """The trial ``candidate``'s attempt was, if it was one (its answer says whether to unlearn it)."""
        return self.running.pop(id(candidate), None)
