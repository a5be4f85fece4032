"""Attempts, fallback, hedging and the streaming relay: from a ``RoutePlan`` to bytes at the client.

``Dispatcher.dispatch`` runs a request's attempts and returns a committed ``Reply``, which
``api.py`` writes to the client. The package, in the order a request meets it:

- ``request``: ``ProxyRequest`` (a validated client request) and its ``RequestTrace``.
- ``dispatch``: the attempt loop (fallback before the first byte, the sample of every attempt).
- ``hedging``: the attempt loop of hedged streams (a second attempt when the first token is late).
- ``attempt``: one attempt, the log of a request's attempts, and how failures become errors.
- ``replies``: writing the committed answer, a whole body or a relayed stream.
- ``disconnect``: noticing a client that hangs up.
"""

from __future__ import annotations

from gateway.relay.attempt import AttemptLog
from gateway.relay.disconnect import DisconnectWatch
from gateway.relay.dispatch import Dispatcher
from gateway.relay.replies import FullReply, Reply, StreamReply
from gateway.relay.request import ProxyRequest, RequestTrace

__all__ = [
    "AttemptLog",
    "DisconnectWatch",
    "Dispatcher",
    "FullReply",
    "ProxyRequest",
    "Reply",
    "RequestTrace",
    "StreamReply",
]
