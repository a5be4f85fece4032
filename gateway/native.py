"""The routing modules and the chunk path compiled with mypyc, used when a build of this very source is present.

Each router's plan and its learning from each answer are pure-Python arithmetic over small objects,
run on every request, and every relayed chunk passes the meter's and the forwarder's byte
scans; mypyc compiles the same modules (their strict type hints are what it needs) into C extensions
that compute the same floats, make the same decisions and keep the same bytes, in a fraction of the
interpreter's time. A compiled class cannot be subclassed in Python: the tests' reference meters and
forwarders (subclasses) run against the sources only. The build is optional and kept apart from the sources: ``python -m
gateway.native_build`` (``make native``) writes the extensions and a stamp into ``gateway/_native/``.
Where no compiler or no build is present, the same modules run as Python. Beside them, ``C_MODULES`` are written in C
where mypyc's per-byte loops are too slow (the chat stream's kept chunks read at the finish, ``chat_read.c``): built
by the same compiler, stamped with the same sources and used under the same rule (``load_c``), each with a pure path
that runs where it is not.

A build is used only while it matches the sources: the stamp holds the hash of every module of the package,
and any edit disables the build whole (compiled modules call each other directly, so one module cannot fall back
alone, and mypyc may have taken a constant from a module it did not compile); a stale build is named in a
warning. ``GATEWAY_NATIVE=0`` runs pure Python regardless
(the test suite's default, so that coverage sees the code; A/B measurements).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

logger = logging.getLogger("gateway")

PACKAGE = Path(__file__).resolve().parent
NATIVE_DIR = PACKAGE / "_native"
"""Where ``gateway.native_build`` writes the extensions (``gateway/routing/<name><suffix>``) and the stamp."""
STAMP = "stamp.json"
GROUP = "gateway_native"
"""mypyc's group name: the shared library holding every compiled module's code is ``gateway_native__mypyc``."""
MODULES = (
    "gateway.routing.affinity",
    "gateway.routing.apis",
    "gateway.routing.capacity",
    "gateway.routing.cost",
    "gateway.routing.deadlines",
    "gateway.routing.filters",
    "gateway.routing.health",
    "gateway.routing.hedge",
    "gateway.routing.lengths",
    "gateway.meter",
    "gateway.kept_chunks",
    "gateway.sse",
    "gateway.relay.forward",
    "gateway.routing.belief",
    "gateway.routing.belief_attempts",
    "gateway.routing.belief_candidates",
    "gateway.routing.belief_failures",
    "gateway.routing.belief_hazard",
    "gateway.routing.belief_others",
    "gateway.routing.belief_prefill",
    "gateway.routing.belief_router",
    "gateway.routing.belief_runs",
    "gateway.routing.belief_scatter",
    "gateway.routing.belief_running",
    "gateway.routing.belief_live",
    "gateway.routing.belief_rank",
    "gateway.routing.student",
    "gateway.routing.draws",
    "gateway.routing.priors",
    "gateway.routing.choose",
    "gateway.routing.belief_look",
    "gateway.routing.worth",
    "gateway.access_numbers",
    "gateway.stats.sketch",
    "gateway.stats.values",
)
"""What is compiled: the router and what its plans and ``attempt_finished`` call per request,
and what every relayed
chunk passes through (the meter's ``feed``, the forwarder's, the SSE splitter and the kept chunks), the access
line's rounding (``access_numbers``), and the stats' histograms every sample is counted in (``stats.sketch``). Not
the data types other packages build and read (``plan``, ``ranking``, ``overrides``, ``reading``): they stay Python
classes."""
C_MODULES = {"gateway.dialects._chat_read": "dialects/chat_read.c", "gateway._frozen_make": "frozen_make.c"}
"""Extensions written in C, by module name, with their source below the package: built by the same compiler
beside the mypyc modules, stamped and used under the same rule (``load_c``); the pure modules stand in for them."""


def source_of(module: str) -> Path:
    return PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")


def source_hashes() -> dict[str, str]:
    """The sha256 of every module of the package and of each C extension's source, by path below it (the build's
    own folder aside)."""
    c_sources = [PACKAGE / source for source in C_MODULES.values()]
    sources = [*PACKAGE.rglob("*.py"), *(path for path in c_sources if path.exists())]  # an install may lack them
    return {
        path.relative_to(PACKAGE).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(sources)
        if NATIVE_DIR not in path.parents
    }


def extension_suffix() -> str:
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def built_files(folder: Path, modules: Sequence[str] = MODULES) -> dict[str, Path]:
    """The extension file of each compiled module (and C extension) and of the shared library, by module name, in
    ``folder``."""
    suffix = extension_suffix()
    names = [*modules, *C_MODULES]
    files = {name: folder.joinpath(*name.split(".")).with_name(name.rsplit(".", 1)[-1] + suffix) for name in names}
    files[f"{GROUP}__mypyc"] = folder / f"{GROUP}__mypyc{suffix}"
    return files


def stale(folder: Path = NATIVE_DIR) -> str | None:
    """Why the build in ``folder`` cannot be used (None: it can): absent, for another Python, or a source changed."""
    try:
        stamp = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return "no build"
    if stamp.get("suffix") != extension_suffix() or stamp.get("modules") != list(MODULES):
        return "built for another Python or module list"
    built, now = stamp.get("sources", {}), source_hashes()
    changed = sorted(name for name in built.keys() | now.keys() if built.get(name) != now.get(name))
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        return f"sources changed since the build: {', '.join(changed[:3])}{more}"
    missing = [str(path) for path in built_files(folder).values() if not path.exists()]
    return f"missing {missing[0]}" if missing else None


class _NativeFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules (and their shared library) in the build, before the sources are looked at."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        return importlib.util.spec_from_file_location(fullname, file) if file is not None else None


def activate(folder: Path = NATIVE_DIR) -> bool:
    """Use the compiled modules if ``folder`` holds a build of these sources; True if they will be used.

    Called before any of them is imported (the first lines of ``gateway.routing`` and ``gateway.stats``, so that
    whichever package a process imports first, no compiled module meets a pure one); a second call changes nothing."""
    if any(isinstance(finder, _NativeFinder) for finder in sys.meta_path):
        return True
    if os.environ.get("GATEWAY_NATIVE") == "0":
        return False
    why = stale(folder)
    if why is not None:
        if why != "no build":
            logger.warning("compiled routing modules in %s not used (%s): run `make native` again", folder, why)
        return False
    sys.meta_path.insert(0, _NativeFinder(built_files(folder)))
    return True


_FRESH: dict[Path, bool] = {}
"""Whether each build folder ``load_c`` looked at matched the sources (``stale``), found once per process: each look
hashes every source, and each C extension is loaded by a module of its own at import."""


def load_c(name: str, folder: Path = NATIVE_DIR) -> ModuleType | None:
    """The C extension ``name`` (one of ``C_MODULES``) when the build in ``folder`` is used (``activate``'s rule: a
    build of these very sources, ``GATEWAY_NATIVE`` not ``0``); None otherwise (the caller's pure path runs).

    Loaded from its file, not through ``activate``'s finder: a module that imports it may be imported before
    ``gateway.routing`` (which activates the build), and activating then would mix compiled and pure modules."""
    if os.environ.get("GATEWAY_NATIVE") == "0":
        return None
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    fresh = _FRESH.get(folder)
    if fresh is None:
        fresh = _FRESH[folder] = stale(folder) is None
    if not fresh:
        return None
    spec = importlib.util.spec_from_file_location(name, built_files(folder)[name])
    if spec is None or spec.loader is None:  # pragma: no cover - a file location always has a loader
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def describe(folder: Path = NATIVE_DIR) -> str:
    """Which routing modules a gateway started now from this package would run, in words (for benchmark reports)."""
    if os.environ.get("GATEWAY_NATIVE") == "0":
        return "Python (GATEWAY_NATIVE=0)"
    why = stale(folder)
    return "compiled (make native)" if why is None else f"Python ({why})"


def active() -> bool:
    """Whether the routing modules running are the compiled ones."""
    module = sys.modules.get("gateway.routing.health")  # imported with the package: every router reads it
    return module is not None and not str(module.__file__).endswith(".py")
