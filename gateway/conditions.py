"""Warnings about states that last: said when a state starts or changes, once more when it ends, quiet between.

A provider that keeps refusing, a background task that keeps failing the same way or a canary that cannot reach
its targets produce the same event every few seconds; a line per event buries the one that says something new
(and, in the demo, the status lines around it). ``ConditionLog`` keeps, per key, the state last said: an event
in that state is not logged again; a new state is; its end is logged once, at warning (an error's too), so the log
says when it recovered wherever the state was seen (the demo shows warnings and up, ``serve`` info and up). The
rule holds in every mode (``serve``, ``--workers N``, the demo): each process keeps its own states and says each
change once.

Usage::

    floors = ConditionLog(logger)
    floors.holds(key, "floor", "deployment %s: concurrency limit backed off to its floor", name)  # logged
    floors.holds(key, "floor", "deployment %s: concurrency limit backed off to its floor", name)  # quiet
    floors.ended(key, "deployment %s: concurrency limit recovered", name)  # logged once, at warning

Not thread-safe: one event loop owns each log.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)


class ConditionLog(Generic[Key]):
    """Per key, the state last said (see the module docstring); ``level`` is the level a state is said at."""

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING) -> None:
        self.logger = logger
        self.level = level
        self._said: dict[Key, Hashable] = {}

    def holds(
        self, key: Key, state: Hashable, message: str, *args: object, exc_info: BaseException | None = None
    ) -> bool:
        """``key`` is in ``state`` now: log ``message % args`` unless that state was the last said; True if logged."""
        if key in self._said and self._said[key] == state:
            return False
        self._said[key] = state
        self.logger.log(self.level, message, *args, exc_info=exc_info)
        return True

    def ended(self, key: Key, message: str, *args: object) -> bool:
        """``key``'s state is over: log ``message % args`` if a state was said (at ``level``, at most warning: a
        recovery is no error, but is shown wherever its state was); True if logged."""
        if key not in self._said:
            return False
        del self._said[key]
        self.logger.log(min(self.level, logging.WARNING), message, *args)
        return True

    def active(self, key: Key) -> bool:
        """Whether a state of ``key`` was said and has not ended."""
        return key in self._said
