"""A ``GatewayError`` as an HTTP answer in its API's shape: a Starlette ``Response``, straight to ASGI ``send``, or
the raw head and body the connection guard writes itself (``error_answer``)."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import Send

from gateway.dialects import CHAT, Dialect, dialect_for_path
from gateway.errors import GatewayError
from gateway.retry_hints import hinted_headers, wants_retry_hints


def error_response(error: GatewayError, request_id: str | None = None, dialect: Dialect = CHAT) -> Response:
    headers = dict(error.headers)
    if request_id:
        headers["x-request-id"] = request_id
    body = dialect.render_error(error)
    return Response(body, status_code=error.status_code, headers=headers, media_type="application/json")


async def send_error(send: Send, error: GatewayError, request_id: str, dialect: Dialect = CHAT) -> None:
    body = dialect.render_error(error)
    await send(
        {"type": "http.response.start", "status": error.status_code, "headers": _headers(error, request_id, body)}
    )
    await send({"type": "http.response.body", "body": body})


def error_answer(error: GatewayError, request_id: str, path: str) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The headers and body answering ``error`` on ``path`` from outside the app (no middleware runs there): the body
    in the path's API shape (OpenAI's when the path is unknown), the request id, the error's own headers, and on the
    Messages API the retry hints its clients read (``gateway.retry_hints``): the same answer the app would give."""
    body = dialect_for_path(path).render_error(error)
    headers = _headers(error, request_id, body)
    return (hinted_headers(error.status_code, headers) if wants_retry_hints(path) else headers), body


def _headers(error: GatewayError, request_id: str, body: bytes) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", request_id.encode()),
        *((k.encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()),
    ]
