"""File descriptors: the process's open-file limit raised at start-up, and a warning when they run short.

Every client connection, upstream connection and Redis connection is a descriptor. With the usual
soft limit of 1,024, about a thousand idle client connections stop all service: accepting fails,
and nothing said why. ``raise_open_file_limit`` lifts the soft limit to the hard one (which an
unprivileged process may do) at start-up; ``DescriptorWatch`` logs a warning once the open
descriptors pass ``WARN_SHARE`` of the limit, and again each time they cross it after falling back
(not on every check), so an operator reads the cause before the refusals start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource

from gateway.background import every

logger = logging.getLogger("gateway")
WARN_SHARE = 0.9
"""Open descriptors past this share of the soft limit are worth a warning."""
CHECK_INTERVAL_S = 5.0


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit where allowed; the (soft, hard) limits in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            logger.info("open-file limit stays at %d (could not raise it to %d: %s)", soft, target, exc)
            return soft, hard
        logger.info("open-file limit raised from %d to %d", soft, target)
        soft = target
    return soft, hard


def open_descriptors() -> int | None:
    """Descriptors this process has open (None where ``/proc`` or ``/dev/fd`` cannot tell)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return len(os.listdir(folder)) - 1  # the listing's own descriptor
    return None


class DescriptorWatch:
    """Checks the open descriptors every ``interval_s`` (``start``/``aclose``), or once (``check``)."""

    def __init__(self, interval_s: float = CHECK_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.short = False
        """Above ``WARN_SHARE`` of the limit at the last check."""
        self._task: asyncio.Task[None] | None = None

    def check(self) -> bool:
        """Look now; True when descriptors run short (a warning is logged as they cross the line)."""
        count = open_descriptors()
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if count is None or soft == resource.RLIM_INFINITY:
            return False
        short = count >= WARN_SHARE * soft
        if short and not self.short:
            logger.warning(
                "file descriptors running short: %d open of the limit of %d; past it no connection is accepted "
                "(raise the hard limit, e.g. ulimit -n or LimitNOFILE=, or add replicas)",
                count,
                soft,
            )
        self.short = short
        return short

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        self.check()
        await every(lambda: self.interval_s, self._check, "checking the open file descriptors")

    async def _check(self) -> None:
        self.check()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
