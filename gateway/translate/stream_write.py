"""What every client-side stream writer (``stream_chat``, ``stream_messages``, ``stream_responses``) keeps alike:
whether the client's stream has started and ended, and a continuation's said tokens.

A broken stream that another upstream finishes (``StreamTranslator.continue_with``) goes on in the same client
stream; the continuation's prompt held the answer's earlier part, which the client counts as output. So its usage
moves those tokens (``said_tokens``) from the prompt to the output, as one whole answer would have reported them.
"""

from __future__ import annotations

from gateway.translate.ir import Usage


class WriterState:
    """The part of a stream writer's state the relay and the translator read and set the same way for every API."""

    def __init__(self) -> None:
        self.started = False
        self.ended = False
        self.said_tokens = 0
        """Output tokens of a broken stream's earlier part, moved from the continuation's prompt to its output."""

    def continue_stream(self, said_tokens: int) -> None:
        """A continuation's events follow: they go on where the client's stream is (its open block or item)."""
        self.said_tokens = said_tokens

    def said_usage(self, usage: Usage) -> Usage:
        """``usage`` with ``said_tokens`` moved from the prompt to the output (``usage`` itself when there are none);
        the reasoning count, the continuation's alone, is not carried."""
        if not self.said_tokens:
            return usage
        return Usage(
            max(0, usage.input_tokens - self.said_tokens),
            usage.output_tokens + self.said_tokens,
            usage.cached_tokens,
            usage.cache_creation_tokens,
        )
