"""``python -m benchmarks.soak``: run the soak and write its results (see the package docstring)."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path

import uvloop

from benchmarks.soak import __doc__ as DESCRIPTION
from benchmarks.soak.fleet import RESULTS, fleet_up, wait_ready
from benchmarks.soak.heap import read_points
from benchmarks.soak.load import HEAP_SHARES, load
from benchmarks.soak.report import report


async def run(args: argparse.Namespace) -> str:
    kept_heap = Path(tempfile.gettempdir()) / f"soak-heap-{time.strftime('%Y%m%d-%H%M%S')}"
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        heap_dir = kept_heap if args.keep_heap else Path(tmp) / "heap"
        return await _run(args, Path(tmp), heap_dir)


async def _run(args: argparse.Namespace, workdir: Path, heap_dir: Path) -> str:
    with fleet_up(workdir, heap_dir) as fleet:
        await wait_ready(fleet)
        started = time.monotonic()
        outcomes, timeline, observed, marks, scraped, boards = await load(
            fleet, args.requests, args.concurrency, args.time_limit, args.outage, args.heap_at
        )
        wall = time.monotonic() - started
        heap = [await asyncio.to_thread(read_points, heap_dir, p.pid, marks.heap_at) for p in fleet.replicas]
        command = "python -m benchmarks.soak" + (" --quick" if args.quick else "")
        defaults = {"requests": 24000, "concurrency": 240, "time_limit": 300.0, "outage": 4.0}
        if not args.quick:
            changed = [
                f" --{k.replace('_', '-')} {getattr(args, k):g}" for k, v in defaults.items() if getattr(args, k) != v
            ]
            command += "".join(changed)
        for index in range(len(fleet.replicas)):
            log = (fleet.workdir / f"replica-{index}.log").read_text(errors="replace")
            errors = [line for line in log.splitlines() if " ERROR " in line or "Traceback" in line]
            if errors:
                timeline.events.append(
                    (wall, f"replica {index} logged {len(errors)} error lines, first: {errors[0][:160]}")
                )
        if args.keep_heap:
            timeline.events.append((wall, f"heap records (benchmarks.soak.heap) kept in {heap_dir}"))
            rss = [{"t": t, "rss_mb": values} for t, values in observed.rss]
            (heap_dir / "rss.json").write_text(json.dumps({"rss": rss, "events": timeline.events}))
        if any(not o.ok for o in outcomes):
            kept = keep_logs(fleet.workdir)
            timeline.events.append((wall, f"a request was lost: the replicas' and providers' logs kept in {kept}"))
        return report(outcomes, timeline, observed, marks, scraped, boards, command, wall, args.concurrency, heap)


def keep_logs(workdir: Path) -> Path:
    """Copy the run's logs out of its temporary folder (deleted at the end) so a lost request's cause can be found."""
    kept = Path(tempfile.gettempdir()) / f"soak-logs-{time.strftime('%Y%m%d-%H%M%S')}"
    kept.mkdir(parents=True, exist_ok=True)
    for log in workdir.glob("*.log"):
        shutil.copy2(log, kept / log.name)
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION.split("\n\n")[0] if DESCRIPTION else None)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--requests", type=int, default=24000)
    parser.add_argument("--concurrency", type=int, default=240)
    parser.add_argument("--time-limit", type=float, default=300.0, help="stop issuing requests after this long")
    parser.add_argument("--outage", type=float, default=4.0, help="seconds Redis stays down")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--heap-at",
        type=lambda text: [float(share) for share in text.split(",")],
        default=HEAP_SHARES,
        metavar="SHARES",
        help="record each replica's heap as the load reaches each share of the requests (default: "
        + ",".join(f"{share:g}" for share in HEAP_SHARES)
        + "); the live memory slope is fitted over these records",
    )
    parser.add_argument(
        "--keep-heap",
        action="store_true",
        help="keep the heap records (and the RSS series) in $TMPDIR/soak-heap-* for "
        "`python -m benchmarks.soak.heap compare`",
    )
    args = parser.parse_args()
    if args.quick:
        args.requests, args.concurrency, args.outage = 1200, 100, 2.0
    text = uvloop.run(run(args))
    print(text)
    if not args.quick:
        args.output.write_text(text)
        print(f"written to {args.output}")


if __name__ == "__main__":
    main()
