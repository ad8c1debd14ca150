"""A change rebuilds only the listeners and route configurations built from what it changed: a
proxy class reuses the ones of an earlier snapshot whose inputs are the same objects (a
ServiceEntry on a new port leaves every other listener and route alone), across pushes that
built none (an endpoint push in between), and rebuilds those a change reaches (a
VirtualService, a DestinationRule's consistent hash). Assertion mode compares every served set
with a fresh build for the very proxy, so a reuse that misses an input fails here."""

from __future__ import annotations

import gc
import types

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.route.v3 import route_pb2

from app.xds.generators.listeners import ClassListeners
from app.xds.generators.routes import ClassRoutes
from app.xds.resource import Resource
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, ROUTE
from tests.support.bookinfo import NODE
from tests.support.bookinfo_mesh import DeltaConnection, Mesh

SERVICE_ENTRY = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: bookinfo, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  hosts: [db.example.com]
  addresses: [240.0.0.9]
  ports: [{number: 7777, name: tcp-db, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 10.9.0.1}]
"""
REVIEWS_VS = """apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: bookinfo, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v2}
"""
REVIEWS_DR = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: reviews, namespace: bookinfo, creationTimestamp: "2026-01-02T00:00:00Z"}}
spec:
  host: reviews
  trafficPolicy:
    connectionPool: {{tcp: {{maxConnections: {connections}}}}}
{hash}  subsets:
  - {{name: v1, labels: {{version: v1}}}}
  - {{name: v2, labels: {{version: v2}}}}
  - {{name: v3, labels: {{version: v3}}}}
"""
EXTERNAL_9080 = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: bookinfo, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  hosts: [ext.example.com]
  ports: [{number: 9080, name: tcp-ext, protocol: TCP}]
  resolution: DNS
"""
HASH = "    loadBalancer: {consistentHash: {httpHeaderName: x-user}}\n"
PRODUCTPAGE_SLICE = """apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: details-extra
  namespace: bookinfo
  labels: {kubernetes.io/service-name: details}
addressType: IPv4
ports: [{name: http, port: 9080, protocol: TCP}]
endpoints:
- {addresses: [10.1.0.77], conditions: {ready: true}}
"""


def connect(mesh: Mesh) -> DeltaConnection:
    """A Delta ADS stream subscribed to all four types as Envoy does."""
    return mesh.connect(listeners=True)[0]


def served(mesh: Mesh, conn: DeltaConnection, type_url: str) -> dict[str, Resource]:
    return {r.name: r for r in mesh.source.generate(type_url, conn.client, conn.session.watches[type_url]) or []}


def test_a_service_entry_on_a_new_port_rebuilds_only_its_own_listener_and_no_route() -> None:
    mesh = Mesh()
    conn = connect(mesh)
    listeners, routes = served(mesh, conn, LISTENER), served(mesh, conn, ROUTE)
    out = conn.on_push(mesh.apply(SERVICE_ENTRY))
    sent = {r.type_url: [x.name for x in r.resources] for r in out}
    assert sent[LISTENER] == ["240.0.0.9_7777"]
    after_listeners, after_routes = served(mesh, conn, LISTENER), served(mesh, conn, ROUTE)
    kept = [n for n in listeners if n != "virtualOutbound" and not n.startswith("virtualInbound")]
    assert kept and all(after_listeners[n] is listeners[n] for n in kept)
    assert routes and all(after_routes[n] is routes[n] for n in routes)


def test_a_class_holds_one_inputs_value_per_listener_across_snapshots() -> None:
    """The listeners a change leaves alone are keyed by the inputs value the first snapshot
    built them from, not an equal copy per snapshot, and the earlier snapshot's mapping goes
    once the class has built its own: a mesh that changes keeps one generation of inputs."""
    mesh = Mesh()
    conn = connect(mesh)
    served(mesh, conn, LISTENER)
    first = mesh.discovery.generator._state().proxy_class(conn.client).parts[ClassListeners]
    assert isinstance(first, ClassListeners)
    conn.on_push(mesh.apply(SERVICE_ENTRY))
    now = mesh.discovery.generator._state().proxy_class(conn.client).parts[ClassListeners]
    assert isinstance(now, ClassListeners) and now is not first and not now.earlier.built
    before = {built[1].name: inputs for inputs, built in first.by_inputs.items()}
    after = {built[1].name: built[0] for built in now.by_inputs.values()}
    kept = [name for name in before if name in after and name != "240.0.0.9_7777"]
    assert kept and all(after[name] is before[name] for name in kept)
    assert "240.0.0.9_7777" in after and "240.0.0.9_7777" not in before


def _held_by(root: object, target: object) -> bool:
    """Whether ``target`` is reachable from ``root`` through instances and containers (types and
    modules, which reach everything global, are not followed)."""
    seen, todo = {id(root)}, [root]
    while todo:
        for found in gc.get_referents(todo.pop()):
            if found is target:
                return True
            if id(found) not in seen and not isinstance(found, (type, types.ModuleType)):
                seen.add(id(found))
                todo.append(found)
    return False


def test_a_rebuilt_route_configuration_and_listener_leave_no_earlier_generation_behind() -> None:
    """Once a class has rebuilt a route configuration or listener, only the new one is held: not
    through the class's inherited reuse map, nor through the replaced snapshot's classes (kept to
    patch clusters from, which is all they are kept for). A route configuration is then held by
    nothing of the generator's; an earlier listener map by the snapshot's memo of class
    differences, which goes with the snapshot."""
    mesh = Mesh()
    conn = connect(mesh)
    old_route, old_listener = served(mesh, conn, ROUTE)["9080"], served(mesh, conn, LISTENER)["0.0.0.0_9080"]
    conn.on_push(mesh.apply(REVIEWS_VS))
    new_route = served(mesh, conn, ROUTE)["9080"]
    assert new_route is not old_route
    generator = mesh.discovery.generator
    assert _held_by(generator, new_route) and not _held_by(generator, old_route)
    conn.on_push(mesh.apply(SERVICE_ENTRY))
    conn.on_push(mesh.apply(EXTERNAL_9080))
    new_listener = served(mesh, conn, LISTENER)["0.0.0.0_9080"]
    assert new_listener is not old_listener
    classes = (generator._state().lineage, generator._state().parents)
    assert _held_by(classes, new_listener) and not _held_by(classes, old_listener)


def test_reuse_reaches_across_a_push_that_built_no_listeners() -> None:
    mesh = Mesh()
    conn = connect(mesh)
    routes = served(mesh, conn, ROUTE)
    request = mesh.apply(PRODUCTPAGE_SLICE)
    assert {r.type_url for r in conn.on_push(request)} <= {ENDPOINT}
    conn.on_push(mesh.apply(SERVICE_ENTRY))
    after = served(mesh, conn, ROUTE)
    assert all(after[n] is routes[n] for n in routes)


def test_a_virtual_service_change_rebuilds_the_route_of_its_port() -> None:
    mesh = Mesh()
    conn = connect(mesh)
    before = served(mesh, conn, ROUTE)["9080"]
    conn.on_push(mesh.apply(REVIEWS_VS))
    after = served(mesh, conn, ROUTE)["9080"]
    assert after is not before and after.version != before.version
    config = route_pb2.RouteConfiguration.FromString(after.body.value)
    [reviews] = [vh for vh in config.virtual_hosts if vh.name.startswith("reviews.")]
    assert [r.route.cluster for r in reviews.routes] == ["outbound|9080|v2|reviews.bookinfo.svc.cluster.local"]


def test_routes_follow_a_destination_rules_consistent_hash_and_nothing_else_of_it() -> None:
    mesh = Mesh()
    conn = connect(mesh)
    conn.on_push(mesh.apply(REVIEWS_DR.format(connections=10, hash="")))
    before = served(mesh, conn, ROUTE)["9080"]
    conn.on_push(mesh.apply(REVIEWS_DR.format(connections=20, hash="")))  # a pool: clusters only
    conn.on_push(mesh.apply(SERVICE_ENTRY))
    assert served(mesh, conn, ROUTE)["9080"] is before
    conn.on_push(mesh.apply(REVIEWS_DR.format(connections=20, hash=HASH)))
    after = served(mesh, conn, ROUTE)["9080"]
    config = route_pb2.RouteConfiguration.FromString(after.body.value)
    [reviews] = [vh for vh in config.virtual_hosts if vh.name.startswith("reviews.")]
    assert all(r.route.hash_policy[0].header.header_name == "x-user" for r in reviews.routes)


EGRESS_SIDECAR = """apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: bookinfo}
spec:
  egress: [{hosts: ["./productpage.bookinfo.svc.cluster.local"]}]  # its own service stays
"""
INGRESS_SIDECAR = """apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: bookinfo}
spec:
  ingress: [{port: {number: 9080, protocol: HTTP, name: http}, defaultEndpoint: "127.0.0.1:9080"}]
  egress: [{hosts: ["./*"]}]
"""
NAMESPACE_POLICY = """apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: same-namespace, namespace: bookinfo}
spec:
  rules: [{from: [{source: {namespaces: [bookinfo]}}]}]
"""
OTHER_NAMESPACE_POLICY = NAMESPACE_POLICY.replace("namespace: bookinfo", "namespace: other")


def _own_clusters(conn: DeltaConnection) -> object:
    return conn.session.watches[CLUSTER].synced.built  # type: ignore[attr-defined]


def test_a_sidecar_narrowing_egress_keeps_the_proxys_inbound_listener_and_clusters() -> None:
    mesh = Mesh()
    conn = connect(mesh)
    inbound, own = served(mesh, conn, LISTENER)["virtualInbound"], _own_clusters(conn)
    out = conn.on_push(mesh.apply(EGRESS_SIDECAR))
    assert out  # the scope narrowed: clusters and listeners of other namespaces went
    assert served(mesh, conn, LISTENER)["virtualInbound"] is inbound
    assert _own_clusters(conn) is own


def test_a_sidecars_ingress_entries_rebuild_the_inbound_listener_and_clusters() -> None:
    mesh = Mesh()
    conn = connect(mesh)
    inbound, own = served(mesh, conn, LISTENER)["virtualInbound"], _own_clusters(conn)
    conn.on_push(mesh.apply(INGRESS_SIDECAR))
    after = served(mesh, conn, LISTENER)["virtualInbound"]
    assert after.version != inbound.version
    assert _own_clusters(conn) is not own


def test_a_policy_rebuilds_the_inbound_listener_of_the_workloads_it_selects_only() -> None:
    mesh = Mesh()
    conn = connect(mesh)  # productpage, in bookinfo
    inbound = served(mesh, conn, LISTENER)["virtualInbound"]
    conn.on_push(mesh.apply(OTHER_NAMESPACE_POLICY))
    assert served(mesh, conn, LISTENER)["virtualInbound"] is inbound
    out = conn.on_push(mesh.apply(NAMESPACE_POLICY))
    assert [r.name for resp in out if resp.type_url == LISTENER for r in resp.resources] == ["virtualInbound"]
    assert served(mesh, conn, LISTENER)["virtualInbound"].version != inbound.version


STAND_IN = """apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: bookinfo}
spec:
  ingress: [{port: {number: 7070, protocol: TCP, name: tcp-admin}, defaultEndpoint: "127.0.0.1:7070"}]
  egress: [{hosts: ["./*"]}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: stand-in, namespace: bookinfo, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  hosts: [default.bookinfo]
  ports: [{number: 7070, name: tcp-admin, protocol: TCP}]
  resolution: DNS
"""
STAND_IN_DR = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: stand-in, namespace: bookinfo, creationTimestamp: "2026-01-02T00:00:00Z"}}
spec:
  host: default.bookinfo
  trafficPolicy: {{connectionPool: {{tcp: {{maxConnections: {connections}}}}}}}
"""


def test_a_rule_on_the_sidecars_stand_in_service_rebuilds_the_ingress_entrys_cluster() -> None:
    """An ingress entry on a port no service targets gets a cluster on behalf of a stand-in named
    after the Sidecar (istiod buildInboundClustersFromSidecar, host SIDECAR.NAMESPACE), which
    takes the rule a host of that name has in the scope (istiod SidecarScope.DestinationRule,
    inbound): a change to that rule reaches the proxy's own cluster."""

    def max_connections(conn: DeltaConnection) -> int:
        cluster = cluster_pb2.Cluster.FromString(served(mesh, conn, CLUSTER)["inbound|7070||"].body.value)
        return cluster.circuit_breakers.thresholds[0].max_connections.value

    mesh = Mesh()
    mesh.apply(STAND_IN)
    mesh.apply(STAND_IN_DR.format(connections=5))
    conn = connect(mesh)
    assert max_connections(conn) == 5
    out = conn.on_push(mesh.apply(STAND_IN_DR.format(connections=7)))
    assert "inbound|7070||" in [r.name for resp in out if resp.type_url == CLUSTER for r in resp.resources]
    assert max_connections(conn) == 7


MESH_POLICY = """apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{name: mesh-allow, namespace: istio-system, creationTimestamp: "2026-01-02T00:00:00Z"}}
spec:
  action: ALLOW
  rules: [{{to: [{{operation: {{methods: [{method}]}}}}]}}]
"""


def _class_parts(mesh: Mesh, conn: DeltaConnection) -> tuple[ClassListeners, ClassRoutes]:
    parts = mesh.discovery.generator._state().proxy_class(conn.client).parts
    listeners, routes = parts[ClassListeners], parts[ClassRoutes]
    assert isinstance(listeners, ClassListeners) and isinstance(routes, ClassRoutes)
    return listeners, routes


def test_a_workload_policy_push_takes_the_class_listeners_and_routes_as_the_parent_built_them() -> None:
    """A mesh-wide AuthorizationPolicy changes every sidecar's inbound listeners and nothing a
    class builds: the class takes its parent's listener set and route inputs as they are (the
    same objects; planning them again found equal ones, per class, 2 of 3 ms per proxy at a
    1,000-service mesh). After an endpoint push, whose snapshot built no listeners, the next
    policy push plans again: what is reused must have been built in the snapshot replaced."""
    mesh = Mesh()
    conn = connect(mesh)
    served(mesh, conn, LISTENER), served(mesh, conn, ROUTE)
    listeners, routes = _class_parts(mesh, conn)
    out = conn.on_push(mesh.apply(MESH_POLICY.format(method="GET")))
    sent = {r.type_url: [x.name for x in r.resources] for r in out}
    assert sent[LISTENER] == ["virtualInbound"] and ROUTE not in sent
    kept_listeners, kept_routes = _class_parts(mesh, conn)
    assert kept_listeners is not listeners and kept_listeners.by_name is listeners.by_name
    assert kept_routes.inputs.keys() == routes.inputs.keys()
    assert all(kept_routes.inputs[name] is routes.inputs[name] for name in routes.inputs)

    conn.on_push(mesh.apply(PRODUCTPAGE_SLICE))  # endpoints only: no listener or route built
    out = conn.on_push(mesh.apply(MESH_POLICY.format(method="POST")))
    assert [x.name for r in out if r.type_url == LISTENER for x in r.resources] == ["virtualInbound"]
    planned, planned_routes = _class_parts(mesh, conn)
    assert planned.by_name is not listeners.by_name and planned.by_name == listeners.by_name
    assert all(planned_routes.inputs[name] is not routes.inputs[name] for name in routes.inputs)
    assert planned_routes.inputs == routes.inputs


PRODUCTPAGE_REPLICA = """apiVersion: v1
kind: Pod
metadata:
  name: productpage-v1-1
  namespace: bookinfo
  labels: {app: productpage, version: v1, security.istio.io/tlsMode: istio}
spec:
  nodeName: worker-us-east1-b
  serviceAccountName: bookinfo-productpage
  containers:
  - name: productpage
    ports: [{containerPort: 9080, name: http}]
status:
  phase: Running
  podIP: 10.1.0.11
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: productpage-replica
  namespace: bookinfo
  labels: {kubernetes.io/service-name: productpage}
addressType: IPv4
ports: [{name: http, port: 9080, protocol: TCP}]
endpoints:
- addresses: [10.1.0.11]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: productpage-v1-1, namespace: bookinfo}
"""
REPLICA_NODE = "sidecar~10.1.0.11~productpage-v1-1.bookinfo~bookinfo.svc.cluster.local"
PRODUCTPAGE_POLICY = """apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: productpage, namespace: bookinfo, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  selector: {matchLabels: {app: productpage}}
  action: DENY
  rules: [{to: [{operation: {paths: [/admin]}}]}]
"""


def _inbound(mesh: Mesh, conn: DeltaConnection) -> list[Resource]:
    return [r for name, r in served(mesh, conn, LISTENER).items() if name.startswith("virtualInbound")]


def test_the_replicas_of_a_workload_share_one_inbound_build_per_snapshot() -> None:
    """Two pods of one Deployment (same labels and service targets, other IPs, ids and node
    metadata) get their inbound listeners from one build; a pod of another workload builds its
    own. A policy that selects them is built once for both again. Assertion mode builds each from
    the whole proxy and compares, so an input the narrowing dropped would fail here."""
    mesh = Mesh()
    mesh.apply(PRODUCTPAGE_REPLICA)
    labels = {"app": "productpage", "version": "v1", "security.istio.io/tlsMode": "istio"}
    first, second = (
        mesh.connect(node, listeners=True, labels=labels, metadata={"POD_NAME": node.split("~")[2]})[0]
        for node in (NODE, REPLICA_NODE)
    )
    other = mesh.connect("sidecar~10.1.0.20~details-v1-0.bookinfo~bookinfo.svc.cluster.local", listeners=True)[0]
    shared = _inbound(mesh, first)
    assert shared and all(a is b for a, b in zip(shared, _inbound(mesh, second), strict=True))
    assert not any(a is b for a in shared for b in _inbound(mesh, other))
    request = mesh.apply(PRODUCTPAGE_POLICY)
    sent = [r for conn in (first, second) for r in conn.on_push(request) if r.type_url == LISTENER]
    assert len(sent) == 2 and sent[0].resources[0] is sent[1].resources[0]
    assert sent[0].resources[0] is not shared[0]  # the policy's DENY is in the new build
