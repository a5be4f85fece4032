"""The ``gateway`` command's help: a formatter that shows every option's default, and examples per command.

Why a module of its own: the help is what a newcomer reads first, and it is tested as such
(every option explained with its default, every example parses); keeping the words here keeps
``cli.py`` about the arguments and ``gateway/commands/`` about what the commands do.
"""

from __future__ import annotations

import argparse

DESCRIPTION = """\
An OpenAI-compatible proxy that measures every response it relays (time to first token,
tokens/s, end-to-end, success) and routes each request to the provider that serves it best."""
QUICK_START = """\
start here:
  gateway demo                          simulated providers and the gateway, one command, no API key
  gateway check -c config.toml          validate a config and print how it would route
  gateway serve -c config.toml          run it for real
  gateway <command> --help              every option of a command, with examples"""

EXAMPLES: dict[str, tuple[str, ...]] = {
    "serve": (
        "gateway serve -c config.toml",
        "gateway serve -c config.toml --host 0.0.0.0 --port 9000",
        "GATEWAY_CONFIG=config.toml gateway serve --log-level warning",
    ),
    "check": (
        "gateway check -c config.toml",
        "GATEWAY_CONFIG=deploy/gateway.toml gateway check",
    ),
    "stats": (
        "gateway stats --url http://127.0.0.1:8080",
        "gateway stats --url http://127.0.0.1:8080 --wide",
        "gateway stats --redis redis://127.0.0.1:6379/0 -c config.toml --csv",
    ),
    "spend": (
        "gateway spend --url http://127.0.0.1:8080",
        "gateway spend -c config.toml --window day --by key,model",
        "gateway spend --url http://127.0.0.1:8080 --window week --csv",
    ),
    "fake-provider": (
        "gateway fake-provider --port 9001 --name fast",
        "gateway fake-provider --port 9002 --name slow --ttft 1.5 --tps 40",
        "gateway fake-provider --port 9003 --name flaky --status 503 --error-rate 0.2",
    ),
    "demo": (
        "gateway demo",
        "gateway demo --traffic 10 --port 9000",
        "gateway demo --duration 120 --write-config demo.toml",
    ),
    "bench": (
        "gateway bench -c config.toml -n 60 --concurrency 4",
        "gateway bench --url http://127.0.0.1:8080/v1 --model glm-5.3-flash -n 8 --concurrency 4",
        "gateway bench -c config.toml --seed-stats --out results/today",
    ),
}


def epilog(command: str) -> str:
    return "examples:\n" + "\n".join(f"  {example}" for example in EXAMPLES[command])


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's example lines as written, and ends each option's help with its default.

    A default of ``None`` or ``False`` says nothing a reader can use, so the option's own help
    says what happens without it instead (``default: $GATEWAY_CONFIG``, "off").
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        # ``is``, not ``in``: a default of 0 or 0.0 equals False, and must still be shown.
        hidden = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        shown = not hidden and action.option_strings
        if shown and "default" not in text:
            text += " (default: %(default)s)"
        return text
