"""What one request would cost on one deployment: time, money, and how sure the router is.

``predict`` is a pure function of the deployment's recent answers on this replica (its
``DeploymentView``, the fast view), the shared stats snapshot (the long view), the policy and
the request's shape. For a request of ``n`` output tokens::

    time  = TTFT + n × seconds_per_token        (means: the expected time; or the policy's quantiles)
    money = (prompt_tokens × price_in + n × price_out) / 1e6

Each metric comes from the first source that has it:

1. ``recent``: the fast view (recency-weighted, with change detection; ``gateway.routing.estimates``);
2. ``window``: the deployment's histograms in the shared window (every replica's samples of the
   last ``stats.window_s``: how a replica that never tried a deployment knows it);
3. ``model``: the model's pooled histograms (``prior``: an unmeasured deployment ranks as an
   average one until measured).

Each carries a relative uncertainty (log units) that shrinks as answers accumulate and grows
as the newest of them ages (``STALE_HALF_LIFE_S``: the evidence halves); the time's combines
the first token's and the stream's in proportion to their share of this request (an
800-token answer's is mostly the stream's). ``sampling`` is the same without the growth with
age: what few or scattered answers alone leave unknown.

Extending the prediction: a term that changes this request's time or money (a warm prompt
cache's shorter first token and cheaper input, the wait before retrying the same deployment)
belongs in ``predict``, adjusting ``ttft_s``/``time_s``/``cost_usd`` and recording itself in a
field of its own; the score (``gateway.routing.score``) reads only these fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gateway.config import DeploymentConfig
from gateway.policies import PolicyConfig
from gateway.routing.cost import EFFECTIVE as EFFECTIVE
from gateway.routing.cost import CacheMode as CacheMode
from gateway.routing.cost import CacheTerms as CacheTerms
from gateway.routing.cost import cached_tokens, valid_rate
from gateway.routing.estimates import (
    MIN_SIGMA,
    PRIOR_WEIGHT,
    TYPICAL_BYTES_PER_TOKEN,
    DeploymentView,
    ViewMetric,
)
from gateway.routing.scored import (
    MAX_UNCERTAINTY,
    PRIOR_SIGMA,
    OutputSource,
    Prediction,
    RequestShape,
    Source,
    prediction_from_fields,
    uncertainty_from_fields,
)
from gateway.stats import DeploymentSummary, LogHistogram, StatsSnapshot

MIN_TIME_S = 1e-3
SUCCESS_PRIOR = 2
"""Pseudo-successes added to the success rate, so one early failure does not sink a deployment."""
WINDOW_SAMPLES = 4.0
"""The weight the shared window's estimate gets when it is all there is: its answers' age is unknown."""
WINDOW_BLEND = 64.0
"""The most answers' weight the shared window gets beside the recent ones (when no change was detected): near-equal
providers (8% apart, single answers spreading 0.6-0.8 in log units) take dozens of answers to tell apart, and a
detected change stops the blend until the window's answers are mostly from after it (16: stable market +7.1% in
simulation, 64: +5.7%)."""
STALE_HALF_LIFE_S = 5.0
IN_FLIGHT_UNCERTAINTY = 0.5
"""A deployment judged by its first stream in flight: one partial answer, of unknown spread."""
STREAM_DOMINATES = 0.5
"""The share of a request's predicted time above which its stream's source (own, window, the model's) is the
prediction's: below it the first token's is."""
WindowMetric = Literal["ttft_s", "tokens_per_s", "e2e_s", "warm_ttft_s", "prefill_tokens_per_s", "cold_ttft_s"]
WINDOW_METRIC: dict[ViewMetric, WindowMetric] = {
    "ttft_s": "ttft_s",
    "seconds_per_token": "tokens_per_s",
    "e2e_s": "e2e_s",
    "warm_ttft_s": "warm_ttft_s",
    "prefill_s_per_token": "prefill_tokens_per_s",
    "cold_ttft_s": "cold_ttft_s",
}
"""Each fast-view metric's counterpart in the shared window (a speed there where the view keeps its inverse)."""
RATES: frozenset[WindowMetric] = frozenset({"tokens_per_s", "prefill_tokens_per_s"})
_WINDOW_RATE: dict[ViewMetric, tuple[WindowMetric, bool]] = {m: (w, w in RATES) for m, w in WINDOW_METRIC.items()}
"""Each fast-view metric's window counterpart, and whether that is a rate: looked up four times per prediction."""
PooledHistograms = dict[WindowMetric, "LogHistogram | None"]
"""A model's pooled histogram of each metric, merged once per request and snapshot (``predict``'s ``pooled``)."""
_NONE: Mapping[str, LogHistogram] = {}
_UNSEEN = LogHistogram()
"""Not in ``pooled`` yet (a histogram of its own: ``None`` there means merged, and nothing was found)."""


@dataclass(slots=True)
class _Value:
    """One metric's estimate inside ``predict`` (never leaves it; not frozen, since four are built per
    deployment per request and a frozen init pays a ``object.__setattr__`` per field)."""

    value: float
    uncertainty: float
    sampling: float
    samples: float
    source: Source
    changed: bool = False
    spread: float = PRIOR_SIGMA

    def __init__(  # the generated one's, written out: compiled (``gateway.native``), it stores each field directly
        self,
        value: float,
        uncertainty: float,
        sampling: float,
        samples: float,
        source: Source,
        changed: bool = False,
        spread: float = PRIOR_SIGMA,
    ) -> None:
        self.value = value
        self.uncertainty = uncertainty
        self.sampling = sampling
        self.samples = samples
        self.source = source
        self.changed = changed
        self.spread = spread

    def with_value(self, value: float) -> _Value:
        """A copy with another value (``dataclasses.replace`` reads every field by name: 10× slower)."""
        return _Value(value, self.uncertainty, self.sampling, self.samples, self.source, self.changed, self.spread)


def expected_output(
    model: str, max_tokens: int | None, snapshot: StatsSnapshot, policy: PolicyConfig
) -> tuple[int, OutputSource]:
    """The answer length to predict with, and where it came from."""
    if max_tokens is not None:
        return max_tokens, "request"
    observed = snapshot.model_quantile(model, "output_tokens", 0.5)
    if observed is not None and observed >= 1:
        return round(observed), "observed"
    return policy.default_output_tokens, "default"


def predict(
    model: str,
    deployment: DeploymentConfig,
    shape: RequestShape,
    snapshot: StatsSnapshot,
    policy: PolicyConfig,
    view: DeploymentView | None = None,
    now: float = 0.0,
    cache: CacheTerms = EFFECTIVE,
    bytes_per_token: Mapping[str, float] | None = None,
    pooled: PooledHistograms | None = None,
) -> Prediction:
    """One deployment's prediction for this request (``now`` on the clock ``view`` was fed with).

    ``bytes_per_token``: the model's other deployments' stream bytes per output token by API, with which the streams
    in flight of one that never finished an answer are read (``DeploymentView.in_flight``). ``pooled``: the model's
    pooled histograms merged so far for this request and snapshot (shared by the calls that predict its deployments).
    """
    summary = snapshot.summaries.get((model, deployment.name))  # ``snapshot.get``, without its Python frame
    ttft = _metric(view, summary, snapshot, model, "ttft_s", policy, now, memo=pooled)
    # A warm first token and a prefill speed are unknown for most deployments (their provider reports no cached
    # tokens, their prompts are short): ``_metric`` is not asked where it would find nothing.
    histograms = summary.histograms if summary is not None else _NONE
    warm = (
        _metric(view, summary, snapshot, model, "warm_ttft_s", policy, now, pooled=False, memo=pooled)
        if "warm_ttft_s" in histograms or (view is not None and view.estimate("warm_ttft_s") is not None)
        else None
    )
    prefill = (
        None
        if "prefill_tokens_per_s" not in histograms
        and (view is None or view.estimate("prefill_s_per_token") is None)
        and pooled is not None
        and pooled.get("prefill_tokens_per_s", _UNSEEN) is None  # the model's, merged for an earlier deployment
        else _metric(view, summary, snapshot, model, "prefill_s_per_token", policy, now, memo=pooled)
    )
    if shape.endpoint != "embeddings" and cache.mode == "warm" and warm is not None:
        ttft = warm
        if prefill is not None and warm.source == prefill.source == "recent" and cache.cached_tokens is not None:
            # This replica's view keeps the base and the prefill apart (``gateway.routing.prefill``): the
            # turn's first token is the base plus the prefill of what the previous turn did not send.
            uncached = max(0, shape.prompt_tokens - cache.cached_tokens)
            ttft = warm.with_value(warm.value + prefill.value * uncached)
    elif shape.endpoint != "embeddings" and cache.mode == "cold":
        # Prefill of the whole prompt: no part of it is cached here.
        if prefill is not None:
            # This replica's view keeps the prefill's own speed (its base latency apart, ``router._observe``).
            base = warm.value if warm is not None and prefill.source == "recent" else 0.0
            ttft = prefill.with_value(base + prefill.value * shape.prompt_tokens)
        else:
            cold = _metric(view, summary, snapshot, model, "cold_ttft_s", policy, now, pooled=False, memo=pooled)
            ttft = cold if cold is not None else ttft
    spt = _metric(view, summary, snapshot, model, "seconds_per_token", policy, now, memo=pooled)
    slow = view.slow_stream(now) if view is not None else 1.0
    if spt is not None and slow > 1.0:
        spt = spt.with_value(spt.value * slow)  # its streams in flight deliver this much slower
    guessed = None
    if view is not None and view.answered == 0 and (ttft is None or ttft.source in ("model", "none")):
        # Nothing of its own finished yet, but a stream of it runs: its first token and its pace so far
        # are its own, one answer's worth (a long first probe would otherwise leave it the model's average).
        early = view.in_flight(now, bytes_per_token)
        if early is not None:
            first, pace = early
            ttft = _Value(first, IN_FLIGHT_UNCERTAINTY, IN_FLIGHT_UNCERTAINTY, 1.0, "recent")
            if pace is not None and (spt is None or spt.source in ("model", "none")):
                spt = _Value(pace, IN_FLIGHT_UNCERTAINTY, IN_FLIGHT_UNCERTAINTY, 1.0, "recent")
            elif pace is None:
                guessed = view.in_flight(now, TYPICAL_BYTES_PER_TOKEN)
    late = view.late_first_token(now) if view is not None and ttft is not None else 1.0
    late_s = 0.0
    if ttft is not None and late > 1.0:
        late_s = ttft.value * (late - 1.0)
        ttft = ttft.with_value(ttft.value + late_s)  # its streams in flight wait this much longer for theirs
    time_s = None
    uncertainty = sampling = MAX_UNCERTAINTY
    samples = 0.0
    prior = False
    source: Source = "none"
    if shape.endpoint != "embeddings" and ttft is not None:
        stream = shape.output_tokens * spt.value if spt is not None else 0.0
        time_s = ttft.value + stream
        # The first token's and the stream's errors add up (a provider that changes tends to change both).
        uncertainty = (ttft.value * ttft.uncertainty + stream * (spt.uncertainty if spt else 0.0)) / time_s
        sampling = (ttft.value * ttft.sampling + stream * (spt.sampling if spt else 0.0)) / time_s
        # The stream's source counts where the stream is most of the request's time: a deployment whose
        # answers came in one chunk each (its tokens/s never seen) is still measured for a short answer, by
        # its own first tokens; with the stream counted it would be neither cold nor measured, so never
        # explored again (its borrowed stream still widens its uncertainty above, and so its caution).
        stream_counts = spt is not None and stream >= STREAM_DOMINATES * time_s
        samples = min(ttft.samples, spt.samples) if spt is not None and stream_counts else ttft.samples
        prior = ttft.source == "model" or (spt is not None and spt.source == "model" and stream_counts)
        source = _weakest(ttft.source, spt.source) if spt is not None and stream_counts else ttft.source
    if time_s is None:
        # Non-streamed traffic and embeddings carry no first-token timings: end-to-end stands in.
        e2e = _metric(view, summary, snapshot, model, "e2e_s", policy, now, memo=pooled)
        if e2e is not None:
            time_s, samples, source = e2e.value, e2e.samples, e2e.source
            uncertainty, sampling = e2e.uncertainty, e2e.sampling
            prior = e2e.source == "model"
    overdue = view.overdue(now) if view is not None else 1.0
    if time_s is not None and overdue > 1.0:
        # Both are lower bounds on how much slower it has become: a late first token already in ``time_s``
        # is not multiplied again by the same attempts' overdue time.
        time_s = max(time_s, (time_s - late_s) * overdue)
    hit_ratio = summary.hit_ratio() if summary is not None else None
    cached = cached_tokens(cache, shape.prompt_tokens, hit_ratio)
    cost = deployment.cost_usd(shape.prompt_tokens, shape.output_tokens, cached)
    attempts = summary.attempts if summary else 0  # a sum over its outcomes: once per prediction
    newest = view.newest_at if view is not None else None
    success_rate, success_samples = _success_rate(view, summary, now, attempts)
    valid, judged = summary.valid_counts(shape.kind) if summary is not None else (0, 0)
    floored = None if time_s is None else max(time_s, MIN_TIME_S)
    # Every field, in order (keywords cost a name match each, 31 per deployment per plan; ``gateway.frozen``).
    return prediction_from_fields(
        ttft.value if ttft else None,  # ttft_s
        1.0 / spt.value if spt else None,  # tokens_per_s
        floored,  # time_s
        cost,  # cost_usd
        success_rate,
        attempts,
        prior,
        bool((ttft and ttft.changed) or (spt and spt.changed)),  # drift
        uncertainty_from_fields(  # uncertainty
            min(MAX_UNCERTAINTY, uncertainty),
            ttft.uncertainty if ttft else MAX_UNCERTAINTY,
            spt.uncertainty if spt else MAX_UNCERTAINTY,
        ),
        uncertainty_from_fields(  # sampling
            min(MAX_UNCERTAINTY, sampling),
            ttft.sampling if ttft else MAX_UNCERTAINTY,
            spt.sampling if spt else MAX_UNCERTAINTY,
        ),
        samples,
        None if newest is None else max(0.0, now - newest),  # age_s
        source,
        ttft.spread if ttft else PRIOR_SIGMA,  # ttft_spread
        spt.source if spt else "none",  # stream_source
        spt.value if spt else None,  # seconds_per_token
        success_samples,
        valid_rate(valid, judged),  # valid_rate
        judged,  # valid_judged
        view.answered if view is not None else 0,  # answers
        overdue,
        late,  # late_first_token
        slow,  # slow_stream
        guessed[1] if guessed is not None else None,  # guessed_seconds_per_token
        view.failure_time() if view is not None else None,  # failure_s
        floored,  # expected_s
        cache.mode,  # cache
        cached,  # cached_tokens
        hit_ratio,
        warm.value if warm is not None else None,  # warm_ttft_s
        1.0 / prefill.value if prefill is not None and prefill.value > 0 else None,  # prefill_tokens_per_s
    )


_ORDER: dict[Source, int] = {"recent": 0, "window": 1, "model": 2, "none": 3}


def _weakest(a: Source, b: Source) -> Source:
    return a if _ORDER[a] >= _ORDER[b] else b


def _metric(
    view: DeploymentView | None,
    summary: DeploymentSummary | None,
    snapshot: StatsSnapshot,
    model: str,
    metric: ViewMetric,
    policy: PolicyConfig,
    now: float,
    *,
    pooled: bool = True,
    memo: PooledHistograms | None = None,
) -> _Value | None:
    """``metric`` (TTFT, seconds per token, end-to-end, ...) from the fast view, else the window, else the
    model's (unless not ``pooled``: a warm first token is a deployment's own or unknown)."""
    window_metric, rate = _WINDOW_RATE[metric]
    histogram = summary.histograms.get(window_metric) if summary is not None else None
    if view is not None:
        estimate = view.estimate(metric)
        if estimate is not None:
            if policy.estimate == "mean":
                value: float | None = estimate.mean
            else:
                value = view.quantile(metric, policy.tps_quantile if rate else policy.ttft_quantile)
            value = value if value is not None else estimate.mean
            extra = 0.0
            if histogram is not None and histogram.count and view.trusts_window(metric, now, histogram.count):
                # No change since the window began: its many answers make a noisy mean (a heavy
                # tail's) precise. It weighs as the answers the recent estimate does not already count
                # (older ones, other replicas'), at most ``WINDOW_BLEND``: a deployment measured on
                # three answers, all in the window, is not judged on them twice.
                long = _histogram_value(histogram, window_metric, policy)
                extra = min(max(0.0, histogram.count - estimate.samples), WINDOW_BLEND)
                if long is not None and long > 0 and extra > 0:
                    long = 1.0 / long if rate else long
                    value = (estimate.samples * value + extra * long) / (estimate.samples + extra)
                else:
                    extra = 0.0
            uncertainty, sampling = estimate.errors(now, STALE_HALF_LIFE_S, extra)
            changed_at = estimate.changed_at
            return _Value(
                value,
                uncertainty,
                sampling,
                estimate.samples + extra,
                "recent",
                changed_at is not None and now - changed_at <= view.window_s,
                estimate.sigma,
            )
    source: Source = "window"
    if (histogram is None or histogram.count == 0) and not pooled:
        return None
    if histogram is None or histogram.count == 0:
        if memo is not None and window_metric in memo:
            histogram = memo[window_metric]
        else:
            histogram = _pooled(snapshot, model, window_metric)
            if memo is not None:
                memo[window_metric] = histogram
        source = "model"
    if histogram is None or histogram.count == 0:
        return None
    value = _histogram_value(histogram, window_metric, policy)
    if value is None or value < 0 or (value == 0 and rate):
        return None
    if rate:
        value = 1.0 / value
    if source == "model":
        return _Value(value, MAX_UNCERTAINTY, MAX_UNCERTAINTY, 0.0, "model")
    samples = min(float(histogram.count), WINDOW_SAMPLES)
    spread = _spread(histogram, histogram.count)
    uncertainty = spread / math.sqrt(samples)
    return _Value(value, uncertainty, uncertainty, samples, "window", spread=spread)


def _pooled(snapshot: StatsSnapshot, model: str, metric: WindowMetric) -> LogHistogram | None:
    """The model's histograms of ``metric`` merged (None: no deployment has one)."""
    histograms = [
        s.histograms[metric] for (m, _), s in snapshot.summaries.items() if m == model and metric in s.histograms
    ]
    return LogHistogram.merged(histograms) if histograms else None


def _histogram_value(histogram: LogHistogram, metric: WindowMetric, policy: PolicyConfig) -> float | None:
    if policy.estimate == "mean":
        # Time is linear in seconds per token, so the expected stream time needs the harmonic mean of tokens/s.
        return histogram.harmonic_mean() if metric in RATES else histogram.mean()
    if metric in RATES:
        # Tokens/s is a floor: a "p95" policy predicts with the speed 95% of responses reached.
        return histogram.quantile(1.0 - policy.tps_quantile)
    return histogram.quantile(policy.ttft_quantile)


def _spread(histogram: LogHistogram, count: int) -> float:
    """The spread of single answers in log units (half the 16th–84th percentile range), shrunk to a prior."""
    low, high = histogram.quantile(0.16), histogram.quantile(0.84)
    observed = math.log(high / low) / 2 if low and high and low > 0 else PRIOR_SIGMA
    blended = (count * observed**2 + PRIOR_WEIGHT * PRIOR_SIGMA**2) / (count + PRIOR_WEIGHT)
    return max(MIN_SIGMA, math.sqrt(blended))


def _success_rate(
    view: DeploymentView | None, summary: DeploymentSummary | None, now: float, attempts: int
) -> tuple[float, float]:
    """(success rate, effective attempts behind it now): the recent attempts' (recency-weighted), with the
    window's as a prior of a few attempts, and ``SUCCESS_PRIOR`` pseudo-successes; ``attempts``: the summary's."""
    ok = summary.outcomes.get("ok", 0) if summary else 0
    recent_ok, recent, effective = view.recent_outcomes(now, STALE_HALF_LIFE_S) if view else (0.0, 0.0, 0.0)
    if recent <= 0:
        return (ok + SUCCESS_PRIOR) / (attempts + SUCCESS_PRIOR), min(float(attempts), WINDOW_SAMPLES)
    weight = min(float(attempts), WINDOW_SAMPLES)
    window_ok = weight * ok / attempts if attempts else 0.0
    rate = (recent_ok + window_ok + SUCCESS_PRIOR) / (recent + weight + SUCCESS_PRIOR)
    return rate, effective
