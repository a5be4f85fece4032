"""How long this request's answer will be: predicted from what this model's answers actually were.

An agent sends ``max_tokens: 32000`` on every call and is answered in a few hundred tokens; planning
for the ceiling would judge every deployment by its speed alone. So the router keeps, per model and
request shape (the order of magnitude of ``max_tokens``, none counting as its own shape), a running
mean of the answers' lengths, and predicts that, capped by the request's ``max_tokens``. A shape
never answered borrows the model's mean share of ``max_tokens`` its answers used (an agent's are a
small share of 32,000; a benchmark asking for exactly its length uses all of it); a model never
answered, the policy's ``default_output_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MEMORY = 50
"""Answers a shape's mean remembers (the older fade): request lengths change with the traffic, not the provider."""

LengthKey = tuple[str, int]


def shape_of(model: str, max_tokens: int | None) -> LengthKey:
    """The request's shape: its model and ``max_tokens``'s power of two (0: none set)."""
    return model, max_tokens.bit_length() if max_tokens else 0


@dataclass(slots=True)
class _Mean:
    value: float = 0.0
    n: int = 0

    def add(self, x: float) -> None:
        self.n = min(self.n + 1, MEMORY)
        self.value += (x - self.value) / self.n


@dataclass
class Lengths:
    """Running means of answer lengths, per shape and per model."""

    shapes: dict[LengthKey, _Mean] = field(default_factory=dict)
    shares: dict[str, _Mean] = field(default_factory=dict)
    """Per model: the share of ``max_tokens`` its answers used."""

    def heard(self, key: LengthKey, tokens: int, max_tokens: int | None) -> None:
        """A complete answer of ``tokens`` output tokens to a request of shape ``key``."""
        self.shapes.setdefault(key, _Mean()).add(float(tokens))
        if max_tokens:
            self.shares.setdefault(key[0], _Mean()).add(min(1.0, tokens / max_tokens))

    def expected(self, key: LengthKey, max_tokens: int | None, default: int) -> float:
        """The answer length to plan for (at least one token, never above ``max_tokens``)."""
        mean = self.shapes.get(key)
        share = self.shares.get(key[0])
        if mean is not None and mean.n:
            value = mean.value
        elif max_tokens and share is not None and share.n:
            value = share.value * max_tokens
        else:
            value = float(default)
        if max_tokens is not None:
            value = min(value, float(max_tokens))
        return max(1.0, value)
