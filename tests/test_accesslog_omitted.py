"""The access line's ``omitted_tools`` taken from the upstream API ``write`` found is ``record.omitted_tools()``.

``AccessLog._taken`` no longer asks the record (which finds the answering deployment's API again): an answer in
the client's own API, or none, left no tool out; a translated one reads the request's list. Over random records
(native, translated and unreachable deployments, each built-in tool choice, omitted lists present or not, no
request or no winner) the two agree.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from gateway.accesslog import AccessLog, AccessRecord
from gateway.config import DeploymentConfig
from gateway.metrics.series import Metrics
from gateway.relay import AttemptLog, ProxyRequest
from gateway.relay.outbound import translation_key
from gateway.translate.ir import TRANSLATABLE

APIS: tuple[Any, ...] = ("chat", "completions", "embeddings", "responses", "messages")


def _record(rng: random.Random, index: int) -> AccessRecord:
    endpoint = rng.choice(APIS)
    deployment = DeploymentConfig(
        provider="p",
        model="m",
        apis=tuple(rng.sample(APIS, rng.randint(1, 3))),
        translate=rng.random() < 0.7,
        builtin_tools=rng.choice(["refuse", "omit"]),
    )
    omitted: dict[str, tuple[str, ...]] = {}
    for target in TRANSLATABLE:
        if rng.random() < 0.6:
            omitted[translation_key(target, deployment)] = tuple(rng.sample(["web_search", "code", "bash"], 2))
    kept = omitted if rng.random() < 0.8 else {}
    request = ProxyRequest(f"r{index}", endpoint, "/x", {"model": "m"}, False, "m", 0.0, omitted_tools=kept)
    record = AccessRecord(f"r{index}", endpoint, 0.0, lambda: 0.0)
    record.request = request if rng.random() < 0.9 else None
    if rng.random() < 0.9:
        log = AttemptLog(status=200)
        log.winner = SimpleNamespace(deployment=deployment) if rng.random() < 0.9 else None  # type: ignore[assignment]
        record.log = log
    return record


def test_the_taken_omitted_tools_are_the_records() -> None:
    rng = random.Random("omitted")
    log = AccessLog(Metrics(process_metrics=False), wall_clock=lambda: 0.0)
    said = 0
    for index in range(5000):
        record = _record(rng, index)
        taken = log._taken(record, 0.1, None, record.winner(), record.status, record.upstream_api())
        assert taken[4] == record.omitted_tools()
        said += taken[4] is not None
    assert said > 100  # translated answers that left tools out were among them
