"""``gateway check`` prints each model's policy and cold ranking beside the routing table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CONFIG = """
[[providers]]
name = "groq"
base_url = "https://api.groq.com/openai/v1"

[[providers]]
name = "together"
base_url = "https://api.together.xyz/v1"

[[models]]
name = "llama"
policy = "snappy"
  [[models.deployments]]
  provider = "groq"
  model = "llama-3.3-70b-versatile"
  price_in = 0.59
  price_out = 0.79
  [[models.deployments]]
  provider = "together"
  model = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
  price_in = 0.88
  price_out = 0.88

[policies.snappy]
extends = "fastest-first-token"
max_price_out = 0.8
"""


def test_check_prints_the_ranking_with_policy_and_constraints(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(CONFIG)
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "check", "-c", str(path)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "llama (policy snappy; a request of 500 prompt tokens, 256 output tokens from default)" in out
    assert "score = ttft 1 + price 0.05 + failures 1" in out and "hedge after own TTFT p95 (budget 10%)" in out
    lines = out.splitlines()
    groq = next(line for line in lines if line.startswith("1  groq"))
    together = next(line for line in lines if line.startswith("2  together"))
    assert "exploring" in groq and "constraint" in together
    assert "together: breaks price_out 0.88 > 0.8" in out
