"""A stream's progress as the relay's meter reports it to the router (``gateway.types.StreamProgress``)."""

from __future__ import annotations


class Stream:
    """Bytes received so far; a test sets them as the stream would have delivered them."""

    def __init__(self, api: str = "chat") -> None:
        self.received_bytes = 0
        self.api = api
