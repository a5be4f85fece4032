"""Bounds on a request's shape and on concurrency: what ``[limits]`` enforces besides rates.

- Header size: an ASGI middleware refuses requests whose header names and values exceed
  ``max_header_bytes`` with 431. uvicorn's httptools protocol (the one ``gateway serve`` runs)
  has no header limit of its own, so ``gateway.server`` also stops reading an oversized head
  before it is buffered; this middleware covers every other way of running the app.
- Body shape: nesting depth, number of messages (or Responses input items), ``n``/``best_of``, the
  ``max_tokens`` ceiling (400, naming the parameter as the client's API calls it).
- Requests in flight, per key (429) and for the whole replica (503).

The body size limit is ``[server] max_body_bytes`` (413), enforced while the body is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.config import LimitsConfig
from gateway.dialects import dialect_for_path
from gateway.errors import HeadersTooLarge, InvalidRequest
from gateway.request_fields import CONVERSATION_FIELDS, token_field
from gateway.samples import Endpoint


def header_bytes(headers: list[tuple[bytes, bytes]]) -> int:
    """The header names' and values' bytes. A plain loop: no generator per request."""
    size = 0
    for name, value in headers:
        size += len(name) + len(value)
    return size


class HeaderSizeLimit:
    """Pure ASGI middleware: 431 for requests whose headers exceed ``max_bytes()``.

    ``max_bytes`` is read per request, so a reloaded config applies at once.
    """

    def __init__(self, app: ASGIApp, max_bytes: Callable[[], int]) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            limit = self.max_bytes()
            size = header_bytes(scope["headers"])
            if size > limit:
                error = HeadersTooLarge(f"request headers of {size} bytes exceed the limit of {limit} bytes")
                body = dialect_for_path(scope["path"]).render_error(error)
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


_CONTAINERS = (dict, list)
"""What nests, as a tuple: ``isinstance`` against a ``dict | list`` written in the loop would build the union per
child."""


def nesting_exceeds(value: object, limit: int) -> bool:
    """True if arrays/objects nest deeper than ``limit``. Iterative: a hostile body cannot blow the stack.

    Walks one level of containers at a time (no (item, depth) pair per child) and stops at the first
    level past ``limit``, so a body nested far deeper is not walked to its bottom."""
    level: list[Any] = [value] if isinstance(value, _CONTAINERS) else []
    depth = 1
    while level:
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            for child in item.values() if isinstance(item, dict) else item:
                if isinstance(child, _CONTAINERS):
                    below.append(child)
        level = below
        depth += 1
    return False


def has_unpaired_surrogate(value: object) -> bool:
    """True if any string (or key) holds a lone UTF-16 surrogate, e.g. from ``"\\ud800"`` in JSON.

    Python's JSON parser accepts such escapes, but the text is not valid Unicode: it cannot be
    encoded to send upstream. Iterative, like ``nesting_exceeds``.
    """
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _count(body: dict[str, Any], name: str, maximum: int) -> int:
    """A positive integer field that multiplies the work (``n``, ``best_of``); 1 when absent."""
    value = body.get(name)
    if value is None:
        return 1
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequest(f"'{name}' must be a positive integer", param=name)
    if value > maximum:
        raise InvalidRequest(f"'{name}' of {value} exceeds this gateway's limit of {maximum}", param=name)
    return value


def containers_at_most(raw: bytes) -> int:
    """An upper bound on the arrays and objects of the JSON value ``raw`` holds: each begins at a ``[`` or ``{`` of
    its text (brackets inside strings are counted too, hence a bound). Two ``bytes.count`` in C: a body with no more
    containers than the depth limit cannot nest deeper than it, and needs no walk (``check_shape``)."""
    return raw.count(b"{") + raw.count(b"[")


def check_shape(
    body: dict[str, Any],
    endpoint: Endpoint,
    max_tokens: int | None,
    limits: LimitsConfig,
    containers: int | None = None,
) -> int:
    """Refuse a body outside ``limits`` with 400; return how many choices it asks for (``n``).

    ``containers``: a bound on the body's arrays and objects, if the caller knows one (``containers_at_most`` of the
    text it was parsed from); within ``max_json_depth``, the body is not walked for its depth."""
    depth = limits.max_json_depth
    if (containers is None or containers > depth) and nesting_exceeds(body, depth):
        raise InvalidRequest(f"request body nests deeper than {limits.max_json_depth} levels", code="invalid_json")
    conversation = CONVERSATION_FIELDS.get(endpoint)
    turns = body.get(conversation[0]) if conversation is not None else None
    if limits.max_messages and isinstance(turns, list) and len(turns) > limits.max_messages:
        field, entries = conversation or ("messages", "messages")
        raise InvalidRequest(
            f"{len(turns)} {entries} exceed this gateway's limit of {limits.max_messages}", param=field
        )
    if limits.max_tokens and max_tokens is not None and max_tokens > limits.max_tokens:
        param = token_field(endpoint, body)
        raise InvalidRequest(
            f"'{param}' of {max_tokens} exceeds this gateway's ceiling of {limits.max_tokens}", param=param
        )
    if endpoint == "embeddings":
        return 1
    choices = _count(body, "n", limits.max_n)
    if endpoint == "completions":
        choices = max(choices, _count(body, "best_of", limits.max_n))
    return choices


InFlightRefusal = Literal["total", "key"]


class InFlight:
    """Requests being served by this replica, in total and per key. Process-lived: survives reloads.

    Not thread-safe; used from the event loop only.
    """

    def __init__(self) -> None:
        self.total = 0
        self.per_key: dict[str, int] = {}

    def try_acquire(self, key_id: str, key_limit: int, total_limit: int) -> InFlightRefusal | None:
        """Take a slot, or say which limit is full (0 means unlimited)."""
        if total_limit and self.total >= total_limit:
            return "total"
        count = self.per_key.get(key_id, 0)
        if key_limit and count >= key_limit:
            return "key"
        self.total += 1
        self.per_key[key_id] = count + 1
        return None

    def release(self, key_id: str) -> None:
        self.total -= 1
        count = self.per_key.get(key_id, 0) - 1
        if count > 0:
            self.per_key[key_id] = count
        else:
            self.per_key.pop(key_id, None)
