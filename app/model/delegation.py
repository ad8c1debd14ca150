"""VirtualService delegation: a root VirtualService's ``delegate`` routes replaced by the delegate's
routes merged into them, as istiod merges them (pilot/pkg/model/virtualservice.go MergeHTTPRoutes,
mergeHTTPMatchRequests, hasConflict; virtualservice_controller.go mergeVirtualServices).

Each delegate route's matches must each fall within one of the root route's matches (a leaf match
that conflicts with every root match drops that delegate route); a kept match takes what the root
match sets and it does not (headers, query params and source labels merged, the leaf winning), a
route takes the root's rewrite, direct response, timeout, retries, fault, mirrors, CORS and
headers where it sets none, and its name is ``ROOT-LEAF``. A delegate that does not exist, or is
not exported to the root's namespace, drops that root route only. Pure.
"""

from __future__ import annotations

from collections.abc import Callable

from app.api import networking as net

# what a delegate route takes from its root route when it sets none (mergeHTTPRoute)
_INHERITED = (
    "rewrite",
    "direct_response",
    "timeout",
    "retries",
    "fault",
    "mirror",
    "mirror_percent",
    "mirror_percentage",
    "cors_policy",
    "headers",
)
_STRING_MATCHES = ("uri", "scheme", "method", "authority")
_MAPS = ("headers", "without_headers", "query_params")


def _kind(m: net.StringMatch | None) -> tuple[str, str]:
    if m is None:
        return "", ""
    which = m.WhichOneof("match_type")
    return (which, getattr(m, which)) if which else ("", "")


def _string_conflict(root: net.StringMatch | None, leaf: net.StringMatch | None) -> bool:
    """istiod stringMatchConflict: whether ``leaf`` can match outside ``root``."""
    if root is None or leaf is None:
        return False
    (root_kind, root_value), (leaf_kind, leaf_value) = _kind(root), _kind(leaf)
    if root_kind == "regex" and leaf_kind in ("regex", "prefix", "exact"):
        return True
    if leaf_kind == "regex" and root_kind in ("regex", "prefix", "exact"):
        return True
    if root_kind == "exact":
        return leaf_kind == "prefix" or leaf_value != root_value or leaf_kind != "exact"
    if root_kind == "prefix" and leaf_kind in ("prefix", "exact"):
        return not leaf_value.startswith(root_value)
    return True


def _field(m: net.HTTPMatchRequest, name: str) -> net.StringMatch | None:
    return getattr(m, name) if m.HasField(name) else None


def _has_conflict(root: net.HTTPMatchRequest, leaf: net.HTTPMatchRequest) -> bool:
    for name in _STRING_MATCHES:
        if _string_conflict(_field(root, name), _field(leaf, name)):
            return True
    for name in _MAPS:
        root_map, leaf_map = getattr(root, name), getattr(leaf, name)
        for key, value in leaf_map.items():
            if _string_conflict(root_map.get(key), value):
                return True
    if root.ignore_uri_case != leaf.ignore_uri_case:
        return True
    if root.port and leaf.port and root.port != leaf.port:
        return True
    if root.source_namespace and leaf.source_namespace != root.source_namespace:
        return True
    if any(key in root.source_labels and root.source_labels[key] != v for key, v in leaf.source_labels.items()):
        return True
    # gateways: the root's must be a superset of the leaf's
    return bool(len(root.gateways) and len(leaf.gateways) and not set(leaf.gateways) <= set(root.gateways))


def _joined(root: str, leaf: str) -> str:
    if not leaf:
        return root
    return f"{root}-{leaf}" if root else leaf


def _merge_match(root: net.HTTPMatchRequest, leaf: net.HTTPMatchRequest) -> net.HTTPMatchRequest:
    out = net.HTTPMatchRequest()
    out.CopyFrom(leaf)
    out.name = _joined(root.name, leaf.name)
    for name in _STRING_MATCHES:
        if not out.HasField(name) and root.HasField(name):
            getattr(out, name).CopyFrom(getattr(root, name))
    for name in _MAPS:
        merged = getattr(out, name)
        for key, value in getattr(root, name).items():
            if key not in merged:
                merged[key].CopyFrom(value)
    for key, label in root.source_labels.items():
        out.source_labels.setdefault(key, label)
    if not out.port:
        out.port = root.port
    if not out.source_namespace:
        out.source_namespace = root.source_namespace
    if not len(out.gateways):
        out.gateways.extend(root.gateways)
    if not out.stat_prefix:
        out.stat_prefix = root.stat_prefix
    return out


def _merge_matches(
    root: list[net.HTTPMatchRequest], leaf: list[net.HTTPMatchRequest]
) -> list[net.HTTPMatchRequest] | None:
    """istiod mergeHTTPMatchRequests; None on a conflict (the delegate route is dropped)."""
    if not root:
        return leaf
    if not leaf:
        return root
    out = []
    for sub in leaf:
        found = [_merge_match(r, sub) for r in root if not _has_conflict(r, sub)]
        if not found:
            return None
        out.extend(found)
    return out or None


def merge_http_routes(root: net.HTTPRoute, delegate: list[net.HTTPRoute]) -> list[net.HTTPRoute]:
    """The delegate's routes merged into ``root`` (a delegate route that conflicts is left out)."""
    out = []
    for leaf in delegate:
        matches = _merge_matches(list(root.match), list(leaf.match))
        if matches is None:
            continue
        merged = net.HTTPRoute()
        merged.CopyFrom(leaf)
        del merged.match[:]
        merged.match.extend(matches)
        merged.name = _joined(root.name, leaf.name)
        for name in _INHERITED:
            if not merged.HasField(name) and root.HasField(name):
                getattr(merged, name).CopyFrom(getattr(root, name))
        if not len(merged.mirrors):
            merged.mirrors.extend(root.mirrors)
        out.append(merged)
    return out


def merge_delegates(
    spec: net.VirtualService,
    namespace: str,
    find: Callable[[str, str], net.VirtualService | None],
    visible: Callable[[str, str, str], bool],
) -> tuple[net.VirtualService, tuple[tuple[str, str], ...]]:
    """``spec`` (a resolved root VirtualService of ``namespace``) with its delegate routes merged,
    and the (namespace, name) of every delegate it names (found or not: a later one changes it).
    ``find(ns, name)``: the delegate's resolved spec; ``visible(ns, name, to)``: whether it is
    exported to the root's namespace."""
    out = net.VirtualService()
    out.CopyFrom(spec)
    del out.http[:]
    named: list[tuple[str, str]] = []
    for route in spec.http:
        if not route.HasField("delegate"):
            out.http.append(route)
            continue
        key = (route.delegate.namespace or namespace, route.delegate.name)
        named.append(key)
        found = find(*key)
        if found is None or not visible(key[0], key[1], namespace):
            continue  # istiod: only this route is left out
        root = net.HTTPRoute()
        root.CopyFrom(route)
        root.ClearField("delegate")
        out.http.extend(merge_http_routes(root, list(found.http)))
    return out, tuple(named)


def is_root(spec: net.VirtualService) -> bool:
    return any(route.HasField("delegate") for route in spec.http)

