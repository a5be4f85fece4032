"""Where a running gateway listens, read from its config file without validating the rest of it.

``gateway stats`` and ``gateway spend`` talk to a running gateway: from the config they need only
``[server] host`` and ``port`` (and ``[auth] admin_key_env``, to find the admin key). A config file
being edited (a typo in a model, a provider not yet defined) must not stop them while the server,
which loaded the file before the edit, serves on: so only those keys are read, and checked. A file
that cannot be read at all, or whose TOML does not parse, is said in one line (``ConfigError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gateway.config import read_toml
from gateway.server_config import ServerConfig
from gateway.toml_reader import TableReader

DEFAULT_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class GatewayAddress:
    """A running gateway's base URL, and the variable its admin key is in."""

    url: str = DEFAULT_URL
    admin_key_env: str = "GATEWAY_ADMIN_KEY"


def gateway_address(path: str | None) -> GatewayAddress:
    """The address ``path`` (a config file, or None: the defaults) gives; ``ConfigError`` if those keys are bad."""
    if path is None:
        return GatewayAddress()
    root = TableReader(read_toml(Path(path)), "", Path(path).name)
    server, auth = root.table("server"), root.table("auth")
    defaults = ServerConfig()
    host = server.text("host", defaults.host)
    port = server.integer("port", defaults.port, minimum=0)
    if port > 65535:
        raise server.error("port", f"expected a port number 0-65535, got {port}")
    return GatewayAddress(f"http://{host}:{port}", auth.text("admin_key_env", GatewayAddress.admin_key_env))
