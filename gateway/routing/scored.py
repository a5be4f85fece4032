"""What a ranking says of one deployment for one request: its prediction and its score's parts.

The measured router makes these (``gateway.routing.predict``, ``gateway.routing.score``); the belief router
makes the same from its beliefs (``gateway.routing.belief_rank``), so that the explanation endpoint, the routing
trace and the dashboard read either router's ``Ranking`` (``gateway.routing.ranking``). Data only: nothing here
decides a route.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Literal

from gateway.config import DeploymentConfig
from gateway.frozen import positional_maker, quick_init
from gateway.routing.cost import CacheMode
from gateway.routing.lengths import LengthSource
from gateway.samples import Endpoint, RequestKind

PRIOR_SIGMA = 0.35
"""Spread of single answers (log units) assumed before a deployment has shown its own."""
MAX_UNCERTAINTY = 4.0
OutputSource = LengthSource
"""Where a request's expected answer length came from (``gateway.routing.lengths``)."""
Source = Literal["recent", "window", "model", "none"]
"""Where a prediction's numbers come from: this replica's recent answers, the shared window, the model's average."""


@quick_init
@dataclass(frozen=True, slots=True)
class RequestShape:
    """What the score needs of a request."""

    endpoint: Endpoint
    prompt_tokens: int
    output_tokens: int
    output_source: OutputSource
    kind: RequestKind | None = None
    """What it asks of its answer (tools, JSON, plain): the valid rate is read for that kind (None: every kind)."""


@quick_init
@dataclass(frozen=True, slots=True)
class Uncertainty:
    """Relative standard errors (log units; 0.1 ≈ ±10%) of a prediction's time, first token and tokens/s."""

    time: float = MAX_UNCERTAINTY
    ttft: float = MAX_UNCERTAINTY
    tokens_per_s: float = MAX_UNCERTAINTY


UNKNOWN = Uncertainty()


@quick_init
@dataclass(frozen=True, slots=True)
class Prediction:
    """One deployment's predicted performance for one request; None where nothing is known."""

    ttft_s: float | None
    tokens_per_s: float | None
    time_s: float | None
    cost_usd: float
    success_rate: float
    """Smoothed: (ok + 2) / (attempts + 2), recency-weighted where the fast view has attempts."""
    attempts: int
    """Attempts in the stats window that say something of the provider."""
    prior: bool
    """Some of the prediction is the model's pooled value, not this deployment's own."""
    drift: bool = False
    """A change was detected in its recent answers: the prediction rests on the answers since."""
    uncertainty: Uncertainty = UNKNOWN
    """Now: what the answers' number and spread leave, grown with the age of the newest of them."""
    sampling: Uncertainty = UNKNOWN
    """What the answers' number and spread alone leave (as if the newest had just arrived)."""
    samples: float = 0.0
    """Effective number of answers behind ``time_s`` (recent ones weigh more)."""
    age_s: float | None = None
    """Age of the newest answer this replica heard from it (None: none yet)."""
    source: Source = "none"
    ttft_spread: float = PRIOR_SIGMA
    """The spread of single first tokens (log units): how often it would beat another to one, in a race."""
    stream_source: Source = "none"
    """Where its tokens/s comes from (a deployment that only sent one-chunk answers has none of its own)."""
    seconds_per_token: float | None = None
    """1 / ``tokens_per_s``: the stream's cost per output token, which is what time adds up."""
    success_samples: float = 0.0
    """Effective attempts behind ``success_rate`` now (they lose weight as they age, like the time's)."""
    valid_rate: float = 1.0
    """Smoothed share of its judged answers of this request's kind that were valid: (valid + 5) / (judged + 5)."""
    valid_judged: int = 0
    """Answers of this request's kind judged in the stats window."""
    answers: int = 0
    """Complete answers this replica heard from it."""
    overdue: float = 1.0
    """Its attempts in flight are this many times slower than predicted (1: they are not): ``time_s`` includes it."""
    late_first_token: float = 1.0
    """Its streams in flight wait this many times longer for a first token than predicted (1: they do not):
    ``ttft_s`` includes it."""
    slow_stream: float = 1.0
    """Its streams in flight deliver this many times slower than its tokens/s (1: they do not): in ``tokens_per_s``."""
    guessed_seconds_per_token: float | None = None
    """Before any stream of the model ended (no envelope to read bytes as tokens by): its streams in flight's pace
    read by ``TYPICAL_BYTES_PER_TOKEN``. A guess within twice the truth, not ranked by: it tells a slow streamer
    from a fast one (``gateway.routing.explore``: long answers beside a slow leader)."""
    failure_s: float | None = None
    """How long its recent failures took before they failed (None: no failure seen here)."""
    expected_s: float | None = None
    """``time_s`` with its failures' cost: (1 - success) × (``failure_s`` + the best other's time) added
    (set by ``score_all``, which knows the others; the score's time term uses it)."""
    cache: CacheMode = "effective"
    """How the prompt cache entered ``ttft_s`` and ``cost_usd`` (see ``CacheMode``)."""
    cached_tokens: int = 0
    """Prompt tokens the cost counts at the cached price."""
    hit_ratio: float | None = None
    """Its observed share of prompt tokens served from cache (None: its provider reports none)."""
    warm_ttft_s: float | None = None
    """Its first token when the prompt is mostly cached (None: not measured); from this replica's view, its base
    latency: a fully cached prompt's first token (``gateway.routing.prefill``)."""
    prefill_tokens_per_s: float | None = None
    """Its prefill speed: uncached prompt tokens per second of first token (None: not measured)."""

    def with_expected(self, expected_s: float | None) -> Prediction:
        """A copy with another ``expected_s`` (``dataclasses.replace`` reads and passes each field by name:
        twice as slow, paid per deployment per request by any that failed lately)."""
        values = list(_PREDICTION_FIELDS(self))
        values[_EXPECTED_AT] = expected_s
        return prediction_from_fields(*values)


_PREDICTION_FIELDS = attrgetter(*(f.name for f in fields(Prediction)))
_EXPECTED_AT = [f.name for f in fields(Prediction)].index("expected_s")
prediction_from_fields = positional_maker(Prediction)
"""``Prediction(*values)``, every field given in order (``gateway.frozen``): one per deployment per plan."""
uncertainty_from_fields = positional_maker(Uncertainty)
"""``Uncertainty(*values)``, every field given in order: two per prediction."""
request_shape_from_fields = positional_maker(RequestShape)
"""``RequestShape(*values)``, every field given in order: one per plan."""


@quick_init
@dataclass(frozen=True, slots=True)
class ScoreParts:
    """The weighted terms of a score; each is 0 for the best candidate on that dimension."""

    time: float = 0.0
    ttft: float = 0.0
    throughput: float = 0.0
    price: float = 0.0
    failure: float = 0.0

    @property
    def total(self) -> float:
        return self.time + self.ttft + self.throughput + self.price + self.failure


@quick_init
@dataclass(frozen=True, slots=True)
class Scored:
    """A deployment with its prediction, score (lower is better) and broken soft constraints."""

    deployment: DeploymentConfig
    prediction: Prediction
    parts: ScoreParts
    violations: tuple[str, ...]
    bonus: float = 0.0
    """How much lower its score might plausibly be (score units): the exploration bonus."""
    caution: float = 0.0
    """What it is ranked behind its score for (score units): few or scattered answers, however recent."""

    @property
    def score(self) -> float:
        return self.parts.total

    @property
    def optimistic(self) -> float:
        """The score if its uncertain estimate erred in its favour by ``CONFIDENCE`` standard errors."""
        return self.parts.total - self.bonus

    @property
    def ranked_by(self) -> float:
        """What it is ranked by: its score plus its caution.

        A deployment measured on two lucky answers would otherwise win traffic from one measured
        on fifty (a skewed stream's mean is underestimated by few answers, not over), and a
        ranking would flap on noise. Only the answers' number and spread count here, not their
        age: an estimate nobody refreshed is explored, not demoted (that would trap whatever lost
        the lead behind the new leader). The success rate needs no such care: its prior already
        leans towards success.
        """
        return self.parts.total + self.caution


score_parts_from_fields = positional_maker(ScoreParts)
"""``ScoreParts(*values)``, every field given in order (``gateway.frozen``): one per deployment per plan."""
scored_from_fields = positional_maker(Scored)
"""``Scored(*values)``, every field given in order: one per deployment per plan."""
