"""What every ``gateway`` subcommand shares: the config path it was given, and how it fails.

Start-up failures are operator errors: one clear line on stderr, exit status 1, no traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

DEFAULT_CONFIG_ENV = "GATEWAY_CONFIG"


def fail(message: str) -> int:
    """Print ``gateway: <message>`` on stderr; the exit status 1 for the caller to return."""
    print(f"gateway: {message}", file=sys.stderr)
    return 1


def config_path(args: argparse.Namespace) -> str | None:
    """``-c FILE``, else ``$GATEWAY_CONFIG``, else None."""
    path: str | None = args.config or os.environ.get(DEFAULT_CONFIG_ENV)
    return path
