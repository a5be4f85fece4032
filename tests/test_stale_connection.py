"""A kept-alive upstream connection the provider closed (or reset) just as it was reused, on a raw loopback socket:
the request was never read, so it is sent again at once on a new connection, and the client is answered (the soak's
lost requests were these: "the provider closed the connection before answering", twice in one request, and "the
connection to the provider was reset", and on uvloop "Can not write request body": the close seen before the request's
body was written). A fresh connection's reset is not sent again here (``test_faults``)."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import httpx
import pytest
import uvloop

from gateway.config import ProviderConfig
from gateway.upstream import AttemptTimeouts, UpstreamClient
from tests.raw_upstream import RawUpstream, _read_request
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


class ClosesOnCue:
    """A loopback server whose first connection answers one request, kept alive, then is closed (a FIN) or reset (an
    RST) when ``close_on_cue`` is called; every later connection answers one request. ``requests`` holds, for each
    request read, the index of the connection it came on."""

    def __init__(self, reset: bool) -> None:
        self.reset = reset
        self.requests: list[int] = []
        self._cue = threading.Event()
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(5.0)
        self.base_url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"
        self._thread = threading.Thread(target=self._serve, name="closes-on-cue", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        for index in range(2):
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5.0)
                _read_request(conn)
                self.requests.append(index)
                conn.sendall(RESPONSE)
                if index == 0:
                    self._cue.wait(5.0)
                    if self.reset:  # SO_LINGER with a zero timeout: close() sends an RST instead of a FIN
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            if index == 0:
                self._closed.set()

    def close_on_cue(self, peer: socket.socket) -> None:
        """Close the first connection, and block until its close has reached ``peer`` (the client's end)."""
        self._cue.set()
        assert self._closed.wait(5.0), "the server did not close its first connection"
        readable, _, _ = select.select([peer], [], [], 5.0)
        assert readable, "the close did not reach the client"

    def stop(self) -> None:
        self._listener.close()
        self._thread.join(5.0)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
def test_a_reused_connection_closed_as_its_request_is_written_is_sent_again(loop: str, reset: bool) -> None:
    """The soak's "Can not write request body": the provider closes a kept-alive connection after the pool has handed
    it out, and the event loop sees the close before the request's body task runs. Staged without timing: a callback
    queued behind the request's first step (which takes the pooled connection and schedules the body task) closes
    the server's end and waits until the close is readable at the client's end. The request went out on the kept-alive
    connection and was never read; its close reads as a disconnect or a reset before any byte of an answer. Either
    way the request is sent once more, on a new connection, and answered."""
    server = ClosesOnCue(reset)
    client_done: list[bytes] = []

    async def go() -> int:
        client = UpstreamClient(ProviderConfig(name="cue", base_url=server.base_url), None)
        timeouts = AttemptTimeouts(connect_s=2.0, read_s=5.0, total_s=10.0)
        try:
            async with await client.send("/chat/completions", b"{}", timeouts) as first:
                client_done.append(await first.read_all())
            (origin,) = client._origins.values()
            (connection,) = origin._idle  # the first request's connection, kept alive
            assert connection._transport is not None
            peer = connection._transport.get_extra_info("socket")
            second = asyncio.ensure_future(client.send("/chat/completions", b"{}", timeouts))
            asyncio.get_running_loop().call_soon(server.close_on_cue, peer)
            async with await second as answer:
                client_done.append(await answer.read_all())
                return answer.status
        finally:
            await client.aclose()

    try:
        status = uvloop.run(go()) if loop == "uvloop" else asyncio.run(go())
    finally:
        server.stop()
    assert status == 200
    assert client_done == [ANSWER, ANSWER]
    # The second request was read once, on the second connection: nothing of it reached the first one.
    assert server.requests == [0, 1]
