"""``gateway serve --workers N``: N worker processes on one port, each a full replica.

One Python process serves on one core. To use a host's cores, the supervisor (this process) starts
N workers (``gateway.worker``) listening on one port. On Linux each worker listens on a socket of
its own, all bound with ``SO_REUSEPORT``, and the kernel spreads new connections evenly over them;
the supervisor holds the port with a bound, non-listening socket of the same group, so it stays
reserved while a worker restarts. (One shared listening socket, elsewhere, lets whichever worker
wakes first accept a whole burst of connections: a client's pool of kept-alive connections would
all land on one worker.) Every worker loads the config and builds its own app,
exactly as a replica on another host would: what replicas share through Redis (the stats window the
router reads, rate limits), workers share the same way. With ``[stats] backend = "memory"`` each
worker measures and rate-limits on its own, as separate replicas without Redis would (a warning
says so at start).

The supervisor itself serves nothing. It:

- forwards SIGHUP to every worker (each re-reads the config file; one still starting gets it once
  it serves, before which a SIGHUP would kill it);
- on SIGTERM or SIGINT, forwards SIGTERM: each worker stops accepting, lets its requests finish (up
  to ``shutdown_grace_s``), flushes its stats and exits; the supervisor exits 0 once all have. A
  second signal forwards SIGINT (uvicorn then stops waiting); past the grace and a margin, SIGKILL;
- restarts a worker that exits on its own, at once if it had served for a while, else after a pause
  that doubles while it keeps dying young (0.5 s … 30 s). A worker that fails before it ever served,
  at the first start, stops the supervisor: the same config would fail every restart too;
- owns ``PROMETHEUS_MULTIPROC_DIR``: wiped at start (a temporary directory unless the variable names
  one), marked for each worker that exits (``mark_process_dead``), removed at the end if it made it.

Workers run in their own session, so a terminal's Ctrl-C reaches the supervisor alone, which stops
them in order; they end with the supervisor if it is killed (``gateway.worker``).
"""

from __future__ import annotations

import logging
import math
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.config import GatewayConfig, Workers
from gateway.metrics.series import WORKER_ENV

logger = logging.getLogger("gateway.workers")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
RESTART_MIN_S = 0.5
RESTART_MAX_S = 30.0
HEALTHY_AFTER_S = 10.0
"""A worker that served this long before dying is restarted at once: it was not crash-looping."""
STOP_MARGIN_S = 10.0
"""Past ``shutdown_grace_s``, how long workers get to flush and close before they are killed."""
_HANDLED = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)


def available_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup CPU quota (containers)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_quota()
    return max(1, min(cores, math.ceil(quota))) if quota else max(1, cores)


def _cgroup_quota() -> float | None:
    try:  # cgroup v2: "<quota> <period>" or "max <period>"
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def resolve_workers(workers: Workers) -> int:
    return available_cores() if workers == "auto" else workers


REUSE_PORT = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")
"""Whether each worker listens on a socket of its own (see the module docstring)."""
BACKLOG = 2048


def bind_socket(host: str, port: int, *, listen: bool, reuse_port: bool = REUSE_PORT) -> socket.socket:
    """A socket bound to ``host:port`` (raises ``OSError`` if the address is taken by another program)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What every worker is started with."""

    config_path: str
    host: str
    port: int
    log_level: str
    workers: int


class _Slot:
    """One worker's place: the process filling it now, and its restart history."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_fd: int | None = None
        self.ready = False
        self.ever_ready = False
        self.started_at = 0.0
        self.quick_deaths = 0
        self.restart_at: float | None = None
        self.hup_pending = False


class Supervisor:
    """Runs ``spec.workers`` workers on ``sock`` until stopped (see the module docstring). ``run`` blocks."""

    def __init__(
        self, spec: WorkerSpec, sock: socket.socket, config: GatewayConfig, environ: Mapping[str, str]
    ) -> None:
        self.spec = spec
        self.sock = sock
        self.grace_s = config.server.shutdown_grace_s
        self.environ = dict(environ)
        self.slots = [_Slot(index) for index in range(spec.workers)]
        self.selector = selectors.DefaultSelector()
        self.signals: list[int] = []
        self.stopping = False
        self.stop_signals = 0
        self.stop_deadline = math.inf
        self.status = 0
        self.metrics_dir, self._own_metrics_dir = self._metrics_directory()

    def _metrics_directory(self) -> tuple[str, bool]:
        named = self.environ.get(MULTIPROC_ENV)
        if named:
            path = Path(named)
            path.mkdir(parents=True, exist_ok=True)
            for stale in path.glob("*.db"):  # a previous run's counts must not add to this one's
                stale.unlink()
            return str(path), False
        return tempfile.mkdtemp(prefix="gateway-metrics-"), True

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        self.selector.register(wake_r, selectors.EVENT_READ, None)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _HANDLED}
        old_wakeup = signal.set_wakeup_fd(wake_w)
        spec = self.spec
        logger.info("supervisor (pid %d): %d workers on http://%s:%d", os.getpid(), spec.workers, spec.host, spec.port)
        try:
            for slot in self.slots:
                self._spawn(slot)
            while not (self.stopping and all(slot.process is None for slot in self.slots)):
                for key, _ in self.selector.select(self._timeout()):
                    if key.data is None:
                        _drain(wake_r)
                    else:
                        self._on_ready_pipe(key.data)
                self._handle_signals()
                self._reap()
                self._restart_due()
                if self.stopping and time.monotonic() > self.stop_deadline:
                    self._send_all(signal.SIGKILL)
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.selector.close()
            os.close(wake_r)
            os.close(wake_w)
            self.sock.close()
            if self._own_metrics_dir:
                shutil.rmtree(self.metrics_dir, ignore_errors=True)
        logger.info("supervisor: all workers stopped")
        return self.status

    def _timeout(self) -> float | None:
        now = time.monotonic()
        due = [slot.restart_at for slot in self.slots if slot.restart_at is not None]
        if self.stopping:
            due.append(self.stop_deadline)
        # Reaping is also driven by SIGCHLD; the cap only guards against a missed wake-up.
        return max(0.0, min([*due, now + 1.0]) - now)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signum)

    def _handle_signals(self) -> None:
        signals, self.signals = self.signals, []
        for signum in signals:
            if signum == signal.SIGHUP and not self.stopping:
                logger.info("supervisor: SIGHUP, reloading every worker")
                for slot in self.slots:
                    if slot.process is not None and slot.ready:
                        slot.process.send_signal(signal.SIGHUP)
                    else:
                        slot.hup_pending = True
            elif signum in (signal.SIGTERM, signal.SIGINT):
                self._stop(signum)

    def _stop(self, signum: int) -> None:
        self.stop_signals += 1
        if self.stop_signals == 1:
            logger.info("supervisor: %s, stopping the workers (grace %gs)", signal.Signals(signum).name, self.grace_s)
            self.stopping = True
            self.stop_deadline = time.monotonic() + self.grace_s + STOP_MARGIN_S
            for slot in self.slots:
                slot.restart_at = None
            self._send_all(signal.SIGTERM)
        else:
            logger.info("supervisor: stop signal again, workers stop without waiting for requests")
            self._send_all(signal.SIGINT if self.stop_signals == 2 else signal.SIGKILL)

    def _send_all(self, signum: int) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.send_signal(signum)

    # -- workers -------------------------------------------------------------------------------------

    def _spawn(self, slot: _Slot) -> None:
        ready_r, ready_w = os.pipe()
        spec = self.spec
        fd = -1 if REUSE_PORT else self.sock.fileno()  # -1: the worker binds its own socket
        command = [sys.executable, "-m", "gateway.worker", "--fd", str(fd)]
        command += ["--ready-fd", str(ready_w), "--index", str(slot.index), "--parent", str(os.getpid())]
        command += ["-c", spec.config_path, "--host", spec.host, "--port", str(spec.port)]
        command += ["--log-level", spec.log_level]
        environ = {**self.environ, MULTIPROC_ENV: self.metrics_dir, WORKER_ENV: str(slot.index)}
        environ["GATEWAY_WORKERS"] = str(len(self.slots))
        slot.process = subprocess.Popen(
            command, pass_fds=(ready_w,) if REUSE_PORT else (fd, ready_w), env=environ, start_new_session=True
        )
        os.close(ready_w)
        slot.ready_fd, slot.ready, slot.restart_at = ready_r, False, None
        slot.started_at = time.monotonic()
        self.selector.register(ready_r, selectors.EVENT_READ, slot)
        logger.info("worker %d started (pid %d)", slot.index, slot.process.pid)

    def _on_ready_pipe(self, slot: _Slot) -> None:
        assert slot.ready_fd is not None
        data = os.read(slot.ready_fd, 16)
        self._close_pipe(slot)  # one byte once serving, or EOF if it died first
        if data and slot.process is not None:
            slot.ready = slot.ever_ready = True
            logger.info("worker %d serving (pid %d)", slot.index, slot.process.pid)
            if slot.hup_pending:
                slot.hup_pending = False
                slot.process.send_signal(signal.SIGHUP)

    def _close_pipe(self, slot: _Slot) -> None:
        if slot.ready_fd is not None:
            self.selector.unregister(slot.ready_fd)
            os.close(slot.ready_fd)
            slot.ready_fd = None

    def _reap(self) -> None:
        from prometheus_client import multiprocess

        for slot in self.slots:
            process = slot.process
            if process is None or process.poll() is None:
                continue
            self._close_pipe(slot)
            slot.process = None
            multiprocess.mark_process_dead(process.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
            status = process.returncode
            if self.stopping:
                logger.info("worker %d stopped (pid %d, status %d)", slot.index, process.pid, status)
                continue
            if not any(other.ever_ready for other in self.slots):
                logger.error("worker %d failed to start (status %d): stopping", slot.index, status)
                self.status = 1
                self._stop(signal.SIGTERM)
                continue
            lived = time.monotonic() - slot.started_at
            slot.quick_deaths = 0 if lived >= HEALTHY_AFTER_S else slot.quick_deaths + 1
            delay = 0.0 if not slot.quick_deaths else min(RESTART_MAX_S, RESTART_MIN_S * 2 ** (slot.quick_deaths - 1))
            logger.warning(
                "worker %d exited (pid %d, status %d) after %.1fs; restarting in %.1fs",
                slot.index,
                process.pid,
                status,
                lived,
                delay,
            )
            slot.ready = False
            slot.restart_at = time.monotonic() + delay

    def _restart_due(self) -> None:
        if self.stopping:
            return
        now = time.monotonic()
        for slot in self.slots:
            if slot.process is None and slot.restart_at is not None and slot.restart_at <= now:
                self._spawn(slot)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def serve_workers(spec: WorkerSpec, config: GatewayConfig, environ: Mapping[str, str]) -> int:
    """Bind, supervise, return the exit status. Raises ``OSError`` if the address cannot be bound."""
    if config.stats.backend == "memory":
        logger.warning(
            "%d workers with [stats] backend = 'memory': each worker measures, routes and rate-limits on "
            "its own (as separate replicas would); set backend = 'redis' to share them",
            spec.workers,
        )
    sock = bind_socket(spec.host, spec.port, listen=not REUSE_PORT)
    port = sock.getsockname()[1]
    spec = WorkerSpec(spec.config_path, spec.host, port, spec.log_level, spec.workers)
    return Supervisor(spec, sock, config, environ).run()


__all__ = ["Supervisor", "WorkerSpec", "available_cores", "bind_socket", "resolve_workers", "serve_workers"]
