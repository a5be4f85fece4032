"""Compile the routing modules with mypyc into ``gateway/_native/`` (``make native``; see ``gateway.native``).

    python -m gateway.native_build            # about a minute: mypy's analysis, then a C compiler

Needs mypy (the dev extra) and a C compiler; the gateway runs without either, as pure Python. The build
happens in a scratch folder (the sources are read where they are, nothing is written beside them); the
extensions and a stamp of the sources they were built from are then moved into place together.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gateway.native import (
    C_MODULES,
    GROUP,
    MODULES,
    NATIVE_DIR,
    PACKAGE,
    STAMP,
    built_files,
    extension_suffix,
    source_hashes,
    source_of,
    stale,
)


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    """Run in ``folder``: setuptools reads the working directory's project files, mypyc writes its C there."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def build(out: Path = NATIVE_DIR) -> None:
    """Compile ``MODULES`` and ``C_MODULES`` and write them with their stamp into ``out`` (replaced whole)."""
    from mypyc.build import mypycify  # the dev extra's: imported only to build
    from setuptools import Extension, setup  # type: ignore[import-untyped]

    hashes = source_hashes()
    with tempfile.TemporaryDirectory(prefix="gateway-native-") as scratch:
        work = Path(scratch)
        lib = work / "lib"
        with _inside(work):
            extensions = mypycify([str(source_of(name)) for name in MODULES], opt_level="3", group_name=GROUP)
            extensions += [
                Extension(name, sources=[str(PACKAGE / source)], extra_compile_args=["-O3"])
                for name, source in C_MODULES.items()
            ]
            setup(
                name="gateway-native",
                ext_modules=extensions,
                script_args=["--quiet", "build_ext", "--build-lib", str(lib), "--build-temp", str(work / "temp")],
            )
        files = built_files(lib)
        missing = [str(path) for path in files.values() if not path.exists()]
        if missing:
            raise RuntimeError(f"mypyc built no {missing[0]}")
        stamp = {"suffix": extension_suffix(), "modules": list(MODULES), "sources": hashes}
        (lib / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(lib, out, ignore=shutil.ignore_patterns("*.c", "*.h", "*.o"))
    if source_hashes() != hashes:
        shutil.rmtree(out)
        raise RuntimeError("a source changed during the build: build again")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=NATIVE_DIR, help=f"where to write the build (default {NATIVE_DIR})")
    parser.add_argument(
        "--if-stale", action="store_true", help="build only when the current build cannot be used (`make test`)"
    )
    args = parser.parse_args()
    if args.if_stale and stale(args.out) is None:
        print(f"the compiled modules in {args.out} match the sources", file=sys.stderr)
        return
    build(args.out)
    print(f"compiled {len(MODULES)} modules and {len(C_MODULES)} C extensions into {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
