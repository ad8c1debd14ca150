# pilotfish: the control plane image. The install step is the project's own (pip install of this
# checkout with the pinned dependencies of pyproject.toml), as `make` and CI run it, minus the
# test extras.
FROM python:3.11.7-slim-bookworm

WORKDIR /opt/pilotfish
COPY pyproject.toml README.md ./
COPY app ./app
# the pinned opentelemetry-proto reinstalled last: xds-protos overwrites its modules (Makefile)
RUN pip install --no-cache-dir . \
    && pip install --no-cache-dir --no-deps --force-reinstall "$(grep -o 'opentelemetry-proto==[0-9.]*' pyproject.toml)" \
    && useradd --uid 1337 --no-create-home --shell /usr/sbin/nologin pilotfish

# istiod's uid; the chart also runs it read-only and without capabilities
USER 1337:1337
EXPOSE 15010 15014 15017
ENTRYPOINT ["pilotfish"]
CMD ["serve", "--config-dir", "/etc/pilotfish/config"]
