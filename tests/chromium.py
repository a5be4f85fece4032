"""Headless Chromium, run once per page load: ``--dump-dom`` for the DOM after scripts ran,
``--screenshot`` for a PNG.

Why: the dashboard is a page, and only a real browser says that it parses, lays out, runs its
refresh script under its Content-Security-Policy, and follows the ``?key=`` redirect with its
cookie. Each run gets a fresh profile directory, so no cookie or cache leaks between loads.
If Chromium is missing the test fails and says how to install it; it never skips.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

INSTALL_HINT = (
    "chromium is not installed or not on PATH; the dashboard's browser tests need it. "
    "Install Debian's package: `apt-get install -y chromium` (.ci/run does this when it is missing)."
)

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser"):
        binary = shutil.which(name)
        if binary is not None:
            return binary
    raise AssertionError(INSTALL_HINT)


def _run(url: str, extra: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [chromium_binary(), *FLAGS, f"--user-data-dir={profile}", *extra, url]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"chromium exited with {result.returncode}: {result.stderr[-2000:]}")
    return result


def dump_dom(url: str, *, wait_ms: int = 0, timeout: float = 60.0) -> str:
    """The page's DOM once loaded; ``wait_ms`` lets its timers run first (virtual time, not a sleep)."""
    extra = [f"--virtual-time-budget={wait_ms}"] if wait_ms else []
    return _run(url, [*extra, "--dump-dom"], timeout).stdout


def screenshot(
    url: str, path: Path, *, width: int = 1280, height: int = 900, scale: float = 1.0, timeout: float = 60.0
) -> Path:
    """A PNG of the page laid out ``width`` × ``height`` CSS pixels wide, ``scale`` image pixels per CSS pixel."""
    size = [f"--window-size={width},{height}", f"--force-device-scale-factor={scale:g}"]
    _run(url, [*size, f"--screenshot={path}"], timeout)
    if not path.is_file() or path.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError(f"chromium wrote no PNG at {path}")
    return path
