"""``GET /v1/responses/{id}/input_items`` of a response the gateway keeps: OpenAI's list page, in OpenAI's item shape.

Why a shape of its own: a client may send its input in the short forms the API accepts (a bare string, a
message without ``type``, a message whose ``content`` is a string), and the gateway keeps it as sent. OpenAI
answers input items in one form, which the SDKs parse by ``type``: a message is ``{"type": "message", "id",
"role", "status", "content": [parts]}``. Relayed as sent, a short-form message came back without ``type`` (or
with string ``content``), and ``client.responses.input_items.list`` gave items whose ``content[0].text`` failed.

The page follows OpenAI's parameters: ``order`` (``desc``, the default, or ``asc``), ``after`` (an item id:
the page starts after it), ``limit`` (1 to 100, default 20); any other value is a 400 naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.errors import InvalidRequest

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
_ORDERS = ("asc", "desc")


def listed_item(item: Any, index: int) -> Any:
    """``item`` as OpenAI lists it: an id (``item_<index>`` when it had none), and a message in its full form."""
    if not isinstance(item, dict):
        return item
    listed = {"id": f"item_{index}", **item}
    if "role" in item and item.get("type", "message") == "message":
        listed["type"] = "message"
        listed.setdefault("status", "completed")
        content = item.get("content")
        if isinstance(content, str):
            part = "output_text" if item["role"] == "assistant" else "input_text"
            text: dict[str, Any] = {"type": part, "text": content}
            if part == "output_text":
                text["annotations"] = []
            listed["content"] = [text]
    return listed


def input_item_page(items: list[Any], query: Mapping[str, str]) -> dict[str, Any]:
    """One page of ``items`` (in the order they were sent) as ``query`` asks, in OpenAI's list shape."""
    order = query.get("order", "desc")
    if order not in _ORDERS:
        raise InvalidRequest("'order' must be 'asc' or 'desc'", param="order")
    try:
        limit = int(query.get("limit", str(DEFAULT_LIMIT)))
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"'limit' must be an integer from 1 to {MAX_LIMIT}", param="limit")
    listed = [listed_item(item, i) for i, item in enumerate(items)]
    if order == "desc":
        listed.reverse()
    after = query.get("after")
    if after is not None:
        ids = [item.get("id") if isinstance(item, dict) else None for item in listed]
        listed = listed[ids.index(after) + 1 :] if after in ids else []
    page = listed[:limit]
    first = page[0].get("id") if page and isinstance(page[0], dict) else None
    last = page[-1].get("id") if page and isinstance(page[-1], dict) else None
    return {"object": "list", "data": page, "first_id": first, "last_id": last, "has_more": len(listed) > limit}


__all__ = ["input_item_page", "listed_item"]
