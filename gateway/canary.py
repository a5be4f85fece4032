"""The canary: a few built-in tasks per deployment on a schedule, within a daily token budget (``[canary]``).

Every ``interval_s`` each deployment that speaks chat answers one of the built-in structured tasks
(``gateway.bench.tasks``, in turn), called directly as ``gateway bench`` calls it, at temperature 0. Its
answer is measured and judged as relayed answers are, and recorded as a ``Sample`` (with its request kind
and verdict) into the runtime's sinks: the stats window's valid rate per kind, and so the router, learns
of a provider whose answers broke with no user traffic. Whether it was exactly right is logged (and
counted in ``Canary.counts``) beside it.

Tokens (the provider's reported prompt and output, else the gateway's estimates) are counted per UTC day;
a round that could pass ``daily_tokens`` (its prompt estimate plus its output ceiling, per deployment)
is skipped until the next day. Each gateway process runs its own canary (so do the workers of one host).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping

import aiohttp

from gateway.background import every, words
from gateway.bench.command import samples_for_store, targets_from_config
from gateway.bench.runner import BenchError, BenchRunner, BenchSettings, RequestResult
from gateway.bench.tasks import builtin_tasks
from gateway.conditions import ConditionLog
from gateway.config import GatewayConfig
from gateway.samples import SampleSink
from gateway.tokens import TokenCounter
from gateway.types import Clock

logger = logging.getLogger("gateway.canary")
CANARY_MAX_TOKENS = 64
"""The tasks' answers are a word, a number or a small object: 64 tokens is ample, and bounds what a round costs."""
DAY_S = 86_400


class Canary:
    """Runs rounds until closed. ``config``, ``sink`` and ``counter`` are read at each round (a reload applies).

    Usage::

        canary = Canary(lambda: runtime.config, lambda: runtime.sink, lambda: runtime.counter, environ)
        canary.start()          # the first round after interval_s
        await canary.round()    # one round now (tests)
        await canary.aclose()
    """

    def __init__(
        self,
        config: Callable[[], GatewayConfig],
        sink: Callable[[], SampleSink],
        counter: Callable[[], TokenCounter],
        environ: Mapping[str, str],
        wall_clock: Clock = time.time,
    ) -> None:
        self.config = config
        self.sink = sink
        self.counter = counter
        self.environ = environ
        self.wall_clock = wall_clock
        self.tasks = builtin_tasks()
        self.rounds = 0
        self.day = -1
        self.spent = 0
        """Tokens spent on ``day`` (days since the epoch, UTC)."""
        self.failures: ConditionLog[str] = ConditionLog(logger)
        """How rounds fail, said once per change (``gateway.conditions``)."""
        self.counts: Counter[str] = Counter()
        """Answers by result: ``correct``, ``wrong``, ``failed``, and rounds ``skipped`` for the budget."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="canary")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        # An unexpected error in a round is logged and the next round runs: the canary never stops for good.
        await every(self._interval, self._tick, "canary round")

    def _interval(self) -> float:
        settings = self.config().canary
        return settings.interval_s if settings is not None else 60.0

    async def _tick(self) -> None:
        if self.config().canary is None:
            return
        try:
            await self.round()
        except (aiohttp.ClientError, BenchError, OSError) as exc:  # expected: the round's targets failed
            # Said once per way of failing, and once when rounds succeed again: not at every interval.
            self.failures.holds("round", words(exc), "canary round failed: %s", exc)
        else:
            self.failures.ended("round", "canary rounds succeed again")

    async def round(self) -> list[RequestResult]:
        """One task per deployment now, if the day's budget allows it; the results."""
        config = self.config()
        settings = config.canary
        if settings is None:
            return []
        day = int(self.wall_clock() // DAY_S)
        if day != self.day:
            self.day, self.spent = day, 0
        targets = targets_from_config(config, self.environ)
        if not targets:
            return []
        task_index = self.rounds % len(self.tasks)
        task = self.tasks[task_index]
        bench = BenchSettings(requests=1, max_tokens=CANARY_MAX_TOKENS, timeout_s=60.0)
        runner = BenchRunner(targets, [], bench, self.counter(), tasks=[task])
        estimate = len(str(task.request)) // 4 + CANARY_MAX_TOKENS
        if self.spent + estimate * len(targets) > settings.daily_tokens:
            self.counts["skipped"] += 1
            logger.info("canary: round skipped, %d of %d tokens spent today", self.spent, settings.daily_tokens)
            return []
        self.rounds += 1
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
            results = await asyncio.gather(*(runner.measure(session, target, 0) for target in targets))
        sink = self.sink()
        for target, result in zip(targets, results, strict=True):
            prompt = result.usage_prompt_tokens or result.prompt_tokens_estimate or 0
            output = result.usage_completion_tokens or result.output_tokens or 0
            self.spent += prompt + output
            verdict = "failed" if result.outcome != "ok" else ("correct" if result.correct else "wrong")
            self.counts[verdict] += 1
            logger.info("canary: %s task %s: %s (%s)", target.name, task.name, verdict, result.validity or "-")
            for sample in samples_for_store([target], [result]):
                sink.record(sample)
        return list(results)
