"""What an ended attempt's answer was worth: a whole reply read into its outcome, and an answer's verdict.

``AttemptRunner`` calls these once per attempt, when it records the attempt's ``Sample``.
"""

from __future__ import annotations

import logging

import msgspec

from gateway.dialects import dialect_for
from gateway.quality import judge
from gateway.reading import Reading, read_full_reply
from gateway.relay.attempt import Attempt
from gateway.relay.outbound import upstream_of
from gateway.relay.request import ProxyRequest
from gateway.samples import Outcome, Validity
from gateway.tokens import TokenCounter

logger = logging.getLogger("gateway")


def read_whole(request: ProxyRequest, attempt: Attempt, counter: TokenCounter) -> tuple[Reading, Outcome]:
    """A whole (non-streamed) answer's reading, and the outcome it makes."""
    try:
        # The upstream's own API reads its body (a translated answer's client got it rewritten).
        reading = read_full_reply(attempt.body, counter, dialect_for(upstream_of(request, attempt.candidate)))
    except Exception:
        # Every reader takes any JSON (tests/test_odd_answers.py); should one still fail, the answer is
        # unreadable, not lost: its attempt is recorded and its slot given back.
        name = attempt.candidate.name
        logger.exception("request %s: the answer of %s could not be read", request.request_id, name)
        return Reading(malformed=True), "upstream_error"
    if request.endpoint == "embeddings":
        # Embeddings are measured by latency only: there are no output tokens to count.
        reading = msgspec.structs.replace(reading, output_tokens=None, answer_text="")
    outcome: Outcome = "upstream_error" if reading.error_message or reading.malformed else "ok"
    if outcome == "ok" and reading.incomplete:
        outcome = "client_error"  # cut short by the request's own limit or filter: not a clean answer
    return reading, outcome


def verdict(request: ProxyRequest, outcome: Outcome, reading: Reading) -> Validity | None:
    """A whole answer's verdict (or one the request's limit ended); None for anything else, and for embeddings.
    Judged once per attempt, after its bytes went to the client (``gateway.quality``)."""
    if not request.expects.judged or not (outcome == "ok" or (outcome == "client_error" and reading.incomplete)):
        return None
    return judge(reading, request.expects)
