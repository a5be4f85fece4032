"""A provider's answer compressed although the gateway asked for ``identity``, read plain.

gzip and deflate are read (as aiohttp read them for the gateway before); any other coding is refused in plain words
at the first read. Each read yields at most ``DECODED_PER_READ`` plain bytes, so a small compressed body that holds
a thousand times its size cannot make one read hold it all (``UpstreamResponse.read_all`` bounds the whole).
"""

from __future__ import annotations

import zlib

from gateway.http1 import WireError

DECODED_PER_READ = 1 << 20
"""The most plain bytes one compressed read yields: a small gzip can hold a thousand times its size (a bomb), and
what is left of it is decoded at the next read, so ``read_all``'s bound holds within this much."""


class AnswerDecoder:
    """One compressed answer's plain bytes, read by read."""

    __slots__ = ("_zlib", "_refused")

    def __init__(self, coding: str) -> None:
        self._zlib = zlib.decompressobj(32 + zlib.MAX_WBITS)  # 32: a zlib or a gzip header, whichever it is
        self._refused = None if coding in ("gzip", "x-gzip", "deflate") else coding

    def pending(self) -> bool:
        """Whether compressed bytes already read are still to be decoded (a read stopped at ``DECODED_PER_READ``)."""
        return bool(self._zlib.unconsumed_tail)

    def decode(self, data: bytes) -> bytes:
        """At most ``DECODED_PER_READ`` plain bytes of what is pending and the next compressed ``data`` (``b""``
        at the end: what is left, then nothing)."""
        if self._refused is not None:
            raise WireError(f"the answer is in content-encoding {self._refused!r}, which the gateway cannot read")
        unpacker = self._zlib
        tail = unpacker.unconsumed_tail
        if tail:
            data = tail + data
        try:
            return unpacker.decompress(data, DECODED_PER_READ) if data else unpacker.flush()
        except zlib.error:
            raise WireError("the compressed answer could not be read: it is not valid gzip or deflate") from None
