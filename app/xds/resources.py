"""xDS type URLs and the order ADS pushes them in.

Envoy wants clusters before their endpoints and listeners before their routes (the xDS
protocol doc, "eventual consistency considerations"), so a push walks ``ADS_ORDER``.
"""

from __future__ import annotations

CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"

ADS_ORDER: tuple[str, ...] = (CLUSTER, ENDPOINT, LISTENER, ROUTE)

SHORT_NAMES: dict[str, str] = {CLUSTER: "cds", ENDPOINT: "eds", LISTENER: "lds", ROUTE: "rds"}

# types whose clients subscribe by name; the others are wildcard (the whole set)
EXPLICIT_TYPES = frozenset({ENDPOINT, ROUTE})
