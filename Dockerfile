# pilotfish: the control plane image. The install step is the project's own (pip install of this
# checkout with the pinned dependencies of pyproject.toml), as `make` and CI run it, minus the
# test extras.

# Istio's .proto files: istio.io/api and istio.io/istio's NDS (with its CRDs and istiod's chart, whose
# injection templates the script copies), at the versions tools/peers/istio
# pins (its go.sum), from the Go module proxy as `make api` takes them from the module cache
FROM golang:1.26-bookworm AS istio-protos
WORKDIR /src
COPY tools/peers/istio/go.mod tools/peers/istio/go.sum ./
RUN go mod download istio.io/api istio.io/istio \
    && istio="$(go list -m -f '{{.Dir}}' istio.io/istio)" \
    && mkdir -p /protos/istio/pkg/dns /protos/istio/manifests/charts/base/files /protos/istio/manifests/charts/istio-control \
    && cp -r "$(go list -m -f '{{.Dir}}' istio.io/api)" /protos/api \
    && cp -r "$istio/pkg/dns/proto" /protos/istio/pkg/dns/ \
    && cp "$istio/manifests/charts/base/files/crd-all.gen.yaml" /protos/istio/manifests/charts/base/files/ \
    && cp -r "$istio/manifests/charts/istio-control/istio-discovery" /protos/istio/manifests/charts/istio-control/

# Istio's API as Python (app/api/istio), generated as `make api` does
FROM python:3.11.7-slim-bookworm AS istio-api
WORKDIR /src
COPY pyproject.toml tools/gen_istio_api.py ./
RUN pip install --no-cache-dir "$(grep -o 'grpcio-tools==[0-9.]*' pyproject.toml)" \
        "$(grep -o 'googleapis-common-protos==[0-9.]*' pyproject.toml)"
COPY --from=istio-protos /protos /protos
RUN python gen_istio_api.py --istio-api /protos/api --istio /protos/istio /out/istio

FROM python:3.11.7-slim-bookworm

WORKDIR /opt/pilotfish
COPY pyproject.toml README.md ./
COPY app ./app
COPY --from=istio-api /out/istio ./app/api/istio
# the pinned opentelemetry-proto reinstalled last: xds-protos overwrites its modules (Makefile)
RUN pip install --no-cache-dir . \
    && pip install --no-cache-dir --no-deps --force-reinstall "$(grep -o 'opentelemetry-proto==[0-9.]*' pyproject.toml)" \
    && useradd --uid 1337 --no-create-home --shell /usr/sbin/nologin pilotfish

# istiod's uid; the chart also runs it read-only and without capabilities
USER 1337:1337
EXPOSE 15010 15014 15017
ENTRYPOINT ["pilotfish"]
CMD ["serve", "--config-dir", "/etc/pilotfish/config"]
