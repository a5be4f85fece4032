"""A client transport that records each exchange's raw bytes and can spoil the request on its way out.

Why: the fault matrix drives the gateway with the real SDKs (so that the exception each SDK raises is
the one a user meets), yet must also read what went over the wire (status, headers, the body or the
stream's every byte) and send what no SDK sends (broken JSON, a body that is no object, a request
without its key). The OpenAI SDK is built on ``httpx`` and the Anthropic SDK on ``httpx2``, which share
one API: ``WireTransport`` wraps either's ``HTTPTransport``.

Each response is read whole before the SDK sees it: the gateway's answers here end by themselves
(bounded by the SDK's timeout), and a whole read is what makes the bytes available afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Spoil = Callable[[bytes], bytes]
_HOP = (b"content-length", b"transfer-encoding", b"content-encoding")


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request as sent and its answer as it came: status, headers (lower-case names), body bytes."""

    sent_headers: dict[str, str]
    sent_body: bytes
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class WireTransport:
    """A sync transport for ``module`` (``httpx`` or ``httpx2``): ``spoil`` rewrites each request's body,
    ``drop_headers`` removes headers (e.g. the key), ``add_headers`` adds some, and every exchange lands in
    ``exchanges``.

    ``inner``: the module's ``HTTPTransport`` to send through, shared and left open (building one costs an SSL
    context, tens of milliseconds); by default one of its own, closed with it."""

    def __init__(
        self,
        module: Any,
        *,
        spoil: Spoil | None = None,
        drop_headers: tuple[str, ...] = (),
        add_headers: dict[str, str] | None = None,
        inner: Any = None,
    ) -> None:
        self.module = module
        self.owned = inner is None
        self.inner = module.HTTPTransport() if inner is None else inner
        self.spoil = spoil
        self.drop_headers = {name.lower().encode() for name in drop_headers}
        self.add_headers = [(name.encode(), value.encode()) for name, value in (add_headers or {}).items()]
        self.exchanges: list[Exchange] = []

    def client(self, timeout: float) -> Any:
        """A ``Client`` of the same module on this transport, for an SDK's ``http_client``."""
        return self.module.Client(transport=self, timeout=timeout)

    def handle_request(self, request: Any) -> Any:
        body = request.read()
        if self.spoil is not None or self.drop_headers or self.add_headers:
            body = self.spoil(body) if self.spoil is not None else body
            headers = [
                (name, value)
                for name, value in request.headers.raw
                if name.lower() not in self.drop_headers and name.lower() != b"content-length"
            ] + self.add_headers
            request = self.module.Request(
                request.method, request.url, headers=headers, content=body, extensions=request.extensions
            )
        response = self.inner.handle_request(request)
        try:
            answer = response.read()
        finally:
            response.close()
        headers = [(name, value) for name, value in response.headers.raw if name.lower() not in _HOP]
        self.exchanges.append(
            Exchange(
                sent_headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers.raw},
                sent_body=body,
                status=response.status_code,
                headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers},
                body=answer,
            )
        )
        return self.module.Response(
            response.status_code,
            headers=headers,
            stream=self.module.ByteStream(answer),
            request=request,
            extensions=response.extensions,
        )

    def close(self) -> None:
        if self.owned:
            self.inner.close()

    @property
    def last(self) -> Exchange:
        assert self.exchanges, "no request went out"
        return self.exchanges[-1]
