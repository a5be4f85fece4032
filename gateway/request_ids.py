"""Request ids: the 32 hex digits of a version-4 UUID, as ``uuid.uuid4().hex`` writes them, made 256 at a time.

One is made per request (its ``x-request-id``, the access log's, the error body's), so the system call for random
bytes and the per-id bit setting are done once per pool of ids, not per request; a forked worker draws a pool of its
own.
"""

from __future__ import annotations

import os

_ID_POOL_BYTES = 4096
"""Random bytes drawn from ``os.urandom`` at a time for request ids: one system call per 256 ids, not one each."""
_VERSION_4 = bytes(b & 0x0F | 0x40 for b in range(256))
"""Byte 6 of an id's 16 as ``uuid.UUID(..., version=4)`` sets it (the version's bits)."""
_RFC_4122 = bytes(b & 0x3F | 0x80 for b in range(256))
"""Byte 8 of an id's 16 as ``uuid.UUID(..., version=4)`` sets it (the variant's bits)."""


class _IdPool:
    """Request ids made 256 at a time: ``os.urandom``'s bytes, each 16 with the version and variant bits set, in hex.

    Each id is used once, in order. Dropped in a forked child (``os.register_at_fork``): a worker process must not
    hand out the ids its parent's pool would, so it draws its own."""

    __slots__ = ("hexes", "at")

    def __init__(self) -> None:
        self.hexes = ""
        self.at = 0

    def refill(self) -> None:
        raw = bytearray(os.urandom(_ID_POOL_BYTES))
        raw[6::16] = raw[6::16].translate(_VERSION_4)
        raw[8::16] = raw[8::16].translate(_RFC_4122)
        self.hexes, self.at = raw.hex(), 0

    def drop(self) -> None:
        self.hexes, self.at = "", 0


_ids = _IdPool()
os.register_at_fork(after_in_child=_ids.drop)


def new_request_id() -> str:
    """A random request id: the 32 hex digits of a version-4 UUID, as ``uuid.uuid4().hex`` writes them.

    Made from 16 random bytes (``os.urandom``'s, as ``uuid4``'s are) with the version and variant bits set as
    ``uuid.UUID`` sets them, without building the ``UUID`` object (its validation and its 128-bit integer); the bytes
    drawn, set and written in hex 256 ids at a time (``_IdPool``), so that a request takes a slice."""
    pool = _ids
    at = pool.at
    if at >= len(pool.hexes):
        pool.refill()
        at = 0
    pool.at = at + 32
    return pool.hexes[at : at + 32]


__all__ = ["new_request_id"]
