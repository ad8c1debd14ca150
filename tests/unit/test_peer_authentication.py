"""PeerAuthentication: how mesh, namespace and workload policies compose (istiod
pilot/pkg/security/authn ComposePeerAuthentication, model/authentication.go
GetNamespaceMutualTLSMode), what clients infer from them (push_context.go
BestEffortInferServiceMTLSMode), and the inbound chains each mode gets (filterchain_options.go)."""

from __future__ import annotations

from pathlib import Path

import pytest
from envoy.config.cluster.v3 import cluster_pb2

from app.config.loader import load_documents
from app.model.authn import MtlsMode, PeerAuthentications
from app.model.push_context import PushContext
from app.xds.generators.reference import generate_clusters, generate_listeners
from tests.support.envoy import agent_bootstrap, validate_bootstrap
from tests.support.mesh import endpoint_slice, kube_pod, kube_service, push_context, sidecar_proxy, slice_endpoint

ROOT = "istio-system"
MESH = "rootNamespace: istio-system\nenableAutoMtls: true\n"


def pa(name: str, ns: str, spec: str, created: str = "2024-01-01T00:00:00Z", api: str = "v1") -> str:
    return f"""
---
apiVersion: security.istio.io/{api}
kind: PeerAuthentication
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: "{created}"}}
spec: {spec}
"""


def policies(*docs: str) -> PeerAuthentications:
    result = load_documents("".join(docs), "pa.yaml")
    assert result.rejected == [], result.rejected
    return PeerAuthentications.build(result.objects, ROOT)


def test_nothing_set_is_permissive_and_clients_see_unknown() -> None:
    authn = policies()
    assert authn.workload_mode("ns", {}, 80) is MtlsMode.PERMISSIVE
    assert authn.namespace_mode("ns") is MtlsMode.UNKNOWN


def test_mesh_then_namespace_then_workload_then_port_compose() -> None:
    authn = policies(
        pa("mesh", ROOT, "{mtls: {mode: STRICT}}"),
        pa("ns", "shop", "{mtls: {mode: DISABLE}}"),
        pa("wl", "shop", "{selector: {matchLabels: {app: cart}}, mtls: {mode: PERMISSIVE}, "
           "portLevelMtls: {8443: {mode: STRICT}, 9000: {mode: UNSET}}}"),
    )  # fmt: skip
    assert authn.workload_mode("other", {}, 80) is MtlsMode.STRICT  # the mesh policy
    assert authn.workload_mode("shop", {"app": "web"}, 80) is MtlsMode.DISABLE  # the namespace's
    assert authn.workload_mode("shop", {"app": "cart"}, 80) is MtlsMode.PERMISSIVE  # the workload's
    assert authn.workload_mode("shop", {"app": "cart"}, 8443) is MtlsMode.STRICT  # its port level
    assert authn.workload_mode("shop", {"app": "cart"}, 9000) is MtlsMode.PERMISSIVE  # UNSET inherits
    # clients follow the namespace (else the mesh) policy, never a workload's
    assert authn.namespace_mode("shop") is MtlsMode.DISABLE
    assert authn.namespace_mode("other") is MtlsMode.STRICT


def test_an_empty_selector_is_namespace_wide_and_root_namespace_selectors_select_nothing() -> None:
    # istiod getConfigsForWorkload: no match labels -> a namespace (or mesh) policy; a selector
    # in the root namespace is skipped
    authn = policies(
        pa("ns", "shop", "{selector: {matchLabels: {}}, mtls: {mode: DISABLE}}"),
        pa("root-wl", ROOT, "{selector: {matchLabels: {app: gw}}, mtls: {mode: STRICT}}"),
    )
    assert authn.namespace_mode("shop") is MtlsMode.DISABLE
    assert authn.workload_mode(ROOT, {"app": "gw"}, 80) is MtlsMode.PERMISSIVE


def test_unset_namespace_mode_inherits_the_mesh_and_the_oldest_policy_wins() -> None:
    authn = policies(
        pa("mesh", ROOT, "{mtls: {mode: STRICT}}"),
        pa("ns", "shop", "{}"),
        pa("newer", "cart", "{mtls: {mode: STRICT}}", "2024-02-01T00:00:00Z"),
        pa("older", "cart", "{mtls: {mode: DISABLE}}", "2023-01-01T00:00:00Z", api="v1beta1"),
        pa("wl-new", "cart", "{selector: {matchLabels: {app: a}}, mtls: {mode: STRICT}}", "2024-03-01T00:00:00Z"),
        pa("wl-old", "cart", "{selector: {matchLabels: {app: a}}, mtls: {mode: PERMISSIVE}}", "2024-01-02T00:00:00Z"),
    )
    assert authn.namespace_mode("shop") is MtlsMode.STRICT
    assert authn.namespace_mode("cart") is MtlsMode.DISABLE
    assert authn.workload_mode("cart", {"app": "a"}, 80) is MtlsMode.PERMISSIVE


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("{portLevelMtls: {8080: {mode: STRICT}}}", "portLevelMtls"),  # needs a selector
        ("{mtls: {mode: SOMETIMES}}", "mtls.mode"),
    ],
)
def test_invalid_peer_authentications_are_rejected_with_the_field(spec: str, field: str) -> None:
    result = load_documents(pa("bad", "shop", spec), "pa.yaml")
    [rejection] = result.rejected
    assert field in str(rejection.error)


# --- clients: auto mTLS follows the destination's namespace / mesh mode --------------------------

SERVICES = (
    kube_service("web", "[{name: http, port: 80, targetPort: 8080}]", namespace="shop", cluster_ip="10.96.0.5",
                 selector="app: web")
    + kube_service("db", "[{name: tcp, port: 5432}]", namespace="data", cluster_ip="10.96.0.6")
)  # fmt: skip


def clusters(push: PushContext, ns: str = "client") -> dict[str, cluster_pb2.Cluster]:
    proxy = sidecar_proxy(f"app-0.{ns}", "10.1.0.9", {"app": "client"})
    return {c.name: c for c in generate_clusters(proxy, push)}


def auto_mtls(cluster: cluster_pb2.Cluster) -> bool:
    return [m.name for m in cluster.transport_socket_matches] == ["tlsMode-istio", "tlsMode-disabled"]


def test_namespace_disable_turns_auto_mtls_off_for_that_namespaces_services_only() -> None:
    push = push_context(SERVICES, pa("no-mtls", "shop", "{mtls: {mode: DISABLE}}"), mesh=MESH)
    found = clusters(push)
    assert not auto_mtls(found["outbound|80||web.shop.svc.cluster.local"])
    assert not found["outbound|80||web.shop.svc.cluster.local"].HasField("transport_socket")
    assert auto_mtls(found["outbound|5432||db.data.svc.cluster.local"])


def test_mesh_disable_turns_it_off_everywhere_and_a_namespace_policy_back_on() -> None:
    push = push_context(
        SERVICES, pa("mesh", ROOT, "{mtls: {mode: DISABLE}}"), pa("mtls", "data", "{mtls: {mode: STRICT}}"), mesh=MESH
    )
    found = clusters(push)
    assert not auto_mtls(found["outbound|80||web.shop.svc.cluster.local"])
    assert auto_mtls(found["outbound|5432||db.data.svc.cluster.local"])


def test_a_workload_selector_policy_does_not_change_client_clusters() -> None:
    base = clusters(push_context(SERVICES, mesh=MESH))
    workload_policy = pa("wl", "shop", "{selector: {matchLabels: {app: web}}, mtls: {mode: DISABLE}}")
    with_workload = clusters(push_context(SERVICES, workload_policy, mesh=MESH))
    assert with_workload == base


def test_headless_service_gets_auto_mtls_only_when_every_endpoint_runs_a_sidecar() -> None:
    headless = kube_service("kv", "[{name: tcp, port: 6379}]", namespace="data", cluster_ip="None", selector="app: kv")
    pods = kube_pod("kv-0", "10.2.0.1", "app: kv", namespace="data") + kube_pod(
        "kv-1", "10.2.0.2", "app: kv", namespace="data", sidecar=False
    )
    both = endpoint_slice(
        "kv", "[{name: tcp, port: 6379}]",
        slice_endpoint("10.2.0.1", "kv-0", namespace="data"), slice_endpoint("10.2.0.2", "kv-1", namespace="data"),
        namespace="data",
    )  # fmt: skip
    only_mesh = endpoint_slice(
        "kv", "[{name: tcp, port: 6379}]", slice_endpoint("10.2.0.1", "kv-0", namespace="data"), namespace="data"
    )
    name = "outbound|6379||kv.data.svc.cluster.local"
    assert not clusters(push_context(headless, pods, both, mesh=MESH))[name].HasField("transport_socket")
    assert clusters(push_context(headless, pods, only_mesh, mesh=MESH))[name].HasField("transport_socket")


# --- the workload's own inbound chains ------------------------------------------------------------

WEB_POD = kube_pod("web-0", "10.1.0.5", "app: web", namespace="shop") + endpoint_slice(
    "web", "[{name: http, port: 8080}]", slice_endpoint("10.1.0.5", "web-0", namespace="shop"), namespace="shop"
)
TCP = (
    kube_service("raw", "[{name: tcp, port: 9000}]", namespace="shop", cluster_ip="10.96.0.7", selector="app: web")
    + endpoint_slice(
        "raw", "[{name: tcp, port: 9000}]", slice_endpoint("10.1.0.5", "web-0", namespace="shop"), namespace="shop"
    )
)


def inbound(*policies_: str) -> dict[str, list[tuple[str, bool]]]:
    """virtualInbound's chains of the web pod: per chain name, (transport, terminates mTLS)."""
    push = push_context(SERVICES, WEB_POD, TCP, *policies_, mesh=MESH)
    proxy = sidecar_proxy("web-0.shop", "10.1.0.5", {"app": "web"})
    [listener] = [x for x in generate_listeners(proxy, push) if x.name == "virtualInbound"]
    out: dict[str, list[tuple[str, bool]]] = {}
    for chain in listener.filter_chains:
        out.setdefault(chain.name, []).append(
            (chain.filter_chain_match.transport_protocol, chain.HasField("transport_socket"))
        )
    return out


def test_permissive_by_default_mtls_and_plaintext_chains() -> None:
    chains = inbound()
    assert chains["0.0.0.0_8080"] == [("tls", True), ("raw_buffer", False)]
    assert chains["0.0.0.0_9000"] == [("tls", True), ("tls", False), ("raw_buffer", False)]


def test_strict_keeps_only_mtls_chains_and_disable_only_plaintext() -> None:
    strict = inbound(pa("strict", "shop", "{mtls: {mode: STRICT}}"))
    assert strict["0.0.0.0_8080"] == [("tls", True)]
    assert strict["0.0.0.0_9000"] == [("tls", True)]
    assert strict["virtualInbound"] == [("tls", True)]  # the passthrough: mTLS only too
    plain = inbound(pa("no-mtls", "shop", "{mtls: {mode: DISABLE}}"))
    assert plain["0.0.0.0_8080"] == [("raw_buffer", False)]
    assert plain["0.0.0.0_9000"] == [("raw_buffer", False)]


def test_port_level_mode_applies_to_that_workload_port() -> None:
    chains = inbound(
        pa("wl", "shop", "{selector: {matchLabels: {app: web}}, mtls: {mode: STRICT}, "
           "portLevelMtls: {9000: {mode: DISABLE}}}")
    )  # fmt: skip
    assert chains["0.0.0.0_8080"] == [("tls", True)]
    assert chains["0.0.0.0_9000"] == [("raw_buffer", False)]


def test_port_level_mode_of_an_undeclared_port_gets_passthrough_chains_of_its_own() -> None:
    # istiod authn Builder.ForPassthrough / needPerPortPassthroughFilterChain: a port-level
    # port no service declares gets passthrough chains in its own mode; a declared one does not
    policy = pa(
        "wl", "shop", "{selector: {matchLabels: {app: web}}, mtls: {mode: STRICT}, "
        "portLevelMtls: {7070: {mode: DISABLE}, 8080: {mode: DISABLE}}}"
    )  # fmt: skip
    push = push_context(SERVICES, WEB_POD, TCP, policy, mesh=MESH)
    proxy = sidecar_proxy("web-0.shop", "10.1.0.5", {"app": "web"})
    [listener] = [x for x in generate_listeners(proxy, push) if x.name == "virtualInbound"]
    passthrough = [
        (c.name, c.filter_chain_match.destination_port.value, c.filter_chain_match.transport_protocol)
        for c in listener.filter_chains
        if c.name in ("virtualInbound", "virtualInbound-catchall-http")
    ]
    assert passthrough == [
        ("virtualInbound-catchall-http", 0, "tls"),  # every other port: the workload's STRICT
        ("virtualInbound", 0, "tls"),
        ("virtualInbound-catchall-http", 7070, "raw_buffer"),  # 7070: DISABLE, sniffed
        ("virtualInbound", 7070, "raw_buffer"),
    ]
    # the HTTP inspector runs only where a chain needs it: port 7070
    inspectors = [f.name for f in listener.listener_filters]
    assert "envoy.filters.listener.http_inspector" in inspectors


@pytest.mark.parametrize(
    "spec",
    [
        "{mtls: {mode: STRICT}}",
        "{mtls: {mode: DISABLE}}",
        "{selector: {matchLabels: {app: web}}, portLevelMtls: {7070: {mode: STRICT}, 7071: {mode: DISABLE}}}",
    ],
)
def test_real_envoy_accepts_each_modes_listeners_and_clusters(spec: str, tmp_path: Path) -> None:
    push = push_context(SERVICES, WEB_POD, TCP, pa("policy", "shop", spec), mesh=MESH)
    node_id = "sidecar~10.1.0.5~web-0.shop~shop.svc.cluster.local"
    proxy = sidecar_proxy("web-0.shop", "10.1.0.5", {"app": "web"})
    bootstrap = agent_bootstrap(node_id, generate_clusters(proxy, push), generate_listeners(proxy, push))
    validate_bootstrap(bootstrap, tmp_path)
