"""The compiled routing modules (``gateway.native``): used only while they match the sources, and the same plans.

The comparisons need a build (``make native``, about a minute with a C compiler); without one they are skipped, and
the stamp's checks still run. Each side runs in a process of its own: which modules a process uses is decided once,
when ``gateway.routing`` is first imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway import native

ROOT = Path(__file__).resolve().parent.parent
BUILT = native.stale() is None
needs_build = pytest.mark.skipif(not BUILT, reason="no fresh build of the compiled routing modules (make native)")


def _fake_build(folder: Path, sources: dict[str, str] | None = None) -> None:
    """A build's layout with a stamp of the current sources (or ``sources``), its extension files left empty."""
    for path in native.built_files(folder).values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    hashes = sources if sources is not None else native.source_hashes()
    stamp = {"suffix": native.extension_suffix(), "modules": list(native.MODULES), "sources": hashes}
    (folder / native.STAMP).write_text(json.dumps(stamp))


def _run(code: str, native_env: str) -> str:
    """``code``'s output in a process of its own, compiled modules or not (``native_env``).

    Not traced by coverage (its subprocess patch passes ``COVERAGE_PROCESS_CONFIG`` on): these processes check that
    two builds agree, they are not what the suite's coverage measures, and tracing made the pure-Python side of the
    plan digest 2–3× slower (87 s untraced on a slow VM; over the test's 300 s traced, beside the other worker)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GATEWAY_NATIVE": native_env}
    for name in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_build_is_used_only_while_every_source_matches_its_stamp(tmp_path: Path) -> None:
    assert native.stale(tmp_path / "none") == "no build"
    _fake_build(tmp_path / "fresh")
    assert native.stale(tmp_path / "fresh") is None
    changed = native.source_hashes() | {"routing/score.py": "0" * 64}
    _fake_build(tmp_path / "edited", changed)
    assert native.stale(tmp_path / "edited") == "sources changed since the build: routing/score.py"
    # Not only the compiled modules: mypyc may have taken a constant from any module they import.
    changed = native.source_hashes() | {"config.py": "0" * 64, "dashboard/page.py": "1" * 64, "gone.py": "2" * 64}
    _fake_build(tmp_path / "elsewhere", changed)
    assert native.stale(tmp_path / "elsewhere") == (
        "sources changed since the build: config.py, dashboard/page.py, gone.py"
    )
    many = {name: "0" * 64 for name in native.source_hashes()}
    _fake_build(tmp_path / "many", many)
    assert (native.stale(tmp_path / "many") or "").endswith(f" and {len(many) - 3} more")
    _fake_build(tmp_path / "partial")
    native.built_files(tmp_path / "partial")["gateway.routing.health"].unlink()
    assert (native.stale(tmp_path / "partial") or "").startswith("missing ")
    stamp = json.loads((tmp_path / "fresh" / native.STAMP).read_text())
    (tmp_path / "fresh" / native.STAMP).write_text(json.dumps(stamp | {"suffix": ".cpython-27.so"}))
    assert native.stale(tmp_path / "fresh") == "built for another Python or module list"


FINDERS = (
    "import sys; from pathlib import Path; from gateway import native; "
    "print(native.activate(Path({folder!r})), [type(f).__name__ for f in sys.meta_path].count('_NativeFinder'))"
)


def test_a_stale_build_installs_no_finder(tmp_path: Path) -> None:
    changed = native.source_hashes() | {"routing/router.py": "0" * 64}
    _fake_build(tmp_path, changed)
    assert _run(FINDERS.format(folder=str(tmp_path)), "1") == "False 0"


def test_a_fresh_build_is_found_first_and_once(tmp_path: Path) -> None:
    _fake_build(tmp_path)
    assert _run(FINDERS.format(folder=str(tmp_path)), "1") == "True 1"
    twice = FINDERS.replace("print(", "native.activate(Path({folder!r})); print(", 1)
    assert _run(twice.format(folder=str(tmp_path)), "1") == "True 1"


def test_a_build_folder_is_checked_once_per_process_for_every_c_extension(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load_c`` hashes the sources once per folder, however many C extensions it is asked for."""
    _fake_build(tmp_path / "stale", {"gone.py": "0"})
    looked: list[Path] = []
    real = native.stale

    def counted(folder: Path = native.NATIVE_DIR) -> str | None:
        looked.append(folder)
        return real(folder)

    monkeypatch.setattr(native, "stale", counted)
    monkeypatch.setenv("GATEWAY_NATIVE", "1")
    for name in (*native.C_MODULES, *native.C_MODULES):
        monkeypatch.delitem(sys.modules, name, raising=False)
        assert native.load_c(name, tmp_path / "stale") is None
    assert looked == [tmp_path / "stale"]


def test_gateway_native_0_runs_the_sources(tmp_path: Path) -> None:
    _fake_build(tmp_path)
    assert _run(FINDERS.format(folder=str(tmp_path)), "0") == "False 0"


DIGEST = (
    "from benchmarks.plan_hash import digest; from benchmarks.routing_scenarios import SCENARIOS; "
    "from gateway import native; "
    "print(native.active(), digest([s for s in SCENARIOS if s.name in ('stable', 'flaky', 'outage')], [0, 1]))"
)


@needs_build
@pytest.mark.timeout(300)  # subprocesses of the whole router (bounded by their own timeout)
def test_the_compiled_router_makes_the_same_plans_bit_for_bit() -> None:
    """Every plan of three simulated markets (candidates, predictions, scores, the rng's state: ``plan_hash``)."""
    compiled, python = _run(DIGEST, "1").split(), _run(DIGEST, "0").split()
    assert compiled[0] == "True"
    assert python[0] == "False"
    assert compiled[1] == python[1]


COMPILED_SUITE = (
    "tests/test_request_output.py",
    "tests/test_meter.py",
    "tests/test_meter_typed.py",
    "tests/test_forward.py",
    "tests/test_sse.py",
    "tests/test_kept_chunks.py",
    "tests/test_chunk_relay.py",
    "tests/test_stream_shapes.py",
    "tests/test_routing_belief.py",
    "tests/test_routing_belief_explained.py",
    "tests/test_routing_belief_replicas.py",
    "tests/test_routing_belief_session.py",
    "tests/test_routing_belief_plan_same.py",
    "tests/test_routing_belief_running.py",
    "tests/test_routing_priors_same.py",
    "tests/test_routing_choose_gain.py",
    "tests/test_access_numbers.py",
    "tests/test_accesslog.py",
    "tests/test_positional_builds.py",
    "tests/test_frozen_make.py",
    "tests/stats/test_sketch.py",
    "tests/stats/test_window.py",
    "tests/test_sink_shortcuts.py",
)
"""Run against the compiled modules: a request relayed (status, headers, body frames, access-log line, Sample),
the meter, forwarder and splitter read chunk by chunk, the belief router's beliefs and choices (a look's and a
plan's arithmetic held to its plain Python form float for float), the per-request frozen objects made by the C
makers (``gateway.frozen``), and the stats' histograms counted sample by sample (``gateway.stats.sketch``: the window's
and the minutes' sums, bit for bit). Not the files
whose reference meters and forwarders subclass the compiled classes, or that replace a router's method on an
instance (Python can do neither to a compiled class)."""


BELIEF_DIGEST = (
    "import hashlib; from benchmarks.routing_scenarios import HELD_OUT, SCENARIOS, STRESS; "
    "from benchmarks.routing_simulate import Simulation; from gateway import native; "
    "names = ('stable', 'mixed-lengths', 'outage', 'ho-replicas'); "
    "markets = [s for s in (*SCENARIOS, *STRESS, *HELD_OUT) if s.name in names]; "
    "assert len(markets) == len(names); "
    "runs = [vars(Simulation(m, seed, 'gateway', None).run()) for m in markets for seed in (0, 1)]; "
    "print(native.active(), hashlib.sha256(repr(runs).encode()).hexdigest())"
)


@needs_build
@pytest.mark.timeout(300)  # subprocesses of the whole router (bounded by their own timeout)
def test_the_compiled_belief_router_serves_the_same_requests_bit_for_bit() -> None:
    """Every request's time, first token and provider of four simulated markets (one of two replicas) under the
    belief router, and every attempt's money: compiled and as Python."""
    compiled, python = _run(BELIEF_DIGEST, "1").split(), _run(BELIEF_DIGEST, "0").split()
    assert compiled[0] == "True"
    assert python[0] == "False"
    assert compiled[1] == python[1]


@needs_build
@pytest.mark.timeout(600)  # subprocesses of the whole router (bounded by their own timeout)
def test_a_request_relayed_with_the_compiled_modules_is_the_same() -> None:
    """``COMPILED_SUITE`` passes against the compiled routing and chunk-path modules."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GATEWAY_NATIVE": "1"}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *COMPILED_SUITE]
    args += ["-p", "no:xdist"]
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout


def test_a_report_says_which_modules_a_gateway_would_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_build(tmp_path / "fresh")
    monkeypatch.setenv("GATEWAY_NATIVE", "1")
    assert native.describe(tmp_path / "fresh") == "compiled (make native)"
    assert native.describe(tmp_path / "none") == "Python (no build)"
    monkeypatch.setenv("GATEWAY_NATIVE", "0")
    assert native.describe(tmp_path / "fresh") == "Python (GATEWAY_NATIVE=0)"
