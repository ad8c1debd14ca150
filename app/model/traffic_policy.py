"""MergeTrafficPolicy: which DestinationRule policy applies to one cluster.

Subset settings replace the rule's settings part by part (connection pool, load balancer,
outlier detection, TLS, proxy protocol, tunnel); then a port-level entry for the cluster's port
replaces every part at once, as istiod does: port-level settings do not inherit, an unset
part (and proxy protocol, tunnel and retry budget, which a port-level entry cannot set) falls
back to defaults (pilot/pkg/networking/util MergeTrafficPolicy). A subset
cluster starts from the rule's policy with the rule's own port-level entry already applied.
"""

from __future__ import annotations

from app.api import networking_pb2 as net

_PARTS = ("connection_pool", "load_balancer", "outlier_detection", "tls")
# parts a subset may override but a port-level entry cannot set
_TOP_ONLY = ("proxy_protocol", "tunnel", "retry_budget")


def merge_traffic_policy(
    original: net.TrafficPolicy | None, subset_policy: net.TrafficPolicy | None, port: int | None
) -> net.TrafficPolicy | None:
    """The policy for a cluster of ``port``; ``subset_policy`` is the subset's, or the rule's
    own policy again for the default cluster (then its portLevelSettings apply)."""
    if original is not None and original.port_level_settings:
        # a subset cluster starts from the rule's policy as already resolved for this port
        # (all it gets, when it has no policy of its own)
        original = merge_traffic_policy(None, original, port)
    if subset_policy is None:
        return original
    merged = net.TrafficPolicy()
    if original is not None:
        for part in (*_PARTS, *_TOP_ONLY):
            if original.HasField(part):
                getattr(merged, part).CopyFrom(getattr(original, part))
    for part in (*_PARTS, *_TOP_ONLY):
        if subset_policy.HasField(part):
            getattr(merged, part).CopyFrom(getattr(subset_policy, part))
    if port is not None:
        for pls in subset_policy.port_level_settings:
            if pls.HasField("port") and pls.port.number == port:
                for part in _PARTS:
                    if pls.HasField(part):
                        getattr(merged, part).CopyFrom(getattr(pls, part))
                    else:
                        merged.ClearField(part)
                for part in _TOP_ONLY:  # a port-level entry cannot carry these, so they fall back too
                    merged.ClearField(part)
                break
    return merged
