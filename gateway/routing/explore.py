"""Exploration: which request, if any, measures a deployment instead of following the score.

A deployment's estimate is only as good as its newest answers. The score gives each deployment
an exploration bonus (``Scored.bonus``: ``CONFIDENCE`` standard errors of its estimate, which
grow as its answers age, ``gateway.routing.estimates``); one whose optimistic score
(score - bonus) beats the leader's might be the better choice now, and is worth measuring.

- **Cold start.** A deployment with nothing measured (no answer here, nothing in the shared
  window) is probed at once (on a cheap request once another is measured), whatever the budget
  holds: by a cold race on a stream (below), else one attempt at a time, one request per
  deployment. While nothing at all is measured this is no probe and costs the budget nothing
  (there is no leader to explore away from): the router counts it apart, as a cold start. One
  whose stream was never measured (its answers were one chunk each) is probed on the next
  request long enough to measure it: once whatever the budget holds, afterwards only when it
  holds a probe (its answers may keep coming whole, and each repeat would run the budget
  further into debt).
- **Afterwards**, a token bucket per model (``ExploreBudget``: ``explore_share`` per request,
  a burst of ``BURST``) bounds probes as a share of requests. A probe goes to the most
  neglected deployment (probed longest ago) whose optimistic score is within
  ``explore_margin`` of the leader's, that has nothing in flight, and only on a *cheap*
  request: an answer no longer than the model's recent median and a prompt at most twice its
  recent median. An answer that surprised its estimate gets a second look on the next
  request that allows one (a *follow-up*: the next probe the budget holds is its).
- **Racing.** On a stream (``explore_race``), the probe races the leader: both start at once
  and the first token wins; the loser is drained (``gateway.relay.drain``: read on unseen until
  its stream is measured). A probe that loses costs the client nothing; one that wins was the
  faster to its first token. (The leader used to join after a head start of half its first
  token, so that the probe would win more often; since a loser is measured all the same, that
  only delayed the leader: simulated, every market gained 0.1-1.2 points without it.) A race is
  not run where the probe would likely win on its first token and then stream a long answer
  much slower (``RACE_SLACK``: the chance it wins times that cost), unless it was not probed for
  ``NEGLECTED_AFTER_S``: then up to
  one leader's time of expected cost. Where no race is affordable, the probe is a *shadow*: sent
  beside the leader and drained, never the answer (it costs the client nothing).
  Without racing (or for unstreamed requests) the probe is the request's first attempt.
- **Cold races.** On a stream, every deployment with nothing measured (and nothing in flight)
  races at once, with the leader if one is measured: one request measures them all. Until any
  first token came, every stream races them all, busy or not (nothing is known to choose by).
- **Beside a slow leader.** At a cold start the first token to come is the first thing known,
  and a low-latency provider that streams slowly is measured first; the model's average is then
  its speed. Until another deployment's first stream is read, a long answer on a stream goes to
  one with nothing measured when the leader would take twice as long as a stream of
  ``TYPICAL_TOKENS_PER_S`` (``_beside_a_slow_leader``); a short one stays with the leader. A cold
  start, not a probe.
- **Pairs.** With ``PAIR_MIN_DEPLOYMENTS`` or more, a race probe takes a second contender with it
  (``choose_partner``): all three start at once, and the first token wins. 5% of requests
  spread over N - 1 contenders sees each of five deployments every ~20 s at 4 requests/s; a
  pair halves that at the same share of requests (the request counts once; a loser costs its
  prompt). The partner is the other contender probed longest ago,
  bonus or not, raced only where that is cheap, else sent as a shadow.
- **Trials.** A leader that leads on a leap (a detected change, one or two answers since) is not
  probed but served; the next well-measured deployment starts beside it at once and the first
  token wins, the leader drained if it loses (``on_trial``). Paid from the hedge budget, not this
  one: the request goes where the score says, and a lucky draw costs it nothing.

Requests with overrides never explore; ``explore_share = 0`` leaves only the cold start, and
``min_samples = 0`` (or a ``fixed`` ranking) not even that.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict, deque
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from gateway.policies import PolicyConfig
from gateway.routing.choose import COLD_RACE
from gateway.routing.ordering import is_thin
from gateway.routing.ranking import Ranked
from gateway.routing.score import CONFIDENCE
from gateway.routing.scored import Prediction, RequestShape

BURST = 2.0
"""Probes the budget may hold in reserve: a probe and a quick second look at what it found."""
RACE_SLACK = 0.25
"""A race may cost at most this share of the leader's predicted time (the chance the probe wins on its first
token, times what its slower stream would then cost)."""
NEGLECTED_AFTER_S = 10.0
"""A contender not probed for this long may be raced at an expected cost of up to one leader's time (not
``RACE_SLACK`` of it): one that streams slowly is otherwise never raced where every answer is long."""
PAIR_MIN_DEPLOYMENTS = 3
"""From this many deployments on, a race probe measures two contenders at once (``choose_partner``)."""
COLD_RACE_WIDTH = COLD_RACE
"""Deployments that join one cold race at most (the belief router's rule, ``choose.COLD_RACE``, shared)."""
BLIND_RACES = 3
"""Cold races a deployment joins at once before any first token came (the first, and the streams that arrive while
it runs: at 4 requests/s and a slow provider's 1.4 s first token, about five)."""
TYPICAL_TOKENS_PER_S = 100.0
"""What a deployment with nothing measured may be taken to stream at beside a measured leader that streams slower
(``_beside_a_slow_leader``): hosted models stream ~40-400 tokens/s, most of them upwards of a hundred."""
SLOW_LEADER_RATIO = 2.0
"""A long answer goes to an unmeasured deployment when the leader's predicted time for it is this many times what a
typical stream would take (the unmeasured one's first token is unknown: a short answer, or a leader a little slower
than typical, stays)."""
WAITING_MAX = 2 * BLIND_RACES
"""An unmeasured deployment takes long answers beside a slow leader while it has fewer than this many in flight."""
TRIAL_SLACK = 1.0
"""A leader on trial is raced where the chance its challenger wins the first token, times what the challenger's
slower stream would then cost, is at most this share of the leader's predicted time (``on_trial``)."""
STREAM_PROBE_TOKENS = 16
"""A deployment whose tokens/s was never measured is probed for it on a request of at least this many tokens."""
SIZES_KEPT = 64
PROMPT_SLACK = 2.0


@dataclass(frozen=True, slots=True)
class Probe:
    """The deployment a request measures, and how."""

    row: Ranked
    race: bool
    """Start the leader beside it; the first token wins."""
    cold: bool
    """Nothing of it was measured yet: probed whatever the budget holds (which then pays it back)."""
    cold_start: bool = False
    """Nothing at all is measured (no leader to explore away from): not a probe, and free of the budget."""
    follow_up: bool = False
    """A second look at a deployment whose last answer surprised its estimate (it comes before the other contenders)."""
    for_stream: bool = False
    """A cold probe of a deployment measured but for its stream (its answers came in one chunk each)."""
    others: tuple[Ranked, ...] = ()
    """A cold race's other unmeasured deployments, started at once beside it (the leader with them, if one is
    measured)."""
    shadow: bool = False
    """Sent beside the leader but never the client's answer: drained for its measures (``gateway.relay.drain``).
    For a contender no race is affordable for on this request (it would likely win the first token and then
    stream a long answer much slower): measuring it costs the client nothing, the provider a prompt."""


@dataclass
class ExploreBudget:
    """A token bucket per model: each request that may explore adds ``share`` tokens, each probe spends one.

    It starts empty, and only a cold probe of a deployment added beside measured ones may spend what
    it does not hold (the debt is repaid before the next probe). A cold start, before anything is
    measured, spends nothing: there is no leader to explore away from. So probes are at most ``share``
    of requests at every moment, not only on average over a long run (a bucket that started with a
    probe in hand, paid for the cold start's races and let follow-ups borrow ahead kept 90 s runs at
    5.2% of 5%, and its first look after a cold start of five came 45 requests in).
    """

    tokens: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def credit(self, model: str, share: float) -> None:
        self.tokens[model] = min(BURST, self.tokens[model] + share)

    def available(self, model: str) -> bool:
        return self.tokens[model] >= 1.0

    def take(self, model: str) -> None:
        self.tokens[model] -= 1.0


@dataclass
class RequestSizes:
    """The recent requests' answer and prompt sizes of one model: what a cheap request is."""

    recent: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=SIZES_KEPT))
    _medians: tuple[float, float] | None = None
    _added: int = 0

    def add(self, output_tokens: int, prompt_tokens: int) -> None:
        self.recent.append((output_tokens, prompt_tokens))
        self._added += 1
        if self._added < 8 or self._added % 8 == 0:
            self._medians = None  # recomputed every 8 requests (once full, the length alone would say every one)

    def medians(self) -> tuple[float, float]:
        if self._medians is None:
            if not self.recent:
                self._medians = (math.inf, math.inf)
                return self._medians
            # Both columns split at once (``zip``, in C: this is redone every 8 requests), the same sizes sorted.
            columns = zip(*self.recent, strict=True)
            outputs, prompts = sorted(next(columns)), sorted(next(columns))
            middle = (len(outputs) - 1) // 2  # the lower median: with 8 and 800 tokens half each, 8
            self._medians = (float(outputs[middle]), float(prompts[middle]))
        return self._medians

    def cheap(self, shape: RequestShape) -> bool:
        output, prompt = self.medians()
        return shape.output_tokens <= output and shape.prompt_tokens <= PROMPT_SLACK * max(prompt, 1.0)


@dataclass
class ExploreCounts:
    """Requests that could have explored, and those that did (per model), for the explanation endpoint."""

    requests: Counter[str] = field(default_factory=Counter)
    probes: Counter[str] = field(default_factory=Counter)
    races: Counter[str] = field(default_factory=Counter)
    first_looks: Counter[str] = field(default_factory=Counter)
    """Probes of a deployment (or a stream) never measured, beside a measured leader: the budget's only debt."""
    cold_starts: Counter[str] = field(default_factory=Counter)
    """Requests routed while nothing was measured (a race of every deployment, or one at a time): not probes."""


def choose_probe(
    rows: Sequence[Ranked],
    policy: PolicyConfig,
    shape: RequestShape,
    *,
    budget: bool,
    cheap: bool,
    stream: bool,
    rng: random.Random,
    follow_ups: Set[str] = frozenset(),
    probed_at: Mapping[str, float] | None = None,
    now: float = 0.0,
    stream_probed: Set[str] = frozenset(),
) -> Probe | None:
    """The deployment this request should measure, if any (``rows``: the available ones, leader first).

    ``budget``: a probe token is available; ``cheap``: the request is small enough to spend it on;
    ``follow_ups``: deployments whose last answer surprised their estimate (the next probe is
    theirs); ``probed_at``: when each deployment was last probed
    (of the contenders, the one probed longest ago goes first: a deployment that keeps losing its
    races to the first token learns nothing of its stream, and must not starve the others);
    ``stream_probed``: deployments that had their free probe for a stream never measured.
    """
    if policy.ranking == "fixed" or policy.min_samples == 0 or not rows:
        return None
    leader = rows[0]
    known_leader = measured(leader)
    race_allowed = stream and policy.explore_race and known_leader and len(rows) > 1
    # Before any first token anywhere, a stream races every deployment again (busy or not, up to ``BLIND_RACES``
    # each): the requests that arrive while the first cold race runs would otherwise be spread blind, a third of
    # them on the slowest. A burst beyond that is spread by load: it must not multiply into every provider.
    blind = stream and policy.explore_race and all(_unmeasured(r) for r in rows)
    cold = [
        r
        for r in rows
        if _cold(r, shape, stream, budget or r.deployment.name not in stream_probed)
        and (r.in_flight == 0 or (blind and r.in_flight < BLIND_RACES))
        and not r.scored.violations
    ]
    if cold and (cheap or not known_leader or all(r.scored.prediction.answers for r in cold)):
        # A cheap request once another is measured. On a stream every deployment with nothing measured races at
        # once (with the leader, if one is measured): the first token wins, and each loser is read on unseen for
        # its stream (``gateway.relay.drain``), so one request measures them all at the cost of the fastest.
        unmeasured = sorted((r for r in cold if _unmeasured(r)), key=lambda r: rng.random())
        if stream and policy.explore_race and unmeasured and len(rows) > 1:
            others = tuple(unmeasured[1 : COLD_RACE_WIDTH - (1 if known_leader else 0)])
            return Probe(unmeasured[0], race=True, cold=True, cold_start=not known_leader, others=others)
        row = min(cold, key=lambda r: rng.random())
        return Probe(row, race=False, cold=True, cold_start=not known_leader, for_stream=not _unmeasured(row))
    waiting = _beside_a_slow_leader(rows, shape) if stream and known_leader else None
    if waiting is not None:
        return Probe(waiting, race=False, cold=True, cold_start=True)
    if policy.explore_share <= 0:
        return None
    if follow_ups and budget and known_leader:
        for row in rows[1:]:
            if row.deployment.name in follow_ups and row.in_flight == 0 and not row.scored.violations:
                # A surprise asked for it: the race is run whatever its estimate says of its stream.
                if race_allowed:
                    return Probe(row, race=True, cold=False, follow_up=True)
                if not stream and cheap:
                    return Probe(row, race=False, cold=False, follow_up=True)
    if not (budget and cheap and known_leader):
        return None
    pool = _contenders(rows, policy, probed_at or {}, rng)
    if not pool:
        return None
    if not race_allowed:
        return Probe(pool[0], race=False, cold=False)
    # The most neglected contender races; where it would likely win the first token and then stream this long
    # answer much slower, it is measured in the leader's shadow instead (each contender has its turn).
    race = _affordable_race(pool[:1], leader, shape, probed_at or {}, now)
    return race if race is not None else Probe(pool[0], race=False, cold=False, shadow=True)


def choose_partner(
    rows: Sequence[Ranked],
    probe: Probe,
    shape: RequestShape,
    *,
    rng: random.Random,
    probed_at: Mapping[str, float] | None = None,
    now: float = 0.0,
) -> Probe | None:
    """A second contender for ``probe``'s race, where the model has ``PAIR_MIN_DEPLOYMENTS`` or more (None: none):
    racing beside it, or a shadow.

    With 5% of requests spent measuring, each of N - 1 contenders is probed once every
    (N - 1) / 0.05 requests: with three deployments, one look at each every ~10 s at 4 requests/s,
    and a recovery waits that long. Both contenders start at once with the leader; the first token
    wins. The request still counts once against the budget: it costs the client what one race
    costs, and the loser's drained attempt its prompt.

    The partner is the other contender probed longest ago, whether or not its bonus reaches the
    leader: its look costs no budget, and a recovered provider is seen on the next probe of any
    (simulated: with three deployments, recovery +10.2% -> +8.4% over 192 schedules, the first
    look at the recovered provider 6.8 s -> 3.7 s after the change; with five, a recovery among
    them +13.7% -> +12.4% over 192, the stable market -0.15 +/- 0.26 points over 256). It races only where
    that is cheap (``RACE_SLACK``, never a neglected contender's costlier race), and it is not
    waited for: one probed ``NEGLECTED_AFTER_S`` ago whose answer is still streaming (a slow
    stream from before a recovery, which would hide the recovery until it ends) goes again.

    Where no partner's race is cheap, the one probed longest ago goes as a shadow (``Probe.shadow``:
    beside the request, drained, never its answer). A deployment that streams slowly but is quick
    to its first token, the shape of one whose speed dropped, never has a cheap race: without it,
    only the probe itself looked at it, and only once its bonus reached the leader's score, ~10 s
    after its last look (simulated, 56 schedules: the stress market ``dip`` -2.2 +/- 0.6 points, a
    recovery at 1 request/s -0.6 +/- 0.3, the same dip of a provider spreading 0.83 -0.3 +/- 0.3;
    every other market within 0.3 over 32; drained attempts per request at most +0.015).
    """
    if not probe.race or probe.cold or len(rows) < PAIR_MIN_DEPLOYMENTS:
        return None
    last = probed_at or {}
    leader, *others = [r for r in rows if r is not probe.row]
    pool = [r for r in others if not r.scored.violations and measured(r) and not _waited_for(r, last, now)]
    pool.sort(key=lambda r: (last.get(r.deployment.name, -math.inf), rng.random()))
    race = _affordable_race(pool, leader, shape, last, now, neglected_slack=RACE_SLACK)
    if race is None and pool:
        return Probe(pool[0], race=False, cold=False, shadow=True)  # no race is cheap: measured unseen instead
    return race


def on_trial(rows: Sequence[Ranked], shape: RequestShape) -> bool:
    """Whether the leader (``rows[0]``) leads on a leap still to be confirmed, and the next deployment should race
    it: both start at once, the first token wins, and the leader is drained if it loses (``Candidate.on_trial``).

    A deployment that rarely serves is seen on single probes, and a single answer from a widely spread
    provider can be far from its mean: deepinfra-like (tokens/s spreading 1.2 in log units) answered a
    probe at 1,165 tokens/s, read as a change, and led on that one answer; the requests it then took
    cost ~10 s each against the best's ~2 (simulated stable market: 1.2 of its 5.4 points). A recovered
    provider's first look reads the same, so the leap cannot be refused. Raced by the next well-measured
    deployment instead, the request costs no more than the faster of the two first tokens: a true
    recovery wins it and streams fast, a lucky draw loses it (a 2.5 s first token against 0.5 s) and is
    measured all the same, unseen. The race is paid for from the hedge budget, like any second attempt
    beside a first.

    Only after a detected change (a leap), while the leader is thin since it (``ordering.is_thin``),
    and only where the race is affordable even if the leap is true: the challenger's chance of the
    first token, times its stream's extra time over the leader's pessimistic pace (``CONFIDENCE``
    spreads of its answers slower), at most ``TRIAL_SLACK`` of the leader's time. A low-latency
    slow streamer never challenges a long answer.
    """
    if len(rows) < 2:
        return False
    leader, challenger = rows[0], rows[1]
    p, q = leader.scored.prediction, challenger.scored.prediction
    if not (p.drift and is_thin(leader) and measured(leader)) or leader.scored.violations:
        return False
    if not measured(challenger) or is_thin(challenger) or challenger.scored.violations:
        return False
    if p.seconds_per_token is None or q.seconds_per_token is None or p.time_s is None:
        return True
    pessimistic = p.seconds_per_token * math.exp(CONFIDENCE * p.sampling.tokens_per_s)
    return _race_cost(q, p, q.seconds_per_token, pessimistic, shape) <= TRIAL_SLACK * p.time_s


def _beside_a_slow_leader(rows: Sequence[Ranked], shape: RequestShape) -> Ranked | None:
    """A deployment with nothing measured (its first attempts out, or none yet) for an answer the leader would
    take ``SLOW_LEADER_RATIO`` times as long to stream as a typical stream would (None: no such deployment, or
    the leader is not that slow for this answer).

    At a cold start the first token to come is the first thing known: a low-latency provider that streams at 40
    tokens/s wins the cold races and is measured first, while a high-latency one that streams at 260 is still
    waiting for its first token. The model's average is then the slow one, so by it every long answer of the next
    second or two would go to the slow streamer (an 800-token answer: 20 s instead of 4). Its own first attempts
    are on their way; meanwhile the unmeasured one is taken at ``TYPICAL_TOKENS_PER_S`` and the leader's first
    token, and a long answer goes there (at most ``WAITING_MAX`` in flight) where the leader is that much slower.
    Before any stream of the model ended, the leader's pace is the guess its bytes so far give
    (``Prediction.guessed_seconds_per_token``).
    """
    leader = rows[0].scored.prediction
    spt, ttft = leader.seconds_per_token, leader.ttft_s
    if leader.stream_source not in ("recent", "window"):
        spt = leader.guessed_seconds_per_token  # no stream of the model ended yet: its bytes read by a guess
    if spt is None or ttft is None:
        return None
    typical = ttft + shape.output_tokens / TYPICAL_TOKENS_PER_S
    if ttft + shape.output_tokens * spt < SLOW_LEADER_RATIO * typical:
        return None
    waiting = [r for r in rows[1:] if _unmeasured(r) and r.in_flight < WAITING_MAX and not r.scored.violations]
    return min(waiting, key=lambda r: r.in_flight, default=None)


def _waited_for(row: Ranked, last: Mapping[str, float], now: float) -> bool:
    """An answer of it is in flight, from a probe less than ``NEGLECTED_AFTER_S`` ago: its look is on its way."""
    return row.in_flight > 0 and now - last.get(row.deployment.name, -math.inf) < NEGLECTED_AFTER_S


def _contenders(
    rows: Sequence[Ranked], policy: PolicyConfig, last: Mapping[str, float], rng: random.Random
) -> list[Ranked]:
    """The measured deployments behind the leader (``rows[0]``) worth a probe, the one probed longest ago first."""
    best = rows[0].scored.ranked_by + policy.explore_margin
    pool = [
        r
        for r in rows[1:]
        if r.in_flight == 0 and not r.scored.violations and measured(r) and r.scored.optimistic < best
    ]
    pool.sort(key=lambda r: (last.get(r.deployment.name, -math.inf), r.scored.optimistic, rng.random()))
    return pool


def _affordable_race(
    pool: Sequence[Ranked],
    leader: Ranked,
    shape: RequestShape,
    last: Mapping[str, float],
    now: float,
    neglected_slack: float = 1.0,
) -> Probe | None:
    """The first of ``pool`` that can race ``leader`` on this request at an affordable cost: ``RACE_SLACK`` of the
    leader's time, or ``neglected_slack`` for one not probed for ``NEGLECTED_AFTER_S``."""
    for row in pool:
        # Not probed for a while: worth a costlier race (a slow streamer on long answers has no cheap one).
        neglected = now - last.get(row.deployment.name, -math.inf) >= NEGLECTED_AFTER_S
        if _race_affordable(row, leader, shape, neglected_slack if neglected else RACE_SLACK):
            return Probe(row, race=True, cold=False)
    return None


def _cold(row: Ranked, shape: RequestShape, stream: bool, affordable: bool) -> bool:
    """Nothing of its own measured; or its stream never was (one-chunk answers only), this request, a
    stream long enough, can measure it (a whole answer never can: its speed is not seen), and the
    probe is ``affordable``: its first such probe is free, later ones need the budget.

    The first happens once per deployment; the second may repeat on every request, since a request
    is judged long enough by its expected answer (before any answer is seen, the policy's default of
    256 tokens) while the answers keep coming in one chunk. Free every time, each repeat ran the
    budget further into debt: twenty at a cold start silenced exploration for two hundred requests.
    """
    if _unmeasured(row):
        return True
    p = row.scored.prediction
    return affordable and stream and p.stream_source in ("model", "none") and shape.output_tokens >= STREAM_PROBE_TOKENS


def _unmeasured(row: Ranked) -> bool:
    p = row.scored.prediction
    return p.answers == 0 and p.source in ("model", "none")


def measured(row: Ranked) -> bool:
    """Its own answers, or the shared window's, give its estimate (not the model's prior)."""
    return row.scored.prediction.source in ("recent", "window")


def _race_affordable(row: Ranked, leader: Ranked, shape: RequestShape, slack: float) -> bool:
    """Whether ``row`` may race ``leader`` on this request.

    If the probe wins on its first token it streams the answer; where it streams slower than the
    leader that costs ``extra`` seconds. The race is affordable when the chance that it wins,
    times that cost, is at most ``slack`` of the leader's predicted time (a probe slower to its
    first token rarely wins: a deployment that used to be slow in both is still raced, and if it
    wins it has changed).
    """
    p, q = row.scored.prediction, leader.scored.prediction
    if p.seconds_per_token is None or q.seconds_per_token is None or q.time_s is None:
        return True
    # Optimistic by its answers' spread only, not by their age: a stale slow streamer is still a slow streamer
    # for a long answer until it shows otherwise on a short one.
    optimistic = p.seconds_per_token * math.exp(-CONFIDENCE * p.sampling.tokens_per_s)
    return _race_cost(p, q, optimistic, q.seconds_per_token, shape) <= slack * q.time_s


def _race_cost(
    runner: Prediction, leader: Prediction, runner_spt: float, leader_spt: float, shape: RequestShape
) -> float:
    """What racing ``runner`` beside ``leader`` is expected to cost the client: the chance its first token comes
    first, times how much longer its stream then takes at these paces (seconds per token)."""
    return _win_chance(runner, leader) * (shape.output_tokens * max(0.0, runner_spt - leader_spt))


def _win_chance(probe: Prediction, leader: Prediction) -> float:
    """P(the probe's first token comes before the leader's, both started at once); log-normal first tokens."""
    if probe.ttft_s is None or leader.ttft_s is None or probe.ttft_s <= 0 or leader.ttft_s <= 0:
        return 1.0
    spread = math.hypot(probe.ttft_spread, leader.ttft_spread)
    z = math.log(leader.ttft_s / probe.ttft_s) / max(spread, 1e-6)
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
