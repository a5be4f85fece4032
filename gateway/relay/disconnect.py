"""Noticing a client that hangs up, so that its upstream is dropped at once."""

from __future__ import annotations

import asyncio

from starlette.types import Receive


class DisconnectWatch:
    """Cancels the request's task the moment the client hangs up, so the upstream is dropped at once.

    Must be created inside the task that serves the request, after the body was read, and
    disarmed before the last frame is sent (the server reports a disconnect once the response
    is complete, too).
    """

    def __init__(self, receive: Receive) -> None:
        self.disconnected = False
        self._armed = True
        self._task = asyncio.current_task()
        self._watcher = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if self._armed and self._task is not None:
                    self.disconnected = True
                    self._task.cancel()
                return

    def disarm(self) -> None:
        self._armed = False
        self._watcher.cancel()
