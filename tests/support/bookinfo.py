"""The bookinfo example config (``examples/bookinfo``) as the xDS connection and server tests
serve it: its directory, the node id of the productpage sidecar, a cluster that sidecar gets, and
one more DestinationRule (for ``ratings``) whose arrival changes its clusters."""

from __future__ import annotations

from pathlib import Path

BOOKINFO = Path(__file__).parents[2] / "examples" / "bookinfo"
NODE = "sidecar~10.1.0.10~productpage-v1-0.bookinfo~bookinfo.svc.cluster.local"
REVIEWS = "outbound|9080||reviews.bookinfo.svc.cluster.local"
RATINGS = "outbound|9080||ratings.bookinfo.svc.cluster.local"
EXTRA_DR = """apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ratings-extra, namespace: bookinfo}
spec:
  host: ratings
  trafficPolicy: {connectionPool: {tcp: {maxConnections: 7}}}
"""
