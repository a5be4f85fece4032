# The two commands of the README's first screen are `make demo` and `make test`; both build
# the virtualenv on first use, so they work on a fresh machine with Python 3.11+.

PYTHON ?= python3
# e.g. make demo DEMO_ARGS='--traffic 10 --port 9000'
DEMO_ARGS ?=
VENV ?= .venv
BIN := $(VENV)/bin
# Nothing outside the checkout is needed: the tokenizer's rank files ship inside the package
# (gateway/data/encodings), so the demo and the tests run offline once the venv is built.

.PHONY: install demo serve test check format bench clean docker

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: install
	$(BIN)/gateway demo $(DEMO_ARGS)

serve: install
	$(BIN)/gateway serve -c config.example.toml

# The whole suite, with the coverage floor of pyproject.toml; PYTEST_ARGS adds pytest options.
test: install
	$(BIN)/python -m pytest --cov --cov-report=term $(PYTEST_ARGS)

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
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
