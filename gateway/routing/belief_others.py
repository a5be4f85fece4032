"""What the other replicas heard: each of their answers, told to this replica's beliefs once, in order.

Replicas of one gateway split the traffic, and a belief told only its own replica's answers learns from
its share alone. Every store keeps the last answers one by one, tagged with the replica that recorded them
(``gateway.stats.answers``); ``OthersAnswers`` picks out of a snapshot's log the entries of other replicas
this router has not heard yet. The router tells them to its beliefs by the rule its own answers follow
(``belief_attempts.tell``), each at its own time.

Why at plan time, from the snapshot the plan reads anyway: that is when a belief is read, the snapshot is
already local (a store reads Redis in its background refresh, never on the request's path), and a
deployment whose log has not changed since is passed over by comparing one mark. A router has no
refresh of its own to hang this on, and the store, which does, knows nothing of beliefs. Its own answers
are skipped by their tag: it heard them as they ended (``attempt_finished``).
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.stats.answers import Answer
from gateway.stats.snapshot import StatsSnapshot
from gateway.types import DeploymentKey


class OthersAnswers:
    """Per deployment, the log's mark last read, and per replica in its log the number of its last answer heard.

    A log only grows at its end between reads, or is replaced by a fresh read of everyone's (Redis); after a growth
    only the answers added are looked at, after a replacement all, and a replica gone from the log is forgotten
    (a log only loses its oldest entries, so none of those heard comes back)."""

    __slots__ = ("_marks", "_heard")

    def __init__(self) -> None:
        self._marks: dict[DeploymentKey, tuple[int, int]] = {}
        self._heard: dict[DeploymentKey, dict[str, int]] = {}

    def new(self, snapshot: StatsSnapshot, pairs: Iterable[DeploymentKey]) -> list[tuple[DeploymentKey, Answer]]:
        """The answers of ``pairs`` recorded by other replicas and not yet heard here, each deployment's in the
        log's order, from now on counted as heard."""
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
