"""``gateway stats`` and ``gateway spend`` read only where the gateway listens from the config file: a file being
edited (invalid elsewhere) must not stop them while the server, which loaded it before, serves on. A file that
cannot be read at all is said in one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.support.config import gateway_config
from tests.support.fakes import Fakes
from tests.support.gateway import Gateway
from tests.test_cli import gateway

ADMIN = "address-admin-key"


def _edited(port: int) -> str:
    """The running gateway's address and admin key variable, and a model naming a provider not defined yet."""
    return (
        f'[server]\nhost = "127.0.0.1"\nport = {port}\n\n[auth]\nadmin_key_env = "ADDRESS_ADMIN_KEY"\n\n'
        '[[models]]\nname = "m"\n  [[models.deployments]]\n  provider = "not-yet-defined"\n  model = "x"\n'
    )


def test_stats_and_spend_read_only_the_address_from_the_config_file(
    fakes: Fakes, start_gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    served = start_gateway(gateway_config([fakes.start("a")]), environ={"GATEWAY_ADMIN_KEY": ADMIN})
    config = tmp_path / "gateway.toml"
    config.write_text(_edited(served.server.port))
    assert "not-yet-defined" in gateway("check", "-c", str(config)).stderr  # the file is invalid indeed
    stats = gateway("stats", "-c", str(config))
    assert stats.returncode == 0, stats.stderr
    assert stats.stdout.startswith("window ") and stats.stderr == ""
    spend = gateway("spend", "-c", str(config), env={"ADDRESS_ADMIN_KEY": ADMIN})
    assert spend.returncode == 0, spend.stderr
    assert spend.stderr == ""
    # What the commands need, they still check; a file they cannot read at all is one line.
    missing = tmp_path / "missing.toml"
    result = gateway("stats", "-c", str(missing))
    assert result.returncode == 1
    assert result.stderr == f"gateway: {missing}: cannot read config: No such file or directory\n"
    broken = tmp_path / "broken.toml"
    broken.write_text("[server\nport = 1\n")
    result = gateway("spend", "-c", str(broken), env={"GATEWAY_ADMIN_KEY": ADMIN})
    assert result.returncode == 1
    assert result.stderr.startswith("gateway: broken.toml: invalid TOML: ") and result.stderr.count("\n") == 1
    bad_port = tmp_path / "port.toml"
    bad_port.write_text('[server]\nport = "eighty"\n')
    result = gateway("stats", "-c", str(bad_port))
    assert result.returncode == 1
    assert result.stderr == 'gateway: port.toml: server.port: expected an integer, got "eighty"\n'
