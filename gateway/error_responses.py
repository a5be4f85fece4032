"""A ``GatewayError`` as an HTTP answer in its API's shape: a Starlette ``Response``, or straight to ASGI ``send``."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import Send

from gateway.dialects import CHAT, Dialect
from gateway.errors import GatewayError


def error_response(error: GatewayError, request_id: str | None = None, dialect: Dialect = CHAT) -> Response:
    headers = dict(error.headers)
    if request_id:
        headers["x-request-id"] = request_id
    body = dialect.render_error(error)
    return Response(body, status_code=error.status_code, headers=headers, media_type="application/json")


async def send_error(send: Send, error: GatewayError, request_id: str, dialect: Dialect = CHAT) -> None:
    body = dialect.render_error(error)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", request_id.encode()),
        *((k.encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()),
    ]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
