"""Noticing a client that hangs up, so that its upstream is dropped at once; and ending the connection of one that
stopped reading, where the server offers it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import Receive, Scope

ABORT_EXTENSION = "gateway.abort"
"""The ASGI scope's extension (``scope["extensions"]``) whose ``abort`` ends the client's connection at once, its
response unfinished: ``gateway serve``'s protocol offers it (``gateway.connections``); other servers may not."""


def abort_of(scope: Scope) -> Callable[[], None] | None:
    """The server's way to end this request's connection at once, if it offers one (``ABORT_EXTENSION``)."""
    offered = (scope.get("extensions") or {}).get(ABORT_EXTENSION)
    abort: Callable[[], None] | None = offered.get("abort") if offered else None
    return abort


class DisconnectWatch:
    """Cancels the request's task the moment the client hangs up, so the upstream is dropped at once.

    Must be created inside the task that serves the request, after the body was read, and
    disarmed before the last frame is sent (the server reports a disconnect once the response
    is complete, too).

    ``disarm`` does not cancel the watcher: the server's report of the completed response ends
    it (uvicorn's ``receive`` returns ``http.disconnect`` then, or when the connection closes).
    A cancelled watcher would keep a ``CancelledError`` whose traceback holds the watcher's
    frame, which holds this watch, which holds the watcher: a reference cycle per request, with
    the server's request cycle inside it, freed only when the cyclic collector runs (which the
    gateway runs rarely, ``server.GC_THRESHOLDS``), so memory grew with the requests served.
    """

    __slots__ = ("disconnected", "abort", "_armed", "_task", "_watcher")

    def __init__(
        self,
        receive: Receive,
        loop: asyncio.AbstractEventLoop | None = None,
        abort: Callable[[], None] | None = None,
    ) -> None:
        """``loop``: the running loop, when the caller has it already (``asyncio.get_running_loop`` costs a
        ``getpid`` system call each time in CPython 3.11); else found here. ``abort``: the server's way to end the
        connection at once (``abort_of``), for a client that stopped reading (None: the server offers none)."""
        self.disconnected = False
        self.abort = abort
        self._armed = True
        # The running loop's own ``create_task``: what ``ensure_future`` comes to for a coroutine, without its checks.
        if loop is None:
            loop = asyncio.get_running_loop()
        self._task = asyncio.current_task(loop)
        self._watcher: asyncio.Future[None] | None = loop.create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while self._armed:
            message = await receive()
            if message["type"] == "http.disconnect":
                if self._armed and self._task is not None:
                    self.disconnected = True
                    self._task.cancel()
                break
        self._watcher = None
        self._task = None

    def disarm(self) -> None:
        self._armed = False
