"""Istio's Name Discovery Service resource, ``istio.networking.nds.v1.NameTable`` (istio.io/istio
pkg/dns/proto/nds.proto): the DNS name table the control plane sends a node agent."""

from app.api.istio.pkg.dns.proto.nds_pb2 import NameTable

__all__ = ["NameTable"]
