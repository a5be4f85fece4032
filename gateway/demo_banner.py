"""The commands ``gateway demo`` prints, written so that each one runs as printed.

Why: a newcomer copies the demo's "try it" lines into another terminal. ``make demo`` runs the
virtualenv's ``gateway`` without activating the virtualenv, so a bare ``gateway`` or ``python``
there is another program, or none. The lines therefore name the very executables running the
demo (relative to the current folder when they are inside it), or the bare names when those
are what the shell would find anyway, plus the one ``activate`` line that makes bare names work.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

BANNER_BENCH_REQUESTS = 8
"""The banner's bench through the gateway: two rounds of four 256-token answers, well under 30 s on the demo's
slowest streamer, enough to show the router's choice in its table by provider."""


@dataclass(frozen=True, slots=True)
class Invocation:
    """How to run the gateway's CLI and its Python from a shell in ``cwd``, as this process was run."""

    gateway: str
    """``gateway``, ``.venv/bin/gateway``, or ``.venv/bin/python -m gateway``."""
    python: str
    activate: str | None
    """The line that puts this virtualenv first on the PATH, if it is not already."""


def _shell_path(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when inside it (``.venv/bin/x``), else absolute; quoted for a shell."""
    try:
        shown = str(path.relative_to(cwd))
    except ValueError:
        shown = str(path)
    return shlex.quote(shown)


def _found_as(name: str, path: Path) -> bool:
    """The shell's ``name`` is ``path`` itself (not a resolved symlink: a venv's python links to the system's)."""
    found = shutil.which(name)
    return found is not None and Path(found).absolute() == path.absolute()


def invocation(argv0: str | None = None, executable: str | None = None, cwd: Path | None = None) -> Invocation:
    """How this process's own programs are reached from a shell in ``cwd`` (defaults: this process)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    python_path = Path(sys.executable if executable is None else executable).absolute()
    here = Path.cwd() if cwd is None else cwd
    python = "python" if _found_as("python", python_path) else _shell_path(python_path, here)
    script = Path(argv0).absolute()
    if script.name == "gateway" and script.is_file():
        gateway = "gateway" if _found_as("gateway", script) else _shell_path(script, here)
    else:  # run as `python -m gateway`
        gateway = f"{python} -m gateway"
    activate = None
    bin_dir = python_path.parent
    if (bin_dir / "activate").is_file() and not _found_as("python", python_path):
        activate = f"source {_shell_path(bin_dir / 'activate', here)}"
    return Invocation(gateway=gateway, python=python, activate=activate)


def try_it_lines(how: Invocation, base: str, model: str, config_file: str | None) -> list[str]:
    """The demo's "try it" commands, each runnable as printed from the folder the demo was started in."""
    lines = []
    if importlib.util.find_spec("openai") is not None:  # the dev extra brings the SDK; a bare install may not
        lines.append(
            f'{how.python} -c \'from openai import OpenAI; c = OpenAI(base_url="{base}/v1", api_key="demo"); '
            f'print(c.chat.completions.create(model="{model}", max_tokens=32, '
            'messages=[{"role": "user", "content": "Say hi"}]).choices[0].message.content)\''
        )
    lines.append(
        f"curl -N {base}/v1/chat/completions -H 'content-type: application/json' "
        f'-d \'{{"model": "{model}", "stream": true, "max_tokens": 32, '
        '"messages": [{"role": "user", "content": "Say hi"}]}\''
    )
    lines.append(f"{how.gateway} stats --url {base}")
    # 256-token answers, 4 at a time, done in ~15 s: long enough that the router sends them to the fast streamer
    # while `fading` is healthy; once it degrades, to any of three near-equal (the status lines say which).
    lines.append(f"{how.gateway} bench --url {base}/v1 --model {model} -n {BANNER_BENCH_REQUESTS} --concurrency 4")
    if config_file is not None:
        quoted = shlex.quote(config_file)
        lines.append(f"{how.gateway} bench -c {quoted} --model {model} -n 60 --concurrency 4")
    return lines


def relative_to_cwd(path: str) -> str:
    """``path`` as the user typed it, or relative to the current folder when it is inside it."""
    absolute = Path(path).absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return os.fspath(absolute)
