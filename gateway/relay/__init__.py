"""Attempts, fallback, hedging and the streaming relay: from a ``RoutePlan`` to bytes at the client.

``Dispatcher.dispatch`` runs a request's attempts and returns a committed ``Reply``, which
``api.py`` writes to the client. The package, in the order a request meets it:

- ``request``: ``ProxyRequest`` (a validated client request) and its ``RequestTrace``.
- ``budget``: ``AttemptBudget``, the request's deadline and attempt count, shared by every loop.
- ``dispatch``: ``Dispatcher`` and the in-order attempt loop (fallback before the first byte).
- ``hedging``: the attempt loop of hedged streams (a second attempt when the first token is late).
- ``drain``: a race's losing probe, read on unseen until its stream is measured.
- ``retry``: whether a failed attempt asks the same deployment again (after a wait) or the next.
- ``context``: a prompt too long for one deployment, moved to one with a larger window.
- ``runner``: ``AttemptRunner``, one attempt from admission to its ``Sample``; the loops call it.
- ``attempt``: an attempt's state, the log of a request's attempts, and how failures become errors.
- ``replies``: writing the committed answer, a whole body or a relayed stream.
- ``recovery``: finishing a stream that broke mid-answer on another deployment.
- ``forward``: which relayed bytes may go to the client now (whole events, errors held back).
- ``disconnect``: noticing a client that hangs up.
- ``probe``: background probes of open circuits, so a recovered provider is noticed without traffic.
"""

from __future__ import annotations

from gateway.relay.attempt import AttemptLog
from gateway.relay.budget import AttemptBudget
from gateway.relay.disconnect import DisconnectWatch
from gateway.relay.dispatch import Dispatcher
from gateway.relay.replies import FullReply, Reply, StreamReply
from gateway.relay.request import ProxyRequest, RequestTrace
from gateway.relay.runner import AttemptRunner

__all__ = [
    "AttemptBudget",
    "AttemptLog",
    "AttemptRunner",
    "DisconnectWatch",
    "Dispatcher",
    "FullReply",
    "ProxyRequest",
    "Reply",
    "RequestTrace",
    "StreamReply",
]
