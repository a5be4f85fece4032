"""The chunks a ``StreamMeter`` keeps unread between its folds, held column by column.

A stream meters every chunk after its first token by keeping it (its bytes and arrival) until the
next fold reads a batch of them (``gateway.meter``). Kept as one ``(arrival, bytes, whole?)`` tuple
each, a chunk cost a tuple and a float object beside its bytes (88 bytes of a ~330-byte chat
event); here the arrivals are machine floats in one array and the few entries that are one event's
data (not a run of whole events) are listed by index, so a held-open stream holds its bytes and
8 more per chunk.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator


class KeptChunks:
    """Kept entries in arrival order: each an arrival, its bytes and whether they are whole chunks.

    An entry is *whole* when its bytes are whole SSE events as they arrived (split at the finish),
    else it is one event's data, already split. Not thread-safe; one per meter.
    """

    __slots__ = ("times", "datas", "parts")

    def __init__(self) -> None:
        self.times = array("d")
        """Each entry's arrival (clock reading)."""
        self.datas: list[bytes] = []
        """Each entry's bytes."""
        self.parts: list[int] = []
        """Indices (ascending) of the entries that are one event's data rather than whole chunks."""

    def __len__(self) -> int:
        return len(self.datas)

    def append(self, at: float, data: bytes, whole: bool) -> None:
        if not whole:
            self.parts.append(len(self.datas))
        self.times.append(at)
        self.datas.append(data)

    def __iter__(self) -> Iterator[tuple[float, bytes, bool]]:
        """Each entry as ``(arrival, bytes, whole?)``."""
        parts = set(self.parts)
        for index, (at, data) in enumerate(zip(self.times, self.datas, strict=True)):
            yield at, data, index not in parts

    def split(self, keep: int) -> KeptChunks:
        """Take all entries but the last ``keep`` out, returned in a new ``KeptChunks``; these stay."""
        cut = max(len(self.datas) - keep, 0)
        older = KeptChunks()
        older.times, self.times = self.times[:cut], self.times[cut:]
        older.datas, self.datas = self.datas[:cut], self.datas[cut:]
        older.parts = [index for index in self.parts if index < cut]
        self.parts = [index - cut for index in self.parts if index >= cut]
        return older
