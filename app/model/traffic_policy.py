"""MergeTrafficPolicy: which DestinationRule policy applies to one cluster, as istiod master's
util.MergeSubsetTrafficPolicy / GetPortLevelTrafficPolicy and model.MergeTrafficPolicy
(pilot/pkg/networking/util/util.go, pilot/pkg/model/destination_rule.go) decide it.

A port-level entry matching the cluster's port replaces the policy it belongs to by the four
blocks it can carry (connection pool, load balancer, outlier detection, TLS), unset ones at
their defaults, and nothing else: a destination's own port-level match drops its top-level
proxy protocol, tunnel and retry budget, while a subset's port-level match leaves the
destination's in force (the subset's top-level ones are then not read at all). Otherwise a
subset's settings replace the destination's block by block.
"""

from __future__ import annotations

from app.api import networking as net

_PARTS = ("connection_pool", "load_balancer", "outlier_detection", "tls")
# parts a top-level policy may set but a port-level entry cannot
_TOP_ONLY = ("proxy_protocol", "tunnel", "retry_budget")


def _port_level(policy: net.TrafficPolicy | None, port: int | None) -> tuple[net.TrafficPolicy | None, bool]:
    """The policy for ``port``: a matching port-level entry's four blocks alone (and True), else
    the policy itself (GetPortLevelTrafficPolicy)."""
    if policy is None or port is None:
        return policy, False
    for pls in policy.port_level_settings:
        if pls.HasField("port") and pls.port.number == port:
            out = net.TrafficPolicy()
            for part in _PARTS:
                if pls.HasField(part):
                    getattr(out, part).CopyFrom(getattr(pls, part))
            return out, True
    return policy, False


def merge_traffic_policy(
    original: net.TrafficPolicy | None, subset_policy: net.TrafficPolicy | None, port: int | None
) -> net.TrafficPolicy | None:
    """The policy for a cluster of ``port``: the destination's ``original`` and a subset's
    ``subset_policy`` (None for the destination's own cluster)."""
    original, _ = _port_level(original, port)
    if subset_policy is None:
        return original
    subset, port_level = _port_level(subset_policy, port)
    if original is None or subset is None:
        return subset
    merged = net.TrafficPolicy()
    for part in (*_PARTS, *_TOP_ONLY):  # ShallowCopyTrafficPolicy: no port-level settings
        if original.HasField(part):
            getattr(merged, part).CopyFrom(getattr(original, part))
    for part in _PARTS:
        if subset.HasField(part):
            getattr(merged, part).CopyFrom(getattr(subset, part))
        elif port_level:  # a port-level entry does not inherit: unset is the default
            merged.ClearField(part)
    for part in _TOP_ONLY:
        if subset.HasField(part):
            getattr(merged, part).CopyFrom(getattr(subset, part))
    return merged
