"""Routing policies: what a model's requests optimise for, and the built-in presets.

A policy is configuration only (a frozen ``PolicyConfig``); ``gateway.routing`` turns it into
rankings. Models name their policy (``policy = "balanced"``); ``[policies.NAME]`` tables in
the config define new ones or adjust a preset, every key optional::

    [policies.interactive]
    extends = "fastest-first-token"     # start from a preset (default: balanced)
    price_weight = 0.2
    max_ttft_s = 1.5                    # soft: breaking it only moves a deployment back
    hedge_quantile = 0.95               # hedge past the deployment's own TTFT p95 (or hedge_after_s)

The score (lower is better, 0 = best candidate on every weighted dimension) is a sum of
log2 ratios against the best candidate, so a weight reads as "how much one doubling costs"::

    score = time_weight       * log2(time  / best time)          time = TTFT(q) + out / tps(q), failures'
                                                                 fallbacks included
          + ttft_weight       * log2(TTFT  / best TTFT)
          + throughput_weight * log2(best tps / tps)
          + price_weight      * log2(money / best money)         money = prompt*in + out*out_price
          + failure_weight    * (log2(1 / success rate)
                                 + quality_weight * log2(1 / valid rate))   valid rate: of this request's kind

With the balanced preset (time 1, price 0.3) taking twice as long costs 1.0 and paying twice
as much costs 0.3: the router accepts being ~23% slower to halve the price, not more.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from gateway.sessions.identity import DEFAULT_SESSION_HEADERS
from gateway.toml_reader import MISSING, TableReader

RankingMode = Literal["measured", "fixed"]
"""How a policy orders deployments (the ``ranking`` key); ``gateway.routing.ranking.Ranking`` is a ranking itself."""
RANKING_MODES: tuple[RankingMode, ...] = ("measured", "fixed")
Affinity = Literal["auto", "strict", "off"]
"""What a session's binding does (the ``affinity`` key): ``auto``, stay where the prompt is cached while the
prediction says staying wins; ``strict``, stay unless that deployment cannot serve; ``off``, score every turn
on its own."""
AFFINITIES: tuple[Affinity, ...] = ("auto", "strict", "off")
EstimateKind = Literal["mean", "quantile"]
ESTIMATE_KINDS: tuple[EstimateKind, ...] = ("mean", "quantile")
DEFAULT_POLICY = "balanced"


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """How a model's requests are ranked, attempted and hedged. Usage::

    policy = BUILTIN_POLICIES["balanced"]
    replace(policy, price_weight=1.0)       # a variant (policies are immutable)

    Timeouts are separate because LLM streams need different limits for each phase: a
    connection should open in seconds, the first token may take tens of seconds, and a long
    answer may stream for minutes.
    """

    name: str
    ranking: RankingMode = "measured"
    """``measured``: by score; ``fixed``: the config's deployment order (health and capacity still apply)."""

    # The score's weights (see the module docstring); each >= 0.
    time_weight: float = 1.0
    ttft_weight: float = 0.0
    throughput_weight: float = 0.0
    price_weight: float = 0.3
    failure_weight: float = 0.25
    """Aversion to failures beyond their cost in time (which ``time`` already counts: a failure's own time and
    the fallback's); what a policy without a time weight judges failures by alone."""

    quality_weight: float = 1.0
    """How much an invalid answer counts against a deployment, inside the failure term: the term reads
    log2(1 / (success × valid^quality_weight)), the valid rate being the deployment's for this request's kind
    (tools, JSON, plain). 1: an invalid answer counts as a failure does; 0: validity is ignored."""

    estimate: EstimateKind = "mean"
    """``mean``: predict the expected time (mean TTFT, harmonic-mean tokens/s), so a provider with a slow tail
    pays for it; ``quantile``: predict at ``ttft_quantile``/``tps_quantile`` (e.g. a p90 for tail-averse traffic)."""
    ttft_quantile: float = 0.5
    """Which TTFT to predict with: 0.5 = the median, 0.95 = the p95 (an upper tail). Constraints use it too."""
    tps_quantile: float = 0.5
    """Which tokens/s to predict with, as a floor: 0.95 = the speed 95% of responses reached (the 5th percentile)."""
    default_output_tokens: int = 256
    """Expected answer length when the request sets no ``max_tokens`` and the model has no observed answers."""

    # Soft constraints: a deployment that breaks one is tried only after those that do not.
    max_price_in: float | None = None
    """USD per 1M prompt tokens."""
    max_price_out: float | None = None
    """USD per 1M output tokens."""
    min_tokens_per_s: float | None = None
    """Compared with the predicted tokens/s (at ``tps_quantile``)."""
    max_ttft_s: float | None = None
    """Compared with the predicted TTFT (at ``ttft_quantile``)."""
    min_success_rate: float | None = None
    min_valid_rate: float | None = 0.9
    """Valid answers of the request's kind (``gateway.quality``), once ``min_samples`` of them were judged; below
    it the deployment goes after those that keep it, for that kind of request only (0 or None: no constraint)."""

    # Memory, exploration and load.
    memory_half_life_s: float = 10.0
    """Read by no router now (a belief forgets by its drift and its hazard, ``docs/routing.md``): accepted so that
    existing configs load."""
    min_samples: int = 5
    """Attempts below which a deployment is shown as not judged yet; soft constraints wait for this many."""
    explore_share: float = 0.05
    """Share of requests that may be spent measuring deployments whose estimates are uncertain or stale."""
    explore_margin: float = 0.0
    """Read by no router now (the draw decides what is explored): accepted so that existing configs load."""
    explore_race: bool = True
    """Explore a stream by racing: the best and the explored deployment start together, the first token wins."""
    tie_band: float = 0.1
    """Read by no router now (the draw spreads near-equal deployments): accepted so that existing configs load."""

    # Health: a circuit per deployment.
    failure_threshold: int = 5
    """Consecutive failures that open the circuit."""
    cooldown_s: float = 5.0
    """How long an opened circuit stays open; doubled on each repeat re-open (soon after the close, few answers
    between), up to ``max_cooldown_s``."""
    max_cooldown_s: float = 15.0
    """The escalation's cap: a provider that recovers gets its probe (in the background, if no request
    comes) at most this long after, so it is back within about this long of its recovery. A 429's
    ``Retry-After`` is honoured up to ``routing.health.MAX_RETRY_AFTER_S`` whatever this is."""

    # Attempts and timeouts.
    max_attempts: int = 3
    retry_invalid: bool = False
    """Retry a non-streamed answer judged invalid on the next deployment, within ``max_attempts`` (the client then
    gets the retry's answer; if none answers, the invalid one). Streams are never retried: their bytes are gone."""
    retries_per_deployment: int = 2
    """Retries of one deployment within a request (a failure before the first byte that is safe to repeat):
    taken when waiting for it (``Retry-After``, or the back-off) is still predicted to beat the next
    candidate, and always by a lone deployment; ``max_attempts`` and the total deadline still bound them."""
    retry_backoff_s: float = 0.25
    """The first retry's back-off without a ``Retry-After``, doubled per retry, jittered (half to all of it)."""
    connect_timeout_s: float = 5.0
    first_token_timeout_s: float = 30.0
    """From sending the request to the first chunk that carries output; past it, the next deployment is tried."""
    idle_timeout_s: float = 60.0
    """Longest gap between two chunks of a stream."""
    total_timeout_s: float = 600.0
    """Deadline for the whole request, all attempts included."""
    first_byte_keepalive_s: float = 15.0
    """A stream still without its first content after this long gets its API's keep-alive (and again at each
    such interval), so that load balancers do not cut it; the 200 is sent with the first (0: never)."""
    deadline_multiple: float = 4.0
    """Learned deadlines: a deployment with ``min_samples`` measured gives up on an attempt's first token
    after this multiple of its own TTFT p99, and on a stream's silence after this multiple of its longest
    usual gap (p99), never below ``deadline_floor_s`` nor above the configured timeouts; 0 turns it off."""
    deadline_floor_s: float = 4.0

    # Waiting for a slot when every deployment is full (``gateway.relay.queue``).
    queue_timeout_s: float = 5.0
    """Longest a request waits for a free slot (never past its deadline); then a 429 with Retry-After."""
    queue_max_length: int = 1024
    """Requests of one model that may wait at once; the next is refused at once (429)."""

    # Hedging of streams: a second attempt when the first token is late.
    hedge_after_s: float | None = None
    """Hedge when the first token is later than this many seconds."""
    hedge_quantile: float | None = None
    """Hedge when the first token is later than the deployment's own TTFT at this quantile (e.g. 0.95)."""
    hedge_min_after_s: float = 0.05
    """Never hedge sooner than this (a floor under the quantile threshold)."""
    hedge_tail: bool = False
    """Hedge a deployment whose first-token tail is heavy, from the point where waiting on is expected to take
    longer than the next candidate's first token (used when neither ``hedge_after_s`` nor ``hedge_quantile`` is)."""
    hedge_budget: float = 0.1
    """Hedges at most this share of the model's streamed requests."""

    # Sessions: a conversation's turns and the deployment that holds its prompt in cache.
    affinity: Affinity = "auto"
    session_ttl_s: float = 300.0
    """A session's binding expires this long after its last answer (providers keep a prompt cached ~5 minutes)."""
    session_min_tokens: int = 1024
    """A request that names no session is fingerprinted only when its prompt is estimated at least this long."""
    session_headers: tuple[str, ...] = DEFAULT_SESSION_HEADERS
    """Request headers that name a session, first found wins (the gateway's ``x-session-id`` and coding agents')."""

    @property
    def hedging(self) -> bool:
        return self.hedge_after_s is not None or self.hedge_quantile is not None or self.hedge_tail


def _presets() -> dict[str, PolicyConfig]:
    balanced = PolicyConfig(name=DEFAULT_POLICY, hedge_tail=True)
    presets = [
        balanced,
        replace(balanced, name="fastest", price_weight=0.0),
        replace(
            balanced,
            name="fastest-first-token",
            time_weight=0.0,
            failure_weight=1.0,
            ttft_weight=1.0,
            price_weight=0.05,
            estimate="quantile",
            ttft_quantile=0.9,
            hedge_quantile=0.95,
        ),
        replace(
            balanced,
            name="highest-throughput",
            time_weight=0.0,
            failure_weight=1.0,
            throughput_weight=1.0,
            price_weight=0.05,
            estimate="quantile",
        ),
        replace(balanced, name="cheapest", time_weight=0.05, price_weight=1.0, failure_weight=1.0),
        replace(balanced, name="fixed-order", ranking="fixed", explore_share=0.0),
    ]
    return {p.name: p for p in presets}


BUILTIN_POLICIES: dict[str, PolicyConfig] = _presets()
"""balanced, fastest, fastest-first-token, highest-throughput, cheapest, fixed-order."""


def parse_policy(name: str, table: TableReader, known: dict[str, PolicyConfig]) -> PolicyConfig:
    """One ``[policies.NAME]`` table. A preset's own name adjusts that preset; ``extends`` picks another base."""
    default_base = name if name in BUILTIN_POLICIES else DEFAULT_POLICY
    base_name = table.text("extends", default_base)
    if base_name not in known:
        raise table.error("extends", f'unknown policy "{base_name}" (known: {", ".join(known)})')
    b = known[base_name]

    def weight(key: str, default: float) -> float:
        return table.number(key, default, minimum=0.0)

    def quantile(key: str, default: float | None) -> float | None:
        value = table.number(key, default)
        if value is not None and not 0.0 < value < 1.0:
            raise table.error(key, f"expected a number between 0 and 1 (exclusive), got {value:g}")
        return value

    def optional(key: str, default: float | None, positive: bool = False) -> float | None:
        return table.number(key, default, minimum=0.0, positive=positive)

    cooldown_s = table.number("cooldown_s", b.cooldown_s, positive=True)
    policy = PolicyConfig(
        name=name,
        ranking=table.choice("ranking", RANKING_MODES, b.ranking),
        estimate=table.choice("estimate", ESTIMATE_KINDS, b.estimate),
        time_weight=weight("time_weight", b.time_weight),
        ttft_weight=weight("ttft_weight", b.ttft_weight),
        throughput_weight=weight("throughput_weight", b.throughput_weight),
        price_weight=weight("price_weight", b.price_weight),
        failure_weight=weight("failure_weight", b.failure_weight),
        quality_weight=weight("quality_weight", b.quality_weight),
        ttft_quantile=quantile("ttft_quantile", b.ttft_quantile) or b.ttft_quantile,
        tps_quantile=quantile("tps_quantile", b.tps_quantile) or b.tps_quantile,
        default_output_tokens=table.integer("default_output_tokens", b.default_output_tokens, minimum=1),
        max_price_in=optional("max_price_in", b.max_price_in),
        max_price_out=optional("max_price_out", b.max_price_out),
        min_tokens_per_s=optional("min_tokens_per_s", b.min_tokens_per_s, positive=True),
        max_ttft_s=optional("max_ttft_s", b.max_ttft_s, positive=True),
        min_success_rate=optional("min_success_rate", b.min_success_rate),
        min_valid_rate=optional("min_valid_rate", b.min_valid_rate),
        memory_half_life_s=table.number("memory_half_life_s", b.memory_half_life_s, positive=True),
        min_samples=table.integer("min_samples", b.min_samples, minimum=0),
        explore_share=optional("explore_share", b.explore_share) or 0.0,
        explore_margin=weight("explore_margin", b.explore_margin),
        explore_race=table.flag("explore_race", b.explore_race),
        tie_band=weight("tie_band", b.tie_band),
        failure_threshold=table.integer("failure_threshold", b.failure_threshold, minimum=1),
        cooldown_s=cooldown_s,
        # A cool-down set above the default cap, with no cap of its own, is not escalated (rather than refused).
        max_cooldown_s=table.number("max_cooldown_s", max(b.max_cooldown_s, cooldown_s), positive=True),
        max_attempts=table.integer("max_attempts", b.max_attempts, minimum=1),
        retry_invalid=table.flag("retry_invalid", b.retry_invalid),
        retries_per_deployment=table.integer("retries_per_deployment", b.retries_per_deployment, minimum=0),
        retry_backoff_s=table.number("retry_backoff_s", b.retry_backoff_s, minimum=0.0),
        connect_timeout_s=table.number("connect_timeout_s", b.connect_timeout_s, positive=True),
        first_token_timeout_s=table.number("first_token_timeout_s", b.first_token_timeout_s, positive=True),
        idle_timeout_s=table.number("idle_timeout_s", b.idle_timeout_s, positive=True),
        total_timeout_s=table.number("total_timeout_s", b.total_timeout_s, positive=True),
        first_byte_keepalive_s=table.number("first_byte_keepalive_s", b.first_byte_keepalive_s, minimum=0.0),
        deadline_multiple=table.number("deadline_multiple", b.deadline_multiple, minimum=0.0),
        deadline_floor_s=table.number("deadline_floor_s", b.deadline_floor_s, positive=True),
        queue_timeout_s=table.number("queue_timeout_s", b.queue_timeout_s, minimum=0.0),
        queue_max_length=table.integer("queue_max_length", b.queue_max_length, minimum=0),
        hedge_after_s=b.hedge_after_s,
        hedge_quantile=b.hedge_quantile,
        hedge_tail=table.flag("hedge_tail", b.hedge_tail),
        hedge_min_after_s=table.number("hedge_min_after_s", b.hedge_min_after_s, minimum=0.0),
        hedge_budget=optional("hedge_budget", b.hedge_budget) or 0.0,
        affinity=table.choice("affinity", AFFINITIES, b.affinity),
        session_ttl_s=table.number("session_ttl_s", b.session_ttl_s, positive=True),
        session_min_tokens=table.integer("session_min_tokens", b.session_min_tokens, minimum=1),
        session_headers=tuple(h.lower() for h in table.strings("session_headers", b.session_headers)),
    )
    policy = _parse_hedge_after(table, policy)
    _check_policy(table, policy)
    table.finish()
    return policy


def _parse_hedge_after(table: TableReader, policy: PolicyConfig) -> PolicyConfig:
    """``hedge_after_s`` (seconds) or ``hedge_quantile`` (of the deployment's own TTFT); ``false`` turns hedging off.

    Setting one clears the other, so a policy can switch the way a preset it extends hedges.
    """
    fixed = _hedge_key(table, "hedge_after_s", "a number of seconds > 0, or false")
    quantile = _hedge_key(table, "hedge_quantile", "a number between 0 and 1 (exclusive), or false")
    if fixed is not None and quantile is not None:
        if fixed is not False and quantile is not False:
            raise table.error("hedge_quantile", "set either hedge_after_s or hedge_quantile, not both")
    if fixed is False or quantile is False:
        policy = replace(policy, hedge_after_s=None, hedge_quantile=None, hedge_tail=False)
    if isinstance(fixed, float):
        if fixed <= 0:
            raise table.error("hedge_after_s", f"expected a number of seconds > 0, or false, got {fixed:g}")
        policy = replace(policy, hedge_after_s=fixed, hedge_quantile=None)
    if isinstance(quantile, float):
        if not 0 < quantile < 1:
            raise table.error(
                "hedge_quantile", f"expected a number between 0 and 1 (exclusive), or false, got {quantile:g}"
            )
        policy = replace(policy, hedge_after_s=None, hedge_quantile=quantile)
    return policy


def _hedge_key(table: TableReader, key: str, expected: str) -> float | bool | None:
    value = table.raw(key)
    if value is MISSING:
        return None
    if value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise table.error(key, f"expected {expected}, got {value!r}")


def _check_policy(table: TableReader, policy: PolicyConfig) -> None:
    if policy.ranking == "measured":
        weights = (policy.time_weight, policy.ttft_weight, policy.throughput_weight, policy.price_weight)
        if not any(w > 0 for w in weights):
            raise table.error(
                "time_weight", "a measured policy needs at least one of time, ttft, throughput, price weights > 0"
            )
    for key, value in (("explore_share", policy.explore_share), ("hedge_budget", policy.hedge_budget)):
        if value > 1.0:
            raise table.error(key, f"expected a share between 0 and 1, got {value:g}")
    if policy.explore_share >= 1.0:
        raise table.error("explore_share", "expected a share below 1 (some requests must follow the score)")
    for key, share in (("min_success_rate", policy.min_success_rate), ("min_valid_rate", policy.min_valid_rate)):
        if share is not None and share > 1.0:
            raise table.error(key, f"expected a share between 0 and 1, got {share:g}")
    if policy.max_cooldown_s < policy.cooldown_s:
        raise table.error("max_cooldown_s", f"expected at least cooldown_s ({policy.cooldown_s:g})")
