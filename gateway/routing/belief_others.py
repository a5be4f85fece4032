"""What the other replicas heard: each of their answers, told to this replica's beliefs once, in order.

Every store keeps the last answers, tagged with the replica that recorded them (``gateway.stats.answers``);
``OthersAnswers`` picks out the ones of other replicas not heard yet. It runs at plan time on the snapshot the plan
reads anyway (already local), where an unchanged log is passed over by comparing one mark.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.stats.answers import Answer
from gateway.stats.snapshot import StatsSnapshot
from gateway.types import DeploymentKey


class OthersAnswers:
    """Per deployment, the log's mark last read and, per replica, the sequence number of its last answer heard.

    A log grows at its end or is replaced whole (a fresh read from Redis): after a growth only the new answers are
    read, after a replacement all, and a replica gone from the log is forgotten."""

    __slots__ = ("_marks", "_heard")

    def __init__(self) -> None:
        self._marks: dict[DeploymentKey, tuple[int, int]] = {}
        self._heard: dict[DeploymentKey, dict[str, int]] = {}

    def new(self, snapshot: StatsSnapshot, pairs: Iterable[DeploymentKey]) -> list[tuple[DeploymentKey, Answer]]:
        """The answers of ``pairs`` recorded by other replicas and not heard here yet, in log order; now heard."""
        log, me = snapshot.answers, snapshot.replica
        new: list[tuple[DeploymentKey, Answer]] = []
        for pair in pairs:
            mark = log.mark(pair)
            last = self._marks.get(pair, (0, 0))
            if mark == last:
                continue
            self._marks[pair] = mark
            answers, grown = log.since(pair, last)
            before = self._heard.get(pair, {})
            heard = before if grown else {}
            for answer in answers:
                replica = answer.replica
                if replica == me:
                    continue
                seq = heard.get(replica)
                if seq is None:
                    seq = before.get(replica, 0)
                if answer.seq > seq:
                    new.append((pair, answer))
                    seq = answer.seq
                heard[replica] = seq
            self._heard[pair] = heard
        return new
