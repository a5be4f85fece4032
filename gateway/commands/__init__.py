"""The ``gateway`` subcommands, one module per command family; ``gateway/cli.py`` parses and dispatches.

serve.py (``serve``), check.py (``check``), reports.py (``stats``, ``spend``: read from a running
gateway or Redis), tools.py (``fake-provider``, ``demo``, ``bench``: hand over to their package),
common.py (the config path and the one-line failure every command shares).
"""
