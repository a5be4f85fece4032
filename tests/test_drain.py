"""Drained losers: a race's losing probe (or a leader on trial) is read on, unseen, until its stream is measured.

Real gateways on loopback over the fake provider, the OpenAI SDK as the client. A cold start
races every deployment with nothing measured; the first token wins and the others are drained:
their samples carry their real first token and tokens/s, the client sees only the winner's
answer, and each drained stream is closed once measured.
"""

from __future__ import annotations

import httpx
import pytest

from gateway.fakes import FakeBehavior
from gateway.routing.worth import DRAIN_EVENTS
from gateway.runtime import runtime_of
from gateway.samples import Sample
from tests.routing_sim import ADMIN_KEY, Sim, SimProvider, Sims, sims_fixture  # noqa: F401 (the sims fixture)
from tests.support.wait import wait_until


def routes(sim: Sim) -> dict[str, dict[str, object]]:
    body = httpx.get(sim.gateway.url + "/v1/gateway/routes", headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()
    return {row["deployment"]: row for row in body["data"][0]["deployments"]}


def idle(sim: Sim) -> bool:
    """No upstream stream open at any fake, and no attempt in flight in the router."""
    in_flight = sum(int(str(row["in_flight"])) for row in routes(sim).values())
    return in_flight == 0 and all(f.app.state.open_streams == 0 for f in sim.fakes.values())


def by_deployment(sim: Sim, n: int) -> dict[str, Sample]:
    wait_until(lambda: len(sim.samples.samples) >= n, what=f"{n} samples")
    return {s.deployment: s for s in sim.samples.samples}


def paced(ttft_s: float, tokens_per_s: float, output_tokens: int = 40, chunk_tokens: int = 1) -> FakeBehavior:
    return FakeBehavior(
        ttft_s=ttft_s, tokens_per_s=tokens_per_s, output_tokens=output_tokens, chunk_tokens=chunk_tokens
    )


def test_a_cold_start_races_every_deployment_and_measures_the_losers_streams(sims: Sims) -> None:
    sim = sims.start(
        [
            SimProvider("quick", paced(0.01, 400.0)),
            SimProvider("late", paced(0.25, 2000.0)),  # later to its first token, far faster to stream
            SimProvider("later", paced(0.4, 800.0)),
        ]
    )
    reply = sim.chat(max_tokens=40)
    assert (reply.provider, reply.route, reply.attempts) == ("quick", "explore", 3)
    assert reply.text.strip().startswith("the quick brown")
    wait_until(lambda: idle(sim), what="every drained stream closed")
    samples = by_deployment(sim, 3)
    assert samples["quick"].outcome == "ok"
    for name, ttft in (("late", 0.25), ("later", 0.4)):
        loser = samples[name]
        # Its real first token (not a lower bound at the winner's), its stream, no end-to-end of its own.
        assert (loser.outcome, loser.hedged) == ("client_cancelled", True)
        assert loser.ttft_s is not None and loser.ttft_s >= ttft
        assert loser.tokens_per_s is not None and loser.output_tokens
        assert loser.cost_usd, "the provider billed what it produced"
    # The router counts each drained stream as an answer: all three are measured after one request.
    rows = routes(sim)
    for name in ("late", "later"):
        predicted = rows[name]["predicted"]
        assert isinstance(predicted, dict) and predicted["source"] == "recent"
    assert rows["late"]["predicted"]["tokens_per_s"] > rows["quick"]["predicted"]["tokens_per_s"]  # type: ignore[index]


def test_a_drained_stream_is_closed_after_its_first_events(sims: Sims) -> None:
    long = paced(0.2, 1000.0, output_tokens=2000)  # 2 s to stream whole
    sim = sims.start([SimProvider("quick", paced(0.01, 4000.0, output_tokens=2000)), SimProvider("slow", long)])
    reply = sim.chat(max_tokens=2000)
    assert reply.provider == "quick"
    wait_until(lambda: idle(sim), what="the drained stream closed")
    loser = by_deployment(sim, 2)["slow"]
    assert loser.outcome == "client_cancelled" and loser.output_tokens is not None
    # Cut after its first events (plus what the read that passed them held: a busy loop reads several at once),
    # not read to 2,000.
    assert DRAIN_EVENTS // 2 <= loser.output_tokens < 500  # (an event or two carry no text: the role, ...)
    assert loser.attempt_s is not None and loser.attempt_s < 1.5


def test_a_stream_that_breaks_while_drained_counts_against_its_provider(sims: Sims) -> None:
    breaks = FakeBehavior(ttft_s=0.2, tokens_per_s=1000.0, output_tokens=40, drop_after=5)
    sim = sims.start([SimProvider("quick", paced(0.01, 1000.0)), SimProvider("breaks", breaks)])
    reply = sim.chat(max_tokens=40)
    assert reply.provider == "quick" and reply.text.strip().startswith("the quick brown")
    wait_until(lambda: idle(sim), what="the broken stream recorded")
    assert by_deployment(sim, 2)["breaks"].outcome == "broken_stream"


def test_a_client_gone_during_the_race_drains_nothing(sims: Sims) -> None:
    # Nothing was committed: every racer is cancelled, none is read on.
    sim = sims.start([SimProvider("a", paced(1.0, 1000.0)), SimProvider("b", paced(1.0, 1000.0))])
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(sim.gateway.url + "/v1/chat/completions", json=body, timeout=0.3)
    wait_until(lambda: idle(sim), what="both racers cancelled")
    samples = list(sim.samples.samples)
    assert sorted(s.deployment for s in samples) == ["a", "b"]
    assert all(s.outcome == "client_cancelled" and not s.output_tokens for s in samples)


def test_closing_the_runtime_cancels_the_drains_still_reading(sims: Sims) -> None:
    sim = sims.start([SimProvider("quick", paced(0.01, 1000.0)), SimProvider("stuck", paced(30.0, 1000.0))])
    reply = sim.chat(max_tokens=40)
    assert reply.provider == "quick"
    runtime = runtime_of({"app": sim.gateway.server.config.app})
    wait_until(lambda: len(runtime.dispatcher.drains.tasks) == 1, what="the stuck racer drained")
    sim.gateway.call(runtime.dispatcher.aclose())
    assert not runtime.dispatcher.drains.tasks
    stuck = by_deployment(sim, 2)["stuck"]
    assert stuck.outcome == "client_cancelled" and stuck.ttft_s is None


def test_a_shadow_probe_measures_a_contender_beside_the_leader_and_never_serves(sims: Sims) -> None:
    # Every answer is as long, and snappy, close behind, would win the first token and then stream 4x slower: no
    # race is affordable, so it is sent beside the leader instead, never the client's answer. Bulk sends four
    # tokens an event, so that its drained stream in the cold race is read whole (50 events over 0.1 s): a
    # stall of the test machine then cannot make its measured speed look slower than snappy's.
    sim = sims.start(
        [SimProvider("bulk", paced(0.16, 2000.0, 400, chunk_tokens=4)), SimProvider("snappy", paced(0.01, 500.0, 400))],
        policy={"explore_share": 0.9},
    )
    sim.chat(max_tokens=200)  # the cold race: snappy's first token wins, bulk is drained
    wait_until(lambda: idle(sim), what="the cold start's attempts ended")
    warm = len(sim.samples.samples)
    replies = []
    for _ in range(12):  # until a look at snappy is worth its bill (its one answer is sure enough to wait a few)
        replies.append(sim.chat(max_tokens=200))
        if any(s.deployment == "snappy" for s in sim.samples.samples[warm:]):
            break
    wait_until(lambda: idle(sim), what="the shadow drained")
    assert replies[-1].provider == "bulk" and replies[-1].attempts == 1  # the shadow is no attempt of the request
    assert replies[-1].route == "best-score"  # the leader answers as the leader: only the shadow explores
    assert all(r.provider == "bulk" for r in replies)
    (shadow,) = [s for s in sim.samples.samples[warm:] if s.deployment == "snappy"]
    assert (shadow.outcome, shadow.hedged) == ("client_cancelled", True)
    assert shadow.ttft_s is not None and shadow.tokens_per_s is not None
    assert shadow.output_tokens is not None and shadow.output_tokens < 200  # drained: not the whole answer


def test_a_leader_on_one_lucky_answer_is_measured_again_and_the_traffic_returns(sims: Sims) -> None:
    """One fast answer from a slower provider makes it the leader; it does not keep winning: its next answers, as
    slow as it really is, are measured, and the traffic returns to the well-measured one within a few requests."""
    # Each stream is paced so that a loaded machine's delays (tens of ms to a read) cannot hide it: the lucky draw
    # streams its 40 tokens over 0.07 s, six times faster than lucky really is and three times as fast as steady,
    # its first token a third of steady's.
    steady, slow = paced(0.1, 200.0), paced(0.2, 100.0)
    sim = sims.start([SimProvider("steady", steady), SimProvider("lucky", slow)], policy={"explore_share": 0.5})
    only_lucky = {"provider": {"only": ["lucky"]}}
    sim.run(10, max_tokens=40)  # the cold race, then steady's answers
    for _ in range(5):  # lucky measured as it is, so that one answer unlike those reads as a change
        sim.chat(max_tokens=40, extra_body=only_lucky)
    sim.fakes["lucky"].app.behavior = paced(0.03, 600.0)  # its next answer a lucky draw
    sim.chat(max_tokens=40, extra_body=only_lucky)
    sim.fakes["lucky"].app.behavior = slow  # as it really is from now on
    wait_until(lambda: idle(sim), what="the lucky answer ended")
    rows = routes(sim)
    assert rows["lucky"]["rank"] == 1, {name: row["belief"] for name, row in rows.items()}  # it leads on that one
    after = len(sim.samples.samples)
    replies = [sim.chat(max_tokens=40) for _ in range(10)]
    wait_until(lambda: idle(sim), what="the last attempts ended")
    served = [(r.provider, r.route, r.attempts) for r in replies]
    # Its next answers were measured as it really is (the first token twice steady's) ...
    later = [s for s in sim.samples.samples[after:] if s.deployment == "lucky" and s.ttft_s is not None]
    assert later and all(s.ttft_s is not None and s.ttft_s >= 0.2 for s in later), served
    # ... and the traffic is steady's again within three requests, and stays there.
    back = next(i for i, r in enumerate(replies) if r.provider == "steady")
    assert back < 3 and all(provider == "steady" for provider, _, _ in served[back:]), served
    assert routes(sim)["steady"]["rank"] == 1
