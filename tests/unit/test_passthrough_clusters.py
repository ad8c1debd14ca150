"""Original-destination clusters of resolution-NONE ServiceEntries (istiod cluster_builder.go
buildCluster, serviceentry conversion.go PassthroughTargetPorts)."""

from __future__ import annotations

import pytest
from envoy.config.cluster.v3 import cluster_pb2

from app.xds.generators.reference import generate_clusters
from tests.support.mesh import push_context, sidecar_proxy

C = cluster_pb2.Cluster


@pytest.mark.parametrize(("target", "override"), [("targetPort: 8443", 8443), ("", 0)])
def test_a_resolution_none_service_entry_port_with_a_target_port_overrides_the_original_destination(
    target: str, override: int
) -> None:
    # istiod cluster_builder.go buildCluster: ORIGINAL_DST clusters of a ServiceEntry with
    # resolution NONE get upstream_port_override from the port's targetPort
    se = f"""
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: db, namespace: default}}
spec:
  hosts: [db.example.com]
  addresses: [192.0.2.10]
  resolution: NONE
  ports: [{{number: 443, name: tls, protocol: TLS, {target}}}]
"""
    proxy = sidecar_proxy("web-0.default", "10.1.0.1", {"app": "web"})
    got = {c.name: c for c in generate_clusters(proxy, push_context(se))}
    c = got["outbound|443||db.example.com"]
    assert c.type == C.ORIGINAL_DST
    assert c.original_dst_lb_config.upstream_port_override.value == override
