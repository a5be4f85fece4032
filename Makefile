# The two commands of the README's first screen are `make demo` and `make test`; both build
# their virtualenv on first use (the demo's: .venv-demo, runtime + demo extra; the tests': .venv,
# + dev extra; `make test` also installs what the tests need beyond Python: tests/install-deps), so they
# work on a fresh machine with Python 3.11+.

PYTHON ?= python3
# e.g. make demo DEMO_ARGS='--traffic 10 --port 9000'
DEMO_ARGS ?=
VENV ?= .venv
BIN := $(VENV)/bin
# The demo's own virtualenv: the package and its demo extra only (no test toolchain), so a first
# `make demo` installs what the gateway runs on and little else.
DEMO_VENV ?= .venv-demo
DEMO_BIN := $(DEMO_VENV)/bin
# Nothing outside the checkout is needed: the tokenizer's rank files ship inside the package
# (gateway/data/encodings), so the demo and the tests run offline once the venv is built.

.PHONY: install install-demo demo serve test test-deps check format bench clean docker native native-if-possible

install: $(VENV)/.installed

install-demo: $(DEMO_VENV)/.installed

$(DEMO_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_BIN)/pip install --quiet --upgrade pip
	$(DEMO_BIN)/pip install --quiet -e '.[demo]'
	touch $@

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: install-demo
	$(DEMO_BIN)/gateway demo $(DEMO_ARGS)

serve: install-demo
	$(DEMO_BIN)/gateway serve -c config.example.toml

# The routing modules and the chunk path compiled with mypyc, and the C extensions (gateway/dialects/chat_read.c),
# into gateway/_native/ (gateway.native: used while they match the sources, which run as Python without it). Needs
# the dev extra and a C compiler; about a minute.
native: install
	$(BIN)/python -m gateway.native_build

# The whole suite, with the coverage floor of pyproject.toml; PYTEST_ARGS adds pytest options.
# Two workers (pytest-xdist), whole modules each (--dist loadfile: a module's shared servers start
# once): most of the suite's time is waiting on loopback servers, which two cores overlap
# (benchmarks/testing_notes.md). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
# What the tests need beyond Python (redis-server, chromium, promtool, the agent CLIs, ...): installed where
# missing, a no-op once there (tests/install-deps says what it installs and how).
test-deps:
	bash tests/install-deps

# The compiled modules too, when a C compiler is here and the build is stale (a no-op when it is current): the suite
# then tests them against the Python ones, as CI does. Without a compiler the suite runs the Python modules and the
# compiled ones' tests skip, saying why.
native-if-possible: install
	@$(BIN)/python -m gateway.native_build --if-stale || echo "make test: no compiled modules built (needs a C compiler); their tests skip"

test: install test-deps native-if-possible
	@echo "make test: pytest collects the suite before its first result (about 20 s on a first run: it rewrites each test's asserts once)"
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --cov --cov-report=term $(PYTEST_ARGS)

check: install
	$(BIN)/ruff format --check gateway tests benchmarks deploy
	$(BIN)/ruff check gateway tests benchmarks deploy
	$(BIN)/mypy

format: install
	$(BIN)/ruff format gateway tests benchmarks deploy
	$(BIN)/ruff check --fix gateway tests benchmarks deploy

# The image carries the tokenizer inside the package: it needs no download at build or run time.
IMAGE ?= gateway:local

docker:
	docker build -t $(IMAGE) .

clean:
	rm -rf $(VENV) $(DEMO_VENV) .pytest_cache .mypy_cache .ruff_cache gateway/_native
