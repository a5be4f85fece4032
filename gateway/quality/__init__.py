"""Answer quality: a verdict on every answer (valid, or why not), from what the meter read and the request asked.

``expectation_of`` reads what a request asks of its answer (its kind: tools, JSON or plain; its
tools' schemas; its JSON schema; its token limit), ``judge`` gives the verdict. The relay judges
each complete answer once, after its last byte went to the client (``AttemptRunner.record``); the
verdict goes into the attempt's ``Sample``, and from there into the stats window (a valid rate per
deployment and request kind), the router's failure term, the metrics and the access log.
"""

from __future__ import annotations

from gateway.quality.expect import NOT_JUDGED, PLAIN, Expectation, expectation_of
from gateway.quality.schema import schema_problem
from gateway.quality.verdict import degenerate, judge

__all__ = ["NOT_JUDGED", "PLAIN", "Expectation", "degenerate", "expectation_of", "judge", "schema_problem"]
