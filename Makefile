# The two commands of the README's first screen are `make demo` and `make test`; both build
# the virtualenv on first use, so they work on a fresh machine with Python 3.11+.

PYTHON ?= python3
# e.g. make demo DEMO_ARGS='--traffic 10 --port 9000'
DEMO_ARGS ?=
VENV ?= .venv
BIN := $(VENV)/bin
# Offline tiktoken: the encodings beside the checkout, when present (see ../shared/tiktoken/README.md).
SHARED_TIKTOKEN := $(abspath ../shared/tiktoken)
ifneq ($(wildcard $(SHARED_TIKTOKEN)/README.md),)
export TIKTOKEN_CACHE_DIR ?= $(SHARED_TIKTOKEN)
endif

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

# The image bakes in the o200k_base rank file (deploy/tiktoken/README.md): copied from
# $TIKTOKEN_CACHE_DIR (../shared/tiktoken by default) when present, else downloaded; the
# Dockerfile checks its sha256.
IMAGE ?= gateway:local
O200K := fb374d419588a4632f3f557e76b4b70aebbca790
O200K_URL := https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken

deploy/tiktoken/$(O200K):
	if [ -f "$(TIKTOKEN_CACHE_DIR)/$(O200K)" ]; then cp "$(TIKTOKEN_CACHE_DIR)/$(O200K)" $@; \
	else curl -fsSL -o $@ $(O200K_URL); fi

docker: deploy/tiktoken/$(O200K)
	docker build -t $(IMAGE) .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
