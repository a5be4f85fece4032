"""The chunks a ``StreamMeter`` keeps unread between its folds, held column by column, their shared head once.

A stream meters every chunk after its first token by keeping it (its bytes and arrival) until the
next fold reads a batch of them (``gateway.meter``). Kept as one ``(arrival, bytes, whole?)`` tuple
each, a chunk cost a tuple and a float object beside its bytes; here the arrivals are machine floats
in one array and the few entries that are one event's data (not a run of whole events) are listed by
index. And the events of one stream mostly begin alike (chat: ``data: {"id": …, "model": …,
"choices": [{"index": 0, "delta": {"content": "``, some 150 of a 180-byte event): a whole chunk that
begins with the stream's *head* is kept as the rest of it, the head held once and pointed at.

The head is learnt from the chunks themselves, not from any dialect: the longest beginning the first
two whole chunks share, shortened to what a later chunk shares with it when that is still at least
``MIN_HEAD`` bytes (a chunk that shares less is kept whole). ``full`` gives every chunk back exactly.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator

MIN_HEAD = 32
"""Shared beginnings shorter than this are not worth a head: such chunks are kept whole."""


def shared_length(a: bytes, b: bytes) -> int:
    """How many bytes ``a`` and ``b`` begin with alike (a bisection over slices: a few C compares)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class KeptChunks:
    """Kept entries in arrival order: each an arrival, its bytes and whether they are whole chunks.

    An entry is *whole* when its bytes are whole SSE events as they arrived (split at the finish),
    else it is one event's data, already split. Entry ``i``'s bytes are ``heads[i] + datas[i]``.
    Not thread-safe; one per meter.
    """

    __slots__ = ("times", "arrive", "datas", "heads", "parts", "head", "_first")

    def __init__(self) -> None:
        self.times = array("d")
        """Each entry's arrival (clock reading)."""
        self.arrive: Callable[[float], None] = self.times.append
        """``times.append``, bound once (and again where ``times`` is replaced, ``split``): the meter notes every
        chunk's arrival through it, and compiled code would otherwise look the array's method up by name each time."""
        self.datas: list[bytes] = []
        """Each entry's bytes after its head."""
        self.heads: list[bytes] = []
        """Each entry's head: the shared beginning it was kept without (the one object), or ``b""``."""
        self.parts: list[int] = []
        """Indices (ascending) of the entries that are one event's data rather than whole chunks."""
        self.head = b""
        """The stream's head as last learnt (``b""``: none yet)."""
        self._first: bytes | None = None
        """The first whole chunk, while no head is learnt: the second is compared with it."""

    def __len__(self) -> int:
        return len(self.datas)

    def append(self, at: float, data: bytes, whole: bool) -> None:
        self.arrive(at)
        if not whole:
            self.parts.append(len(self.datas))
            self.datas.append(data)
            self.heads.append(b"")
            return
        head = self.head
        if head and data.startswith(head):
            self.datas.append(data[len(head) :])
            self.heads.append(head)
            return
        self.keep_unshared(data)

    def keep_unshared(self, data: bytes) -> None:
        """Keep a whole chunk that does not begin with the head (the arrival is appended already): learn or
        shorten the head from it when it shares enough, else keep it as it is."""
        known = self.head or self._first
        if known is not None:
            length = shared_length(known, data)
            if length >= MIN_HEAD:
                head = self.head = known[:length]
                self._first = None
                self.datas.append(data[length:])
                self.heads.append(head)
                return
        if not self.head:
            self._first = data  # the next whole chunk is compared with this one
        self.datas.append(data)
        self.heads.append(b"")

    def full(self, start: int, stop: int) -> list[bytes]:
        """Entries ``start`` to ``stop`` (excluded), each its whole bytes."""
        heads, datas = self.heads[start:stop], self.datas[start:stop]
        return [head + data if head else data for head, data in zip(heads, datas, strict=True)]

    def __iter__(self) -> Iterator[tuple[float, bytes, bool]]:
        """Each entry as ``(arrival, bytes, whole?)``."""
        parts = set(self.parts)
        for index, (at, data) in enumerate(zip(self.times, self.full(0, len(self.datas)), strict=True)):
            yield at, data, index not in parts

    def split(self, keep: int) -> KeptChunks:
        """Take all entries but the last ``keep`` out, returned in a new ``KeptChunks``; these stay."""
        cut = max(len(self.datas) - keep, 0)
        older = KeptChunks()
        older.times, self.times = self.times[:cut], self.times[cut:]
        older.arrive, self.arrive = older.times.append, self.times.append
        older.datas, self.datas = self.datas[:cut], self.datas[cut:]
        older.heads, self.heads = self.heads[:cut], self.heads[cut:]
        older.parts = [index for index in self.parts if index < cut]
        self.parts = [index - cut for index in self.parts if index >= cut]
        return older
