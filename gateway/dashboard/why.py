"""Why a model's next request goes where it goes: the router's own ranking, as the page shows it.

Nothing here scores anything. ``why_view`` takes the ``Ranking`` that ``MeasuredRouter.rank``
builds (the same call that plans real requests, for a typical request: 500 prompt tokens and
the model's observed answer length) and keeps what a reader needs: each deployment's predicted
time and money for that request, its status and the score's terms (``score_terms``, the column
``gateway check`` prints). ``render_why`` draws it as a small table under the model's rows,
with a sentence that names the trade-off: the fastest and the cheapest, and what the chosen one
gives up against each.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.dashboard.text import esc, money, seconds
from gateway.routing.explain import policy_summary, score_terms
from gateway.routing.ranking import Ranked, Ranking

OUTPUT_FROM = {"observed": "the model's observed median answer", "default": "the policy's default", "request": "given"}


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


def why_view(ranking: Ranking) -> WhyView:
    shape = ranking.shape
    rows = tuple(
        Predicted(
            deployment=row.deployment.name,
            time_s=row.scored.prediction.time_s,
            cost_usd=row.scored.prediction.cost_usd,
            status=row.status,
            terms=score_terms(row),
            estimated=row.scored.prediction.prior,
            load=_load(row),
        )
        for row in ranking.rows
    )
    return WhyView(
        prompt_tokens=shape.prompt_tokens,
        output_tokens=shape.output_tokens,
        output_from=OUTPUT_FROM.get(shape.output_source, shape.output_source),
        policy=f"{ranking.policy.name}: {policy_summary(ranking.policy)}",
        fixed=ranking.policy.ranking == "fixed",
        rows=rows,
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


def render_why(view: WhyView, colors: dict[str, str], chosen: str | None) -> str:
    """The ``<details>``-free, always-visible panel: the sentence, then one line per deployment."""
    cheapest, fastest = view.cheapest, view.fastest
    lines = []
    for rank, row in enumerate(view.rows, start=1):
        tags = []
        if row.deployment == chosen:
            tags.append('<span class="tag next">next</span>')
        if row.deployment == fastest and not view.fixed:
            tags.append('<span class="tag fastest">fastest</span>')
        if row.deployment == cheapest:
            tags.append('<span class="tag cheapest">cheapest</span>')
        color = colors.get(row.deployment, "#4b5563")
        lines.append(
            f'<tr style="--c:{color}"><td class="num">{rank}</td>'
            f'<td class="name"><span class="swatch"></span>{esc(row.deployment)} {"".join(tags)}</td>'
            f'<td class="num">{_time(row)}</td><td class="num">{money(row.cost_usd)}</td>'
            f'<td title="in flight / learned limit: {esc(row.load)}">{esc(row.status)} · {esc(row.load)}</td>'
            f"<td><code>{esc(row.terms)}</code></td></tr>"
        )
    shape = (
        f"a typical request: {view.prompt_tokens:,} prompt tokens, {view.output_tokens:,} output tokens "
        f"({esc(view.output_from)})"
    )
    return (
        '<div class="why"><h3>Why the next request goes where it goes</h3>'
        f'<p class="why-sentence">{esc(why_sentence(view))}</p>'
        '<table class="why-rows"><thead><tr><th class="num">#</th><th>Deployment</th>'
        '<th class="num">Predicted time</th><th class="num">Predicted cost</th><th>Status</th>'
        "<th>Score terms (0 = best)</th></tr></thead>"
        f"<tbody>{''.join(lines)}</tbody></table>"
        f'<p class="muted why-note">The router\'s own ranking for {shape}; policy {esc(view.policy)}. '
        "≈: not measured yet, the model's average stands in. Every number: GET /v1/gateway/routes.</p></div>"
    )
