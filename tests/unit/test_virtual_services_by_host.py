"""VirtualServicesByHost finds exactly what a scan with host matching finds, in the same order."""

from __future__ import annotations

import itertools

from app.config.host import matches
from app.config.loader import load_documents
from app.model.virtual_service import ResolvedVirtualService, VirtualServicesByHost, resolve_virtual_service

HOSTS = [
    ["a.ns.svc.cluster.local"],
    ["*.ns.svc.cluster.local"],
    ["b.ns.svc.cluster.local", "*.example.com"],
    ["a.ns.svc.cluster.local", "c.example.com"],
    ["*.cluster.local"],
    ["*.com"],
]


def vss() -> list[ResolvedVirtualService]:
    out = []
    for i, hosts in enumerate(HOSTS):
        text = (
            f"apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs{i}, namespace: ns}}\n"
            f"spec:\n  hosts: {hosts}\n  http: [{{route: [{{destination: {{host: x}}}}]}}]\n"
        )
        [obj] = load_documents(text, "vs.yaml").objects
        out.append(resolve_virtual_service(obj))
    return out


def test_matching_equals_a_scan_in_order() -> None:
    ordered = vss()
    index = VirtualServicesByHost.build(ordered)
    names = ["a.ns.svc.cluster.local", "b.ns.svc.cluster.local", "c.example.com", "d.other"]
    names += ["*.example.com", "*.cluster.local"]
    for hostname in names:
        scan = [vs for vs in ordered if any(matches(h, hostname) for h in vs.spec.hosts)]
        assert index.matching(hostname) == scan, hostname


def test_every_order_of_input_is_kept() -> None:
    for perm in itertools.permutations(vss(), 4):
        index = VirtualServicesByHost.build(perm)
        scan = [vs for vs in perm if any(matches(h, "a.ns.svc.cluster.local") for h in vs.spec.hosts)]
        assert index.matching("a.ns.svc.cluster.local") == scan
