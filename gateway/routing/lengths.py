"""How long this request's answer will be: predicted from what this model's answers actually were.

The lengths of the answers relayed (``heard``) are kept in cells from the general to the particular: the model at a
``max_tokens`` magnitude, the request's shape (``shape_of``), its client key, its session. A prediction
(``forecast``) starts from a prior and each cell pulls it toward its own answers; ``max_tokens`` caps it
(docs/routing.md, "The score").
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple

from gateway.routing.draws import STANDARD_NORMAL, new_tuple
from gateway.routing.priors import MEMORY

if TYPE_CHECKING:
    from gateway.routing.plan import RouteRequest

PRIOR_ANSWERS = 3.0
"""A cell's answers weigh against its parent's estimate as if the parent were this many answers: a key's third
answer moves its prediction halfway from the model's toward its own."""
SESSIONS_KEPT = 10_000
LengthSource = Literal["learned", "share", "request", "default"]
"""Where a prediction's prior came from before the cells pulled it: answers to this shape were heard
(``learned``), the share of ``max_tokens`` the model's answers used, the request's ``max_tokens`` (nothing heard
of the model), or the policy's default."""


class LengthKey(NamedTuple):
    """A request's shape, as far as its answer's length goes (``shape_of``). Its first two fields key the model's
    cell (any API or kind), its first five the shape's, its first six the client key's."""

    model: str
    magnitude: int
    """``max_tokens``'s power of two (0: none set)."""
    api: str = "chat"
    stream: bool = True
    kind: str | None = None
    """What it asks of its answer: tools, JSON, plain (None: not said)."""
    client: str = ""
    """The client key's id ("": not known)."""
    session: str | None = None


def shape_of(
    model: str,
    max_tokens: int | None,
    *,
    api: str = "chat",
    stream: bool = True,
    kind: str | None = None,
    client: str = "",
    session: str | None = None,
) -> LengthKey:
    """The request's ``LengthKey``: ``max_tokens`` counted by its power of two."""
    magnitude = max_tokens.bit_length() if max_tokens else 0
    # ``LengthKey(...)`` with every field given, without the named tuple's Python ``__new__`` (one per plan).
    return new_tuple(LengthKey, (model, magnitude, api, stream, kind, client, session))


def request_shape(request: RouteRequest) -> LengthKey:
    """The ``LengthKey`` of a request as the router sees it: its API, streaming, kind, client key and session."""
    session = request.session
    return shape_of(
        request.model.name,
        request.max_tokens,
        api=request.endpoint,
        stream=request.stream,
        kind=request.kind,
        client=request.client,
        session=session.key if session is not None else None,
    )


@dataclass(slots=True)
class _Cell:
    """Running mean of lengths, and mean and variance of their logs, over the last ``MEMORY`` answers."""

    n: int = 0
    mean: float = 0.0
    log_mean: float = 0.0
    log_var: float = 0.0

    def add(self, x: float) -> None:
        self.n = min(self.n + 1, MEMORY)
        self.mean += (x - self.mean) / self.n
        log = math.log(max(x, 1.0))
        before = self.log_mean
        self.log_mean += (log - before) / self.n
        self.log_var += ((log - before) * (log - self.log_mean) - self.log_var) / self.n


def _shape_cell(shapes: dict[tuple[object, ...], _Cell], cut: tuple[object, ...]) -> _Cell:
    """``shapes``' cell of ``cut``, made when missing."""
    cell = shapes.get(cut)
    if cell is None:
        cell = shapes[cut] = _Cell()
    return cell


class Forecast(NamedTuple):
    """One request's predicted answer length: its mean, its log-normal spread, and the cap."""

    key: LengthKey
    max_tokens: int | None
    mean: float
    """The expected length (at least one token, never above ``max_tokens``)."""
    log_mean: float
    log_sigma: float
    """The predictive spread of one answer's log length (the cells' spread, widened for few answers)."""
    answers: float
    """Answers of this shape behind it, at most ``MEMORY`` (0: a prior only)."""
    source: LengthSource

    def at(self, quantile: float) -> float:
        """The length that ``quantile`` of such answers stay within (capped by ``max_tokens``)."""
        z = STANDARD_NORMAL.inv_cdf(min(max(quantile, 0.001), 0.999))
        value = max(1.0, math.exp(self.log_mean + z * self.log_sigma))
        return min(value, float(self.max_tokens)) if self.max_tokens else value


@dataclass
class Lengths:
    """Answer lengths per shape (model, key, session) and the model's share of ``max_tokens`` used."""

    shapes: dict[tuple[object, ...], _Cell] = field(default_factory=dict)
    """The model's cells (the key's first two fields), each shape's (its first five) and each key's (its first six)."""
    sessions: OrderedDict[LengthKey, _Cell] = field(default_factory=OrderedDict)
    shares: dict[str, _Cell] = field(default_factory=dict)
    """Per model: the share of ``max_tokens`` its answers used."""

    def heard(self, key: LengthKey, tokens: int, max_tokens: int | None) -> None:
        """A complete answer of ``tokens`` output tokens to a request of shape ``key``."""
        x = float(max(tokens, 0))
        shapes = self.shapes
        # The cuts ``key[:2]``, ``key[:5]`` and ``key[:6]`` (equal tuples), made from the items without slices.
        _shape_cell(shapes, (key[0], key[1])).add(x)
        _shape_cell(shapes, (key[0], key[1], key[2], key[3], key[4])).add(x)
        if key.client:
            _shape_cell(shapes, (key[0], key[1], key[2], key[3], key[4], key[5])).add(x)
        if key.session is not None:
            cell = self.sessions.get(key)
            if cell is None:
                cell = self.sessions[key] = _Cell()
                if len(self.sessions) > SESSIONS_KEPT:
                    self.sessions.popitem(last=False)
            else:
                self.sessions.move_to_end(key)
            cell.add(x)
        if max_tokens:
            share = self.shares.get(key.model)
            if share is None:
                share = self.shares[key.model] = _Cell()
            share.add(min(1.0, x / max_tokens))

    def forecast(
        self, key: LengthKey, max_tokens: int | None, default: float, source: LengthSource = "default"
    ) -> Forecast:
        """The answer length to plan for. ``default`` (from ``source``) is the prior when the model has no share of
        ``max_tokens`` learned, or the request sets none."""
        share = self.shares.get(key.model)
        if max_tokens and share is not None and share.n:
            prior, source = share.mean * max_tokens, "share"
        else:
            prior = min(default, float(max_tokens)) if max_tokens else default
        prior = max(1.0, prior)
        mean = prior
        # Before any answer is heard, a log-normal of mean ``prior`` and log spread 1 (the p95 ~ 5× the median).
        log_var = 1.0
        log_mean = math.log(prior) - log_var / 2
        # The cells that know this shape: its own (the model's at any API or kind while it has none: a shape's own
        # answers replace what other shapes' say, which may lie far off), then the key's and the session's.
        shape = self.shapes.get(key[:5])
        if shape is None or not shape.n:
            shape = self.shapes.get(key[:2])
        client = self.shapes.get(key[:6]) if key.client else None
        session = self.sessions.get(key) if key.session is not None else None
        answers = 0.0
        for cell in (shape, client, session):
            if cell is None or not cell.n:
                continue
            n, k = float(cell.n), PRIOR_ANSWERS
            if answers:
                mean = (n * cell.mean + k * mean) / (n + k)
                log_mean = (n * cell.log_mean + k * log_mean) / (n + k)
            else:
                # The shape's own answers replace a prior from elsewhere outright: a share of max_tokens learned
                # on other traffic may be a hundred times off, and would take hundreds of answers to wash out.
                mean, log_mean = cell.mean, cell.log_mean
            log_var = (n * cell.log_var + k * log_var) / (n + k)
            answers = max(answers, n)  # the model's cell counts the key's and the session's answers too
        if answers:
            source = "learned"
        # One answer's spread, plus the mean's own uncertainty while there are few answers behind it.
        sigma = math.sqrt(log_var * (1.0 + 1.0 / (answers + PRIOR_ANSWERS)))
        if max_tokens:
            mean = min(mean, float(max_tokens))
        # ``Forecast(...)``, every field given, without the named tuple's Python ``__new__`` (one per plan).
        return new_tuple(Forecast, (key, max_tokens, max(1.0, mean), log_mean, sigma, answers, source))
