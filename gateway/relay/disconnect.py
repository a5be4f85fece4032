"""Noticing a client that hangs up, so that its upstream is dropped at once."""

from __future__ import annotations

import asyncio

from starlette.types import Receive


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

    __slots__ = ("disconnected", "_armed", "_task", "_watcher")

    def __init__(self, receive: Receive, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """``loop``: the running loop, when the caller has it already (``asyncio.get_running_loop`` costs a
        ``getpid`` system call each time in CPython 3.11); else found here."""
        self.disconnected = False
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
