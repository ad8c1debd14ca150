"""A proxy's labels are its pod's, against a real kube-apiserver, as istiod's SetWorkloadLabels
gives them: ``pilotfish serve --kubeconfig`` (with the chart's RBAC) selects config for a
sidecar by the labels its Pod has, not those its xDS node metadata claims, and when the Pod is
relabelled after the sidecar connected, the sidecar's stream (never reconnected) is pushed the
config of its new labels (istiod's pod controller: a ProxyUpdate). The config that tells: a
Sidecar for ``canary: "yes"`` workloads whose egress sees nothing of the namespace, so a canary
has no cluster for the namespace's Service cart and any other sidecar has one. The mesh's
discoverySelectors keep pilotfish to the test's namespace of the shared cluster."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path

from app.model.proxy import build_proxy
from app.runtime import Runtime
from app.xds.client import node
from app.xds.type_urls import CLUSTER
from tests.kube.common import cart_namespaces, serving, streaming, wait_for_slice
from tests.support.ads import DeltaStream
from tests.support.cluster import Cluster
from tests.support.runtime import running
from tests.support.waiting import until

CART_IP, CLIENT_IP = "10.8.0.1", "10.8.0.9"
CANARY = {"canary": "yes"}


def make_shop(kube: Cluster, client_labels: Mapping[str, str]) -> tuple[str, str]:
    """Namespace ``shop-*`` with Service cart (pod cart-0), the pod ``client`` with
    ``client_labels`` and the canary Sidecar; the mesh ConfigMap, selecting that namespace only,
    in ``system-*``. Returns (shop, system)."""
    shop, system = cart_namespaces(kube)
    kube.apply(
        {"apiVersion": "networking.istio.io/v1", "kind": "Sidecar", "metadata": {"name": "canary"},
         "spec": {"workloadSelector": {"labels": CANARY}, "egress": [{"hosts": ["./nothing.example.com"]}]}},
        namespace=shop,
    )  # fmt: skip
    for name, ip, labels in (("cart-0", CART_IP, {"app": "cart"}), ("client", CLIENT_IP, client_labels)):
        pod = {"metadata": {"name": name, "labels": dict(labels)}, "spec": {"containers": [{"name": "app"}]}}
        kube.run_pod(pod, ip, namespace=shop)
    wait_for_slice(kube, shop, "cart", {CART_IP})
    return shop, system


def node_id(namespace: str) -> str:
    return f"sidecar~{CLIENT_IP}~client.{namespace}~{namespace}.svc.cluster.local"


def sidecar(
    port: int, namespace: str, labels: Mapping[str, str]
) -> contextlib.AbstractAsyncContextManager[tuple[DeltaStream, asyncio.Task[None]]]:
    """The client pod's sidecar on one Delta stream, its node metadata claiming ``labels``."""
    ident = node(node_id(namespace), {"NAMESPACE": namespace, "LABELS": dict(labels)})
    return streaming(port, lambda channel: DeltaStream(channel, ident))


def clusters(stream: DeltaStream) -> set[str]:
    held = stream.client.held.get(CLUSTER)
    return set(held.versions) if held is not None else set()


async def test_a_pod_relabelled_after_its_sidecar_connected_pushes_it_the_config_of_its_new_labels(
    kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    shop, system = await asyncio.to_thread(make_shop, kube, {"app": "client"})
    cart = f"outbound|80||cart.{shop}.svc.cluster.local"
    async with (
        running(serving(pilotfish_kubeconfig, system)) as runtime,
        sidecar(runtime.xds.port, shop, {"app": "client"}) as (stream, task),
    ):
        await until(f"{cart} sent (no Sidecar selects the client yet)", lambda: cart in clusters(stream))
        [connected] = runtime.streams()

        await asyncio.to_thread(kube.patch, "v1", "Pod", shop, "client", {"metadata": {"labels": CANARY}})
        await until(
            f"{cart} removed: the canary Sidecar selects the relabelled pod", lambda: cart not in clusters(stream)
        )
        assert connected.connection.client.labels["canary"] == "yes"
        assert runtime.streams() == [connected] and not task.done()  # the same stream, never reconnected

        await asyncio.to_thread(kube.patch, "v1", "Pod", shop, "client", {"metadata": {"labels": {"canary": None}}})
        await until(f"{cart} sent again: the label is gone", lambda: cart in clusters(stream))
        assert "canary" not in connected.connection.client.labels and not task.done()


async def test_the_pods_labels_win_over_the_stale_labels_of_the_node_metadata(
    kube: Cluster, pilotfish_kubeconfig: Path
) -> None:
    shop, system = await asyncio.to_thread(make_shop, kube, {"app": "client", **CANARY})
    cart = f"outbound|80||cart.{shop}.svc.cluster.local"
    async with running(serving(pilotfish_kubeconfig, system)) as runtime:
        # the metadata says no canary (a sidecar started before the pod was labelled): the pod's
        # canary label selects the Sidecar, so the cart cluster is never sent
        async with sidecar(runtime.xds.port, shop, {"app": "client"}) as (stream, _):
            await until("clusters sent", lambda: bool(clusters(stream)))
            assert cart not in clusters(stream)
            [connected] = runtime.streams()
            assert connected.connection.client.labels["canary"] == "yes"
        # and the other way round: the metadata claims canary, the pod (relabelled) is none
        await asyncio.to_thread(kube.patch, "v1", "Pod", shop, "client", {"metadata": {"labels": {"canary": None}}})
        await until("the pod's label gone in the registry", lambda: "canary" not in registry_labels(runtime, shop))
        async with sidecar(runtime.xds.port, shop, {"app": "client", **CANARY}) as (stream, _):
            await until(
                f"{cart} sent: the pod is no canary whatever the metadata says", lambda: cart in clusters(stream)
            )


def registry_labels(runtime: Runtime, shop: str) -> Mapping[str, str]:
    """The labels the registry gives the client's proxy now."""
    proxy = build_proxy(node_id(shop), {"NAMESPACE": shop})
    return runtime.env.registry.with_workload_labels(proxy).labels
