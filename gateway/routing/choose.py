"""One draw per request: the order of a request's deployments, and what it explores.

A stream goes to the leader with at most one look (a race or a shadow) under ``RACE_BUDGET``, where the look is
worth its cost (``worth``); any other request goes by one draw of each belief (Thompson sampling); a cold start
races at most ``COLD_RACE`` attempts. See docs/routing.md ("What the router knows", "Exploration").
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from gateway.config import DeploymentConfig
from gateway.routing.belief import Belief
from gateway.routing.belief_look import gains
from gateway.routing.cost import Cost, Shape, Weights, cost, scores
from gateway.routing.health import LookBudget
from gateway.routing.priors import MEMORY, Prior
from gateway.routing.worth import Race, drained_usd, look_cost, news_in_s, race_time
from gateway.routing.worth import worth as look_worth

RACE_BUDGET = 0.10
"""Share of streamed requests that may carry one extra attempt to look at another deployment (a race or a shadow)."""
COLD_RACE = 3
"""Attempts one cold start may race at once, a measured leader counted: each loser is drained and billed."""


class Option(NamedTuple):
    """A deployment the request may go to, with what the router believes of it now."""

    deployment: DeploymentConfig
    belief: Belief
    prior: Prior
    measuring: bool = False
    """An attempt running now will measure it: not cold."""


class Choice(NamedTuple):
    """The request's order (indexes into the options), and how it explores."""

    order: tuple[int, ...]
    costs: tuple[Cost, ...]
    """Each option's cost at the posterior means: the prediction shown and used for deadlines."""
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
        """The share of requests that explored, and attempts per request beyond one (never below zero: a request is
        counted when planned, before its attempts start)."""
        requests = max(1, self.requests)
        return self.explored / requests, max(0.0, self.attempts / requests - 1.0)


@dataclass
class Budget(LookBudget):
    """The races' and shadows' look budget (``RACE_BUDGET`` a streamed request); beside it, the model's pace of
    streamed requests (over about ``MEMORY`` gaps), which ``worth`` reads."""

    last: dict[str, float] = field(default_factory=dict)
    gap_s: dict[str, float] = field(default_factory=dict)
    gaps: dict[str, int] = field(default_factory=dict)

    def streamed(self, model: str, now: float) -> None:
        """A streamed request of ``model`` arrived at ``now``: its share of a look, and its gap to the last."""
        self.credit(model, RACE_BUDGET)
        last = self.last.get(model)
        self.last[model] = now
        if last is not None:  # a running mean over about the last ``MEMORY`` gaps
            n = self.gaps[model] = self.gaps.get(model, 0) + 1
            gap = self.gap_s.get(model, 0.0)
            self.gap_s[model] = gap + (now - last - gap) / min(n, MEMORY)

    def pace(self, model: str) -> float | None:
        """Streamed requests a second, None until a gap between two of them is known."""
        gap = self.gap_s.get(model)
        return 1.0 / gap if gap else None


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
    means: Sequence[Cost] | None = None,
) -> Choice:
    """Order ``options`` for this request and decide its race, shadow or cold start. ``means``: the options'
    ``mean_costs``, when the caller has them already."""
    means = list(means) if means is not None else mean_costs(options, shape, weights, now)
    measured = [i for i in range(len(options)) if options[i].belief.answers]
    # Never measured and nobody measuring it; with nothing measured at all, every one.
    cold = [i for i in range(len(options)) if not options[i].belief.answers and not (measured and options[i].measuring)]
    if (cold and may_race and len(options) > 1) or not measured or not may_race:
        drawn = [
            cost(o.belief.draw(now, rng, o.prior), o.deployment, shape, weights, o.belief.prefill_s()) for o in options
        ]
        by_draw = scores(drawn, weights)
        order = sorted(range(len(options)), key=by_draw.__getitem__)
        if cold and may_race and len(options) > 1:
            joins = [i for i in order if i in measured][:1]  # a measured leader joins at once
            racers = [i for i in order if i in cold][: COLD_RACE - len(joins)]
            rest = [i for i in order if i not in racers and i not in joins]
            race = (*racers, *joins) if len(racers) + len(joins) > 1 else ()
            return Choice((*racers, *joins, *rest), tuple(means), race=race, cold=True)
        if not measured:
            return Choice(tuple(order), tuple(means))
    by_mean = scores(means, weights)
    # The fallbacks follow the beliefs' means.
    ranked = sorted(range(len(options)), key=by_mean.__getitem__)
    leader = next(i for i in ranked if i in measured)
    if not may_race:
        first = order[0]  # not a stream: the draw goes first (Thompson sampling)
        return Choice(_first(first, ranked), tuple(means), explored=first != leader)
    if budget is None or len(options) < 2 or not budget.ready(model):
        return Choice(_first(leader, ranked), tuple(means))
    pace = budget.pace(model)
    lead = options[leader]
    lead_drained = drained_usd(means[leader], lead.deployment, shape) if pace is not None else 0.0
    races: dict[int, Race | None] = {}

    def race_s(i: int) -> Race | None:
        """The race where a look at ``i`` is a race (never measured, or racing costs no time), else None: a shadow."""
        if i in races:
            return races[i]
        o = options[i]
        race: Race | None
        if not o.belief.answers:
            race = Race(means[leader].time_s, 0.5)
        else:
            race = race_time(o.belief, o.prior, lead.belief, lead.prior, means[i], means[leader], now)
            race = race if race.time_s <= means[leader].time_s else None
        races[i] = race
        return race

    def net(i: int) -> tuple[float, float]:
        """A look's worth less its cost; before the pace is known, its gain times how much sooner it tells than
        traffic would, ties going to the one traffic would tell of last."""
        o = options[i]
        if pace is None:
            news = news_in_s(o.belief, now)
            return gain(o, means[leader], shape, weights, now, rng) * news, news
        if not o.belief.answers:
            return math.inf, 0.0
        value = look_worth(o.belief, o.prior, o.deployment, means[leader], shape, weights, now, rng, pace)
        e_drained = drained_usd(means[i], o.deployment, shape)
        return value - look_cost(means[i], means[leader], e_drained, lead_drained, weights, race_s(i)), 0.0

    nets = {i: net(i) for i in ranked if i != leader}
    first = max(nets, key=nets.__getitem__)
    if pace is not None and nets[first][0] <= 0.0:  # no look is worth its cost
        return Choice(_first(leader, ranked), tuple(means))
    budget.take(model)
    if race_s(first) is not None:
        rest = [i for i in _first(leader, ranked) if i != first]
        return Choice((first, *rest), tuple(means), race=(first, leader), explored=True)
    return Choice(_first(leader, ranked), tuple(means), shadow=first, explored=True)


def mean_costs(options: Sequence[Option], shape: Shape, weights: Weights, now: float) -> list[Cost]:
    """Each option's cost at its belief's means: the prediction, and the order of the leader and fallbacks.

    A belief that has heard is read as heard, not mixed with the prior by the chance it changed: that would pull
    every deployment left alone toward its siblings' middle with no answer saying so. Finding a change is for the
    looks and the draws. One never heard is its prior."""
    return [
        cost(
            o.belief.expected(now, None if o.belief.answers else o.prior),
            o.deployment,
            shape,
            weights,
            o.belief.prefill_s(),
        )
        for o in options
    ]


def gain(option: Option, leader: Cost, shape: Shape, weights: Weights, now: float, rng: random.Random) -> float:
    """What one look at ``option`` may teach: the knowledge gradient (``belief_look.gains``)."""
    return gains(option.belief, option.prior, option.deployment, leader, shape, weights, now, rng)[0]


def _first(index: int, ranked: list[int]) -> tuple[int, ...]:
    return (index, *[i for i in ranked if i != index])


def chance_best(
    options: Sequence[Option], shape: Shape, weights: Weights, now: float, rng: random.Random
) -> list[float]:
    """The probability each option is the best for a request of ``shape`` (for explaining, not for routing), from
    64 draws of every option."""
    draws = 64
    wins = [0] * len(options)
    for _ in range(draws):
        drawn = [cost(o.belief.draw(now, rng, o.prior), o.deployment, shape, weights) for o in options]
        by_draw = scores(drawn, weights)
        wins[min(range(len(options)), key=by_draw.__getitem__)] += 1
    return [w / draws for w in wins]
