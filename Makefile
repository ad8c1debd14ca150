# Two entry points for people (README): `make run` and `make test`. Everything else is plumbing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: run test lint typecheck unit protos bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# Serving xDS arrives with the next issue; until then `make run` shows what one proxy would get.
run: $(STAMP)
	@echo "pilotfish: xDS serving is not built yet; printing the clusters the productpage sidecar would receive" >&2
	@$(BIN)/pilotfish config-dump --config-dir examples/bookinfo --type cds \
		--node-id 'sidecar~10.1.0.10~productpage-v1-0.bookinfo~bookinfo.svc.cluster.local' \
		--labels app=productpage,version=v1

test: $(STAMP) lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check app tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

# Regenerate Python code for the protos the project owns (committed; CI checks it is current).
protos: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. $(shell find proto -name '*.proto')

bench: $(STAMP)
	$(BIN)/python -m bench.parse_config

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
