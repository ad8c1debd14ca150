"""Istio's API as Python: ``app.api.istio`` is generated at build time (``make api``,
tools/gen_istio_api.py) from the .proto files of the pinned istio.io/api and istio.io/istio
modules; the modules beside this one name what pilotfish uses of it."""
