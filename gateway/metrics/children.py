"""The children the per-request metric updates touch, found once, and whether their values may be updated in place.

``AttemptSeries.record`` updates up to a dozen series per sample, ``request_done`` three per request, the routing
events one each. Each update used to be a method call (``inc``, ``observe``) on a child that ``_series`` found; with
the plain classes of ``gateway.metrics.plain`` the update is an addition to a ``PlainValue``, which the caller can do
itself, in its own frame: ``plain_children`` says when (every family of the group is of a plain class, not a
subclass: prometheus-client's own values, and the multiprocess files of ``WorkerMetrics``, go through the methods).
"""

from __future__ import annotations

from typing import Any

from gateway.metrics.plain import PlainCounter, PlainGauge, PlainHistogram


def plain_children(*families: object) -> bool:
    """Every family is a plain counter or histogram, or a plain gauge not kept as the most recent worker's value:
    its children's values are ``PlainValue``s that an update may add to directly, as ``inc``/``observe`` would."""
    for family in families:
        kind = type(family)
        if kind is PlainGauge:
            if family._is_most_recent:  # type: ignore[attr-defined]
                return False
        elif kind is not PlainCounter and kind is not PlainHistogram:
            return False
    return True


class SampleChildren:
    """The children ``AttemptSeries.record`` updates for one (model, provider, deployment, API), each None until
    ``make`` asks ``_series`` for it (when the series is first touched, as before: no series shows earlier).

    ``plain``: the group's families are plain (``plain_children``), so ``record`` adds to the values itself."""

    __slots__ = (
        "_owner", "_model", "_provider", "_endpoint", "plain", "attempts", "ttft", "api_ttft", "first_answer",
        "tokens_per_second", "end_to_end", "output_tokens_per_answer", "input_tokens", "output_tokens", "cost",
    )  # fmt: skip

    def __init__(self, owner: Any, model: str, provider: str, deployment: str, endpoint: str) -> None:
        """``owner``: the ``AttemptSeries`` whose families these are (``Any``: that module imports this one)."""
        self._owner = owner
        self._model, self._provider, self._endpoint = model, provider, endpoint
        self.plain = plain_children(
            owner.attempts,
            owner.ttft,
            owner.api_ttft,
            owner.first_answer,
            owner.tokens_per_second,
            owner.end_to_end,
            owner.output_tokens_per_answer,
            owner.tokens,
            owner.cost,
        )
        self.attempts: dict[str, Any] = {}
        self.ttft: Any = None
        self.api_ttft: Any = None
        self.first_answer: Any = None
        self.tokens_per_second: Any = None
        self.end_to_end: Any = None
        self.output_tokens_per_answer: Any = None
        self.input_tokens: Any = None
        self.output_tokens: Any = None
        self.cost: Any = None

    def make(self, name: str) -> Any:
        """The child ``name`` stands for, made (or found) by ``_series`` and kept."""
        owner, model, provider = self._owner, self._model, self._provider
        child: Any
        if name == "api_ttft":
            child = owner._series(owner.api_ttft, model, self._endpoint)
        elif name == "input_tokens":
            child = owner._series(owner.tokens, model, provider, "input")
        elif name == "output_tokens":
            child = owner._series(owner.tokens, model, provider, "output")
        else:
            child = owner._series(getattr(owner, name), model, provider)
        setattr(self, name, child)
        return child


__all__ = ["SampleChildren", "plain_children"]
