"""Why a model's next request goes where it goes: the router's own ranking, as the page shows it.

Nothing here scores anything. ``why_view`` takes the ``Ranking`` that the router's ``rank``
builds (from the same beliefs that plan real requests, for a typical request: 500 prompt tokens and
the model's observed answer length) and keeps what a reader needs: each deployment's predicted
time and money for that request, its status and the score's terms (``score_terms``, the column
``gateway check`` prints), and its belief (``Predicted.believed``): the medians and spreads of its first
token and speed, how long ago it was heard from, and its chance of being the best. ``render_why`` draws it
as a small table under the model's rows, with a sentence that names the trade-off: the fastest and the
cheapest, and what the chosen one gives up against each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.dashboard.text import esc, money, seconds
from gateway.routing.explain import budgeted, policy_summary, score_terms
from gateway.routing.ranking import BeliefView, Ranked, Ranking

OUTPUT_FROM = {
    "learned": "the answers' mean length",
    "share": "the share of max_tokens the answers used",
    "default": "the policy's default",
    "request": "given",
}


@dataclass(frozen=True, slots=True)
class Predicted:
    """One deployment's prediction for the typical request, as the router made it."""

    deployment: str
    time_s: float | None
    """Predicted seconds to the whole answer (TTFT + tokens ÷ tokens/s); None when nothing is known yet."""
    cost_usd: float
    status: str
    """``ready``, ``exploring``, ``constraint``, ``circuit open``, ``at capacity``, ``rate limited``."""
    terms: str
    """The score's terms, e.g. ``time+0.78 price+0.26``; ``best`` for none."""
    estimated: bool
    """Part of the prediction borrows the model's average: this deployment is not measured yet."""
    load: str = ""
    """Its provider's requests in flight over its learned limit, and its reported budget, e.g. ``12/40``."""
    answers: float = 0.0
    """Effective number of its own answers behind ``time_s`` (recent ones weigh more)."""
    age_s: float | None = None
    """Age of the newest of them (None: none yet)."""
    spread: float | None = None
    """The prediction's relative uncertainty (0.15 ≈ ±15%); None when it rests on the model's average."""
    belief: BeliefView | None = None
    """The belief behind the prediction (None only in a ranking built by hand)."""

    @property
    def believed(self) -> str:
        """``first token 0.42 s ×1.5 · 85 tok/s ×1.3 · 12 answers · heard 4 s ago · best 72%``: the belief, in words
        (medians, the factor one answer's spread spans, the answers it rests on, how long ago it was heard from, its
        chance of being the best)."""
        b = self.belief
        if b is None:
            return ""
        parts = [
            f"first token {seconds(b.ttft_s)} ×{math.exp(b.ttft_spread):.1f}",
            f"{b.tokens_per_s:.0f} tok/s ×{math.exp(b.tokens_per_s_spread):.1f}",
            f"{b.answers} answer{'' if b.answers == 1 else 's'}",
            f"heard {_age(b.age_s)} ago" if b.age_s is not None else "never heard",
            f"best {b.best:.0%}",
        ]
        return " · ".join(parts)

    @property
    def basis(self) -> str:
        """``12 answers · newest 4 s ago · ±15%``: what the prediction rests on."""
        if self.answers < 0.5 and self.age_s is None:
            return "no answer yet: the model's average"
        parts = [f"{self.answers:.0f} answer{'' if round(self.answers) == 1 else 's'}"]
        if self.age_s is not None:
            parts.append(f"newest {_age(self.age_s)} ago")
        if self.spread is not None:
            parts.append(f"±{self.spread:.0%}")
        return " · ".join(parts)


@dataclass(frozen=True, slots=True)
class WhyView:
    """A model's ranking for a typical request, best first (the order a request tries them)."""

    prompt_tokens: int
    output_tokens: int
    output_from: str
    policy: str
    """One line on what the policy optimises (``policy_summary``)."""
    fixed: bool
    """The policy keeps the config's order, whatever the numbers."""
    rows: tuple[Predicted, ...]
    ttft_quantile: float = 0.5
    tps_quantile: float = 0.5
    """The quantiles the predictions use (a TTFT tail, a tokens/s floor), for the note under the table."""
    explored: str = ""
    """How many of this replica's requests went to measuring rather than to the leader, e.g.
    ``explored 12 of 300 requests (4.0%; budget 5%)``; empty before any request."""

    @property
    def cheapest(self) -> str | None:
        """The deployment with the lowest predicted cost (the first of equals), if any."""
        return min(self.rows, key=lambda r: r.cost_usd).deployment if self.rows else None

    @property
    def fastest(self) -> str | None:
        """The deployment with the lowest predicted time, among those with a prediction."""
        timed = [r for r in self.rows if r.time_s is not None]
        return min(timed, key=lambda r: r.time_s or 0.0).deployment if timed else None


def _load(row: Ranked) -> str:
    """``in flight/limit``, then what the provider said it has left, and for how long it is out."""
    load = f"{row.in_flight}/{row.limit}" if row.limit is not None else str(row.in_flight)
    if row.remaining_requests is not None:
        load += f", {row.remaining_requests:,} requests left"
    if row.blocked_in_s > 0:
        load += f", out for {row.blocked_in_s:.0f}s"
    return load


def _age(seconds_ago: float) -> str:
    if seconds_ago < 90:
        return f"{seconds_ago:.0f} s"
    return f"{seconds_ago / 60:.0f} min" if seconds_ago < 5400 else f"{seconds_ago / 3600:.1f} h"


def _predicted(row: Ranked) -> Predicted:
    p = row.scored.prediction
    return Predicted(
        deployment=row.deployment.name,
        time_s=p.time_s,
        cost_usd=p.cost_usd,
        status=row.status,
        terms=score_terms(row),
        estimated=p.prior,
        load=_load(row),
        answers=p.samples,
        age_s=p.age_s,
        spread=p.uncertainty.time if p.source == "recent" and not p.prior else None,
        belief=row.belief,
    )


def why_view(ranking: Ranking) -> WhyView:
    shape = ranking.shape
    rows = tuple(_predicted(row) for row in ranking.rows)
    return WhyView(
        prompt_tokens=shape.prompt_tokens,
        output_tokens=shape.output_tokens,
        output_from=OUTPUT_FROM.get(shape.output_source, shape.output_source),
        policy=f"{ranking.policy.name}: {policy_summary(ranking.policy)}",
        fixed=ranking.policy.ranking == "fixed",
        rows=rows,
        ttft_quantile=ranking.policy.ttft_quantile,
        tps_quantile=ranking.policy.tps_quantile,
        explored=_explored(ranking),
    )


def _explored(ranking: Ranking) -> str:
    if not ranking.requests or ranking.policy.ranking == "fixed":
        return ""
    share = ranking.probes / ranking.requests
    budget = budgeted(ranking)
    return (
        f"explored {ranking.probes:,} of {ranking.requests:,} requests ({share:.1%}): {budget.paid:,} by a race or a "
        f"shadow, within a race budget of {budget.share:.0%} of streamed requests; {ranking.extra_attempts:.2f} extra "
        "attempts per request"
    )


def _by_name(view: WhyView) -> dict[str, Predicted]:
    return {row.deployment: row for row in view.rows}


def _time(row: Predicted) -> str:
    return "not measured" if row.time_s is None else ("≈ " if row.estimated else "") + seconds(row.time_s)


def why_sentence(view: WhyView) -> str:
    """One sentence (plain text) on why the first deployment leads: what it wins and what it gives up."""
    if not view.rows:
        return "No deployment of this model can take a request."
    first = view.rows[0]
    rows = _by_name(view)
    head = f"{first.deployment}: {_time(first)} and {money(first.cost_usd)} for a typical request"
    if view.fixed:
        return f"{head}; the policy keeps the config's order, whatever the figures."
    if first.status == "exploring" and first.estimated:
        return f"{head}, estimated from the model's average: it is being measured (a bounded share of requests)."
    fastest, cheapest = rows.get(view.fastest or ""), rows.get(view.cheapest or "")
    wins = [word for word, best in (("fastest", fastest), ("cheapest", cheapest)) if best is first]
    parts = [f"{head}{' — ' + ' and '.join(wins) if wins else ''}"]
    if fastest is not None and fastest is not first and fastest.time_s is not None:
        parts.append(f"{fastest.deployment} is faster ({_time(fastest)}) but costs {money(fastest.cost_usd)}")
    if cheapest is not None and cheapest is not first and cheapest.cost_usd < first.cost_usd:
        parts.append(f"{cheapest.deployment} is cheapest ({money(cheapest.cost_usd)}) but takes {_time(cheapest)}")
    if len(parts) == 1:
        return parts[0] + "."
    return parts[0] + "; " + "; ".join(parts[1:]) + "."


def _tags(row: Predicted, view: WhyView, chosen: str | None) -> str:
    tags = []
    if row.deployment == chosen:
        tags.append('<span class="tag next">next</span>')
    if row.deployment == view.fastest and not view.fixed:
        tags.append('<span class="tag fastest">fastest</span>')
    if row.deployment == view.cheapest:
        tags.append('<span class="tag cheapest">cheapest</span>')
    if row.status == "exploring":
        tags.append('<span class="tag exploring" title="too few answers of its own: measured">exploring</span>')
    return "".join(tags)


def render_why(view: WhyView, colors: dict[str, str], chosen: str | None) -> str:
    """The ``<details>``-free, always-visible panel: the sentence, then one line per deployment."""
    lines = []
    for rank, row in enumerate(view.rows, start=1):
        color = colors.get(row.deployment, "#4b5563")
        cost = money(row.cost_usd)
        lines.append(
            f'<tr style="--c:{color}"><td class="num">{rank}</td>'
            f'<td class="name"><span class="swatch"></span>{esc(row.deployment)} {_tags(row, view, chosen)}</td>'
            f'<td class="num">{_time(row)}</td><td class="num">{cost}</td>'
            f'<td class="basis-cell">{esc(row.believed or row.basis)}</td>'
            f'<td title="in flight / learned limit: {esc(row.load)}">{esc(row.status)} · {esc(row.load)}</td>'
            f"<td><code>{esc(row.terms)}</code></td></tr>"
        )
    shape = (
        f"a typical request: {view.prompt_tokens:,} prompt tokens, {view.output_tokens:,} output tokens "
        f"({esc(view.output_from)})"
    )
    tails = (
        f"Predicted time = first token (p{view.ttft_quantile * 100:g}) + {view.output_tokens:,} tokens at the "
        f"tokens/s p{view.tps_quantile * 100:g} floor, widened by its uncertainty: longer than the medians above "
        "when the policy plans for the tail. "
        if not view.fixed
        else ""
    )
    return (
        '<div class="why"><h3>Why the next request goes where it goes</h3>'
        f'<p class="why-sentence">{esc(why_sentence(view))}</p>'
        '<div class="why-wrap"><table class="why-rows"><thead><tr><th class="num">#</th><th>Deployment</th>'
        '<th class="num">Predicted time</th><th class="num">Predicted cost</th>'
        + (
            "<th>Belief <small>median ×spread · answers · heard · chance best</small></th>"
            if any(row.belief is not None for row in view.rows)
            else "<th>Basis <small>answers · newest · spread</small></th>"
        )
        + "<th>Status</th>"
        "<th>Score terms (0 = best)</th></tr></thead>"
        f"<tbody>{''.join(lines)}</tbody></table></div>"
        f'<p class="muted why-note">The router\'s own ranking for {shape}; policy {esc(view.policy)}. {tails}'
        + (f"This replica {esc(view.explored)}. " if view.explored else "")
        + "≈: not measured yet, the model's average stands in. Every number: GET /v1/gateway/routes.</p></div>"
    )
