"""An inference request's body: read under a size cap, parsed as JSON, and the fields the gateway relies on checked.

The provider validates the rest; what is checked here is what routing and admission need (the model,
``stream``, the input field, the answer's length bound).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable
from typing import Any

import msgspec
from starlette.types import Receive, Scope

from gateway.admission.limits import has_unpaired_surrogate
from gateway.errors import InvalidRequest, PayloadTooLarge, UnsupportedEncoding
from gateway.request_fields import INPUT_FIELDS, MAX_TOKEN_FIELDS
from gateway.samples import Endpoint


def decoded_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """ASGI headers as text, names lower-cased: decoded once per request for all that reads them by name (the
    session look-up, the headers forwarded upstream)."""
    return [(name.decode("latin-1").lower(), value.decode("latin-1")) for name, value in headers]


PLANNED_TOKENS_BOUND = 2**31 - 1
"""The most output tokens the gateway plans, holds budget for or predicts time by. Beyond any model's; a client that
writes 10**30 for "no limit" has its body forwarded as it is (the provider answers it), while the gateway's own
arithmetic stays within a float (past ~1e308 it raised OverflowError: a 500)."""


async def read_request_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body, plain (``decoded_body``), refused with 413 as soon as it is known to exceed ``limit``."""
    coding = b""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError as exc:
                raise InvalidRequest("invalid Content-Length header") from exc
            if declared > limit:
                raise PayloadTooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
        elif name == b"content-encoding":
            coding = value
    # The body's messages read here, not by a coroutine of their own: one coroutine per request fewer.
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    raw = parts[0] if len(parts) == 1 else b"".join(parts)
    return decoded_body(raw, coding, limit) if coding else raw


def decoded_body(raw: bytes, coding: bytes, limit: int) -> bytes:
    """A body sent with ``Content-Encoding: coding`` as plain bytes, at most ``limit`` of them.

    The gateway rewrites every body it forwards (the model, at least), so it reads the client's coding itself:
    gzip and deflate, as servers commonly do; any other is refused with 415 (RFC 9110 §15.5.16), where reading
    compressed bytes as JSON would say the body is "not valid JSON" and nothing of why."""
    kind = coding.strip().lower()
    if kind in (b"", b"identity"):
        return raw
    if kind not in (b"gzip", b"x-gzip", b"deflate"):
        shown = kind.decode("latin-1")[:40]
        raise UnsupportedEncoding(f"request body content-encoding '{shown}' is not supported (use gzip, or none)")
    reader = zlib.decompressobj(32 + zlib.MAX_WBITS)  # 32: a zlib or a gzip header, whichever it is
    try:
        plain = reader.decompress(raw, limit + 1)  # bounded: a small bomb must not inflate past the limit
    except zlib.error as exc:
        raise InvalidRequest(f"request body is not valid {kind.decode()}: {exc}", code="invalid_encoding") from None
    if len(plain) > limit:
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes once decompressed")
    if not reader.eof:
        raise InvalidRequest(f"request body is not valid {kind.decode()}: it is cut short", code="invalid_encoding")
    return plain


class ClientGone(Exception):
    """The client hung up before its request was read: nobody to answer."""


# A surrogate escape (\\ud800-\\udfff); only bodies holding one need the slower check for unpaired ones.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and the provider would choke on them.
    raise ValueError(f"{name} is not valid JSON")


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, exactly as ``json.loads`` reads it, or ``InvalidRequest``.

    msgspec decodes first, in a fraction of ``json``'s time; it is stricter (no NaN, no
    out-of-range floats, no lone surrogate escapes, no byte-order mark), and whatever it refuses
    goes to ``json.loads``, which accepts it or gives the error message the client sees.
    """
    try:
        body = msgspec.json.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        body = _parse_with_json(raw)
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object", code="invalid_json")
    if _SURROGATE_ESCAPE.search(raw) and has_unpaired_surrogate(body):
        raise InvalidRequest("request body holds an unpaired UTF-16 surrogate escape", code="invalid_json")
    return body


def _parse_with_json(raw: bytes) -> Any:
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}", code="invalid_json") from exc
    except RecursionError as exc:
        # A small body can nest deeper than the parser's stack: the client's fault, not a 500.
        raise InvalidRequest("request body is nested too deeply", code="invalid_json") from exc
    return body


def check_types(body: dict[str, Any], endpoint: Endpoint) -> tuple[str, bool, int | None]:
    """Validate the fields the gateway itself relies on; the provider validates the rest."""
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequest("'model' is required and must be a non-empty string", param="model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean", param="stream")
    if stream and endpoint == "embeddings":
        raise InvalidRequest("embeddings cannot be streamed", param="stream")
    field, kinds, expected, required = INPUT_FIELDS[endpoint]
    value = body.get(field)
    if value is None:
        if required:
            raise InvalidRequest(f"'{field}' is required", param=field)
    elif not isinstance(value, kinds):
        raise InvalidRequest(f"'{field}' must be {expected}", param=field)
    if endpoint in ("chat", "messages") and not value:
        raise InvalidRequest("'messages' must not be empty", param="messages")
    if endpoint == "messages" and body.get("max_tokens") is None:
        raise InvalidRequest("'max_tokens' is required", param="max_tokens")
    max_tokens: int | None = None
    for name in MAX_TOKEN_FIELDS[endpoint]:
        limit = body.get(name)
        if limit is None:
            continue
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidRequest(f"'{name}' must be a positive integer", param=name)
        limit = min(limit, PLANNED_TOKENS_BOUND)
        max_tokens = limit if max_tokens is None else min(max_tokens, limit)
    return model, stream, max_tokens
