"""Stopping by signal, however many arrive: ``gateway demo`` and ``gateway serve`` (one process, or workers)
with a stream open get SIGTERM, then SIGTERM or SIGINT again (``timeout … make demo`` sends both: ``timeout``
to the process group, make to its child). Each must exit promptly with status 0, print no traceback, and
leave no process behind.

Why subprocesses: signals, the exit status and leftover children are only real for a whole process.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from gateway.fakes import FakeBehavior
from tests.support.fakes import Fakes, FakeServer
from tests.support.wait import wait_until
from tests.test_demo import READY, DemoProcess, _refuses
from tests.test_shutdown import ServeProcess
from tests.test_workers import Supervised

SECOND = [signal.SIGTERM, signal.SIGINT]
LONG_ANSWER = {"stream": True, "max_tokens": 4000, "messages": [{"role": "user", "content": "write a long story"}]}


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` now (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class OpenStream:
    """A streamed request held open in a thread: ``begun`` once its first bytes arrived; it then reads on."""

    def __init__(self, url: str, body: dict[str, object]) -> None:
        self.begun = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(url, body), daemon=True)
        self.thread.start()

    def _run(self, url: str, body: dict[str, object]) -> None:
        try:
            with httpx.Client(timeout=60) as client, client.stream("POST", url, json=body) as response:
                for _ in response.iter_bytes():
                    self.begun.set()
        except httpx.HTTPError as exc:  # the forced stop cuts it: expected
            self.error = exc


def _stop_twice(process: subprocess.Popen[str] | subprocess.Popen[bytes], second: int, stopping: object) -> float:
    """SIGTERM, then (once the first took effect) ``second``; how long the process took to exit after it."""
    process.send_signal(signal.SIGTERM)
    wait_until(stopping, 15, "the first signal to start the stop")  # type: ignore[arg-type]
    process.send_signal(second)
    sent = time.monotonic()
    process.wait(20)
    return time.monotonic() - sent


@pytest.mark.parametrize("second", SECOND, ids=lambda s: signal.Signals(s).name)
def test_the_demo_stops_at_once_on_a_second_signal_without_a_traceback(second: int) -> None:
    demo = DemoProcess("--traffic", "5")
    try:
        demo.wait_for(READY)
        ports = demo.ports()
        stream = OpenStream(demo.base_url + "/chat/completions", {"model": "glm-5.3-flash", **LONG_ANSWER})
        assert stream.begun.wait(20), "the stream did not begin"
        children = _children(demo.proc.pid)
        took = _stop_twice(demo.proc, second, lambda: any("stopping (SIGTERM)" in line for line in demo.lines))
        code = demo.finish(10)
    finally:
        demo.kill()
    output = "\n".join(demo.lines + demo.errors)
    assert "Traceback" not in output and "Exception in" not in output, output
    assert code == 0, output
    assert took < 8, f"took {took:.1f}s to stop after the second signal"
    assert any("stopping at once" in line for line in demo.lines), demo.lines
    assert demo.lines[-1].endswith("stopped: the gateway and 5 simulated providers are down."), demo.lines
    stream.thread.join(10)
    assert not stream.thread.is_alive()
    assert all(_refuses(port) for port in ports)
    assert not [pid for pid in children if _alive(pid)]


def test_the_demo_stops_cleanly_on_one_signal_with_a_stream_open() -> None:
    """One SIGTERM: the stream outlasts the grace period, is cut, and nothing reports it as an error."""
    demo = DemoProcess("--traffic", "0")
    try:
        demo.wait_for(READY)
        stream = OpenStream(demo.base_url + "/chat/completions", {"model": "glm-5.3-flash", **LONG_ANSWER})
        assert stream.begun.wait(20), "the stream did not begin"
        code = demo.stop(signal.SIGTERM, timeout=20)
    finally:
        demo.kill()
    output = "\n".join(demo.lines + demo.errors)
    assert code == 0 and "Traceback" not in output and "Exception in" not in output, output
    stopping = [line for line in demo.lines if "stopping" in line]
    assert len(stopping) == 1 and stopping[0].endswith(
        "stopping (SIGTERM): open requests get up to 3s to finish; Ctrl-C again stops at once."
    ), demo.lines


def _config(tmp_path: Path, fake: FakeServer, *, grace_s: float, workers: int = 1) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = 0\nshutdown_grace_s = {grace_s}\nworkers = {workers}\n'
        f'[[providers]]\nname = "p"\nbase_url = "{fake.base_url}"\n'
        '[[models]]\nname = "m"\n[[models.deployments]]\nprovider = "p"\nmodel = "up"\n'
    )
    return path


@pytest.mark.parametrize("second", SECOND, ids=lambda s: signal.Signals(s).name)
def test_serve_stops_at_once_on_a_second_signal_and_still_runs_its_shutdown(
    fakes: Fakes, tmp_path: Path, second: int
) -> None:
    fake = fakes.start("p", FakeBehavior(tokens_per_s=5.0, output_tokens=300))  # a minute of answer
    gateway = ServeProcess(_config(tmp_path, fake, grace_s=60))
    try:
        stream = OpenStream(gateway.base_url + "/chat/completions", {"model": "m", **LONG_ANSWER})
        assert stream.begun.wait(20), "the stream did not begin"
        took = _stop_twice(gateway.process, second, lambda: "Waiting for connections to close" in gateway.log())
        code = gateway.wait(10)
    finally:
        gateway.stop()
    log = gateway.log()
    assert code == 0 and "Traceback" not in log and "Exception in" not in log, log
    assert took < 8, f"took {took:.1f}s to stop after the second signal (grace 60s)"
    assert "again: stopping now" in log and "closing 1 open connection(s)" in log, log
    assert "Application shutdown complete" in log  # forced, the lifespan still flushed and closed
    stream.thread.join(10)
    assert stream.error is not None  # the answer was cut, not completed
    wait_until(lambda: fake.app.state.open_streams == 0, 15, "the upstream stream to be dropped")


@pytest.mark.parametrize("second", SECOND, ids=lambda s: signal.Signals(s).name)
def test_serve_with_workers_stops_at_once_on_a_second_signal(fakes: Fakes, tmp_path: Path, second: int) -> None:
    fake = fakes.start("p", FakeBehavior(tokens_per_s=5.0, output_tokens=300))
    gateway = Supervised(_config(tmp_path, fake, grace_s=60, workers=2), tmp_path / "log.txt")
    try:
        gateway.wait(lambda: len(gateway.serving()) == 2, "both workers to serve")
        workers = list(gateway.serving().values())
        stream = OpenStream(gateway.url + "/v1/chat/completions", {"model": "m", **LONG_ANSWER})
        assert stream.begun.wait(20), "the stream did not begin"
        took = _stop_twice(gateway.process, second, lambda: "stopping the workers" in gateway.text())
    finally:
        gateway.stop()
    log = gateway.text()
    assert gateway.process.returncode == 0 and "Traceback" not in log and "Exception in" not in log, log
    assert took < 8, f"took {took:.1f}s to stop after the second signal (grace 60s)"
    assert not [pid for pid in workers if _alive(pid)]
    assert log.count("Application shutdown complete") == 2, log
    stream.thread.join(10)
    assert stream.error is not None


def test_ctrl_c_in_a_one_off_command_is_one_line_and_status_130() -> None:
    """A Ctrl-C that no server has taken over (``gateway stats`` waiting on a gateway that does not answer, or a
    server still starting) interrupts the command: one line, the conventional 130, no traceback."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "stats", "--url", f"http://127.0.0.1:{port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            silent.settimeout(20)
            connection, _ = silent.accept()  # the command is now waiting for an answer that never comes
            with connection:
                process.send_signal(signal.SIGINT)
                out, err = process.communicate(timeout=10)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(5)
    assert process.returncode == 130, err
    assert err == "gateway: interrupted\n" and out == ""


def test_serve_interrupted_while_it_starts_stops_without_a_traceback(fakes: Fakes, tmp_path: Path) -> None:
    """SIGINT as soon as ``gateway serve`` logs its first line (the config is loaded; the server may or may not have
    taken the signal over yet): it stops (130 if the start was interrupted, 0 if the server stopped), quietly."""
    fake = fakes.start("p")
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "-c", str(_config(tmp_path, fake, grace_s=5))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        assert "client auth OFF" in first, first
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    assert process.returncode in (0, 130), err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
