"""What the router learned of a deployment's limits (input it refused, the window its ``context_length_exceeded``
stated) is believed for the routing model's own memory, the hazard's half-life, then tried again by one request.

An operator may load a multimodal (or a longer-context) model behind the same URL without touching the gateway's
config: a refusal believed forever would keep images (or long prompts) from that deployment for good. The
gateway's clock is injected (the real monotonic clock plus a shift the test makes), so the half-life passes at
once; the fake provider refuses per request as llama.cpp does (``text_only``) or as a small window does
(``context_window``); real SDK clients over loopback.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from gateway.app import AppOptions, create_app
from gateway.config import GatewayConfig
from gateway.fakes import FakeBehavior
from gateway.routing import RouteRequest
from gateway.routing.belief_live import LiveBeliefRouter
from gateway.routing.belief_router import BeliefRouter
from gateway.routing.plan import Candidate
from gateway.routing.trials import believed_s
from gateway.samples import SampleLog
from gateway.stats import InMemoryStatsStore
from tests.support.clock import FakeClock
from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway, GatewayServers
from tests.test_unsupported_input import LEARNED, LOOK, REFUSED, TEXT_ONLY, asked

LONG = [{"role": "user", "content": "word " * 12_000}]
"""About 15k tokens by the body's size: more than an 8k window, with room to spare."""
SMALL_WINDOW = {"fake": {"servers": {"small": {"context_window": 8192}}}}
"""Per request: the deployment ``small`` takes at most 8192 tokens (it refuses LONG, stating so)."""


@dataclass
class ShiftedClock:
    """The monotonic clock, moved forward by the test: time that passes at once, without a sleep."""

    shift: float = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.shift


@dataclass
class Learning:
    gateway: Gateway
    clock: ShiftedClock
    client: openai.OpenAI

    @property
    def believed_s(self) -> float:
        router = self.gateway.runtime.router
        assert isinstance(router, BeliefRouter)
        return believed_s(router.hazards.get("m"))

    def within(self) -> None:
        """Move the clock to just within the refusal's belief, from when it was heard."""
        self.clock.shift += 0.5 * self.believed_s

    def past(self) -> None:
        """Move the clock well past the refusal's belief. Well past: the answers heard after the move tell the
        model's hazard of the time moved through without a change, so the belief the next plan reads may be longer
        than the one read here (up to the time moved, at the prior's one change)."""
        self.clock.shift += 3.0 * self.believed_s

    def look(self, steer: dict[str, Any] | None = None) -> tuple[str, str]:
        """An image request: which deployment answered, in how many attempts."""
        answer = self.client.chat.completions.with_raw_response.create(model="m", messages=LOOK, extra_body=steer)
        assert answer.parse().choices[0].message.content
        return answer.headers["x-gateway-deployment"], answer.headers["x-gateway-attempts"]


@pytest.fixture
def learning(fakes: Fakes) -> Iterator[tuple[Fakes, Any]]:
    started: list[Learning] = []

    def start(config: GatewayConfig) -> Learning:
        clock = ShiftedClock()
        samples = SampleLog()
        app = create_app(config, AppOptions(environ={}, sinks=[samples], clock=clock))
        gateway = GatewayServers(fakes.servers).serve(app, samples=samples)
        client = openai.OpenAI(base_url=gateway.base_url, api_key="k", max_retries=0, timeout=10)
        started.append(Learning(gateway, clock, client))
        return started[-1]

    yield fakes, start
    for each in started:
        each.client.close()


def test_a_refusal_is_tried_again_after_the_half_life_and_forgotten_when_answered(
    learning: tuple[Fakes, Any],
) -> None:
    """The operator loads a projector behind ``text``'s URL: once the refusal's belief ran out, one image goes
    there again, is answered, and images go there from then on."""
    fakes, start = learning
    text, vision = fakes.start("text"), fakes.start("vision")
    learned = start(gateway_config([text, vision]))  # config order: the text-only one first
    assert learned.look(TEXT_ONLY) == ("vision", "2")  # refused there, learned
    learned.within()
    assert learned.look() == ("vision", "1")  # believed: not asked (it would have answered by now)
    assert asked(text) == 1
    learned.past()
    assert learned.look() == ("text", "1")  # tried again: answered
    assert learned.look() == ("text", "1")  # and forgotten: images go there again, as config order says
    assert (asked(text), asked(vision)) == (3, 2)


def test_a_deployment_that_still_refuses_costs_one_retry_per_half_life_and_never_the_client(
    learning: tuple[Fakes, Any],
) -> None:
    fakes, start = learning
    text, vision = fakes.start("text"), fakes.start("vision")
    learned = start(gateway_config([text, vision]))
    assert learned.look(TEXT_ONLY) == ("vision", "2")
    learned.past()
    assert learned.look(TEXT_ONLY) == ("vision", "2")  # tried again, refused again: the next candidate answers
    assert learned.look(TEXT_ONLY) == ("vision", "1")  # learned again, from the retry's time
    learned.within()
    assert learned.look(TEXT_ONLY) == ("vision", "1")
    assert (asked(text), asked(vision)) == (2, 4)
    refusals = [s.outcome for s in learned.gateway.samples.samples if s.deployment == "text"]
    assert refusals == ["client_error"] * 2  # neither held against its health


def test_a_lone_deployment_is_asked_again_after_the_half_life(learning: tuple[Fakes, Any]) -> None:
    """No other deployment could serve: the retry's refusal is the client's answer, as the first one was."""
    fakes, start = learning
    text = fakes.start("text")
    learned = start(gateway_config([text]))
    messages: list[str] = []
    for move in (lambda: None, learned.within, learned.past):
        move()
        with pytest.raises(openai.BadRequestError) as refused:
            learned.client.chat.completions.create(model="m", messages=LOOK, extra_body=TEXT_ONLY)
        error = refused.value.response.json()["error"]
        assert error["code"] == "image_input_unsupported" and REFUSED in error["message"]
        messages.append(error["message"])
    assert [LEARNED in message for message in messages] == [False, True, False]
    assert asked(text) == 2


def _long(learned: Learning, steer: dict[str, Any] | None = None) -> tuple[str, str]:
    answer = learned.client.chat.completions.with_raw_response.create(
        model="m",
        messages=LONG,  # type: ignore[arg-type]
        extra_body=steer,
    )
    assert answer.parse().choices[0].message.content
    return answer.headers["x-gateway-deployment"], answer.headers["x-gateway-attempts"]


def test_a_learned_window_is_tried_again_after_the_half_life(learning: tuple[Fakes, Any]) -> None:
    """The same for a window: a long prompt skips the deployment that stated a small one while it is believed;
    then one long prompt tries it again, and it took it (the operator gave it a longer context)."""
    fakes, start = learning
    small, large = fakes.start("small"), fakes.start("large")
    learned = start(gateway_config([small, large]))
    assert _long(learned, SMALL_WINDOW) == ("large", "2")
    learned.within()
    assert _long(learned, SMALL_WINDOW) == ("large", "1")
    learned.past()
    assert _long(learned, SMALL_WINDOW) == ("large", "2")  # still 8k: refused again, moved on, learned again
    assert _long(learned) == ("large", "1")
    learned.past()
    assert _long(learned) == ("small", "1")  # its window grew: answered, the learned window forgotten
    assert _long(learned) == ("small", "1")
    assert (small.app.state.requests, large.app.state.requests) == (4, 4)


def test_a_configured_window_is_not_tried_again(learning: tuple[Fakes, Any]) -> None:
    """A window the operator configured is the config's word, not a belief: it holds until the config changes."""
    fakes, start = learning
    small, large = fakes.start("small", FakeBehavior(context_window=8192)), fakes.start("large")
    learned = start(gateway_config([small, large], deployments={"small": {"context_window": 8192}}))
    for move in (lambda: None, learned.past, learned.past):
        move()
        assert _long(learned) == ("large", "1")
    assert small.app.state.requests == 0


def test_one_request_tries_again_while_the_others_keep_away() -> None:
    """Requests planned while the trial is under way do not try it too; its refusal is believed anew meanwhile."""
    config = gateway_config(["text", "vision"])
    clock = FakeClock()
    router = LiveBeliefRouter(config, InMemoryStatsStore(config.stats), rng=random.Random(1), clock=clock)
    model = router.config.models[0]
    images = RouteRequest(model, "chat", False, 10, None, inputs=frozenset({"image"}))
    text_only = Candidate(model.deployments[0], router.config.providers[0], model="m")
    router.input_refused(text_only, "image", "deployment 'text' does not accept image input")

    def names() -> list[str]:
        return [c.name for c in router.plan(images).candidates]

    assert names() == ["vision"]
    clock.advance(believed_s(router.hazards.get("m")) + 1.0)
    trial = router.plan(images).candidates
    assert [c.name for c in trial] == ["text", "vision"]
    assert names() == ["vision"]  # one trial at a time
    assert [key for key, _ in router.state.trials.running.values()] == [("m", "text")]
