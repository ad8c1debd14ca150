"""Benchmark: what a push costs the control plane per proxy, in-process and without gRPC.

The load benchmark (bench/xds_load.py) measures push latency from outside, where the client
process and the transport dominate on a 2-core machine; this one isolates the server's own CPU:
the mesh of bench/mesh.py is loaded through the FileSource into an Environment, N sidecars
connect as Delta (or SotW) ADS ``Connection``s subscribing as Envoy does (CDS and LDS wildcard,
EDS for the EDS clusters, RDS for the listeners' route names, every response ACKed), and each
scenario (a DestinationRule change, an endpoint added, a ServiceEntry added, a Service deleted, a
root-namespace AuthorizationPolicy added, with ``--envoy-filter`` the mesh's EnvoyFilter changed,
then, without ``--sidecars``, one Sidecar per namespace added) changes files, pushes the change
through the runtime's ``Discovery`` (PushContext rebuilt and served, cache invalidated), and hands
the push to every connection, filtered first as the server does (``unaffected``). Reported per
scenario: milliseconds of the filter and ``on_push`` per proxy and in total, the proxies that were
sent something, resources and bytes sent, the encoded resources still alive after it (``held``);
with ``--profile`` the top functions.
Usage:
    python -m bench.push_cost [--services 1000 --namespaces 50 --proxies 400] [--protocol delta]
                              [--sidecars] [--agents N] [--envoy-filter] [--profile] [--out FILE]
``--envoy-filter``: a root-namespace EnvoyFilter from the start (a Lua HTTP filter before every
sidecar's router, inbound and outbound, and a setting merged into every outbound cluster), what
patching costs every proxy.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import platform
import pstats
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import struct_pb2

from app.environment import Environment
from app.heap import HeapKeeper
from app.sources.files import FileSource
from app.translate.endpoint.for_proxy import eds_cluster_names
from app.translate.listener.for_proxy import route_names
from app.xds.cache import ResourceCache
from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.discovery import Discovery
from app.xds.mesh_source import MeshSource, proxy_from_node
from app.xds.next_push import push_request
from app.xds.push_request import PushRequest
from app.xds.resource import Resource
from app.xds.sotw import SotwSession
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, NAME_TABLE, ROUTE
from app.xds.watch import NameSets, counter_nonces
from bench.mesh import DELETED_SERVICE, Mesh, MeshSpec, SidecarIdentity, sidecars

AnyConnection = Connection[Any, Any, Any, Any]
ROUTER = {"name": "envoy.filters.network.http_connection_manager", "subFilter": {"name": "envoy.filters.http.router"}}


def envoy_filter(code: str) -> str:
    """The mesh's EnvoyFilter (``--envoy-filter``), its Lua code ``code``."""
    lua = {"name": "envoy.lua", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua", "inlineCode": code}}  # fmt: skip
    patches = [
        {"applyTo": "HTTP_FILTER", "match": {"context": context, "listener": {"filterChain": {"filter": ROUTER}}},
         "patch": {"operation": "INSERT_BEFORE", "value": lua}}
        for context in ("SIDECAR_INBOUND", "SIDECAR_OUTBOUND")
    ]  # fmt: skip
    merge = {"operation": "MERGE", "value": {"per_connection_buffer_limit_bytes": 65536}}
    patches.append({"applyTo": "CLUSTER", "match": {"context": "SIDECAR_OUTBOUND"}, "patch": merge})
    meta = {"name": "mesh", "namespace": "istio-system"}
    doc = {"apiVersion": "networking.istio.io/v1alpha3", "kind": "EnvoyFilter", "metadata": meta}
    return json.dumps({**doc, "spec": {"configPatches": patches}})


@dataclass
class World:
    """The control plane's state as the runtime keeps it, without the event loop."""

    env: Environment
    source: FileSource
    discovery: Discovery[AnyConnection]

    @classmethod
    def load(cls, root: Path) -> World:
        env = Environment()
        source = FileSource(root)
        env.apply(source.load())
        discovery: Discovery[AnyConnection] = Discovery(env, ResourceCache())
        discovery.start()
        return cls(env, source, discovery)

    def change(self) -> tuple[PushRequest, float]:
        """Re-read the directory, apply it and push it as the runtime's debounced fire does;
        returns the request pushed and the seconds the apply and the push took."""
        events = self.source.load()
        started = time.perf_counter()
        request = push_request(self.env.apply(events), len(events))
        assert request is not None, "the change made no push"
        pushed = self.discovery.push(request)
        return pushed.request, time.perf_counter() - started


def _node(identity: SidecarIdentity) -> base_pb2.Node:
    metadata = struct_pb2.Struct()
    metadata.update(identity.metadata())
    return base_pb2.Node(id=identity.node_id, metadata=metadata)


def connect_delta(conn: AnyConnection, node: Any, agent: bool = False) -> None:
    """Subscribe as Envoy does over Delta ADS (and an agent's NDS) and ACK everything."""
    Req = discovery_pb2.DeltaDiscoveryRequest

    def ask(req: Any) -> list[Any]:
        out = conn.on_request(req)
        for resp in out:
            conn.on_request(Req(type_url=resp.type_url, response_nonce=resp.nonce))
        return out

    [cds] = ask(Req(type_url=CLUSTER, node=node))
    clusters = [cluster_pb2.Cluster.FromString(r.body.value) for r in cds.resources]
    ask(Req(type_url=ENDPOINT, resource_names_subscribe=eds_cluster_names(clusters)))
    [lds] = ask(Req(type_url=LISTENER))
    listeners = [listener_pb2.Listener.FromString(r.body.value) for r in lds.resources]
    ask(Req(type_url=ROUTE, resource_names_subscribe=route_names(listeners)))
    if agent:
        ask(Req(type_url=NAME_TABLE))


def connect_sotw(conn: AnyConnection, node: Any, agent: bool = False) -> None:
    """Subscribe as Envoy does over SotW ADS (and an agent's NDS) and ACK everything."""
    Req = discovery_pb2.DiscoveryRequest
    names: dict[str, list[str]] = {CLUSTER: [], LISTENER: []}

    def ask(type_url: str, first: bool = False) -> list[Any]:
        req = Req(type_url=type_url, resource_names=names.get(type_url, []))
        if first:
            req.node.CopyFrom(node)
        out = conn.on_request(req)
        for resp in out:
            conn.on_request(
                Req(
                    type_url=type_url,
                    version_info=resp.version_info,
                    response_nonce=resp.nonce,
                    resource_names=names.get(type_url, []),
                )
            )
        return out

    [cds] = ask(CLUSTER, first=True)
    names[ENDPOINT] = eds_cluster_names(cluster_pb2.Cluster.FromString(r.body.value) for r in cds.resources)
    ask(ENDPOINT)
    [lds] = ask(LISTENER)
    names[ROUTE] = route_names(listener_pb2.Listener.FromString(r.body.value) for r in lds.resources)
    ask(ROUTE)
    if agent:
        ask(NAME_TABLE)


def _sent(resp: Any) -> tuple[int, int]:
    """(resources, bytes) of a response; encoding it is the server's work, so it is timed."""
    return len(resp.resources), len(resp.payload())


def held() -> dict[str, float]:
    """The encoded resources alive after a push (what generation keeps of this snapshot and of
    earlier ones; nothing else holds them in-process): how many, and their Delta bytes. Frozen
    objects are not listed, so the heap is unfrozen (and collected) to count, then frozen again."""
    gc.unfreeze()
    gc.collect()
    found = [o for o in gc.get_objects() if type(o) is Resource]
    gc.freeze()
    return {"held_resources": len(found), "held_mb": round(sum(len(r.entry) for r in found) / 2**20, 1)}


def run_push(conns: list[AnyConnection], request: PushRequest, profile: cProfile.Profile | None) -> dict[str, Any]:
    reached = resources = size = 0
    if profile is not None:
        profile.enable()
    start = time.perf_counter()
    for conn in conns:
        # as the server: the push filter first, before the push is queued (istiod ProxyNeedsPush)
        out = [] if conn.unaffected(request) else conn.on_push(request)
        if out:
            reached += 1
        for resp in out:
            n, b = _sent(resp)
            resources += n
            size += b
    elapsed = time.perf_counter() - start
    if profile is not None:
        profile.disable()
    return {
        "push_ms_total": round(elapsed * 1000, 1),
        "push_ms_per_proxy": round(elapsed * 1000 / len(conns), 3),
        "proxies_sent_something": reached,
        "resources_sent": resources,
        "bytes_sent": size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--proxies", type=int, default=400)
    parser.add_argument("--protocol", choices=("delta", "sotw"), default="delta")
    parser.add_argument("--sidecars", action="store_true", help="one Sidecar per namespace (./*, istio-system/*)")
    parser.add_argument("--agents", type=int, default=0, help="how many of the proxies are node agents (NDS too)")
    parser.add_argument("--envoy-filter", action="store_true", help="a root-namespace EnvoyFilter from the start")
    parser.add_argument("--profile", action="store_true", help="print the top functions of each scenario")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    args = parser.parse_args()

    spec = MeshSpec(args.services, args.namespaces, args.sidecars)
    with tempfile.TemporaryDirectory(prefix="pilotfish-push-cost-") as tmp:
        mesh = Mesh(spec, Path(tmp))
        mesh.write()
        filters = Path(tmp) / "envoy-filter.yaml"
        if args.envoy_filter:
            filters.write_text(envoy_filter("-- one"))
        started = time.perf_counter()
        world = World.load(Path(tmp))
        load_s = time.perf_counter() - started
        heap = HeapKeeper()  # the runtime's heap policy, so collections land as in the server
        heap.settled()

        name_sets = NameSets()  # one per server, as XdsServer shares it
        session: Callable[[], Any] = (
            (lambda: DeltaSession(counter_nonces(), None, name_sets))
            if args.protocol == "delta"
            else (lambda: SotwSession(counter_nonces(), None, name_sets))
        )
        connect = connect_delta if args.protocol == "delta" else connect_sotw
        source = MeshSource(world.discovery.generator)
        conns: list[AnyConnection] = []
        started = time.perf_counter()
        for i, identity in enumerate(sidecars(spec, args.proxies, args.agents)):
            node = _node(identity)
            conn: AnyConnection = Connection(f"c{i}", proxy_from_node(node), session(), source)
            connect(conn, node, identity.agent)
            conns.append(conn)
            heap.connected()
        connect_s = time.perf_counter() - started

        report: dict[str, Any] = {
            "benchmark": "push_cost",
            "protocol": args.protocol,
            "services": args.services,
            "namespaces": args.namespaces,
            "proxies": args.proxies,
            "agents": args.agents,
            "sidecars": args.sidecars,
            "envoy_filter": args.envoy_filter,
            "load_seconds": round(load_s, 2),
            "connect_ms_per_proxy": round(connect_s * 1000 / args.proxies, 2),
        }
        changed = spec.services_in(0)[0]  # svc-0: has a DestinationRule
        scenarios: dict[str, Callable[[], object]] = {
            "dr-change": lambda: mesh.change_destination_rule(changed),
            "endpoint-add": lambda: mesh.add_endpoint(changed),
            "service-entry-add": mesh.add_service_entry,
            "service-delete": lambda: mesh.delete_service(DELETED_SERVICE),
            "mesh-policy": mesh.add_mesh_policy,
        }
        if args.envoy_filter:
            scenarios["envoy-filter-change"] = lambda: filters.write_text(envoy_filter("-- two"))
        if not args.sidecars:  # last: every proxy's scope shrinks to its namespace
            scenarios["sidecar-add"] = mesh.add_sidecars
        for name, make_change in scenarios.items():
            make_change()
            request, rebuild_s = world.change()
            heap.settled()  # as the runtime does after each fire
            profile = cProfile.Profile() if args.profile else None
            figures = run_push(conns, request, profile)
            figures["rebuild_ms"] = round(rebuild_s * 1000, 1)
            figures.update(held())
            report[name] = figures
            if profile is not None:
                text = io.StringIO()
                pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(25)
                print(f"--- {name}\n{text.getvalue()}")
        report["python"] = platform.python_version()
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
