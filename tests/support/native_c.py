"""A C extension of the native build loaded for its own tests, whatever ``GATEWAY_NATIVE`` says (the suite runs the
gateway as Python, ``tests/conftest.py``)."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from gateway import native


def load_built_c(name: str) -> ModuleType | None:
    """The C extension ``name`` of a fresh build (``gateway.native_build``), else None (its tests are skipped)."""
    if native.stale() is not None:
        return None
    spec = importlib.util.spec_from_file_location(name, native.built_files(native.NATIVE_DIR)[name])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
