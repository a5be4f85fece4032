"""What every ``gateway`` subcommand shares: the config path it was given, and how it fails.

Start-up failures are operator errors: one clear line on stderr, exit status 1, no traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

DEFAULT_CONFIG_ENV = "GATEWAY_CONFIG"
MAX_PORT = 65535


def fail(message: str) -> int:
    """Print ``gateway: <message>`` on stderr; the exit status 1 for the caller to return."""
    print(f"gateway: {message}", file=sys.stderr)
    return 1


def config_path(args: argparse.Namespace) -> str | None:
    """``-c FILE``, else ``$GATEWAY_CONFIG``, else None."""
    path: str | None = args.config or os.environ.get(DEFAULT_CONFIG_ENV)
    return path


def port_arg(value: str) -> int:
    """``--port``: 0 (any free port) to 65535. A larger number is refused, not wrapped around by the socket layer
    onto another port while the log names the one asked for."""
    if not value.isdigit() or int(value) > MAX_PORT:
        raise argparse.ArgumentTypeError(f"expected a port number 0-{MAX_PORT}, got {value}")
    return int(value)


def non_negative(value: str) -> float:
    """A number of at least 0 (a rate, a duration)."""
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}")
    return number
