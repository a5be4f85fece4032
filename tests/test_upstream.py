"""The upstream layer against a real fake provider: headers, keys, errors translated at the boundary."""

from __future__ import annotations

import asyncio
import json
import re
import socket

import aiohttp
import pytest

from gateway.bench.transport_errors import describe_transport_error
from gateway.config import ProviderConfig, parse_config
from gateway.errors import UpstreamTimeout, UpstreamUnavailable
from gateway.fakes import FakeBehavior
from gateway.http1_origin import request_bytes
from gateway.request_body import decoded_headers
from gateway.upstream import (
    AttemptTimeouts,
    UpstreamClient,
    forwardable_headers,
    forwardable_of,
)
from gateway.upstream_pool import UpstreamPool
from tests.support.fakes import Fakes, FakeServer
from tests.support.wait import wait_until

TIMEOUTS = AttemptTimeouts(connect_s=2.0, read_s=2.0, total_s=10.0)
CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def provider_for(fake: FakeServer, **headers: str) -> ProviderConfig:
    return ProviderConfig(name=fake.name, base_url=fake.base_url, headers=tuple(headers.items()))


def test_forwardable_headers_drop_hop_by_hop_and_credentials() -> None:
    raw = [
        (b"Host", b"gateway:8080"),
        (b"Connection", b"keep-alive, X-Hop-Custom"),
        (b"Keep-Alive", b"timeout=5"),
        (b"X-Hop-Custom", b"only for this hop"),
        (b"TE", b"trailers"),
        (b"Trailer", b"x"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Upgrade", b"h2c"),
        (b"Proxy-Authorization", b"Basic abc"),
        (b"Proxy-Connection", b"keep-alive"),
        (b"Authorization", b"Bearer client-key"),
        (b"api-key", b"client-key"),
        (b"X-Api-Key", b"client-key"),
        (b"Cookie", b"session=1"),
        (b"Content-Length", b"12"),
        (b"Content-Type", b"application/json"),
        (b"Accept-Encoding", b"gzip"),
        (b"Expect", b"100-continue"),
        (b"X-Gateway-Debug", b"1"),
        (b"X-Forwarded-For", b"10.0.0.1"),
        (b"OpenAI-Organization", b"org-1"),
        (b"X-Request-Tag", b"caf\xe9"),
        (b"Accept", b"text/event-stream"),
    ]
    assert forwardable_headers(raw) == [
        ("openai-organization", "org-1"),
        ("x-request-tag", "caf\xe9"),
        ("accept", "text/event-stream"),
    ]
    # The intake decodes a request's headers once (for its session too) and filters the decoded ones: the same.
    assert forwardable_of(decoded_headers(raw)) == forwardable_headers(raw)


def test_send_carries_the_provider_key_and_headers(fakes: Fakes) -> None:
    fake = fakes.start("p")

    async def go() -> bytes:
        client = UpstreamClient(provider_for(fake, **{"x-org": "acme"}), "sk-provider")
        try:
            headers = [("user-agent", "client/1.0"), ("x-request-tag", "t1")]
            async with await client.send("/chat/completions", CHAT, TIMEOUTS, headers) as response:
                assert response.status == 200
                assert response.headers["content-type"] == "text/event-stream"
                return await response.read_all()
        finally:
            await client.aclose()

    body = asyncio.run(go())
    assert body.endswith(b"data: [DONE]\n\n")
    (recorded,) = fake.app.state.recorded
    assert recorded.path == "/v1/chat/completions"
    assert recorded.headers["authorization"] == "Bearer sk-provider"
    assert recorded.headers["x-org"] == "acme"
    assert recorded.headers["x-request-tag"] == "t1"
    assert recorded.headers["user-agent"].startswith("gateway/")
    assert recorded.headers["content-type"] == "application/json"
    assert recorded.headers["accept-encoding"] == "identity"


def test_each_header_goes_once_and_the_wire_adds_only_host_and_length() -> None:
    """The client's own user-agent and accept-encoding are replaced, not doubled, and the wire adds nothing of its
    own beyond ``Host`` and ``Content-Length`` (the provider, an aiohttp server, sees one of each)."""
    from aiohttp import web

    seen: list[list[tuple[str, str]]] = []
    port_seen: list[int] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append([(k.decode().lower(), v.decode()) for k, v in request.raw_headers])
        return web.json_response({"ok": True})

    async def go() -> bytes:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", answer)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        port_seen.append(port)
        provider = ProviderConfig(name="p", base_url=f"http://127.0.0.1:{port}/v1")
        client = UpstreamClient(provider, "sk-provider")
        try:
            headers = [("user-agent", "client/1.0"), ("accept-encoding", "br")]
            async with await client.send("/chat/completions", CHAT, TIMEOUTS, headers) as response:
                return await response.read_all()
        finally:
            await client.aclose()
            await runner.cleanup()

    assert json.loads(asyncio.run(go())) == {"ok": True}
    (headers,) = seen
    names = [name for name, _ in headers]
    assert sorted(names) == sorted(
        ["host", "user-agent", "accept-encoding", "content-type", "authorization", "content-length"]
    )
    values = dict(headers)
    assert values["user-agent"].startswith("gateway/")
    assert values["accept-encoding"] == "identity"
    assert values["content-length"] == str(len(CHAT))
    assert values["host"] == f"127.0.0.1:{port_seen[0]}"


def test_no_key_means_no_authorization_header(fakes: Fakes) -> None:
    fake = fakes.start("p")

    async def go() -> int:
        client = UpstreamClient(provider_for(fake), None)
        try:
            async with await client.request("GET", "/models", None, TIMEOUTS) as listed:
                assert json.loads(await listed.read_all())["object"] == "list"
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as response:
                await response.read_all()
                return response.status
        finally:
            await client.aclose()

    assert asyncio.run(go()) == 200
    assert "authorization" not in fake.app.state.recorded[0].headers


def test_connection_refused_is_upstream_unavailable() -> None:
    port = free_port()
    provider = ProviderConfig(name="gone", base_url=f"http://127.0.0.1:{port}/v1")

    async def go() -> None:
        client = UpstreamClient(provider, "sk-secret")
        try:
            await client.send("/chat/completions", CHAT, TIMEOUTS)
        finally:
            await client.aclose()

    with pytest.raises(UpstreamUnavailable) as info:
        asyncio.run(go())
    assert info.value.provider == "gone"
    assert str(info.value).startswith(f"gone: cannot reach upstream (connection to 127.0.0.1:{port} failed")
    assert "sk-secret" not in str(info.value)


def test_hang_before_headers_is_upstream_timeout(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(hang_s=30))

    async def go() -> None:
        client = UpstreamClient(provider_for(fake), None)
        try:
            await client.send("/chat/completions", CHAT, AttemptTimeouts(connect_s=1, read_s=0.2, total_s=5))
        finally:
            await client.aclose()

    with pytest.raises(UpstreamTimeout, match=r"^p: upstream did not answer in time$"):
        asyncio.run(go())
    wait_until(lambda: fake.app.state.cancelled == 1)


def test_stall_mid_stream_is_upstream_timeout(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(stall_after=2))

    async def go() -> list[bytes]:
        client = UpstreamClient(provider_for(fake), None)
        chunks: list[bytes] = []
        try:
            async with await client.send(
                "/chat/completions", CHAT, AttemptTimeouts(connect_s=1, read_s=0.2, total_s=5)
            ) as response:
                while chunk := await response.read_chunk():
                    chunks.append(chunk)
        finally:
            await client.aclose()
        return chunks

    with pytest.raises(UpstreamTimeout, match=r"^p: no data from upstream within the idle timeout"):
        asyncio.run(go())
    wait_until(lambda: fake.app.state.open_streams == 0)


def test_dropped_connection_is_upstream_unavailable(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(drop_after=2))

    async def go() -> None:
        client = UpstreamClient(provider_for(fake), None)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as response:
                await response.read_all()
        finally:
            await client.aclose()

    with pytest.raises(UpstreamUnavailable, match=r"^p: the provider closed the stream mid-answer$"):
        asyncio.run(go())


def test_closing_early_cancels_the_upstream_request(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(tokens_per_s=20, output_tokens=200))

    async def go() -> None:
        client = UpstreamClient(provider_for(fake), None)
        try:
            response = await client.send("/chat/completions", CHAT, TIMEOUTS)
            assert await response.read_chunk()
            response.close()
            # The fake notices the dropped connection while this loop is still running.
            await asyncio.to_thread(wait_until, lambda: fake.app.state.open_streams == 0)
        finally:
            await client.aclose()

    asyncio.run(go())
    assert fake.app.state.cancelled == 1
    assert fake.app.state.completed == 0


def test_redact_masks_the_key() -> None:
    client_provider = ProviderConfig(name="p", base_url="http://127.0.0.1:1/v1")

    async def go() -> tuple[bytes, bytes]:
        client = UpstreamClient(client_provider, "sk-abc")
        try:
            return client.redact(b'{"error": "bad key sk-abc"}'), client.redact(b"nothing here")
        finally:
            await client.aclose()

    assert asyncio.run(go()) == (b'{"error": "bad key ***"}', b"nothing here")


def test_pool_has_one_client_per_provider(fakes: Fakes) -> None:
    first, second = fakes.start("a"), fakes.start("b")
    config = parse_config(
        {
            "providers": [
                {"name": "a", "base_url": first.base_url, "api_key_env": "A_KEY"},
                {"name": "b", "base_url": second.base_url},
            ],
            "models": [{"name": "m", "deployments": [{"provider": "a", "model": "x"}]}],
        }
    )

    async def go() -> None:
        pool = UpstreamPool.from_config(config, {"a": "sk-a", "b": None})
        try:
            assert set(pool.clients) == {"a", "b"}
            for name in ("a", "b"):
                async with await pool[name].send("/chat/completions", CHAT, TIMEOUTS) as response:
                    await response.read_all()
        finally:
            await pool.aclose()

    asyncio.run(go())
    assert first.app.state.recorded[0].headers["authorization"] == "Bearer sk-a"
    assert "authorization" not in second.app.state.recorded[0].headers


def unwritten_request() -> aiohttp.ClientOSError:
    """What aiohttp raises when its writer finds the connection closing: no errno, its writer's error as the cause."""
    error = aiohttp.ClientOSError(None, "Can not write request body for http://127.0.0.1:9/v1/chat/completions")
    error.__cause__ = aiohttp.ClientConnectionResetError("Cannot write to closing transport")
    return error


@pytest.mark.parametrize(
    ("error", "mid_answer", "expected"),
    [
        (
            aiohttp.ClientPayloadError(
                "Response payload is not completed: <TransferEncodingError: 400, message='Not enough data to "
                "satisfy transfer length header.'>"
            ),
            True,
            "the provider closed the stream mid-answer",
        ),
        (aiohttp.ServerDisconnectedError(), False, "the provider closed the connection before answering"),
        (aiohttp.ServerDisconnectedError(), True, "the provider closed the connection mid-answer"),
        (
            aiohttp.ClientOSError(104, "Connection reset by peer"),
            True,
            "the connection to the provider was reset mid-answer",
        ),
        (
            aiohttp.ClientConnectionResetError("Cannot write to closing transport"),
            False,
            "the connection to the provider was reset",
        ),
        (unwritten_request(), False, "the provider closed the connection before the request was sent"),
        (
            aiohttp.ClientResponseError(None, (), status=400, message="Invalid header"),  # type: ignore[arg-type]
            False,
            "the provider sent a malformed HTTP response",
        ),
        (aiohttp.ClientError("something aiohttp says"), True, "the stream from the provider broke mid-answer"),
    ],
)
def test_the_bench_clients_transport_errors_read_as_plain_words_never_as_aiohttps_internals(
    error: BaseException, mid_answer: bool, expected: str
) -> None:
    described = describe_transport_error(error, mid_answer=mid_answer)
    assert described == expected
    assert "Error" not in described and "message=" not in described and "aiohttp" not in described


def test_read_ready_gives_what_read_chunk_would_without_waiting(fakes: Fakes) -> None:
    """The bytes already in (the same bytes a read gives), None while the next are not in, ``b""`` at the end."""
    fake = fakes.start("p", FakeBehavior(stall_after=2))
    whole = fakes.start("q", FakeBehavior())

    async def go() -> tuple[bytes, bytes | None, bytes, bytes, bytes | None]:
        client = UpstreamClient(provider_for(fake), None)
        other = UpstreamClient(provider_for(whole), None)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as response:
                got = b""
                while got.count(b"\n\n") < 3:  # the role and two answer events, before the stall
                    got += response.read_ready() or await response.read_chunk()
                stalled = response.read_ready()  # nothing more will come: a read would wait
            async with await other.send("/chat/completions", CHAT, TIMEOUTS) as response:
                mixed = b""
                while chunk := response.read_ready() if mixed else await response.read_chunk():
                    mixed += chunk
                while (ready := response.read_ready()) is None:  # not yet in: the next read waits
                    mixed += await response.read_chunk()
                assert ready == b""
                ended = response.read_ready()
            async with await other.send("/chat/completions", CHAT, TIMEOUTS) as response:
                plain = await response.read_all()
        finally:
            await client.aclose()
            await other.aclose()
        return got, stalled, mixed, plain, ended

    got, stalled, mixed, plain, ended = asyncio.run(go())
    assert got.count(b"\n\n") == 3 and stalled is None
    per_request = re.compile(rb'"(id|created)": [^,]*')  # the fake's id and time differ between the two requests
    assert per_request.sub(b"", mixed) == per_request.sub(b"", plain)
    assert b"[DONE]" in plain and ended == b""


def test_read_ready_raises_as_read_chunk_does(fakes: Fakes) -> None:
    fake = fakes.start("p", FakeBehavior(drop_after=2))

    async def go() -> tuple[str, str]:
        client = UpstreamClient(provider_for(fake), None)
        try:
            async with await client.send("/chat/completions", CHAT, TIMEOUTS) as response:
                with pytest.raises(UpstreamUnavailable) as read:
                    await response.read_all()
                with pytest.raises(UpstreamUnavailable) as ready:
                    response.read_ready()
        finally:
            await client.aclose()
        return str(read.value), str(ready.value)

    read, ready = asyncio.run(go())
    assert read == ready == "p: the provider closed the stream mid-answer"


@pytest.mark.parametrize("value", ["a\r\nx-injected: 1", "a\nb", "a\rb"])
def test_a_header_value_with_a_line_break_is_refused_not_sent(value: str) -> None:
    """A CR or LF in a header would end its line and smuggle another header (or a request) onto the wire."""
    with pytest.raises(ValueError, match="line break"):
        request_bytes("POST", "/v1/chat/completions", "example.com", {"x-note": value}, b"{}")
    assert request_bytes("GET", "/v1/models", "example.com", {"x-note": "fine"}, None) == (
        b"GET /v1/models HTTP/1.1\r\nhost: example.com\r\nx-note: fine\r\n\r\n"
    )
