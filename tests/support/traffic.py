"""Streaming clients that keep a gateway busy until told to stop, bounded in count and time.

For the tests that break something (Redis, a node, a provider) under load and then count what
was lost: every answer is either counted as ``ok`` or kept in ``failures``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import openai

from tests.support.wait import wait_until

THREADS = 4
MAX_REQUESTS = 2_000
"""Per thread; the tests stop the traffic long before."""


class Traffic:
    """``threads`` clients spread over ``base_urls`` (replicas) and ``models``, streaming until ``stop``."""

    def __init__(
        self,
        base_urls: Sequence[str],
        *,
        models: Sequence[str] = ("m",),
        api_key: str = "unused",
        time_limit_s: float = 60.0,
        threads: int = THREADS,
    ) -> None:
        self.clients = [openai.OpenAI(base_url=url, api_key=api_key, max_retries=0) for url in base_urls]
        self.models = tuple(models)
        self.time_limit_s = time_limit_s
        self.ok = 0
        self.failures: list[BaseException] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(threads)]

    def _run(self, thread: int) -> None:
        deadline = time.monotonic() + self.time_limit_s
        for i in range(MAX_REQUESTS):
            if self.stop.is_set() or time.monotonic() > deadline:
                return
            client = self.clients[(thread + i) % len(self.clients)]
            model = self.models[(thread // len(self.clients) + i) % len(self.models)]
            try:
                stream = client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": f"q{i}"}], stream=True
                )
                text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
                assert text, "empty answer"
            except (openai.APIError, AssertionError) as exc:
                with self.lock:
                    self.failures.append(exc)
            else:
                with self.lock:
                    self.ok += 1

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def served_more_than(self, count: int) -> Callable[[], bool]:
        return lambda: self.ok > count

    def keep_going(self, more: int, what: str) -> None:
        """Wait until ``more`` further requests have been answered."""
        served = self.ok
        wait_until(self.served_more_than(served + more), timeout=30, what=what)
