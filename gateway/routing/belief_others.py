"""What the other replicas heard: each of their answers, told to this replica's beliefs once, in order.

Every store keeps the last answers, tagged with the replica that recorded them (``gateway.stats.answers``);
``OthersAnswers`` picks out the ones of other replicas not heard yet. It runs at plan time on the snapshot the plan
reads anyway (already local), where an unchanged log is passed over by comparing one mark.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gateway.config import ModelConfig
from gateway.stats.answers import Answer
from gateway.stats.snapshot import StatsSnapshot
from gateway.types import DeploymentKey


class _PairHeard:
    """One deployment's reading of the log: the mark last read and, per replica, the sequence number of its last
    answer heard. One object per deployment, so that a read finds both without a look-up by the pair's tuple."""

    __slots__ = ("mark", "replicas")

    def __init__(self) -> None:
        self.mark: tuple[int, int] = (0, 0)  # what ``log.mark`` says of a deployment with no answers yet
        self.replicas: dict[str, int] = {}


class OthersAnswers:
    """Per deployment, the log's mark last read and, per replica, the sequence number of its last answer heard.

    A log grows at its end or is replaced whole (a fresh read from Redis): after a growth only the new answers are
    read, after a replacement all, and a replica gone from the log is forgotten."""

    __slots__ = ("_read", "_pairs")

    def __init__(self) -> None:
        self._read: dict[DeploymentKey, _PairHeard] = {}
        self._pairs: dict[str, tuple[ModelConfig, list[tuple[DeploymentKey, _PairHeard]]]] = {}
        """Each model's deployments' keys with their readings, found once per model as configured."""

    def new_of(self, snapshot: StatsSnapshot, model: ModelConfig) -> list[tuple[DeploymentKey, Answer]]:
        """``new`` of every deployment of ``model``, in its configured order."""
        kept = self._pairs.get(model.name)
        if kept is None or kept[0] is not model:
            kept = self._pairs[model.name] = (model, [self._of((model.name, d.name)) for d in model.deployments])
        return self._new(snapshot, kept[1])

    def new(self, snapshot: StatsSnapshot, pairs: Iterable[DeploymentKey]) -> list[tuple[DeploymentKey, Answer]]:
        """The answers of ``pairs`` recorded by other replicas and not heard here yet, in log order; now heard."""
        return self._new(snapshot, [self._of(pair) for pair in pairs])

    def _of(self, pair: DeploymentKey) -> tuple[DeploymentKey, _PairHeard]:
        read = self._read.get(pair)
        if read is None:
            read = self._read[pair] = _PairHeard()
        return pair, read

    def _new(
        self, snapshot: StatsSnapshot, pairs: list[tuple[DeploymentKey, _PairHeard]]
    ) -> list[tuple[DeploymentKey, Answer]]:
        log, me = snapshot.answers, snapshot.replica
        marks = log.marks
        new: list[tuple[DeploymentKey, Answer]] = []
        for pair, read in pairs:
            mark = marks.get(pair, (0, 0))  # ``log.mark(pair)``, read in place: (0, 0) with no answers yet
            last = read.mark
            if mark == last:
                continue
            read.mark = mark
            answers: Sequence[Answer]
            if mark[0] == last[0] and mark[1] - last[1] == 1:
                # One answer added (most often the one this replica just recorded): ``log.since``'s answer, its
                # last, read in place.
                kept = log.recent.get(pair)
                answers, grown = ([kept[-1]] if kept else []), True
            else:
                answers, grown = log.since(pair, last)
            before = read.replicas
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
            read.replicas = heard
        return new
