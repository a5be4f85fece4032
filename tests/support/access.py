"""The access log's lines as a test reads them from pytest's ``caplog``.

Why a helper: each line is written as its request ends, just after the client has its answer, so a
test that reads them at once may read before the last one is there; ``count`` waits for that many.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.accesslog import ACCESS_LOGGER
from tests.support.wait import wait_until


def access_lines(caplog: pytest.LogCaptureFixture, count: int | None = None) -> list[dict[str, Any]]:
    """The access log's lines so far (once at least ``count`` are there, when given), oldest first."""
    if count is not None:
        wait_until(lambda: sum(r.name == ACCESS_LOGGER for r in caplog.records) >= count, what=f"{count} access lines")
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == ACCESS_LOGGER]
