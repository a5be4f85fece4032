"""The ``gateway`` command as an operator runs it: a subprocess, its exit status and its output."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gateway.cli import build_parser
from tests.support.clients import MESSAGES, sdk
from tests.support.wait import wait_until
from tests.test_config import EXAMPLE, MINIMAL

ENV = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("GATEWAY_")}
# The routing modules as Python, as the rest of the suite runs them (``conftest``): a stale ``make native`` build in
# the tree would otherwise add its warning to the one-line errors these tests read.
ENV["GATEWAY_NATIVE"] = "0"


def gateway(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        env={**ENV, **(env or {})},
        timeout=timeout,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_check_prints_the_routing_table() -> None:
    result = gateway("check", "-c", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == f"{EXAMPLE}: 2 providers, 2 models"
    # The verdict comes last, once every check (keys, tokenizer) has passed.
    assert lines[-1] == f"{EXAMPLE}: valid (config, provider keys, client and admin keys, tokenizer o200k_base)"
    assert sum("valid" in line for line in lines) == 1
    header = lines[2].split()
    assert header == [
        "model",
        "policy",
        "#",
        "deployment",
        "provider",
        "upstream",
        "model",
        "in",
        "$/1M",
        "out",
        "$/1M",
        "key",
    ]
    table_end = lines.index("", 4)
    rows = [line.split() for line in lines[4:table_end]]
    assert lines[table_end + 1] == (
        "auth: no client keys: loopback clients only; "
        "admin endpoints: loopback only (no admin key; set $GATEWAY_ADMIN_KEY to require one)"
    )
    assert rows == [
        ["llama-3.3-70b", "balanced", "1", "fast", "fast", "llama-3.3-70b-versatile", "0.59", "0.79", "none"],
        ["2", "slow", "slow", "meta-llama/Llama-3.3-70B-Instruct-Turbo", "0.88", "0.88", "none"],
        ["small", "interactive", "1", "fast", "fast", "llama-3.1-8b-instant", "0.05", "0.08", "none"],
    ]


def test_check_of_a_bad_config_exits_1_with_the_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(MINIMAL.replace('provider = "groq"', 'provider = "grok"'))
    result = gateway("check", "-c", str(bad))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        'gateway: bad.toml: models[0].deployments[0].provider: unknown provider "grok" (known: groq, together)\n'
    )


def test_check_shows_key_variables_as_set_or_missing_never_their_values(tmp_path: Path) -> None:
    config = tmp_path / "keys.toml"
    text = MINIMAL.replace('name = "groq"\n', 'name = "groq"\napi_key_env = "GROQ_API_KEY"\n', 1)
    config.write_text(text.replace('name = "together"\n', 'name = "together"\napi_key_env = "TOGETHER_API_KEY"\n'))
    ok = gateway("check", "-c", str(config), env={"GROQ_API_KEY": "sk-secret-1", "TOGETHER_API_KEY": "sk-2"})
    assert ok.returncode == 0, ok.stderr
    assert "$GROQ_API_KEY set" in ok.stdout
    assert "sk-secret-1" not in ok.stdout + ok.stderr
    missing = gateway("check", "-c", str(config), env={"TOGETHER_API_KEY": "sk-2"})
    assert missing.returncode == 1
    assert "$GROQ_API_KEY MISSING" in missing.stdout
    assert "valid" not in missing.stdout  # the table is shown, but nothing claims it passed
    assert missing.stderr == (
        "gateway: keys.toml: providers[0].api_key_env: environment variable GROQ_API_KEY is not set "
        '(expected the API key of provider "groq")\n'
    )


def test_serve_with_a_missing_env_var_exits_1_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text(MINIMAL.replace('name = "groq"\n', 'name = "groq"\napi_key_env = "GROQ_API_KEY"\n', 1))
    result = gateway("serve", "-c", str(config), "--port", str(free_port()))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "gateway: serve.toml: providers[0].api_key_env: environment variable GROQ_API_KEY is not set "
        '(expected the API key of provider "groq")'
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "-c", "nowhere.toml"], "gateway: nowhere.toml: cannot read config: No such file or directory"),
        (["serve"], "gateway: no config given: use -c FILE (or set GATEWAY_CONFIG), or try `gateway demo`"),
        (["check"], "gateway: no config given: use -c FILE"),
    ],
)
def test_operator_errors_are_one_line(args: list[str], message: str) -> None:
    result = gateway(*args)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [message]


def test_serve_with_a_bad_tokenizer_exits_1_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "tok.toml"
    config.write_text(MINIMAL + '\n[stats]\ntokenizer = "/nowhere/o200k_base.tiktoken"\n')
    result = gateway("serve", "-c", str(config), "--port", str(free_port()))
    assert result.returncode == 1
    assert result.stderr.splitlines() == ["gateway: tokenizer file not found: /nowhere/o200k_base.tiktoken"]


def test_serve_and_fake_provider_end_to_end(tmp_path: Path) -> None:
    """The two commands a newcomer runs: a fake provider, and the gateway in front of it."""
    fake_port, gateway_port = free_port(), free_port()
    config = tmp_path / "live.toml"
    config.write_text(
        EXAMPLE.read_text()
        .replace("http://127.0.0.1:9001/v1", f"http://127.0.0.1:{fake_port}/v1")
        .replace("port = 8080", f"port = {gateway_port}")
    )
    command = [sys.executable, "-m", "gateway"]
    fake = subprocess.Popen(
        [*command, "fake-provider", "--port", str(fake_port), "--name", "fast", "--ttft", "0", "--tokens", "5"],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    served = subprocess.Popen(
        [*command, "serve", "-c", str(config), "--log-level", "warning"],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: _healthy(fake_port) and _healthy(gateway_port), timeout=20, what="both servers up")
        client = sdk(f"http://127.0.0.1:{gateway_port}/v1")
        raw = client.chat.completions.with_raw_response.create(model="llama-3.3-70b", messages=MESSAGES)
        assert raw.parse().choices[0].message.content == " the quick brown fox jumps"
        assert raw.headers["x-gateway-provider"] == "fast"
        streamed = client.chat.completions.create(model="small", messages=MESSAGES, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == " the quick brown fox jumps"
        # A planned mid-stream drop, straight at the fake: the connection closes, its log stays clean.
        cut = {"model": "m", "stream": True, "messages": MESSAGES, "fake": {"drop_after": 2}}
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.post(f"http://127.0.0.1:{fake_port}/v1/chat/completions", json=cut, timeout=10)
    finally:
        for process in (served, fake):
            process.send_signal(signal.SIGINT)
        errors = [process.communicate(timeout=15)[1] for process in (served, fake)]
    # Ctrl-C is a clean stop: exit 0, and nothing on stderr (no traceback) but the one line
    # saying who may call the gateway.
    assert [served.returncode, fake.returncode] == [0, 0], errors
    notice = errors[0].decode().splitlines()
    assert len(notice) == 1 and "client auth OFF" in notice[0], notice
    assert errors[1] == b""


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code in (200, 404)
    except httpx.TransportError:
        return False


def test_version() -> None:
    result = gateway("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("gateway ")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "auth: no client keys: loopback clients only; admin endpoints: loopback only "
             "(no admin key; set $GATEWAY_ADMIN_KEY to require one)"),
        ({"GATEWAY_API_KEYS": "k1"}, "auth: 1 client key (1 from $GATEWAY_API_KEYS); admin endpoints: disabled "
                                     "(set $GATEWAY_ADMIN_KEY to enable them)"),
        ({"GATEWAY_API_KEYS": "k1,k2", "GATEWAY_ADMIN_KEY": "adm"},
         "auth: 2 client keys (2 from $GATEWAY_API_KEYS); admin key $GATEWAY_ADMIN_KEY set"),
    ],
)  # fmt: skip
def test_check_says_who_may_call_and_counts_in_proper_plural(
    tmp_path: Path, env: dict[str, str], expected: str
) -> None:
    config = tmp_path / "one.toml"
    config.write_text(
        '[auth]\napi_keys_env = "GATEWAY_API_KEYS"\nadmin_key_env = "GATEWAY_ADMIN_KEY"\n'
        '[[providers]]\nname = "groq"\nbase_url = "https://api.groq.com/openai/v1"\n'
        '[[models]]\nname = "llama"\n  [[models.deployments]]\n  provider = "groq"\n  model = "x"\n'
    )
    result = gateway("check", "-c", str(config), env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{config}: 1 provider, 1 model"
    assert expected in lines
    assert "k1" not in result.stdout and "adm" not in result.stdout.replace("admin", "")


def test_a_bare_gateway_prints_its_help() -> None:
    result = gateway()
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("usage: gateway")
    for command in ("serve", "check", "stats", "fake-provider", "demo", "bench"):
        assert f"    {command}" in result.stdout
    assert "gateway demo " in result.stdout  # the quick start


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (choices,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(choices.choices)


def test_every_option_says_what_it_does_and_its_default() -> None:
    for name, command in _subcommands().items():
        text = command.format_help()
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"gateway {name} {action.option_strings}: no help text"
            if action.default is not None and action.default is not False:
                assert f"(default: {action.default})" in " ".join(text.split()), (name, action.option_strings)
            else:  # nothing to show: the help itself says what happens without it (or it is a flag, "off")
                assert "default" in action.help or isinstance(action, argparse._StoreTrueAction) or action.required, (
                    name,
                    action.option_strings,
                )


def test_every_command_has_two_or_three_examples_that_parse() -> None:
    for name, command in _subcommands().items():
        epilog = command.epilog or ""
        examples = [line.strip() for line in epilog.splitlines()[1:]]
        assert epilog.startswith("examples:") and 2 <= len(examples) <= 3, name
        for example in examples:
            words = shlex.split(example)
            words = words[words.index("gateway") + 1 :]  # past any VAR=value prefix
            assert words[0] == name, example
            build_parser().parse_args(words)  # exits (SystemExit) on an option that does not exist
        assert "examples:" in command.format_help()


def test_every_gateway_command_in_the_readmes_parses() -> None:
    """What a newcomer copies from the READMEs and docs/ names only commands and options that exist."""
    root = Path(__file__).resolve().parents[1]
    found = 0
    documents = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    for readme in (*documents, root / "deploy" / "README.md", root / "benchmarks" / "README.md"):
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", readme.read_text(), re.DOTALL):
            for line in block.splitlines():
                command = line.split("  #")[0].split(" > ")[0].split(" | ")[0].strip()  # the command, not the shell's
                if not command.startswith((".venv/bin/gateway ", "gateway ", "make demo")):
                    continue
                words = shlex.split(command)
                if words[:2] == ["make", "demo"]:
                    args = next((w.split("=", 1)[1] for w in words if w.startswith("DEMO_ARGS=")), "")
                    words = ["gateway", "demo", *shlex.split(args)]
                if words and words[0].endswith("gateway") and len(words) > 1:
                    build_parser().parse_args(words[1:])  # SystemExit on an unknown command or option
                    found += 1
    assert found >= 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("demo", "--port", "99999"), "argument --port: expected a port number 0-65535, got 99999"),
        (
            ("serve", "-c", "unused.toml", "--port", "70000"),
            "argument --port: expected a port number 0-65535, got 70000",
        ),
        (("fake-provider", "--port", "-3"), "argument --port: expected a port number 0-65535, got -3"),
        (("demo", "--traffic", "-1"), "argument --traffic: expected a number >= 0, got '-1'"),
        (("demo", "--duration", "nan"), "argument --duration: expected a number >= 0, got 'nan'"),
    ],
)
def test_out_of_range_options_are_one_line_before_anything_starts(args: tuple[str, ...], message: str) -> None:
    # A port past 65535 used to wrap around onto another port (the log naming the one asked for), or raise a
    # traceback in the demo; a negative traffic rate ran as "-1 requests/s".
    result = gateway(*args, timeout=30)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith(message), result.stderr
    assert "Traceback" not in result.stderr
