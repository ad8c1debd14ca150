"""xDS type URLs and the order ADS pushes them in.

Envoy wants clusters before their endpoints and listeners before their routes (the xDS
protocol doc, "eventual consistency considerations"), so a push walks ``ADS_ORDER``.
"""

from __future__ import annotations

CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
# Istio's Name Discovery Service: the DNS name table a node agent asks for (one unnamed resource)
NAME_TABLE = "type.googleapis.com/istio.networking.nds.v1.NameTable"
# a credentialName's certificates, asked for by name over ADS (istiod's SecretGen)
SECRET = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

# istiod's debug types (istio.io/debug/syncz, .../config_dump), asked for by istioctl; answered
# from the server's streams, outside any watch
DEBUG_PREFIX = "istio.io/debug"

ENVOY_TYPES = frozenset({CLUSTER, ENDPOINT, LISTENER, ROUTE})
# istiod pushes the types outside its Envoy order after the ordered ones
ADS_ORDER: tuple[str, ...] = (CLUSTER, ENDPOINT, LISTENER, ROUTE, SECRET, NAME_TABLE)

SHORT_NAMES: dict[str, str] = {
    CLUSTER: "cds",
    ENDPOINT: "eds",
    LISTENER: "lds",
    ROUTE: "rds",
    SECRET: "sds",
    NAME_TABLE: "nds",
}

# types whose clients subscribe by name; the others are wildcard (the whole set)
EXPLICIT_TYPES = frozenset({ENDPOINT, ROUTE, SECRET})
