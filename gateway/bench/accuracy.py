"""The task benchmark's report: each target's exact-task accuracy beside its speed (``gateway bench --tasks``).

Accuracy is exactly right answers ÷ tasks sent, failures and timeouts in the denominator (a task that
got no answer was not done), as the seed benchmark counts it. Beside it: valid answers (``gateway.quality``)
÷ complete answers, the top reason for the others, and the target's median first token and speed over the
same requests.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from gateway import tables
from gateway.bench.runner import BenchTarget, RequestResult


@dataclass(frozen=True, slots=True)
class AccuracySummary:
    target: str
    tasks: int
    """Tasks sent (one request each)."""
    correct: int
    accuracy: float | None
    """``correct`` ÷ ``tasks`` (None: no task sent)."""
    failed: int
    """Requests that got no complete answer (errors, timeouts, broken streams)."""
    valid_rate: float | None
    """Valid ÷ complete answers (None: none complete)."""
    invalid_reason: str | None
    ttft_p50_s: float | None
    tps_p50: float | None
    wrong: tuple[str, ...] = ()
    """The names of the tasks it got wrong (or got no answer to)."""


def summarize_accuracy(
    targets: Sequence[BenchTarget], results: Sequence[RequestResult], names: Sequence[str]
) -> list[AccuracySummary]:
    """One summary per target, most accurate first (ties: the faster first)."""
    summaries = []
    for target in targets:
        mine = [r for r in results if r.target == target.name]
        complete = [r for r in mine if r.outcome == "ok"]
        judged = [r for r in complete if r.validity is not None]
        reasons = Counter(r.validity for r in judged if r.validity != "valid")
        ttfts = [r.ttft_s for r in complete if r.ttft_s is not None]
        speeds = [r.tokens_per_s for r in complete if r.tokens_per_s is not None]
        correct = sum(1 for r in mine if r.correct)
        summaries.append(
            AccuracySummary(
                target=target.name,
                tasks=len(mine),
                correct=correct,
                accuracy=correct / len(mine) if mine else None,
                failed=len(mine) - len(complete),
                valid_rate=sum(r.validity == "valid" for r in judged) / len(judged) if judged else None,
                invalid_reason=reasons.most_common(1)[0][0] if reasons else None,
                ttft_p50_s=statistics.median(ttfts) if ttfts else None,
                tps_p50=statistics.median(speeds) if speeds else None,
                wrong=tuple(names[r.prompt] for r in sorted(mine, key=lambda r: r.index) if not r.correct),
            )
        )
    summaries.sort(key=lambda s: (-(s.accuracy or 0.0), -(s.tps_p50 or 0.0)))
    return summaries


HEADER = ("Target", "Accuracy", "Correct", "Failed", "Valid answers", "TTFT p50", "Tokens/s p50", "Wrong")


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def format_accuracy(summaries: Sequence[AccuracySummary]) -> str:
    rows = []
    for s in summaries:
        valid = _share(s.valid_rate) + (f" {s.invalid_reason}" if s.invalid_reason else "")
        ttft = "-" if s.ttft_p50_s is None else f"{s.ttft_p50_s * 1000:,.0f} ms"
        speed = "-" if s.tps_p50 is None else f"{s.tps_p50:,.1f}"
        wrong = ", ".join(s.wrong[:4]) + (f" +{len(s.wrong) - 4}" if len(s.wrong) > 4 else "")
        rows.append([s.target, _share(s.accuracy), f"{s.correct}/{s.tasks}", str(s.failed), valid, ttft, speed, wrong])
    return tables.format_table(HEADER, rows)
