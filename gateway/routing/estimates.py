"""The router's own fast view of each deployment: its recent answers, weighted by recency.

The stats window (``gateway.stats``) keeps exact percentiles over minutes, for the
leaderboard; a market moves faster than that. Each replica's router also keeps, per
deployment, what it hears in ``attempt_finished`` (no I/O, nothing shared), and estimates
each metric with weights that halve

- every ``half_life_s`` seconds between an answer and the newest one (a deployment sampled
  rarely, e.g. by exploration, is judged by its latest probes), and
- every ``COUNT_HALF_LIFE`` answers newer than it (a busy deployment's estimate follows its
  last few dozen answers, however many arrive per second).

The weighted sums are kept incrementally (O(1) per answer); the last ``MAX_ANSWERS`` answers
are kept too, for quantiles and for starting over after a change.

**Change detection.** Each metric's complete answers since its last change are a run; each new
answer closes windows of the latest ones (up to ``WINDOW_ANSWERS``), and each window's mean log is
compared with the answers' before it, in standard errors of the difference. The spread behind
those errors is the deployment's own long-run one shrunk towards its model's (``spread``): a
deployment seen three times has shown nothing of its tail, and judged by a small spread, one lucky
draw of a heavy-tailed provider reads as a recovery. Each answer counts in that spread at most
``Z_CLIP`` spreads from the centre of those before it (``_for_spread``): the first answer of a change
must not stretch the yardstick the next are judged by. How far a window must be is Bayes' rule on the
time the deployment went unheard before it (``change_threshold``): changes arrive at random, so a
deployment answering every second is held to about four standard errors (it is tested thousands of
times an hour) and one probed after half a minute to about two and a half (a recovered provider's
second look is enough). Two or more answers are needed in one metric (one outlier never changes
it); first token and stream are also judged together, and a window far off in both, the same way,
changes both from a single answer when faster (a *leap*: a recovered provider's first probe; one answer slower
in both is a stall, and a slowdown shows in the answers after it and in the attempts in flight). A change found
in one of them is looked for in the other at the same answer at a lower bar (``SHARED_CHANGE_Z``).
On a change the answers before it stop counting for that metric: a provider whose tokens/s fell
fivefold is judged on its new speed after two answers, not once a long average moves. An answer
far faster than the answers before it (a *surprise*) asks exploration for a second look.

**Uncertainty.** Each estimate has a relative standard error (log units): the answers'
spread over the square root of their effective number, where that evidence loses half its
weight every ``half_life_s`` seconds after the newest answer. An estimate nobody refreshed
grows uncertain; the exploration bonus (``gateway.routing.explore``) is spent on that.

Values: TTFT and end-to-end in seconds, speed as seconds per token (time is linear in it, so
its mean gives the expected stream time). Not thread-safe: one event loop owns it.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from gateway.frozen import positional_maker, quick_init
from gateway.routing.extremes import reach, within
from gateway.routing.scored import MAX_UNCERTAINTY, PRIOR_SIGMA
from gateway.types import StreamProgress

ViewMetric = Literal["ttft_s", "seconds_per_token", "e2e_s", "warm_ttft_s", "prefill_s_per_token", "cold_ttft_s"]
VIEW_METRICS: tuple[ViewMetric, ...] = (
    "ttft_s",
    "seconds_per_token",
    "e2e_s",
    "warm_ttft_s",
    "prefill_s_per_token",
    "cold_ttft_s",
)
"""``warm_ttft_s``: first tokens of prompts mostly served from the provider's cache; ``prefill_s_per_token``:
first-token seconds per uncached prompt token (of prompts long enough for prefill to dominate). With these the
router predicts a cached conversation's next first token where it is cached and where it is not."""
MAX_ANSWERS = 64
COUNT_HALF_LIFE = 16.0
"""Answers after which an older answer's weight has halved."""
SPREAD_HALF_LIFE = 256.0
"""Answers over which the long-run spread of each metric is kept (no decay with time, kept across changes)."""
PRIOR_WEIGHT = 2.0
"""Pseudo-answers of ``PRIOR_SIGMA`` blended into the observed spread."""
SPREAD_PRIOR_WEIGHT = 4.0
"""Pseudo-answers of the model's spread blended into a deployment's long-run spread, for the change test."""
MIN_SIGMA = 0.05
DRIFT_SIGMA = PRIOR_SIGMA
"""How far (log units) a deployment may have drifted one half-life after its newest answer."""
_DRIFT_VARIANCE = DRIFT_SIGMA**2
_MAX_VARIANCE = MAX_UNCERTAINTY**2
Z_CLIP = 3.0
"""A single answer counts at most this many spreads in a change test (one wild outlier is not a change)."""
SPREAD_CLIP_AFTER = 2.0
"""Answers a deployment's spread rests on before it bounds a new answer's share in it (``_for_spread``)."""
WINDOW_ANSWERS = 12
"""The latest answers the change test looks back over (since the last change)."""
CHANGE_EVERY_S = 300.0
"""How often a deployment's speed is assumed to change, on average: the prior of a change in a gap unheard."""
CHANGE_PENALTY = 3.0
"""What a change of unknown size pays in likelihood ratio (``change_threshold``)."""
CHANGE_MIN_Z = 2.5
"""Whatever the gap, a shift of fewer standard errors is not a change."""
SHARED_CHANGE_Z = 2.0
"""A change of first token (or stream) is a change of the other too from the same answer on, if the other's answers
since lean the same way by this many standard errors."""
LEAP_EACH_Z = 1.0
"""In such a joint change, each metric's own run must lean that way by this many standard errors."""
SURPRISE_Z = 2.0
"""An answer this many standard errors faster than the answers before it, in one metric, is a surprise: worth a
second look at once (a look costs one probe; a missed recovery, every request until the next)."""
SURPRISE_JOINT_Z = 2.0
"""... or this many, first token and stream taken together."""
LEAP_METRICS: tuple[ViewMetric, ViewMetric] = ("ttft_s", "seconds_per_token")
FOLLOW_UP_TRIES = 2
"""Second looks asked for by a surprise (a race lost to the first token says little; another may be needed)."""
STALE_WINDOW_SHARE = 0.05
"""After a change, the shared window is blended in again once its answers from before are at most this share."""
OVERDUE_RATIO = 1.5
"""An attempt running this many times longer than predicted, without an answer yet, is overdue."""
OVERDUE_SHARE = 0.5
OVERDUE_MIN = 3
OVERDUE_RECENT = 8
"""The most recent attempts that should be over by now are the ones judged."""
ATTEMPTS_KEPT = 64
SLOW_STREAM_RATIO = 2.0
"""A stream in flight delivering this many times fewer tokens than its deployment's speed predicts is slow."""
SLOW_STREAM_MIN = 3
"""Streams it takes to judge a deployment's speed by them."""
SLOW_STREAM_RECENT = 6
"""The latest streams judged."""
SLOW_STREAM_Z = 2.0
"""Standard errors (their mean's, in the answers' spread) by which they must be slower than its estimate. The bar is
low because the two errors cost so differently: a false alarm sends a second or so of traffic to the next best (a
few percent slower), a missed one sends every request until the slow answers end to a provider five times slower.
Three streams of a provider spreading 0.83 that fell fivefold, judged beside two of its answers from before,
suffice (at 3 standard errors they did not). Simulated over 256 schedules against 3: throughput-drop -0.9 +/- 0.2
points, stable and recovery unchanged within 0.2."""
SLOW_STREAM_TOKENS = 24.0
"""A stream is judged once its deployment's speed would have delivered this many tokens since its first."""
SLOW_STREAM_MIN_S = 0.3
"""... and not before this long after its first token (chunks arrive in bursts)."""
BYTES_PER_TOKEN_ANSWERS = 8.0
"""Answers over which a deployment's stream bytes per output token is averaged (its events' envelope)."""
TYPICAL_BYTES_PER_TOKEN: Mapping[str, float] = {
    "chat": 150.0,
    "completions": 150.0,
    "responses": 250.0,
    "messages": 60.0,
}
"""Stream bytes per output token, taken before any stream of the model has ended: a chat chunk is ~150-250 bytes of
envelope around one or two tokens, a Responses event half as much again, an Anthropic delta ~110 bytes around a
few. Within twice the truth either way: a guess that tells 40 tokens/s from 250, not one to rank by
(``gateway.routing.predict.Prediction.guessed_seconds_per_token``)."""


@quick_init
@dataclass(frozen=True, slots=True)
class Observation:
    """One finished attempt as the router heard it; None where it measured nothing."""

    at: float
    ttft_s: float | None = None
    seconds_per_token: float | None = None
    e2e_s: float | None = None
    ok: bool | None = True
    """True: a complete answer; False: the provider failed; None: it says nothing of the provider."""
    failed_after_s: float | None = None
    """For a failure: how long the attempt took to fail."""
    warm_ttft_s: float | None = None
    prefill_s_per_token: float | None = None
    cold_ttft_s: float | None = None
    started_at: float | None = None
    """When the attempt went out: an answer that started before a change's first answer measured the old speed."""

    def value(self, metric: ViewMetric) -> float | None:
        if metric == "ttft_s":
            return self.ttft_s
        if metric == "seconds_per_token":
            return self.seconds_per_token
        if metric == "warm_ttft_s":
            return self.warm_ttft_s
        if metric == "prefill_s_per_token":
            return self.prefill_s_per_token
        if metric == "cold_ttft_s":
            return self.cold_ttft_s
        return self.e2e_s


@quick_init
@dataclass(frozen=True, slots=True)
class Estimate:
    """One metric of one deployment, from its recent answers. Usage::

    estimate.mean                          # recency-weighted mean
    estimate.uncertainty(now, 10.0)        # relative standard error of that mean, now
    """

    mean: float
    sigma: float
    """Spread of single answers, log units (shrunk towards the deployment's long-run spread while they are few)."""
    samples: float
    """Effective number of answers behind it (Kish: (Σw)² / Σw²)."""
    newest_at: float
    """When its newest answer (or a confirmation of it) arrived."""
    changed_at: float | None = None
    """When a change was last detected (the answers before it stopped counting)."""
    log_center: float = 0.0
    """The weighted mean of the answers' logs: where a single answer is judged from (a skewed metric's mean is
    above most of its answers)."""

    def age(self, now: float) -> float:
        return max(0.0, now - self.newest_at)

    def sampling(self, extra_samples: float = 0.0) -> float:
        """Relative standard error of the mean (log units) that the answers' number and spread leave."""
        return min(MAX_UNCERTAINTY, self.sigma / math.sqrt(self.samples + extra_samples))

    def uncertainty(self, now: float, half_life_s: float, extra_samples: float = 0.0) -> float:
        """The sampling error, and what the deployment may have drifted since its newest answer.

        The drift is a random walk whose variance doubles every ``half_life_s``, from
        ``DRIFT_SIGMA`` squared after one half-life: it does not depend on how many answers came
        before (a provider measured a thousand times a minute ago may have changed as much as one
        measured once), so every deployment's estimate goes stale at the same pace.
        """
        return self.errors(now, half_life_s, extra_samples)[0]

    def errors(self, now: float, half_life_s: float, extra_samples: float = 0.0) -> tuple[float, float]:
        """(``uncertainty``, ``sampling``) at once, the same arithmetic inline: a prediction reads both of each
        metric, on every plan."""
        sampling = min(MAX_UNCERTAINTY, self.sigma / math.sqrt(self.samples + extra_samples))
        age = max(0.0, now - self.newest_at)
        drift = _DRIFT_VARIANCE * (2.0 ** (age / half_life_s) - 1.0) if half_life_s > 0 else 0.0
        return min(MAX_UNCERTAINTY, math.sqrt(sampling**2 + min(drift, _MAX_VARIANCE))), sampling


estimate_from_fields = positional_maker(Estimate)
"""``Estimate(*values)``, every field given in order (``gateway.frozen``): one per metric after each answer."""
observation_from_fields = positional_maker(Observation)
"""``Observation(*values)``, every field given in order: one per answer the router hears."""


@dataclass(slots=True)
class _Sums:
    """Recency-weighted sums of one metric's values, decayed as answers arrive."""

    at: float = 0.0
    """Time of the newest value: every weight is relative to it."""
    weight: float = 0.0
    squares: float = 0.0
    values: float = 0.0
    logs: float = 0.0
    log_squares: float = 0.0

    def __init__(  # the generated one's, written out: compiled, it stores each field directly (not interpreted)
        self,
        at: float = 0.0,
        weight: float = 0.0,
        squares: float = 0.0,
        values: float = 0.0,
        logs: float = 0.0,
        log_squares: float = 0.0,
    ) -> None:
        self.at = at
        self.weight = weight
        self.squares = squares
        self.values = values
        self.logs = logs
        self.log_squares = log_squares

    def add(self, at: float, value: float, half_life_s: float, count_half_life: float = COUNT_HALF_LIFE) -> None:
        """Count ``value``; ``half_life_s`` 0: no decay with time (only with the answers that follow)."""
        if self.weight > 0:
            by_time = max(0.0, at - self.at) / half_life_s if half_life_s > 0 else 0.0
            decay = 2.0 ** (-by_time - 1.0 / count_half_life)
            self.weight *= decay
            self.squares *= decay * decay
            self.values *= decay
            self.logs *= decay
            self.log_squares *= decay
        log = math.log(value)
        self.at = max(self.at, at)
        self.weight += 1.0
        self.squares += 1.0
        self.values += value
        self.logs += log
        self.log_squares += log * log

    def estimate(self, confirmed_at: float | None, changed_at: float | None, prior: float = PRIOR_SIGMA) -> Estimate:
        samples = self.weight * self.weight / self.squares
        return estimate_from_fields(  # every field, in order: rebuilt on the plan after each answer
            self.values / self.weight,  # mean
            self.sigma(samples, prior),  # sigma
            samples,
            max(self.at, confirmed_at or self.at),  # newest_at
            changed_at,
            self.logs / self.weight,  # log_center
        )

    def sigma(self, samples: float | None = None, prior: float = PRIOR_SIGMA) -> float:
        """The spread of single values (log units), shrunk towards ``prior`` while they are few: an
        ``Estimate``'s ``sigma`` without the rest of it."""
        effective, variance = self.log_variance()
        if samples is None:
            samples = effective
        blended = (samples * variance + PRIOR_WEIGHT * prior**2) / (samples + PRIOR_WEIGHT)
        return max(MIN_SIGMA, math.sqrt(blended))

    def log_variance(self) -> tuple[float, float]:
        """(effective number of values, weighted variance of their logs): what every spread is made of."""
        log_mean = self.logs / self.weight
        return self.weight * self.weight / self.squares, max(0.0, self.log_squares / self.weight - log_mean * log_mean)


@dataclass(slots=True)
class _Attempt:
    started_at: float
    predicted_s: float | None
    predicted_first_token_s: float | None = None
    """A streamed attempt's predicted first token (None: not streamed, or nothing predicted)."""
    ended_at: float | None = None
    progress: StreamProgress | None = None
    """Its stream, once its first token came (``streaming``), until it ended."""
    api: str = ""
    """Its stream's API (each has its own envelope of bytes per token)."""
    streaming_at: float | None = None
    bytes_at_first: int = 0
    streamed_bytes: int = 0
    """Once it ended: the bytes its stream delivered after its first token."""

    def __init__(  # the generated one's, written out: compiled (``gateway.native``), it stores each field directly
        self,
        started_at: float,
        predicted_s: float | None,
        predicted_first_token_s: float | None = None,
        ended_at: float | None = None,
        progress: StreamProgress | None = None,
        api: str = "",
        streaming_at: float | None = None,
        bytes_at_first: int = 0,
        streamed_bytes: int = 0,
    ) -> None:
        self.started_at = started_at
        self.predicted_s = predicted_s
        self.predicted_first_token_s = predicted_first_token_s
        self.ended_at = ended_at
        self.progress = progress
        self.api = api
        self.streaming_at = streaming_at
        self.bytes_at_first = bytes_at_first
        self.streamed_bytes = streamed_bytes

    def streamed(self, now: float) -> tuple[float, int]:
        """How long its stream has run since its first token, and the bytes it delivered in that time (up to its
        end, once it ended). Only for an attempt whose first token came (``streaming_at`` set)."""
        since = self.streaming_at or 0.0
        if self.progress is not None:
            return now - since, self.progress.received_bytes - self.bytes_at_first
        return (self.ended_at or now) - since, self.streamed_bytes


@dataclass(slots=True)
class _Run:
    """One metric's complete answers since its last change: the sum and number of their logs, and the latest.

    The latest answers are kept as four lists side by side, oldest first (at most ``WINDOW_ANSWERS`` + 1 each), not as
    a deque of tuples: compiled, ``shifts`` then reads native list items by index, with no copy of the deque and no
    tuple made per answer nor unpacked per window."""

    total: float = 0.0
    count: int = 0
    seqs: list[int] = field(default_factory=list)
    """Sequence numbers of the latest answers."""
    logs: list[float] = field(default_factory=list)
    """Their logs."""
    clipped: list[float] = field(default_factory=list)
    """Their logs clipped to ``Z_CLIP`` spreads of the run's mean before each."""
    ats: list[float] = field(default_factory=list)
    """Their arrival times."""

    def __init__(self, total: float = 0.0, count: int = 0) -> None:
        """Written out (compiled, it stores each field directly; the generated one is interpreted): a run starts
        with no latest answers (every run is made empty, on a metric's first answer and on each change)."""
        self.total = total
        self.count = count
        self.seqs = []
        self.logs = []
        self.clipped = []
        self.ats = []

    def add(self, seq: int, log: float, at: float, sigma: float) -> None:
        clip = Z_CLIP * sigma
        mean = self.total / self.count if self.count else log
        self.total += log
        self.count += 1
        self.seqs.append(seq)
        self.logs.append(log)
        self.clipped.append(_bounded(log, mean, clip))
        self.ats.append(at)
        if len(self.seqs) > WINDOW_ANSWERS + 1:  # the oldest goes, as a deque's of that length would
            del self.seqs[0]
            del self.logs[0]
            del self.clipped[0]
            del self.ats[0]

    @property
    def latest(self) -> list[tuple[int, float, float, float]]:
        """(sequence number, log, clipped log, arrival time) of the latest answers, oldest first (for tests)."""
        return list(zip(self.seqs, self.logs, self.clipped, self.ats, strict=True))

    def shifts(self, sigma: float) -> list[float]:
        """For each window of the latest answers, newest first (one answer, two, ...), while answers before it
        remain: how far its mean log is from theirs in standard errors (``window`` gives its first answer and the
        gap before it).

        A window of two or more counts each answer clipped (no single outlier makes a change); one answer alone
        counts as it came (it can change first token and stream together only, where a lucky outlier rarely lands).
        """
        shifts: list[float] = []
        raw = clipped = 0.0
        count, total, logs, bounded = self.count, self.total, self.logs, self.clipped
        kept = len(logs)
        for length in range(1, kept):  # newest first, all but the oldest (the newest before a window stays)
            before = count - length
            if before < 1:
                break
            log = logs[kept - length]
            raw += log
            clipped += bounded[kept - length]
            base = (total - raw) / before
            deviation = (log if length == 1 else clipped) - length * base
            shifts.append(deviation / length / (sigma * math.sqrt(1.0 / length + 1.0 / before)))
        return shifts

    def window(self, index: int) -> tuple[int, float]:
        """The ``index``-th window of ``shifts`` (0: the newest answer alone): its first answer's sequence number,
        and how long the deployment went unheard between the newest answer before it and that one."""
        ats = self.ats
        first = len(ats) - 1 - index
        return self.seqs[first], ats[first] - ats[first - 1]

    def shift_since(self, since: int, sigma: float) -> float | None:
        """How far the mean log of its answers from ``since`` on is from theirs before, in standard errors (None:
        none on one side, or the answers from ``since`` are no longer all among the latest)."""
        seqs = self.seqs
        latest = [(seq, log) for seq, log in zip(seqs, self.logs, strict=True) if seq >= since]
        after = len(latest)
        before = self.count - after
        if after == 0 or before < 1 or (after == len(seqs) and seqs[0] > since):
            return None
        window = sum(log for _, log in latest)
        base = (self.total - window) / before
        return (window / after - base) / (sigma * math.sqrt(1.0 / after + 1.0 / before))


def _awaits_first(attempt: _Attempt) -> bool:
    """Whether an attempt in flight still waits for a first token it was predicted to have (``awaiting_first``)."""
    return attempt.predicted_first_token_s is not None and attempt.streaming_at is None


def _bounded(log: float, centre: float, clip: float) -> float:
    """``log`` moved to within ``clip`` of ``centre``: a far answer counts as far, never as wild (``Z_CLIP``)."""
    return centre + max(-clip, min(clip, log - centre))


def change_threshold(gap_s: float) -> float:
    """How many standard errors a shift must reach to be taken for a change, after ``gap_s`` unheard.

    Bayes' rule with changes arriving at random, one per ``CHANGE_EVERY_S`` on average: the chance that
    one came in the gap is its prior, and a shift of z standard errors has a likelihood ratio of about
    exp(z² / 2) / ``CHANGE_PENALTY`` (a change of unknown size pays for fitting it). A change is taken
    when its posterior odds pass even: a deployment answering every second must show ~4 standard errors
    (thousands of tests an hour must not raise false alarms), one probed after half a minute unheard
    ~2.7 (a recovered provider's second look shows it). Never below ``CHANGE_MIN_Z``.
    """
    prior = -math.expm1(-max(gap_s, 1e-3) / CHANGE_EVERY_S)
    odds = prior / max(1e-12, 1.0 - prior)
    return max(CHANGE_MIN_Z, math.sqrt(max(0.0, 2.0 * math.log(CHANGE_PENALTY / odds))))


@dataclass
class DeploymentView:
    """One deployment's recent answers on this replica and what they say. Usage::

    view = DeploymentView(half_life_s=10.0)
    view.add(Observation(at=now, ttft_s=0.4, seconds_per_token=0.01))
    view.estimate("ttft_s").mean
    """

    half_life_s: float
    window_s: float = 300.0
    """The shared stats window's length: after a change, the window is stale this long."""
    answers: deque[tuple[int, Observation]] = field(default_factory=lambda: deque(maxlen=MAX_ANSWERS))
    seq: int = 0
    answered: int = 0
    """Complete answers heard (confirmations of a lost race excluded)."""
    sums: dict[ViewMetric, _Sums] = field(default_factory=dict)
    spreads: dict[ViewMetric, _Sums] = field(default_factory=dict)
    """Each metric's values over many answers: its long-run spread, against which a surprise is judged."""
    failures: _Sums = field(default_factory=_Sums)
    """How long failed attempts took to fail."""
    outcomes: _Sums = field(default_factory=_Sums)
    """Successes (value 2) and failures (value 1): the weighted count of each gives the success rate."""
    confirmed_at: dict[ViewMetric, float] = field(default_factory=dict)
    changed_at: dict[ViewMetric, float] = field(default_factory=dict)
    restart_seq: dict[ViewMetric, int] = field(default_factory=dict)
    """Per metric, the first answer that still counts (set by a detected change)."""
    regime_started_at: dict[ViewMetric, float] = field(default_factory=dict)
    """Per metric, when the first answer of its last change went out: an answer started before it, finishing later
    (a long stream from before a recovery), measured the old speed and is left out of the new one."""
    window_at_change: dict[ViewMetric, int] = field(default_factory=dict)
    """Per metric, how many answers the shared window held when the change was detected."""
    runs: dict[ViewMetric, _Run] = field(default_factory=dict)
    """Per metric, its complete answers since its last change, for the change test."""
    _direction: dict[ViewMetric, float] = field(default_factory=dict)
    """Per metric, which way its last change went (-1 faster, +1 slower)."""
    prior_spreads: dict[ViewMetric, float] = field(default_factory=dict)
    """Per metric, the spread of the model's other deployments: this one's until it has shown its own."""
    follow_ups: int = 0
    """An answer surprised its estimate: the next requests that can (this many, at most) should measure it again."""
    probed_at: float = -math.inf
    """When exploration last chose it."""
    stream_probed: bool = False
    """It had its one free probe for a stream never measured (``gateway.routing.explore``); further ones are paid."""
    _estimates: dict[ViewMetric, Estimate | None] = field(default_factory=dict)
    attempts: deque[_Attempt] = field(default_factory=lambda: deque(maxlen=ATTEMPTS_KEPT))
    pending: dict[int, _Attempt] = field(default_factory=dict)
    """Attempts in flight (by the caller's token), oldest first."""
    awaiting_first: int = 0
    """Attempts in ``pending`` with a predicted first token that has not come yet: kept as they start, stream and
    end, so that ``late_first_token`` need not walk every attempt in flight on every plan."""
    bytes_per_token: dict[str, _Sums] = field(default_factory=dict)
    """Per API, its streams' bytes after the first token per output token: how a stream in flight's bytes count as
    tokens (an API's events have their own envelope: a Responses event is twice a chat chunk)."""

    def started(
        self, token: int, at: float, predicted_s: float | None, predicted_first_token_s: float | None = None
    ) -> None:
        """An attempt went out, predicted to take ``predicted_s`` (its first token ``predicted_first_token_s``)."""
        attempt = _Attempt(at, predicted_s, predicted_first_token_s)
        replaced = self.pending.get(token)
        if replaced is not None and _awaits_first(replaced):
            self.awaiting_first -= 1
        if predicted_first_token_s is not None:
            self.awaiting_first += 1
        self.pending[token] = attempt
        self.attempts.append(attempt)

    def streaming(self, token: int, at: float, progress: StreamProgress) -> None:
        """The attempt's first token came at ``at``; ``progress`` counts its stream's bytes from then on."""
        attempt = self.pending.get(token)
        if attempt is not None:
            if _awaits_first(attempt):
                self.awaiting_first -= 1
            attempt.progress, attempt.streaming_at, attempt.bytes_at_first = progress, at, progress.received_bytes
            attempt.api = progress.api

    def ended(self, token: int, at: float, output_tokens: int | None = None) -> float | None:
        """The attempt is over; returns when it started (None if it was never started here).

        A complete stream of ``output_tokens`` teaches the deployment's bytes per token (its
        events' envelope: ids, model, ...), with which ``slow_stream`` reads a stream in flight.
        """
        attempt = self.pending.pop(token, None)
        if attempt is None:
            return None
        if _awaits_first(attempt):
            self.awaiting_first -= 1
        attempt.ended_at = at
        if attempt.progress is not None:
            streamed = attempt.streamed_bytes = attempt.streamed(at)[1]
            attempt.progress = None
            if output_tokens is not None and output_tokens >= 2 and streamed > 0:
                envelope = self.bytes_per_token.get(attempt.api)
                if envelope is None:  # made only when missing (a ``setdefault`` made one per stream to throw away)
                    envelope = self.bytes_per_token[attempt.api] = _Sums()
                envelope.add(at, streamed / (output_tokens - 1), 0.0, BYTES_PER_TOKEN_ANSWERS)
            elif output_tokens is None:
                attempt.streaming_at = None  # cut short or failed: its pace says nothing
        return attempt.started_at

    def per_token(self, api: str) -> float | None:
        """Its ``api`` streams' bytes per output token (None: none of them finished yet)."""
        envelope = self.bytes_per_token.get(api)
        return envelope.values / envelope.weight if envelope is not None and envelope.weight > 0 else None

    def in_flight(
        self, now: float, bytes_per_token: Mapping[str, float] | None = None
    ) -> tuple[float, float | None] | None:
        """The median first token and seconds per token of its streams running now, or None when none runs.

        For a deployment that has not finished an answer yet (its first probe, a long one): its first
        token came already, and its stream shows its pace within ``SLOW_STREAM_MIN_S``; waiting for the
        answer to end would route every long request meanwhile by the model's average. Its bytes read as
        tokens by its own bytes per token of that API when known, else by ``bytes_per_token`` (the model's
        others', by API): the seconds per token is None when neither is known.
        """
        firsts, paces = [], []
        for attempt in self.pending.values():
            since = attempt.streaming_at
            if attempt.progress is None or since is None:
                continue
            firsts.append(since - attempt.started_at)
            streamed_s, streamed = attempt.streamed(now)
            per_token = self.per_token(attempt.api) or (bytes_per_token or {}).get(attempt.api)
            if per_token and streamed_s >= SLOW_STREAM_MIN_S:
                tokens = streamed / per_token
                if tokens >= 1.0:
                    paces.append(streamed_s / tokens)
        if not firsts:
            return None
        return statistics.median(firsts), statistics.median(paces) if paces else None

    def slow_stream(self, now: float) -> float:
        """How much slower than its estimated speed its latest streams deliver (1: not slower).

        Answers arrive when they end: a provider whose tokens/s fell fivefold says nothing for a
        whole slow answer, and its first tokens come as fast as before. Its streams in flight say
        it within a second: the bytes each has delivered since its first token, read as tokens by
        the deployment's own bytes per token, give its seconds per token so far. The
        ``SLOW_STREAM_RECENT`` streams that started last (at least ``SLOW_STREAM_MIN_S`` and
        ``SLOW_STREAM_TOKENS`` predicted tokens ago), ended ones included with their whole pace
        (streams still running are the slow ones of a healthy provider: the fast ones ended), are
        judged against the estimate in units of its answers' spread: when their mean is
        ``SLOW_STREAM_Z`` standard errors and ``SLOW_STREAM_RATIO`` times slower, the geometric
        mean ratio of those still running multiplies its seconds per token (a lower bound: they
        are not done).
        """
        if not self.pending or not self.bytes_per_token:
            return 1.0
        speed = self.estimate("seconds_per_token")
        if speed is None:
            return 1.0
        settle_s = max(SLOW_STREAM_MIN_S, SLOW_STREAM_TOKENS * speed.mean)
        logs = []
        running = []
        for attempt in reversed(self.attempts):
            since = attempt.streaming_at
            per_token = self.per_token(attempt.api) if since is not None else None
            if since is None or per_token is None or now - since < settle_s:
                continue
            streamed_s, streamed = attempt.streamed(now)
            log = math.log(max(streamed_s, 1e-6) / max(1.0, streamed / per_token)) - speed.log_center
            logs.append(log)
            if attempt.progress is not None:
                running.append(log)
            if len(logs) >= SLOW_STREAM_RECENT:
                break
        if not running or len(logs) < SLOW_STREAM_MIN:
            return 1.0
        shift = sum(logs) / len(logs)
        sigma = max(speed.sigma, self.spread("seconds_per_token"))
        if shift < math.log(SLOW_STREAM_RATIO) or shift * math.sqrt(len(logs)) < SLOW_STREAM_Z * sigma:
            return 1.0
        # How much slower: as its streams still running show (the ended ones judged beside them may predate it).
        return math.exp(max(shift, sum(running) / len(running)))

    def overdue(self, now: float) -> float:
        """How much slower than predicted its attempts in flight show it to be (1: not overdue).

        Answers arrive when they end, so a provider that just slowed down fivefold says nothing
        for a whole slow answer. Its attempts still in flight say it sooner: of the recent
        attempts that would be over by now had they taken ``OVERDUE_RATIO`` times their
        prediction, a healthy provider has finished nearly all (a heavy tail keeps a few), a
        degraded one almost none. When at least ``OVERDUE_MIN`` and ``OVERDUE_SHARE`` of them are
        still running, the median of their elapsed-to-predicted ratios (a lower bound on how much
        slower they are) multiplies its predicted time.
        """
        if len(self.pending) < OVERDUE_MIN:
            return 1.0
        oldest = next(iter(self.pending.values()))
        if oldest.predicted_s is None or now - oldest.started_at < OVERDUE_RATIO * oldest.predicted_s:
            return 1.0
        return self._late_share(now, lambda a: a.predicted_s, lambda a: a.ended_at is None)

    def late_first_token(self, now: float) -> float:
        """How much later than predicted its streamed attempts in flight show its first token to be (1: not late).

        ``overdue`` judges an attempt by its whole predicted time, which for a long answer is mostly its
        stream: a provider whose first token just went from 0.1 s to 1.3 s keeps looking on time for
        seconds, and every conversation bound to it sends its next turn there meanwhile. A first token
        has a prediction of its own, and its arrival is a signal of its own (``streaming``): of the
        recent streamed attempts that should have had it by now (``OVERDUE_RATIO`` times its
        prediction), a healthy provider has nearly all, a heavy tail keeps a few. When at least
        ``OVERDUE_MIN`` and ``OVERDUE_SHARE`` of them still wait, the median of their elapsed-to-predicted
        ratios (a lower bound on how much later it has become) multiplies its predicted first token.
        """
        if self.awaiting_first < OVERDUE_MIN:
            return 1.0
        return self._late_share(
            now, lambda a: a.predicted_first_token_s, lambda a: a.streaming_at is None and a.ended_at is None
        )

    def _late_share(
        self, now: float, predicted_of: Callable[[_Attempt], float | None], waiting: Callable[[_Attempt], bool]
    ) -> float:
        """What ``overdue`` and ``late_first_token`` share: of the ``OVERDUE_RECENT`` latest attempts due by
        now (``OVERDUE_RATIO`` times ``predicted_of`` them), when at least ``OVERDUE_MIN`` and
        ``OVERDUE_SHARE`` are still ``waiting``, the median of their elapsed-to-predicted ratios (else 1)."""
        due = 0
        ratios = []
        for attempt in reversed(self.attempts):
            predicted = predicted_of(attempt)
            if predicted is None or predicted <= 0 or now - attempt.started_at < OVERDUE_RATIO * predicted:
                continue
            due += 1
            if waiting(attempt):
                ratios.append((now - attempt.started_at) / predicted)
            if due >= OVERDUE_RECENT:
                break
        if len(ratios) < OVERDUE_MIN or len(ratios) < OVERDUE_SHARE * due:
            return 1.0
        ratios.sort()
        return ratios[len(ratios) // 2]

    @property
    def newest_at(self) -> float | None:
        return self.answers[-1][1].at if self.answers else None

    def add(self, observation: Observation) -> None:
        """Count one answer, after checking each of its values for a change (and for a surprise)."""
        self.seq += 1
        self.answers.append((self.seq, observation))
        changes: dict[ViewMetric, int] = {}
        surprised = False
        # Each value once (a restart below moves only its own metric's regime), and each metric's spread as it
        # stood before this answer: the tests, the shared change and ``_for_spread`` all read that one.
        values = self._values(observation)
        spreads: dict[ViewMetric, float] = {}
        if observation.ok is True:
            tests = self._tests(values, observation.at, spreads)
            changes = self._changes(tests, spreads)
            surprised = _surprising(tests)
        for metric, value in values:
            sums = self.sums.get(metric) or self.sums.setdefault(metric, _Sums())
            spread = self.spreads.get(metric) or self.spreads.setdefault(metric, _Sums())
            spread.add(observation.at, self._for_spread(metric, value, spreads.get(metric)), 0.0, SPREAD_HALF_LIFE)
            since = changes.get(metric)
            if since is not None:
                self._restart(metric, since, observation.at)
            else:
                sums.add(observation.at, value, self.half_life_s)
            self._estimates.pop(metric, None)
        if observation.ok is not None:
            self.outcomes.add(observation.at, 2.0 if observation.ok else 1.0, self.half_life_s)
        if observation.failed_after_s is not None:
            self.failures.add(observation.at, max(observation.failed_after_s, 1e-3), self.half_life_s)
        if observation.ok:
            self.answered += 1
            leap = any(since == self.seq for since in changes.values())
            # Faster than thought (a surprise, or a leap): it may be the better one now, and a deployment
            # that does not win the traffic that would show it is only seen again by exploration. Otherwise
            # the second look came back unsurprising, or agreed (a change): no more looks. A slower
            # surprise needs none: its traffic, if it has any, gives one.
            self.follow_ups = FOLLOW_UP_TRIES if leap or (surprised and not changes) else 0

    def _for_spread(self, metric: ViewMetric, value: float, spread: float | None = None) -> float:
        """``value`` as it counts in the deployment's spread: at most ``Z_CLIP`` spreads from the centre of the
        answers before it (once there are ``SPREAD_CLIP_AFTER`` of them).

        The spread is the yardstick the next answers are judged by. Counted whole, the first answer of a change
        stretches it: a provider back from a slowdown (40 tokens/s, its answers spreading 0.35) that streams one
        answer at 385 tokens/s moved its spread to 0.59, its second fast answer read 2.6 standard errors instead
        of 4.4, and the end of the slowdown was taken 13 s later (simulated, the stress market ``dip``: -1.1 points
        over 160 schedules, the other markets within noise). Bounded, one far answer widens the spread a little, as
        a tail would, and the next ones still show the change. ``spread``: ``spread(metric)``, if already known.
        """
        kept = self.spreads.get(metric)
        if kept is None or kept.weight < SPREAD_CLIP_AFTER:
            return value
        if spread is None:
            spread = self.spread(metric)
        return math.exp(_bounded(math.log(value), kept.logs / kept.weight, Z_CLIP * spread))

    def _values(self, observation: Observation) -> list[tuple[ViewMetric, float]]:
        """``observation``'s positive values that count (``_value``), in ``VIEW_METRICS``' order: each metric is the
        name of its field, read directly (an ``Observation`` is a Python class: a method call per metric costs more
        than the read), and the answer's start is read once."""
        started = observation.started_at
        regimes = self.regime_started_at
        values: list[tuple[ViewMetric, float]] = []
        for metric in VIEW_METRICS:
            value: float | None = getattr(observation, metric)
            if value is not None and value > 0 and (started is None or not started < regimes.get(metric, -math.inf)):
                values.append((metric, value))
        return values

    def _value(self, observation: Observation, metric: ViewMetric) -> float | None:
        """``observation``'s value of ``metric``, unless it went out before the metric's last change began."""
        started = observation.started_at
        if started is not None and started < self.regime_started_at.get(metric, -math.inf):
            return None
        return observation.value(metric)

    def confirm(self, metric: ViewMetric, at_least: float, now: float) -> None:
        """A lower bound on ``metric`` (a race this deployment lost): news only if the estimate is lower.

        Consistent with the estimate, it only refreshes the estimate's age (it still holds);
        above it, it counts as an answer of that value (it is at least that slow).
        """
        estimate = self.estimate(metric)
        if estimate is not None and at_least <= estimate.mean:
            self.confirmed_at[metric] = now
            self._estimates.pop(metric, None)
            return
        self.add(Observation(at=now, ok=None, **{metric: at_least}))

    def spread(self, metric: ViewMetric) -> float:
        """The spread of single answers of ``metric`` (log units) a new answer is judged against.

        Its long-run spread (``SPREAD_HALF_LIFE`` answers, kept across changes), shrunk towards the
        model's (``prior_spreads``: its other deployments', set by the router) while its own answers
        are few: a deployment measured twice has shown next to nothing of its tail, and judged by a
        small spread, one lucky draw of a heavy-tailed provider reads as a recovery.
        """
        prior = self.prior_spreads.get(metric, PRIOR_SIGMA)
        spread = self.spreads.get(metric)
        if spread is None or spread.weight <= 0:
            return prior
        samples, variance = spread.log_variance()
        blended = (samples * variance + SPREAD_PRIOR_WEIGHT * prior * prior) / (samples + SPREAD_PRIOR_WEIGHT)
        # Never below ``PRIOR_SIGMA``: a provider that looks steady over a few dozen answers may still jitter.
        return max(PRIOR_SIGMA, math.sqrt(blended))

    def _tests(
        self, values: Iterable[tuple[ViewMetric, float]], at: float, spreads: dict[ViewMetric, float]
    ) -> dict[ViewMetric, list[float]]:
        """Each value of a complete answer joins its metric's run, and the run's tests are read: for each
        window of the latest answers, its standardised shift (``_Run.shifts``). Each metric's spread, read for its
        test, is left in ``spreads``."""
        found: dict[ViewMetric, list[float]] = {}
        for metric, value in values:
            run = self.runs.get(metric)
            if run is None:
                run = self.runs[metric] = _Run()
            spread = spreads[metric] = self.spread(metric)
            run.add(self.seq, math.log(value), at, spread)
            found[metric] = run.shifts(spread)
        return found

    def _changes(
        self, tests: Mapping[ViewMetric, list[float]], spreads: Mapping[ViewMetric, float]
    ) -> dict[ViewMetric, int]:
        """The metrics the latest answers show changed, each with the first answer of the change.

        The latest answers of a metric (a window of up to ``WINDOW_ANSWERS``) are compared with its
        answers before them since its last change: the difference of their mean logs over its standard
        error (the spread, ``spread``, is the deployment's long-run one, or the model's while it has
        shown little) is a standard normal while nothing changed. A window of two answers or more past
        ``change_threshold`` of the time the deployment went unheard before it is a change (each answer
        counts at most ``Z_CLIP`` spreads: no single outlier makes one). First token and stream are also
        judged together: a provider that really changed shows it in both (a recovered one: much faster
        in both on its first probe), where a lucky draw of a heavy tail rarely does. A window whose two
        shifts, summed, pass the threshold (each leaning that way by ``LEAP_EACH_Z``) changes both, one
        answer sufficing.
        """
        found: dict[ViewMetric, tuple[int, float, float]] = {}
        for metric, shifts in tests.items():
            if not shifts or within(shifts, CHANGE_MIN_Z):
                continue  # no window is that far (a NaN, which max and min may pass over, never is)
            tested = self.runs[metric]
            for i in range(1, len(shifts)):  # windows of two answers or more
                shift = shifts[i]
                if abs(shift) < CHANGE_MIN_Z:
                    continue
                since, gap = tested.window(i)
                excess = abs(shift) - change_threshold(gap)
                if excess >= 0 and (metric not in found or excess > found[metric][1]):
                    found[metric] = (since, excess, math.copysign(1.0, shift))
        first, stream = (tests.get(m) for m in LEAP_METRICS)
        if first and stream and _may_leap(first, stream):
            first_run, stream_run = (self.runs[m] for m in LEAP_METRICS)
            for length, (a, b) in enumerate(zip(first, stream, strict=False), start=1):
                since, gap = first_run.window(length - 1)
                if since != stream_run.window(length - 1)[0]:
                    break  # an answer measured in one metric only: the windows differ from here on
                joint = (a + b) / math.sqrt(2.0)
                if abs(joint) < CHANGE_MIN_Z or (length == 1 and joint > 0):
                    # One answer slower in both is a hiccup (a stall slows a whole answer), not a change: a
                    # slowdown shows in the next answers, and sooner in the attempts still in flight.
                    continue
                lean = min(a * math.copysign(1.0, joint), b * math.copysign(1.0, joint))
                excess = abs(joint) - change_threshold(gap)
                if excess >= 0 and lean >= LEAP_EACH_Z:
                    for metric in LEAP_METRICS:
                        if metric not in found or found[metric][1] < excess:
                            found[metric] = (since, excess, math.copysign(1.0, joint))
        # A change found in first token or stream is looked for in the other at the same answer, at a lower
        # bar: a provider that changed one has likely changed both (a recovery shows in its first token at
        # once, in a heavy-tailed stream only over several answers).
        pairs: tuple[tuple[ViewMetric, ViewMetric], ...] = (LEAP_METRICS, (LEAP_METRICS[1], LEAP_METRICS[0]))
        for looked, changed in pairs:
            point = found[changed][0] if changed in found else self.restart_seq.get(changed)
            run = self.runs.get(looked)
            if point is None or looked in found or run is None or point <= self.restart_seq.get(looked, 0):
                continue
            spread = spreads.get(looked)
            moved = run.shift_since(point, spread if spread is not None else self.spread(looked))
            way = found[changed][2] if changed in found else self._direction.get(changed, 0.0)
            if moved is not None and moved * way >= SHARED_CHANGE_Z:
                found[looked] = (point, 0.0, way)
        for metric, (_, _, way) in found.items():
            self._direction[metric] = way
        return {metric: since for metric, (since, _, _) in found.items()}

    def _restart(self, metric: ViewMetric, since: int, now: float) -> None:
        """Forget ``metric``'s answers before ``since``: rebuild its estimate, its spread and its change test
        from the run that showed the change (a spread kept across a change would mix the two regimes)."""
        sums = self.sums[metric] = _Sums()
        spread = self.spreads[metric] = _Sums()
        run = self.runs[metric] = _Run()
        sigma = self.prior_spreads.get(metric, PRIOR_SIGMA)  # its spread starts over too: the model's, until its own
        first = next((o.started_at for seq, o in self.answers if seq == since), None)
        if first is not None:
            self.regime_started_at[metric] = first
        for seq, observation in self.answers:
            value = self._value(observation, metric)
            if seq >= since and value is not None and value > 0:
                sums.add(observation.at, value, self.half_life_s)
                spread.add(observation.at, self._for_spread(metric, value), 0.0, SPREAD_HALF_LIFE)
                if observation.ok:
                    run.add(seq, math.log(value), observation.at, sigma)
        self.changed_at[metric] = now
        self.restart_seq[metric] = since
        self.confirmed_at.pop(metric, None)

    def estimate(self, metric: ViewMetric) -> Estimate | None:
        """The recency-weighted estimate of ``metric``; None before any answer measured it."""
        if metric in self._estimates:
            return self._estimates[metric]
        sums = self.sums.get(metric)
        result = None
        if sums is not None and sums.weight > 0:
            # Few answers (a cold start, or since a change) are judged by the spread its answers have shown over
            # the long run: a change moves a deployment's level, not its spread, and one lucky answer of a
            # heavy-tailed provider must not read as a precise estimate.
            prior = self.spread(metric)
            result = sums.estimate(self.confirmed_at.get(metric), self.changed_at.get(metric), prior)
        self._estimates[metric] = result
        return result

    def trusts_window(self, metric: ViewMetric, now: float, window_count: int) -> bool:
        """Whether the shared window can be blended in for ``metric``: no change detected within it, or
        the answers from before the change are at most ``STALE_WINDOW_SHARE`` of it by now."""
        changed = self.changed_at.get(metric)
        if changed is None or now - changed >= self.window_s:
            return True
        before = self.window_at_change.get(metric)
        return before is not None and before <= STALE_WINDOW_SHARE * window_count

    def note_window(self, metric: ViewMetric, window_count: int) -> None:
        """How many answers the shared window held when a change of ``metric`` was detected."""
        self.window_at_change[metric] = window_count

    def quantile(self, metric: ViewMetric, q: float) -> float | None:
        """A recency-weighted quantile of ``metric`` over the kept answers that still count."""
        since = self.restart_seq.get(metric, 0)
        points = [(o.at, v) for s, o in self.answers if s >= since and (v := o.value(metric)) is not None and v > 0]
        if not points:
            return None
        newest = points[-1][0]
        weighted = sorted(
            (v, 2.0 ** (-(newest - at) / self.half_life_s - rank / COUNT_HALF_LIFE))
            for rank, (at, v) in enumerate(reversed(points))
        )
        total = sum(w for _, w in weighted)
        seen = 0.0
        for value, weight in weighted:
            seen += weight
            if seen >= q * total:
                return value
        return weighted[-1][0]

    def failure_time(self) -> float | None:
        """The recency-weighted mean time its failed attempts took (None: none failed here)."""
        return self.failures.values / self.failures.weight if self.failures.weight > 0 else None

    def recent_outcomes(self, now: float, half_life_s: float) -> tuple[float, float, float]:
        """(weighted successes, weighted attempts, their effective number now) over the attempts that say
        something of the provider; the effective number halves every ``half_life_s`` after the newest."""
        sums = self.outcomes
        if sums.weight <= 0:
            return 0.0, 0.0, 0.0
        # Values are 2 (success) and 1 (failure): the weighted successes are values - weight.
        effective = sums.weight * sums.weight / sums.squares * 2.0 ** (-max(0.0, now - sums.at) / half_life_s)
        return max(0.0, sums.values - sums.weight), sums.weight, effective


def _may_leap(first: list[float], stream: list[float]) -> bool:
    """Whether any window of first token and stream together may pass ``CHANGE_MIN_Z`` (else ``_changes``' joint
    test would pass over every one): |a + b| / √2 is at most (max |a| + max |b|) / √2 (``reach``), and 1.4 < √2
    leaves a margin far above rounding. Both lists hold one window at least."""
    return reach(first) + reach(stream) >= 1.4 * CHANGE_MIN_Z


def _surprising(tests: Mapping[ViewMetric, list[float]]) -> bool:
    """Whether the latest answer alone was far faster than the answers before it: in one metric, or in first
    token and stream together."""
    if any(shifts and shifts[0] <= -SURPRISE_Z for shifts in tests.values()):  # no dict of the first shifts
        return True
    first, stream = tests.get(LEAP_METRICS[0]) or [], tests.get(LEAP_METRICS[1]) or []
    return bool(first) and bool(stream) and (first[0] + stream[0]) / math.sqrt(2) <= -SURPRISE_JOINT_Z


def pooled_spreads(views: Iterable[DeploymentView]) -> dict[ViewMetric, float]:
    """The spread of single answers of each metric over ``views`` (a model's other deployments), each view's
    long-run variance weighted by its answers, with ``PRIOR_WEIGHT`` pseudo-answers of ``PRIOR_SIGMA``."""
    weights: dict[ViewMetric, float] = {}
    variances: dict[ViewMetric, float] = {}
    for view in views:
        for metric, spread in view.spreads.items():
            if spread.weight <= 0:
                continue
            samples, variance = spread.log_variance()
            weights[metric] = weights.get(metric, 0.0) + samples
            variances[metric] = variances.get(metric, 0.0) + samples * variance
    return {
        metric: max(MIN_SIGMA, math.sqrt((variances[metric] + PRIOR_WEIGHT * PRIOR_SIGMA**2) / (weight + PRIOR_WEIGHT)))
        for metric, weight in weights.items()
    }
