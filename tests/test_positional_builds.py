"""The per-attempt objects built positionally are the ones their keyword builds made, field for field.

``gateway.frozen.positional_maker`` builds a frozen, slotted dataclass through a plain twin and a class swap, and
``AttemptRunner.record``, ``reading_of`` and ``read_full_reply`` now pass every field in order rather than by
name. Each is held here to the former keyword build (copied) over random inputs whose every field differs, so a
value put in another field's place fails.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import pickle
import random
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.admission.ratelimit import Counts, InMemoryRateLimiter, RateDecision, decide
from gateway.admission.spending.store import Booking
from gateway.dialects.base import CallParts, Tally
from gateway.frozen import positional_maker
from gateway.reading import Reading, reading_of
from gateway.relay import runner as runner_module
from gateway.relay.runner import AttemptRunner
from gateway.samples import Sample, sample_from_fields
from gateway.tokens import load_token_counter

COUNTER = load_token_counter("o200k_base")


def _value(rng: random.Random, kind: str) -> Any:
    """A random value of a field's kind: distinct from any other field's with near certainty."""
    choices: dict[str, Any] = {
        "str": lambda: f"s{rng.getrandbits(40)}",
        "float": lambda: rng.uniform(-1e6, 1e6),
        "int": lambda: rng.getrandbits(31),
        "bool": lambda: rng.random() < 0.5,
        "gaps": lambda: tuple(rng.random() for _ in range(rng.randrange(4))),
    }
    return choices[kind]()


SAMPLE_KINDS = {
    "model": "str",
    "deployment": "str",
    "provider": "str",
    "endpoint": "str",
    "stream": "bool",
    "outcome": "str",
    "started_at": "float",
    "status": "int",
    "ttft_s": "float",
    "first_answer_s": "float",
    "tokens_per_s": "float",
    "e2e_s": "float",
    "output_tokens": "int",
    "usage_prompt_tokens": "int",
    "usage_completion_tokens": "int",
    "usage_cached_tokens": "int",
    "prompt_tokens_estimate": "int",
    "cost_usd": "float",
    "hedged": "bool",
    "attempt_s": "float",
    "chunk_gaps_s": "gaps",
    "kind": "str",
    "validity": "str",
}


def _random_fields(rng: random.Random, kinds: dict[str, str]) -> dict[str, Any]:
    """Each field's random value, or None (a third of the optional ones: the unmeasured case)."""
    return {
        name: None if rng.random() < 0.3 and kind in ("float", "int") else _value(rng, kind)
        for name, kind in kinds.items()
    }


def test_the_sample_kinds_are_the_sample_fields() -> None:
    assert list(SAMPLE_KINDS) == [field.name for field in dataclasses.fields(Sample)]


@pytest.mark.parametrize(
    ("cls", "kinds"),
    [
        (Sample, SAMPLE_KINDS),
        (RateDecision, {"allowed": "bool", "window": "int", "limit": "str", "retry_after_s": "float", "tokens": "int"}),
        (
            Booking,
            {"key_id": "str", "team": "str", "model": "str", "provider": "str", "deployment": "str", "cost": "int"},
        ),
    ],
)
def test_the_positional_maker_makes_what_the_class_makes(cls: type[Any], kinds: dict[str, str]) -> None:
    rng = random.Random(cls.__name__)
    make = positional_maker(cls)
    for _ in range(2000):
        fields = _random_fields(rng, kinds)
        made, built = make(*fields.values()), cls(**fields)
        assert type(made) is cls
        assert made == built and hash(made) == hash(built) and repr(made) == repr(built)
        assert dataclasses.astuple(made) == tuple(fields.values())
        assert pickle.loads(pickle.dumps(made)) == built and copy.copy(made) == built
        name = next(iter(fields))
        assert dataclasses.replace(made, **{name: "other"}) == dataclasses.replace(built, **{name: "other"})
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made, name, "changed")
    with pytest.raises(TypeError):
        make(*fields.values(), 1)  # one too many
    with pytest.raises(TypeError):
        make(*list(fields.values())[:-1])  # every field is required


def test_the_positional_maker_refuses_what_its_twin_cannot_stand_for() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class Derived:
        a: int
        b: int = dataclasses.field(init=False, default=0)

    for cls in (Mutable, Unslotted, Checked, Derived):
        with pytest.raises(TypeError):
            positional_maker(cls)


# -- InMemoryRateLimiter.acquire --------------------------------------------------------------------------------


class _FormerLimiter(InMemoryRateLimiter):
    """``acquire`` as it was (copied): each decision built by keyword."""

    async def acquire(
        self, key_id: str, tokens: int, rpm: int, tpm: int, likely_tokens: int | None = None
    ) -> RateDecision:
        now = self.wall_clock()
        window = int(now // 60)
        if not rpm and not tpm:
            return RateDecision(True, window, tokens=tokens)
        c = self._counters(key_id, window)
        counts = Counts(c.previous_requests, c.current_requests, c.previous_tokens, c.current_tokens)
        limit, wait = decide(counts, tokens, rpm, tpm, now)
        if limit == "tokens" and likely_tokens is not None and likely_tokens < tokens:
            tokens = likely_tokens
            limit, wait = decide(counts, tokens, rpm, tpm, now)
        if limit is not None:
            return RateDecision(False, window, limit, wait)
        c.current_requests += 1
        c.current_tokens += tokens
        return RateDecision(True, window, tokens=tokens)


def test_the_limiter_decides_what_the_keyword_builds_decided() -> None:
    rng = random.Random("limiter")
    now = [1_796_000_000.0]
    limiter, former = InMemoryRateLimiter(lambda: now[0]), _FormerLimiter(lambda: now[0])
    allowed = 0

    async def run() -> None:
        nonlocal allowed
        for _ in range(5000):
            now[0] += rng.expovariate(20.0)
            call = (
                rng.choice("abc"), rng.randrange(1, 400), rng.choice([0, 5, 50]), rng.choice([0, 500, 5000]),
                rng.choice([None, rng.randrange(1, 100)]),
            )  # fmt: skip
            decision = await limiter.acquire(*call)
            assert type(decision) is RateDecision and decision == await former.acquire(*call)
            allowed += decision.allowed

    asyncio.run(run())
    assert 500 < allowed < 4500  # refusals and admissions both came


# -- AttemptRunner.record -----------------------------------------------------------------------------------------


class _Clock:
    """Returns 1000, 2000, ... in turn: each reading of the clock is told apart."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1000.0
        return self.now


def _former_sample(request: Any, attempt: Any, outcome: Any, reading: Reading, status: Any, cost: Any, validity: Any,
                   clock: Any) -> Sample:  # fmt: skip
    """The ``Sample`` as ``AttemptRunner.record`` built it before (copied), by keyword."""
    candidate = attempt.candidate
    expects = request.expects
    return Sample(
        model=request.requested_model,
        deployment=candidate.deployment.name,
        provider=candidate.provider.name,
        endpoint=request.endpoint,
        stream=request.stream,
        outcome=outcome,
        started_at=attempt.started_wall,
        status=status if status is not None else attempt.status,
        ttft_s=reading.ttft_s,
        first_answer_s=reading.first_answer_s,
        tokens_per_s=reading.tokens_per_s,
        e2e_s=clock() - request.received_at,
        output_tokens=reading.output_tokens,
        usage_prompt_tokens=reading.usage_prompt_tokens,
        usage_completion_tokens=reading.usage_completion_tokens,
        usage_cached_tokens=reading.usage_cached_tokens,
        prompt_tokens_estimate=request.prompt_tokens,
        cost_usd=cost,
        hedged=attempt.hedged,
        attempt_s=clock() - attempt.sent_at,
        chunk_gaps_s=reading.chunk_gaps_s,
        kind=expects.kind if expects.judged else None,
        validity=validity,
    )


class _Sink:
    def __init__(self) -> None:
        self.samples: list[Sample] = []

    def record(self, sample: Sample) -> None:
        self.samples.append(sample)


def test_record_builds_the_sample_the_keyword_build_built(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random("record")
    verdicts: list[Any] = []
    monkeypatch.setattr(runner_module, "verdict", lambda request, outcome, reading: verdicts[-1])
    sink = _Sink()
    clock = _Clock()
    router = SimpleNamespace(attempt_finished=lambda *args, **kwargs: None)
    upstreams: defaultdict[str, SimpleNamespace] = defaultdict(lambda: SimpleNamespace(thought_signers=set()))
    runner = AttemptRunner(upstreams, router, sink, COUNTER, clock=clock)  # type: ignore[arg-type]
    for _ in range(1000):
        price = rng.uniform(0.0, 1.0)
        deployment = SimpleNamespace(
            name=_value(rng, "str"), model="upstream-m", cost_usd=lambda p, o, c=0, price=price: (p + o + c) * price
        )
        candidate = SimpleNamespace(
            deployment=deployment, provider=SimpleNamespace(name=_value(rng, "str")), model="m", name=deployment.name,
            prefill_tokens_per_s=None,
        )  # fmt: skip
        request = SimpleNamespace(
            requested_model=_value(rng, "str"), endpoint=_value(rng, "str"), stream=_value(rng, "bool"),
            received_at=_value(rng, "float"), prompt_tokens=_value(rng, "int"),
            expects=SimpleNamespace(kind=_value(rng, "str"), judged=_value(rng, "bool")),
            trace=SimpleNamespace(samples=[], answer_text=None, provider_timings=None), probe=False, session_key=None,
            body=b"{}",
        )  # fmt: skip
        attempt = SimpleNamespace(
            candidate=candidate, started_wall=_value(rng, "float"), status=rng.choice([None, _value(rng, "int")]),
            hedged=_value(rng, "bool"), sent_at=_value(rng, "float"), rate_limits=None, recorded=False,
        )  # fmt: skip
        fields = _random_fields(rng, READING_KINDS)
        fields["usage_prompt_tokens"] = _value(rng, "int")  # the prompt from usage: no prompt to count
        reading = Reading(**fields)
        outcome = rng.choice(["ok", "upstream_error", "timeout"])
        status = rng.choice([None, _value(rng, "int")])
        verdicts.append(rng.choice([None, "valid", "empty"]))
        clock.now = 0.0
        sample = runner.record(request, attempt, outcome, reading, status)  # type: ignore[arg-type]
        clock.now = 0.0
        expected = _former_sample(request, attempt, outcome, reading, status, sample.cost_usd, verdicts[-1], clock)
        assert type(sample) is Sample and sample == expected
        assert sink.samples[-1] is sample
        if outcome == "ok" or reading.usage_completion_tokens or reading.output_tokens:
            assert sample.cost_usd is not None
    assert {s.cost_usd is None for s in sink.samples} == {True, False}


# -- reading_of ---------------------------------------------------------------------------------------------------

READING_KINDS = {
    "ttft_s": "float",
    "first_answer_s": "float",
    "last_answer_s": "float",
    "tokens_per_s": "float",
    "output_tokens": "int",
    "answer_text": "str",
    "usage_prompt_tokens": "int",
    "usage_completion_tokens": "int",
    "usage_cached_tokens": "int",
    "usage_cache_creation_tokens": "int",
    "finished": "bool",
    "incomplete": "bool",
    "saw_done": "bool",
    "error_message": "str",
    "response_model": "str",
    "response_id": "str",
    "malformed": "bool",
    "tool_calls": "bool",
    "provider_timings": "str",
    "last_sequence": "int",
    "chunk_gaps_s": "gaps",
    "calls": "gaps",
    "stop": "str",
    "thought_signed": "bool",
}


def test_the_reading_kinds_are_the_reading_fields() -> None:
    assert list(READING_KINDS) == list(Reading.__struct_fields__)


def _former_reading_of(tally: Tally, sent: float, saw_done: bool) -> Reading:
    """``reading_of`` as it was (copied), by keyword."""
    text = "".join(tally.answer)
    tokens = COUNTER.count(text)
    events = tally.output_events
    tokens_per_s = None
    first, last = tally.first_answer_at, tally.last_answer_at
    if tokens >= 2 and first is not None and last is not None:
        window = last - first
        tokens_per_s = tokens / window if window > 0 else None
    return Reading(
        ttft_s=None if tally.first_output_at is None else tally.first_output_at - sent,
        first_answer_s=None if first is None else first - sent,
        last_answer_s=None if last is None else last - sent,
        tokens_per_s=tokens_per_s,
        output_tokens=tokens,
        answer_text=text,
        usage_prompt_tokens=tally.usage_prompt,
        usage_completion_tokens=tally.usage_completion,
        usage_cached_tokens=tally.usage_cached,
        usage_cache_creation_tokens=tally.usage_cache_creation,
        finished=tally.finished,
        incomplete=tally.incomplete,
        saw_done=saw_done,
        error_message=tally.error_message,
        response_model=tally.response_model,
        response_id=tally.response_id,
        malformed=tally.malformed,
        tool_calls=tally.tool_calls,
        provider_timings=tally.provider_timings,
        last_sequence=tally.last_sequence,
        chunk_gaps_s=tuple(b - a for a, b in zip(events, events[1:], strict=False)),
        calls=tally.tool_call_list() if tally.calls else (),
        stop=tally.stop,
    )


def _random_tally(rng: random.Random) -> Tally:
    def maybe(kind: str) -> Any:
        return None if rng.random() < 0.3 else _value(rng, kind)

    tally = Tally(
        answer=[f" w{rng.getrandbits(20)}" for _ in range(rng.randrange(6))],
        first_output_at=maybe("float"), first_answer_at=maybe("float"), last_answer_at=maybe("float"),
        usage_prompt=maybe("int"), usage_completion=maybe("int"), usage_cached=maybe("int"),
        usage_cache_creation=maybe("int"), finished=_value(rng, "bool"), incomplete=_value(rng, "bool"),
        error_message=maybe("str"), response_model=maybe("str"), response_id=maybe("str"),
        malformed=_value(rng, "bool"), tool_calls=_value(rng, "bool"),
        provider_timings=None if rng.random() < 0.5 else {"timings": {"n": _value(rng, "int")}},
        last_sequence=maybe("int"), output_events=sorted(rng.random() for _ in range(rng.randrange(5))),
        stop=rng.choice([None, "stop", "length", "tool"]),
    )  # fmt: skip
    if rng.random() < 0.3:
        tally.calls = {(0, 0): CallParts(_value(rng, "str"), ["{", "}"])}
    return tally


def test_reading_of_reads_what_the_keyword_build_read() -> None:
    rng = random.Random("reading")
    for _ in range(3000):
        tally = _random_tally(rng)
        sent, saw_done = rng.uniform(0, 100), _value(rng, "bool")
        assert reading_of(tally, COUNTER, sent, saw_done) == _former_reading_of(tally, sent, saw_done)


def test_sample_from_fields_is_the_sample_maker() -> None:
    fields = _random_fields(random.Random("one"), SAMPLE_KINDS)
    assert sample_from_fields(*fields.values()) == Sample(**fields)
