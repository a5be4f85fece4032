"""Every replica's recent answers, one by one: what each replica's beliefs hear of the others' attempts.

The window (``gateway.stats.window``) counts samples per time slice: enough for percentiles, not for a
belief, which takes each answer as one answer, in order, at its time (``gateway.routing.belief``). So beside
the window each store keeps a short log per (model, deployment): the last ``ANSWERS_KEPT`` answers, each the
facts a belief observes of an attempt, tagged with the replica that recorded it (a random id per store, per
process) and numbered by it. A router hears the entries of other replicas it has not heard yet and skips its
own, which it heard directly (``gateway.routing.belief_others``).

Attempts that say nothing of the provider are not kept: a request's own fault (``client_error``) and a
client that left before anything was measured (``client_cancelled`` neither raced nor drained). A stream the
request's deadline cut (``deadline``) is kept: its first token and speed are the provider's.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

from gateway.samples import OUTCOMES, Outcome, Sample
from gateway.types import DeploymentKey

ANSWERS_KEPT = 128
"""Answers kept per deployment: what a replica that refreshes late, or starts cold, can still hear."""

_OUTCOMES: dict[str, Outcome] = {o: o for o in OUTCOMES}


class Answer(NamedTuple):
    """One attempt as a belief hears it (the field names are ``Sample``'s, so either reads the same). A named tuple:
    the stores make one per sample recorded, and a tuple is made in a fraction of a frozen dataclass's time."""

    replica: str
    """The store that recorded it (``InMemoryStatsStore.replica``, ``RedisStatsStore.writer``)."""
    seq: int
    """Its number among that replica's answers: increasing, so "heard up to n" is one number per replica."""
    at: float
    """Wall-clock (unix) time it was recorded: when the attempt ended."""
    outcome: Outcome
    stream: bool = True
    hedged: bool = False
    ttft_s: float | None = None
    tokens_per_s: float | None = None
    output_tokens: int | None = None
    attempt_s: float | None = None
    uncached_tokens: int | None = None
    """Prompt tokens the provider did not serve from its cache (None: it reported no prompt)."""

    @property
    def drained(self) -> bool:
        """An attempt read as far as it went for its measurements, an answer all the same: a cancelled one read on
        (a probe that lost its race), or a stream the request's own deadline cut while it was still coming
        (``deadline``: its speed so far is the provider's)."""
        return (
            self.outcome in ("client_cancelled", "deadline")
            and self.output_tokens is not None
            and self.ttft_s is not None
        )


def tells(sample: Sample) -> bool:
    """Whether ``sample`` says anything of the provider (see the module docstring)."""
    if sample.outcome == "client_error":
        return False
    if sample.outcome == "client_cancelled" and not sample.hedged:
        return sample.output_tokens is not None and sample.ttft_s is not None  # drained
    return True


def answer_of(sample: Sample, replica: str = "", seq: int = 0, at: float = 0.0) -> Answer:
    """What a belief hears of ``sample`` (whether it says anything at all: ``tells``). Made as ``Recorder.answer``
    makes it, without the named tuple's ``__new__`` (the router makes one per attempt finished)."""
    prompt = sample.usage_prompt_tokens
    return tuple.__new__(
        Answer,
        (
            replica,
            seq,
            at,
            sample.outcome,
            sample.stream,
            sample.hedged,
            sample.ttft_s,
            sample.tokens_per_s,
            sample.output_tokens,
            sample.attempt_s,
            None if prompt is None else max(0, prompt - (sample.usage_cached_tokens or 0)),
        ),
    )


def encode(answer: Answer) -> str:
    """One answer as the string kept in Redis: a JSON array of its fields, in order."""
    return json.dumps(answer, separators=(",", ":"))


def decode(raw: str) -> Answer | None:
    """An answer read back from Redis; None for anything a gateway did not write (skipped, not fatal)."""
    try:
        fields = json.loads(raw)
        replica, seq, at, outcome, stream, hedged, ttft, tps, tokens, attempt, uncached = fields
        answer = Answer(
            str(replica),
            int(seq),
            float(at),
            _OUTCOMES[outcome],
            bool(stream),
            bool(hedged),
            _number(ttft),
            _number(tps),
            None if tokens is None else int(tokens),
            _number(attempt),
            None if uncached is None else int(uncached),
        )
    except (ValueError, TypeError, KeyError):
        return None
    return answer if math.isfinite(answer.at) else None


def _number(value: object) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(value)
    return float(value)


class AnswerLog:
    """Per deployment, the last ``ANSWERS_KEPT`` answers, oldest first, and a mark of their state: (the change that
    last replaced them, answers added since). A reader with nothing new to hear compares one mark; one whose mark
    has the same first part reads only the answers added since (``since``). Not thread-safe (one event loop)."""

    __slots__ = ("recent", "marks", "_replaced")

    def __init__(self) -> None:
        self.recent: dict[DeploymentKey, deque[Answer]] = {}
        self.marks: dict[DeploymentKey, tuple[int, int]] = {}
        self._replaced = itertools.count(1)

    def add(self, pair: DeploymentKey, answer: Answer) -> None:
        kept = self.recent.get(pair)
        if kept is None:
            kept = self.recent[pair] = deque(maxlen=ANSWERS_KEPT)
        kept.append(answer)
        replaced, added = self.marks.get(pair, (0, 0))
        self.marks[pair] = (replaced, added + 1)

    def replace(self, pair: DeploymentKey, answers: Sequence[Answer]) -> None:
        """``pair``'s answers as read back (already in order), unless they are the ones kept."""
        kept = self.recent.get(pair)
        if kept is not None and len(kept) == len(answers) and all(a is b for a, b in zip(kept, answers, strict=True)):
            return
        self.recent[pair] = deque(answers[-ANSWERS_KEPT:], maxlen=ANSWERS_KEPT)
        self.marks[pair] = (next(self._replaced), 0)

    def of(self, pair: DeploymentKey) -> Sequence[Answer]:
        return self.recent.get(pair, ())

    def mark(self, pair: DeploymentKey) -> tuple[int, int]:
        """(0, 0) until ``pair`` has answers; then a mark no other state of them had."""
        return self.marks.get(pair, (0, 0))

    def since(self, pair: DeploymentKey, mark: tuple[int, int]) -> tuple[Sequence[Answer], bool]:
        """The answers kept now that were not at ``mark`` (a mark of this log), and True; or, when they were replaced
        since, all of them and False."""
        now = self.mark(pair)
        kept = self.recent.get(pair, ())
        if now[0] != mark[0]:
            return kept, False
        return list(itertools.islice(reversed(kept), now[1] - mark[1]))[::-1], True


NO_ANSWERS = AnswerLog()
"""The log of a snapshot built from counts alone (tests, ``StatsSnapshot.from_samples``): never written."""


class Recorder:
    """One replica's tag and numbering of the answers it records."""

    __slots__ = ("replica", "_seq")

    def __init__(self, replica: str) -> None:
        self.replica = replica
        self._seq = itertools.count(1)

    def answer(self, sample: Sample, at: float) -> Answer | None:
        """``sample`` as this replica's next answer; None when it tells nothing (``tells``).

        ``tells`` and ``answer_of``, inline: the stores call this once per sample recorded."""
        outcome = sample.outcome
        if outcome == "client_error":
            return None
        output, ttft = sample.output_tokens, sample.ttft_s
        if outcome == "client_cancelled" and not sample.hedged and (output is None or ttft is None):
            return None  # neither raced nor drained
        prompt = sample.usage_prompt_tokens
        # ``Answer(...)`` without the named tuple's generated ``__new__`` (a Python frame): the same tuple, of the
        # same class, every field given in order.
        return tuple.__new__(
            Answer,
            (
                self.replica,
                next(self._seq),
                at,
                outcome,
                sample.stream,
                sample.hedged,
                ttft,
                sample.tokens_per_s,
                output,
                sample.attempt_s,
                None if prompt is None else max(0, prompt - (sample.usage_cached_tokens or 0)),
            ),
        )
