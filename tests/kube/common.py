"""What the Kubernetes tests share: a small mesh made in a real cluster (namespaces of the test's
own, a pod "run" so the endpointslice controller makes its slice), and reading a KubeSource's
events for the test's namespaces only (the cluster is shared: other tests' namespaces, and the
system ones, come and go around it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc

from app.config.objects import ConfigEvent, ConfigKey, Kind
from app.settings import Settings
from app.sources.kube.source import KubeSource
from tests.support.ads import DeltaStream
from tests.support.cluster import Cluster

CART_IP = "10.1.1.1"


@dataclass(frozen=True)
class Mesh:
    shop: str  # the app's namespace
    system: str  # the root namespace: the mesh ConfigMap (``system_namespace``)
    slice: str  # the name of cart's EndpointSlice, as the endpointslice controller named it

    @property
    def namespaces(self) -> tuple[str, str]:
        return (self.shop, self.system)

    @property
    def cart_dr(self) -> ConfigKey:
        return ConfigKey(Kind.DESTINATION_RULE, self.shop, "cart")

    def destination_rule(self, max_connections: Any = 5, name: str = "cart") -> dict[str, Any]:
        return {
            "apiVersion": "networking.istio.io/v1",
            "kind": "DestinationRule",
            "metadata": {"name": name, "namespace": self.shop},
            "spec": {"host": "cart", "trafficPolicy": {"connectionPool": {"tcp": {"maxConnections": max_connections}}}},
        }

    def mesh_config(self, mesh: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "istio", "namespace": self.system},
            "data": {"mesh": mesh},
        }


S = TypeVar("S", bound=DeltaStream)


def serving(kubeconfig: Path, system: str) -> Settings:
    """pilotfish on the cluster (root namespace ``system``), plaintext xDS on a port of its own,
    no leader writes, a 10 ms debounce."""
    return Settings(
        config_dir=None,
        kubeconfig=kubeconfig,
        system_namespace=system,
        xds_address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        kube_controllers=False,
        debounce_after=0.01,
    )


@contextlib.asynccontextmanager
async def streaming(port: int, make: Callable[[grpc.aio.Channel], S]) -> AsyncIterator[tuple[S, asyncio.Task[None]]]:
    """A Delta stream (``make`` on a channel to ``port``) running while the block runs."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stream = make(channel)
        task = asyncio.create_task(stream.run())
        try:
            yield stream, task
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await task


def cart_namespaces(kube: Cluster) -> tuple[str, str]:
    """Namespace ``shop-*`` with Service cart (port 80 to 8080, pods ``app: cart``); the mesh
    ConfigMap, selecting that namespace only, in ``system-*``. Returns (shop, system)."""
    shop = kube.namespace("shop")
    system = kube.namespace("system")
    kube.apply(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "cart"},
         "spec": {"selector": {"app": "cart"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}},
        namespace=shop,
    )  # fmt: skip
    mesh = f"discoverySelectors: [{{matchLabels: {{kubernetes.io/metadata.name: {shop}}}}}]\n"
    kube.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "istio"}, "data": {"mesh": mesh}},
        namespace=system,
    )
    return shop, system


MESH_CONFIG = "defaultConfig: {discoveryAddress: istiod.istio-system.svc:15012}\nconnectTimeout: 3s\n"


def make_mesh(kube: Cluster, mesh: str = MESH_CONFIG) -> Mesh:
    """Namespace ``shop-*`` with Service cart, its running pod and the slice the controller
    makes for it, DestinationRule cart; the mesh ConfigMap (and an unrelated one) in ``system-*``."""
    shop = kube.namespace("shop", {"istio-injection": "enabled"})
    system = kube.namespace("system")
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "cart"},
            "spec": {"selector": {"app": "cart"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        },
        namespace=shop,
    )
    pod = {
        "metadata": {"name": "cart-0", "labels": {"app": "cart"}},
        "spec": {"serviceAccountName": "cart", "containers": [{"name": "cart", "ports": [{"containerPort": 8080}]}]},
    }
    kube.run_pod(pod, CART_IP, namespace=shop)
    made = Mesh(shop, system, "")
    kube.apply(made.destination_rule(), made.mesh_config(mesh))
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unrelated"}, "data": {"x": "y"}},
               namespace=system)  # fmt: skip
    return Mesh(shop, system, wait_for_slice(kube, shop, "cart", {CART_IP}))


def wait_for_slice(kube: Cluster, namespace: str, service: str, ready: set[str]) -> str:
    """Until the endpointslice controller has made ``service``'s slice with ``ready`` addresses;
    its name."""

    def made() -> str | None:
        slices = kube.list("discovery.k8s.io/v1", "EndpointSlice", namespace,
                           labelSelector=f"kubernetes.io/service-name={service}")  # fmt: skip
        for s in slices:
            endpoints = s.get("endpoints") or ()
            addresses = {a for e in endpoints if (e.get("conditions") or {}).get("ready") for a in e["addresses"]}
            managed = s["metadata"]["labels"].get("endpointslice.kubernetes.io/managed-by")
            if addresses == ready and managed == "endpointslice-controller.k8s.io":
                return str(s["metadata"]["name"])
        return None

    return kube.wait_for(f"the EndpointSlice of {namespace}/{service}", made)


def ours(namespaces: Iterable[str]) -> Callable[[ConfigKey], bool]:
    """Keys of the test's namespaces (their objects and the Namespaces themselves) and the MeshConfig."""
    mine = frozenset(namespaces)
    return lambda key: key.kind is Kind.MESH_CONFIG or key.namespace in mine or (
        key.kind is Kind.NAMESPACE and key.name in mine
    )


async def next_events(
    watch: AsyncIterator[list[ConfigEvent]], namespaces: Iterable[str], timeout: float = 20
) -> list[ConfigEvent]:
    """The next batch with events of the test's namespaces (those events only)."""
    keep = ours(namespaces)
    async with asyncio.timeout(timeout):
        while True:
            events = [e for e in await anext(watch) if keep(e.obj.key)]
            if events:
                return events


async def changes_until(
    watch: AsyncIterator[list[ConfigEvent]],
    namespaces: Iterable[str],
    done: Callable[[set[tuple[Any, ConfigKey]]], bool],
    timeout: float = 20,
) -> set[tuple[Any, ConfigKey]]:
    """(type, key) of the test's namespaces' events, gathered over batches until ``done``."""
    keep = ours(namespaces)
    got: set[tuple[Any, ConfigKey]] = set()
    async with asyncio.timeout(timeout):
        while not done(got):
            got |= {(e.type, e.obj.key) for e in await anext(watch) if keep(e.obj.key)}
    return got


async def started(source: KubeSource, timeout: float = 60) -> list[ConfigEvent]:
    """``source.start()``, which waits for every informer's first list: an informer refused (a
    permission charts/pilotfish does not grant) retries for ever, and this fails instead."""
    try:
        return await asyncio.wait_for(source.start(), timeout)
    except TimeoutError:
        raise AssertionError(
            f"KubeSource.start() has not finished after {timeout:.0f}s: is a list refused (HTTP 403: a "
            "permission the chart does not grant)? See the informers' warnings in the captured log"
        ) from None
