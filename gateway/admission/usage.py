"""What one request used, summed over its attempts: the sample sink that adds each attempt to its request's tally.

The tally reaches the sink through a context variable set in the request's task (``gateway.admission.access``'s
``Ticket``): samples are recorded in that task or in tasks it spawns, which inherit it, so no layer in between has
to pass it along. Split from ``gateway.admission.access``, which admits the request and settles what it used.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.samples import Sample


@dataclass(slots=True)
class UsageTally:
    """Tokens one request actually used, summed over its attempts."""

    output_tokens: int = 0
    prompt_tokens: int | None = None
    """As the provider reported it; None when none did."""
    attempts: int = 0
    samples: list[Sample] = field(default_factory=list)
    """Every attempt's sample, each once: what the request's spend is settled with."""
    late: Callable[[Sample], None] | None = None
    """Once the request is released: books an attempt that ended after it (a race's drained loser,
    ``gateway.relay.drain``) on its own."""


TALLY: contextvars.ContextVar[UsageTally | None] = contextvars.ContextVar("gateway_usage_tally", default=None)
"""The tally of the request whose task (or a task it spawned) is running: set by its ticket (``access.Ticket``)."""


class UsageTap:
    """A sample sink that adds each attempt's usage to the tally of the request it belongs to."""

    def record(self, sample: Sample) -> None:
        tally = TALLY.get()
        if tally is None:
            return
        if tally.late is not None:
            tally.late(sample)
            return
        tally.attempts += 1
        tally.samples.append(sample)
        output = sample.usage_completion_tokens  # ``billed_output_tokens``, inline (a property's frame)
        if output is None:
            output = sample.output_tokens
        tally.output_tokens += output or 0
        if sample.usage_prompt_tokens is not None:
            tally.prompt_tokens = sample.usage_prompt_tokens


USAGE_TAP = UsageTap()


__all__ = ["TALLY", "USAGE_TAP", "UsageTally", "UsageTap"]
