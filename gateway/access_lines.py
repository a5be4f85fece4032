"""Where access-log lines go under ``gateway serve``: stdout, in batches (``LineWriter``).

One ``write`` and flush per batch, at most ``LineWriter.delay_s`` after a line was handed over, instead of one
locked ``StreamHandler.emit`` and flush per request. A line may be handed over unbuilt (a callable that makes
it): it is then made with its batch, after its request has gone, with the others (``gateway.accesslog``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import Callable
from typing import IO

ACCESS_LOGGER = "gateway.access"

Line = str | Callable[[], str]
"""A line (no newline), or what makes it when its batch is written."""

logger = logging.getLogger("gateway")


class LineWriter(logging.Handler):
    """A handler that writes bare lines (the message only) to ``stream`` in batches.

    A line waits at most ``delay_s`` (on the event loop that handed it over), or until
    ``max_lines`` are pending; outside an event loop it is written at once. ``flush`` and
    ``close`` write whatever is pending, so ``logging.shutdown`` at exit loses nothing.
    """

    delay_s = 0.05
    max_lines = 256

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self.stream = stream
        self._pending: list[Line] = []
        self._scheduled = False
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.add(record.getMessage())
        except Exception:
            self.handleError(record)

    def add(self, line: Line) -> None:
        """Queue one line (no newline) for the next batch; a callable makes its line when the batch is written."""
        with self._guard:
            self._pending.append(line)
            count = len(self._pending)
            schedule = not self._scheduled and count < self.max_lines
            if schedule:
                self._scheduled = True
        if count >= self.max_lines:
            self.flush()
            return
        if schedule:
            try:
                asyncio.get_running_loop().call_later(self.delay_s, self.flush)
            except RuntimeError:
                self.flush()  # no event loop here: nothing would run a later flush

    def flush(self) -> None:
        with self._guard:
            lines, self._pending = self._pending, []
            self._scheduled = False
        if not lines:
            return
        # Each deferred line made here, in this frame (no comprehension's or call's frame per line); one that cannot be
        # made is lost alone, the others written.
        texts: list[str] = []
        for line in lines:
            if isinstance(line, str):
                texts.append(line)
                continue
            try:
                text = line()
            except Exception:
                logger.exception("access log: a line could not be made")
                continue
            if text is not None:
                texts.append(text)
        try:
            self.stream.write("\n".join(texts) + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # stdout closed or gone: nobody left to read the log

    def close(self) -> None:
        self.flush()
        super().close()


def sole_writer(logger: logging.Logger) -> LineWriter | None:
    """The ``LineWriter`` that alone receives ``logger``'s lines, if so: then a line skips the
    ``LogRecord``; any other handler, filter or propagation sends it through ``logger`` instead."""
    handlers = logger.handlers
    if len(handlers) == 1 and not logger.propagate and not logger.filters:
        handler = handlers[0]
        if isinstance(handler, LineWriter) and not handler.filters and handler.level <= logging.INFO:
            return handler
    return None


def configure_access_log(stream: IO[str] | None = None) -> None:
    """Send access-log lines, bare (no level or logger prefix), to ``stream`` (stdout by default), in batches.

    Called by ``gateway serve``; embedding apps configure the ``gateway.access`` logger themselves.
    """
    logger = logging.getLogger(ACCESS_LOGGER)
    handler = LineWriter(stream or sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


__all__ = ["ACCESS_LOGGER", "Line", "LineWriter", "configure_access_log", "sole_writer"]
