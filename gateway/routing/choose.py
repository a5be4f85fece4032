"""One draw per request: the order of a request's deployments, and what it explores.

For each request every deployment's belief is drawn once (``Belief.draw``) and the request's cost
computed from that draw (``gateway.routing.cost``); the deployments are tried in the order of those
scores. This is Thompson sampling: a deployment is first as often as it is plausibly the best, so a
stale or thinly measured one gets looked at in proportion to its chance, near-equal ones share the
traffic (concurrent requests and replicas draw apart instead of herding), and a clear loser is
left alone.

When the draw puts first a deployment that is not the leader (the best at the beliefs' means),
the request explores. A stream then explores cheaply, under one budget (``RACE_BUDGET``):

- a **race** when the explored deployment streams at least as fast as the leader is believed
  to: both start at once, the first token wins, the explored one is drained if it loses;
- a **shadow** otherwise: the leader answers, the explored one runs beside it unseen and is
  drained (racing it would hand a long answer to a slower stream on a quicker first token).

Without budget (or not a stream), the draw's order stands. A **cold start**: deployments never
measured and not being measured are raced all at once (up to ``COLD_RACE``), beside the leader.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.config import DeploymentConfig
from gateway.routing.belief import Belief
from gateway.routing.cost import Cost, Shape, Weights, cost, scores
from gateway.routing.priors import Prior

_LEAST_KNOWN = "least-known:"
RACE_BUDGET = 0.05
"""Share of streamed requests that may carry one extra attempt to explore (a race or a shadow)."""
COLD_RACE = 4
"""Deployments never measured that one request may race at once (the rest follow on the next ones)."""


@dataclass(frozen=True, slots=True)
class Option:
    """A deployment the request may go to, with what the router believes of it now."""

    deployment: DeploymentConfig
    belief: Belief
    prior: Prior
    measuring: bool = False
    """An attempt is out there now that will measure it (not cold any more)."""


@dataclass(frozen=True, slots=True)
class Choice:
    """The request's order (indexes into the options), and how it explores."""

    order: tuple[int, ...]
    costs: tuple[Cost, ...]
    """Each option's cost at the posterior means (the prediction shown and used for deadlines)."""
    race: tuple[int, ...] = ()
    """Options that start at once, the first token wins (the order's first ones)."""
    shadow: int | None = None
    """An option measured beside the first, never the answer."""
    explored: bool = False
    """The draw put first another than the leader."""
    cold: bool = False


@dataclass(slots=True)
class Counts:
    """What exploration cost, per model: requests, those that explored, and the attempts they added."""

    requests: int = 0
    explored: int = 0
    races: int = 0
    shadows: int = 0
    cold_starts: int = 0
    attempts: int = 0

    def shares(self) -> tuple[float, float]:
        """The share of requests that explored, and attempts per request beyond one."""
        requests = max(1, self.requests)
        return self.explored / requests, self.attempts / requests - 1.0


@dataclass
class Budget:
    """A token bucket per model: each streamed request adds ``RACE_BUDGET``, each race or shadow spends one."""

    burst: float = 2.0
    tokens: dict[str, float] = field(default_factory=dict)

    def credit(self, model: str) -> None:
        for key in (model, _LEAST_KNOWN + model):
            self.tokens[key] = min(self.burst, self.tokens.get(key, 1.0) + RACE_BUDGET / 2)

    def take(self, model: str) -> bool:
        tokens = self.tokens.get(model, 1.0)
        if tokens < 1.0:
            return False
        self.tokens[model] = tokens - 1.0
        return True


def choose(
    options: Sequence[Option],
    shape: Shape,
    weights: Weights,
    now: float,
    rng: random.Random,
    *,
    may_race: bool,
    budget: Budget | None = None,
    model: str = "",
) -> Choice:
    """Order ``options`` for this request by one draw of each belief; decide its race, shadow or cold start."""
    means = [cost(o.belief.expected(now, o.prior), o.deployment, shape, weights, o.belief.prefill[0]) for o in options]
    drawn = [cost(o.belief.draw(now, rng, o.prior), o.deployment, shape, weights, o.belief.prefill[0]) for o in options]
    by_draw = scores(drawn, weights)
    order = sorted(range(len(options)), key=by_draw.__getitem__)
    measured = [i for i in range(len(options)) if options[i].belief.answers]
    # Never measured and nobody measuring it; at the very start (nothing measured at all) every one.
    cold = [i for i in order if not options[i].belief.answers and not (measured and options[i].measuring)]
    if cold and may_race and len(options) > 1:
        racers = cold[:COLD_RACE]
        joins = [i for i in order if i in measured and i not in racers][:1]  # a measured leader joins at once
        rest = [i for i in order if i not in racers and i not in joins]
        race = (*racers, *joins) if len(racers) + len(joins) > 1 else ()
        return Choice((*racers, *joins, *rest), tuple(means), race=race, cold=True)
    if not measured:
        return Choice(tuple(order), tuple(means))
    by_mean = scores(means, weights)
    # The draw decides who goes first; the fallbacks are what the beliefs expect best (exploiting, not exploring).
    ranked = sorted(range(len(options)), key=by_mean.__getitem__)
    leader = next(i for i in ranked if i in measured)
    first = order[0]
    looked = False
    if first == leader and may_race and budget is not None and len(order) > 1 and budget.take(_LEAST_KNOWN + model):
        # Half the budget looks where the present is least known (a change is likeliest to be found there).
        first = max(
            (i for i in ranked if i != leader), key=lambda i: options[i].belief.uncertainty(now, options[i].prior)
        )
        looked = True
    if first == leader:
        return Choice(_first(leader, ranked), tuple(means))
    if not may_race:
        return Choice(_first(first, ranked), tuple(means), explored=True)  # not a stream: the draw goes first
    if not looked and (budget is None or not budget.take(model)):
        # A stream explores only by a race or a shadow: without budget, the leader goes first.
        return Choice(_first(leader, ranked), tuple(means))
    if not looked and (means[first].s_per_token <= means[leader].s_per_token or not options[first].belief.answers):
        rest = [i for i in _first(leader, ranked) if i != first]
        return Choice((first, *rest), tuple(means), race=(first, leader), explored=True)
    return Choice(_first(leader, ranked), tuple(means), shadow=first, explored=True)


def _first(index: int, ranked: list[int]) -> tuple[int, ...]:
    return (index, *[i for i in ranked if i != index])


def chance_best(
    options: Sequence[Option], shape: Shape, weights: Weights, now: float, rng: random.Random, draws: int = 64
) -> list[float]:
    """The probability each option is the best for a request of ``shape`` (for explaining, not for routing)."""
    wins = [0] * len(options)
    for _ in range(draws):
        drawn = [cost(o.belief.draw(now, rng, o.prior), o.deployment, shape, weights) for o in options]
        by_draw = scores(drawn, weights)
        wins[min(range(len(options)), key=by_draw.__getitem__)] += 1
    return [w / draws for w in wins]
