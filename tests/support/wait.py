"""Waiting for a condition that another thread or process makes true, with a deadline.

Why: the tests drive real servers in other threads and processes; a fixed sleep is either too
short on a busy machine or wastes time on a quiet one. Polling with a deadline is neither.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``condition`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout:g} s")
        time.sleep(0.005)
