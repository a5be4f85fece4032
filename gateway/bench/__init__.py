"""``gateway bench``: a provider benchmark with the method of the public leaderboards.

``runner`` sends the requests and measures them as the gateway measures what it relays;
``report`` turns the results into the leaderboard's percentiles, a table and files;
``command`` picks the targets and seeds the stats store.
"""

from gateway.bench.command import BenchOptions, run_bench_command, samples_for_store, seed_store
from gateway.bench.runner import BenchError, BenchRunner, BenchSettings, BenchTarget, RequestResult

__all__ = [
    "BenchError",
    "BenchOptions",
    "BenchRunner",
    "BenchSettings",
    "BenchTarget",
    "RequestResult",
    "run_bench_command",
    "samples_for_store",
    "seed_store",
]
