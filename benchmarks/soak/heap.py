"""A soak replica whose heap can be looked at: what holds the memory a replica gains.

``python -m benchmarks.soak.heap serve -c FILE`` runs ``gateway serve`` and, on each SIGUSR1, writes
to ``SOAK_HEAP_DIR`` one record of the process's heap, ``heap-<pid>-<n>.pickle``: its RSS, CPython's
small-object allocator (``sys._debugmallocstats``: bytes in used blocks, arenas), glibc's malloc
(``mallinfo2``: bytes in use, free inside its heap, in large mmap'd blocks), the collector's counts,
the number of live gc-tracked objects by type and of the gateway's own classes; then, unless
``SOAK_HEAP_COLLECT=0``, the same after a full collection (``live_mb``: what is reachable, the
cycles that were waiting for a collection gone). The soak starts its replicas this way; between
records the wrapper does nothing, so the replica is the plain ``gateway serve``.

Diagnosis only: ``SOAK_HEAP_FRAMES=N`` runs tracemalloc with N frames (from the start, or from
record ``SOAK_HEAP_TRACE_FROM``; it slows a replica two- to threefold), each record then holding a
snapshot; ``SOAK_HEAP_YOUNG_EVERY_S=S`` runs a young collection every S seconds from a thread.
``python -m benchmarks.soak.heap compare A B`` prints what changed from record A to record B.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def malloc_figures() -> dict[str, int]:
    """glibc's view of its heap: ``arena`` bytes obtained by brk/mmap'd arenas, ``uordblks`` in use,
    ``fordblks`` free (fragmentation that RSS keeps), ``hblkhd`` in large mmap'd blocks. Empty elsewhere."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
    except (OSError, AttributeError):
        return {}
    info = libc.mallinfo2()
    return {name: int(getattr(info, name)) for name, _ in _MallInfo2._fields_}


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pymalloc_figures() -> dict[str, int]:
    """CPython's small-object allocator (``sys._debugmallocstats``): arenas allocated now, bytes in used
    blocks, in free blocks of used pools, in empty pools and in arena alignment waste."""
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(sink.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        text = sink.read().decode(errors="replace")
    figures = {}
    for line in text.splitlines():
        if line.startswith("#") and "=" in line:
            name, value = line[1:].split("=", 1)
            with contextlib.suppress(ValueError):
                figures[" ".join(name.split())] = int(value.strip().replace(",", ""))
    return figures


def live_types() -> Counter[str]:
    """Every gc-tracked object by type, unreachable cycles not yet collected included."""
    types: Counter[str] = Counter()
    for obj in gc.get_objects():
        kind = type(obj)
        types[f"{kind.__module__}.{kind.__qualname__}"] += 1
    return types


def live_mb(figures: dict[str, Any]) -> float:
    """Memory in use, MB: CPython's small objects (bytes in used blocks) plus what malloc has handed out (its heap
    and its mmap'd large blocks). RSS adds to this what the allocators keep free, and the code."""
    pymalloc, malloc = figures["pymalloc"], figures["malloc"]
    used = pymalloc.get("bytes in allocated blocks", 0) + malloc.get("uordblks", 0) + malloc.get("hblkhd", 0)
    return float(used) / (1024 * 1024)


def record(number: int, collect: bool) -> dict[str, Any]:
    """One look at the heap as it is (objects, CPython's and glibc's allocators, the collector's counts) and,
    with ``collect``, again after a full collection (which then changes what the process does next)."""
    started = time.monotonic()
    data: dict[str, Any] = {
        "number": number,
        "pid": os.getpid(),
        "at": time.time(),
        "rss_mb": rss_mb(),
        "traced": tracemalloc.get_traced_memory()[0],
        "malloc": malloc_figures(),
        "pymalloc": pymalloc_figures(),
        "gc_count": gc.get_count(),
        "gc_stats": gc.get_stats(),
        "types": dict(live_types()),
        "snapshot": None,
        "after_collect": None,
    }
    data["own"] = {name: count for name, count in data["types"].items() if name.startswith("gateway.")}
    if collect:
        freed = gc.collect()
        data["after_collect"] = {
            "freed": freed,
            "rss_mb": rss_mb(),
            "malloc": malloc_figures(),
            "pymalloc": pymalloc_figures(),
            "types": dict(live_types()),
        }
    if tracemalloc.is_tracing():
        data["snapshot"] = tracemalloc.take_snapshot()
    data["took_s"] = time.monotonic() - started
    return data


@dataclass(frozen=True)
class HeapPoint:
    """One record as the soak reports it: requests done (both replicas) when it was asked for, and the replica's
    live memory, live gc-tracked objects and RSS after the record's full collection."""

    requests: int
    live_mb: float
    objects: int
    rss_mb: float
    freed: int
    """Objects the collection freed: cycles that were waiting for the collector."""


def read_points(folder: Path, pid: int, marks: Sequence[tuple[float, int]], wait_s: float = 30.0) -> list[HeapPoint]:
    """The records of replica ``pid``, one per mark (waiting up to ``wait_s`` for the last to be written)."""
    deadline = time.monotonic() + wait_s
    paths = [folder / f"heap-{pid}-{number}.pickle" for number in range(1, len(marks) + 1)]
    while not all(path.exists() for path in paths) and time.monotonic() < deadline:
        time.sleep(0.2)
    points = []
    for path, (_, requests) in zip(paths, marks, strict=True):
        if not path.exists():
            continue
        data = pickle.loads(path.read_bytes())
        after = data["after_collect"] or data
        freed = after.get("freed", 0)
        points.append(HeapPoint(requests, live_mb(after), sum(after["types"].values()), after["rss_mb"], freed))
    return points


def _install(folder: Path, frames: int, trace_from: int, collect: bool) -> None:
    taken = [0]

    def dump(signum: int, frame: FrameType | None) -> None:
        taken[0] += 1
        data = record(taken[0], collect)
        if taken[0] == trace_from and not tracemalloc.is_tracing():
            tracemalloc.start(frames)
        name = f"heap-{os.getpid()}-{taken[0]}.pickle"
        with (folder / (name + ".part")).open("wb") as sink:
            pickle.dump(data, sink)
        (folder / (name + ".part")).rename(folder / name)  # whole, or not there: the soak reads them as they come
        print(f"heap record {taken[0]} written in {data['took_s']:.1f} s", file=sys.stderr, flush=True)

    signal.signal(signal.SIGUSR1, dump)


def compare(first: Path, second: Path, top: int = 25) -> str:
    a, b = (pickle.loads(path.read_bytes()) for path in (first, second))
    lines = [f"{first.name} -> {second.name}: {b['at'] - a['at']:.0f} s apart"]
    lines.append(f"RSS {a['rss_mb']:.1f} -> {b['rss_mb']:.1f} MB ({b['rss_mb'] - a['rss_mb']:+.2f})")
    mib = 1024 * 1024
    lines.append(
        f"tracemalloc traced {a['traced'] / mib:.2f} -> {b['traced'] / mib:.2f} MB "
        f"({(b['traced'] - a['traced']) / mib:+.2f}); gc counts {a['gc_count']} / {b['gc_count']}"
    )
    lines.append(f"gc stats {a['gc_stats']} -> {b['gc_stats']}")
    for key in (
        "arenas allocated current",
        "bytes in allocated blocks",
        "bytes in available blocks",
        "bytes in unused pools",
        "bytes lost to arena alignment",
    ):
        if key in a.get("pymalloc", {}):
            scale, unit = (1, "") if key.startswith("arenas") else (mib, " MB")
            before, after = a["pymalloc"][key] / scale, b["pymalloc"][key] / scale
            lines.append(f"pymalloc {key}: {before:.2f} -> {after:.2f}{unit} ({after - before:+.3f})")
    for key in ("arena", "uordblks", "fordblks", "hblkhd", "keepcost"):
        if key in a["malloc"]:
            lines.append(
                f"malloc {key}: {a['malloc'][key] / mib:.2f} -> {b['malloc'][key] / mib:.2f} MB "
                f"({(b['malloc'][key] - a['malloc'][key]) / mib:+.2f})"
            )
    if a["snapshot"] is None or b["snapshot"] is None:
        lines.append("(no tracemalloc snapshot in one of the two)")
    lines.append("")
    lines.append("top tracemalloc differences by traceback:")
    snaps = a["snapshot"] is not None and b["snapshot"] is not None
    for stat in b["snapshot"].compare_to(a["snapshot"], "traceback")[:top] if snaps else []:
        lines.append(
            f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks (now {stat.size / 1024:.1f} KiB)"
        )
        for frame in stat.traceback.format(limit=8, most_recent_first=True):
            lines.append("      " + frame.strip())
    lines.append("")
    lines.append("top tracemalloc differences by line:")
    for stat in b["snapshot"].compare_to(a["snapshot"], "lineno")[:top] if snaps else []:
        lines.append(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d}  {stat.traceback[0]}")
    lines.append("")
    lines.append("object counts that changed most (gc-tracked):")
    names = set(a["types"]) | set(b["types"])
    changes = sorted(names, key=lambda n: -abs(b["types"].get(n, 0) - a["types"].get(n, 0)))
    for name in changes[:top]:
        before, after = a["types"].get(name, 0), b["types"].get(name, 0)
        if before != after:
            lines.append(f"  {after - before:+7d}  {before} -> {after}  {name}")
    lines.append("")
    lines.append("the gateway's own classes, live:")
    for name in sorted(set(a["own"]) | set(b["own"])):
        lines.append(f"  {a['own'].get(name, 0):6d} -> {b['own'].get(name, 0):6d}  {name}")
    return "\n".join(lines)


def _collect_young(every_s: float) -> None:
    """Experiment: a young collection (generations 0 and 1) every ``every_s``, whatever the allocation count."""
    while True:
        time.sleep(every_s)
        gc.collect(1)


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "compare":
        print(compare(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 25))
        return 0
    frames = int(os.environ.get("SOAK_HEAP_FRAMES", "0"))
    trace_from = int(os.environ.get("SOAK_HEAP_TRACE_FROM", "0"))
    if frames and not trace_from:
        tracemalloc.start(frames)
    collect = os.environ.get("SOAK_HEAP_COLLECT", "1") == "1"
    young_every_s = float(os.environ.get("SOAK_HEAP_YOUNG_EVERY_S", "0"))
    if young_every_s > 0:
        threading.Thread(target=_collect_young, args=(young_every_s,), daemon=True).start()
    _install(Path(os.environ.get("SOAK_HEAP_DIR", ".")), frames, trace_from, collect)
    from gateway.cli import main as gateway_main

    return gateway_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
