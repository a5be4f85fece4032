"""A kept-alive upstream connection the provider closed (or reset) just as it was reused, on a raw loopback socket:
the request was never read, so it is sent again at once on a new connection, and the client is answered (the soak's
lost requests were these: "the provider closed the connection before answering", twice in one request, and "the
connection to the provider was reset"). A fresh connection's reset is not sent again here (``test_faults``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.raw_upstream import RawUpstream
from tests.support.config import gateway_config
from tests.support.gateway import Gateway

StartGateway = Callable[..., Gateway]
ANSWER = json.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "model": "up",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
).encode()
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: keep-alive\r\n"
    + f"content-length: {len(ANSWER)}\r\n\r\n".encode()
    + ANSWER
)


@pytest.fixture(params=["stale", "stale-reset"])
def stale(request: pytest.FixtureRequest) -> Iterator[RawUpstream]:
    upstream = RawUpstream(request.param, RESPONSE, name="stale").start()
    yield upstream
    upstream.stop()


def test_a_reused_connection_closed_or_reset_before_answering_is_sent_again(
    stale: RawUpstream, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(gateway_config([stale], policy={"max_attempts": 1}))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
        answers = [client.post("/chat/completions", json=body) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200], answers[-1].text
    assert all(a.headers["x-gateway-attempts"] == "1" for a in answers)
    # Three requests, each on a connection of its own: the second and third were each read first on the previous
    # request's kept-alive connection, dropped (closed or reset) there, and sent again on a new one.
    assert stale.connections == 5
