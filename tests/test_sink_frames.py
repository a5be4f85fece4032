"""The sinks with calls taken inline, against the former code copied here: the same lines, metrics and settlements.

``AccessLog.write`` works the winner, the status and the overhead out in its own frame (``record.winner()`` and
``record.overhead_s()`` before); ``LineWriter.flush`` makes each deferred line in its own loop (``_made`` per line
and a comprehension before); ``Ticket.release`` settles through ``SpendLedger.settle_now`` itself
(``AccessState.settle`` before), logging a failure the same way.
"""

from __future__ import annotations

import io
import logging
import random
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.access_lines import Line, LineWriter, sole_writer
from gateway.accesslog import AccessLog, AccessRecord
from gateway.admission.access import AccessState, Ticket
from gateway.admission.auth import ClientKey, KeyLimits
from gateway.admission.ratelimit import InMemoryRateLimiter
from gateway.config import DeploymentConfig, LimitsConfig
from gateway.metrics.attempts import OverheadMode
from gateway.metrics.series import Metrics
from gateway.relay import AttemptLog, ProxyRequest
from gateway.samples import Sample
from tests.test_metrics_plain import rendered


class FormerAccessLog(AccessLog):
    """``write`` as it was: the winner and the overhead from the record's methods."""

    def write(self, record: AccessRecord) -> None:
        duration = record.clock() - record.received_at
        request, log = record.request, record.log
        winner = record.winner()
        status = record.error_status
        if status is None and log is not None:
            status = log.status
        answered = log.winner if log is not None else None
        upstream = record.upstream_api() if answered is not None else None
        model = request.requested_model if request is not None else ""
        provider = winner.provider if winner is not None and log is not None else ""
        overhead = record.overhead_s()
        mode: OverheadMode | None = None
        if overhead is not None and request is not None:
            mode = "stream" if request.stream else "full"
        self.metrics.request_done(model, provider, record.endpoint, upstream, status, mode, overhead)
        if self.enabled and self.logger.isEnabledFor(logging.INFO):
            taken = self._taken(record, duration, overhead, winner, status, upstream)
            writer = sole_writer(self.logger)
            if writer is not None:
                writer.add(partial(self._made, taken))
            else:
                self.logger.info(self._made(taken))


def _maybe(rng: random.Random, value: Any) -> Any:
    return None if rng.random() < 0.25 else value


def _record(rng: random.Random, index: int) -> AccessRecord:
    """A record over every branch ``write`` takes: no request, no reply log, no winner, a winner among the samples or
    not, an error the gateway answered, no first byte, no upstream times, several attempts."""
    endpoint: Any = rng.choice(["chat", "messages", "responses"])
    names = ["a", "b", "c"]
    deployments = {n: DeploymentConfig(provider=f"p{n}", model="m", name=n, apis=("chat",)) for n in names}
    clock_end = rng.uniform(5, 9)
    record = AccessRecord(f"r{index}", endpoint, rng.uniform(0, 2), lambda: clock_end)
    if rng.random() < 0.9:
        request = ProxyRequest(f"r{index}", endpoint, "/x", {"model": "m"}, rng.random() < 0.5, "m", 0.0)
        trace = request.trace
        for _ in range(rng.randint(0, 3)):
            name = rng.choice(names)
            trace.samples.append(
                Sample(
                    "m",
                    name,
                    f"p{name}",
                    endpoint,
                    request.stream,
                    rng.choice(["ok", "timeout"]),
                    0.0,
                    ttft_s=_maybe(rng, rng.random()),
                    output_tokens=_maybe(rng, rng.randint(0, 90)),
                    cost_usd=_maybe(rng, rng.random() / 100),
                    status=_maybe(rng, 200),
                )
            )
        trace.upstream_sent_at = _maybe(rng, rng.uniform(2, 3))
        trace.upstream_ready_at = _maybe(rng, rng.uniform(3, 4))
        trace.queue_wait_before_sent_s = rng.choice([0.0, rng.random() / 10])
        trace.queue_wait_s = trace.queue_wait_before_sent_s
        record.request = request
    if rng.random() < 0.85:
        log = AttemptLog(status=rng.choice([200, 200, 429, 502]))
        if rng.random() < 0.8:
            log.winner = SimpleNamespace(deployment=deployments[rng.choice(names)])  # type: ignore[assignment]
        log.first_byte_at = _maybe(rng, rng.uniform(4, 5))
        record.log = log
    if rng.random() < 0.15:
        record.error_status = rng.choice([400, 502])
    record.key_name, record.team = _maybe(rng, "k"), _maybe(rng, "t")
    return record


def _logs(sole: bool) -> list[tuple[AccessLog, Metrics, io.StringIO, logging.Logger]]:
    sides = []
    for index, cls in enumerate((AccessLog, FormerAccessLog)):
        stream = io.StringIO()
        logger = logging.getLogger(f"test.sink_frames.{sole}.{index}")
        logger.handlers = [LineWriter(stream)]
        if not sole:  # a second handler: the line goes through ``logger.info``
            logger.handlers.append(logging.NullHandler())
            logger.handlers[0].setFormatter(logging.Formatter("%(message)s"))
        logger.setLevel(logging.INFO)
        logger.propagate = False
        metrics = Metrics(process_metrics=False)
        sides.append((cls(metrics, logger=logger, wall_clock=lambda: 1_700_000_000.25), metrics, stream, logger))
    return sides


@pytest.mark.parametrize("sole", [True, False])
def test_write_logs_and_counts_what_the_former_write_did(sole: bool) -> None:
    rng = random.Random(f"write-{sole}")
    sides = _logs(sole)
    for index in range(3000):
        seed = rng.random()
        for log, *_ in sides:
            log.write(_record(random.Random(seed), index))  # the same record, built afresh for each side
    for log, _, _, logger in sides:
        log.flush()
        logger.handlers[0].flush()
    (_, new_metrics, new_stream, _), (_, old_metrics, old_stream, _) = sides
    assert new_stream.getvalue() == old_stream.getvalue() and new_stream.getvalue().count("\n") == 3000
    assert rendered(new_metrics) == rendered(old_metrics)
    assert '"overhead_s":null' in new_stream.getvalue() and '"overhead_s":0.' in new_stream.getvalue()


def _former_flush(lines: list[Line]) -> str:
    """``LineWriter.flush``'s text as it was: ``_made`` per line in a comprehension, the lost ones filtered."""

    def made(line: Callable[[], str]) -> str | None:
        try:
            return line()
        except Exception:
            return None

    texts = [line if isinstance(line, str) else made(line) for line in lines]
    return "\n".join(text for text in texts if text is not None) + "\n"


def test_a_batch_is_written_as_the_former_flush_wrote_it(caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random("flush")

    def failing() -> str:
        raise ValueError("no line")

    for _ in range(300):
        lines: list[Line] = []
        for i in range(rng.randint(1, 12)):
            kind = rng.randrange(3)
            text = f'{{"n":{i},"s":"{rng.random()}"}}'
            made: Line = partial(str, text)
            lines.append(text if kind == 0 else made if kind == 1 else failing)
        stream = io.StringIO()
        writer = LineWriter(stream)
        writer._pending = list(lines)  # one batch (``add`` outside a loop writes each line at once)
        with caplog.at_level(logging.ERROR, logger="gateway"):
            caplog.clear()
            writer.flush()
        assert stream.getvalue() == _former_flush(lines)
        assert len(caplog.records) == sum(line is failing for line in lines)


class _Ledger:
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.settled: list[tuple[Any, ...]] = []

    def settle_now(self, spender: Any, hold: Any, samples: list[Sample]) -> None:
        if self.fail:
            raise RuntimeError("store gone")
        self.settled.append((spender, hold, list(samples)))


@pytest.mark.parametrize("fail", [False, True])
def test_release_settles_or_logs_as_access_state_settle_did(fail: bool, caplog: pytest.LogCaptureFixture) -> None:
    ledger = _Ledger(fail)
    state = AccessState(InMemoryRateLimiter(), ledger)  # type: ignore[arg-type]
    key = ClientKey("k", "k1", KeyLimits.defaults(LimitsConfig()), team="t")
    assert state.in_flight.try_acquire("k1", 10, 10) is None
    ticket = Ticket(state, key, 0, 0, 0)
    sample = Sample("m", "a", "a", "chat", True, "ok", 0.0, cost_usd=0.01)
    ticket.tally.samples.append(sample)
    with caplog.at_level(logging.ERROR, logger="gateway.access"):
        ticket.release()
    assert ledger.settled == ([] if fail else [(ticket.spender, None, [sample])])
    assert [r.getMessage() for r in caplog.records] == (
        ["access: a token correction or a settlement failed"] if fail else []
    )
    assert ticket.tally.late is not None  # a late sample still books on its own
    assert state.in_flight.total == 0
