"""Plain-text tables for the CLI: one renderer for ``check``, ``stats`` and ``bench``."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, numeric_from: int | None = None) -> str:
    """Columns padded to their widest cell, a dashed rule under the header.

    Columns from ``numeric_from`` on are right-aligned, so that magnitudes line up.
    """
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    right = len(widths) if numeric_from is None else numeric_from

    def line(cells: Sequence[str]) -> str:
        parts = [
            str(c).rjust(w) if i >= right else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(row) for row in rows)])
