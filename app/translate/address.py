"""Envoy addresses as istiod builds them (pilot/pkg/networking/util/util.go BuildAddress), the one
place every listener bind, inline cluster endpoint and EDS endpoint gets its ``Address``.

A port is an IP socket; port 0 is a Unix domain socket (istiod: a ServiceEntry or WorkloadEntry
``unix:///path`` endpoint is kept with port 0 and its path, a Sidecar ingress
``defaultEndpoint: unix:///path`` with port 0), sent as a ``pipe``. A ``socket_address`` with
port 0 and a path is "malformed IP address" to Envoy, which then rejects the whole response.
"""

from __future__ import annotations

from envoy.config.core.v3 import address_pb2

UNIX_ADDRESS_PREFIX = "unix://"  # istiod model.UnixAddressPrefix


def build_address(bind: str, port: int) -> address_pb2.Address:
    """istiod BuildAddress: ``bind:port`` as a TCP socket address; with port 0 a pipe at ``bind``
    without its ``unix://``. A ``unix://`` bind is a pipe whatever the port (istiod would send it
    as a socket address Envoy rejects)."""
    out = address_pb2.Address()
    if port == 0 or bind.startswith(UNIX_ADDRESS_PREFIX):
        out.pipe.path = bind.removeprefix(UNIX_ADDRESS_PREFIX)
    else:
        out.socket_address.address = bind
        out.socket_address.port_value = port
    return out
