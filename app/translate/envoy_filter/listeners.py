"""EnvoyFilter patches to listeners (istiod envoyfilter/listener_patch.go): LISTENER,
LISTENER_FILTER, FILTER_CHAIN, NETWORK_FILTER and HTTP_FILTER patches, in that nesting, each
on what its match selects; ADDs after the existing items are patched."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from envoy.config.listener.v3.listener_components_pb2 import Filter, FilterChain, ListenerFilter
from envoy.config.listener.v3.listener_pb2 import Listener
from envoy.config.route.v3.route_pb2 import RouteConfiguration
from envoy.extensions.filters.network.http_connection_manager.v3.http_connection_manager_pb2 import (
    HttpConnectionManager,
    HttpFilter,
)

from app.model.envoy_filter import ApplyTo, ConfigPatch, MergedPatches, Operation
from app.translate.envoy_filter.common import (
    added,
    context_matches,
    copy_of,
    is_merge,
    list_operation,
    merge_value,
    replace_items,
)
from app.translate.envoy_filter.merge import merge_any

HCM = "envoy.filters.network.http_connection_manager"
_VIRTUAL = frozenset({"virtualInbound", "virtualOutbound"})
_HCM_TYPE = "type.googleapis.com/" + HttpConnectionManager.DESCRIPTOR.full_name
# what may patch listeners: a set without any of these needs no decoding
LISTENER_TYPES = (
    ApplyTo.LISTENER,
    ApplyTo.LISTENER_FILTER,
    ApplyTo.FILTER_CHAIN,
    ApplyTo.NETWORK_FILTER,
    ApplyTo.HTTP_FILTER,
)


def patches_listeners(patches: MergedPatches | None) -> bool:
    return patches is not None and any(patches.of(t) for t in LISTENER_TYPES)


def patch_listeners(
    context: int, patches: MergedPatches, listeners: Sequence[Listener], skip_adds: bool = False
) -> list[Listener]:
    """istiod ApplyListenerPatches on copies: each listener patched (REMOVE drops it), then the
    ADDed listeners of this context (none with ``skip_adds``, as for the virtual listeners)."""
    out = []
    for listener in listeners:
        copy = Listener()
        copy.CopyFrom(listener)
        if copy.name and _patch_listener(context, patches, copy):
            out.append(copy)
    if not skip_adds:
        out.extend(m for m in added(context, patches.of(ApplyTo.LISTENER)) if isinstance(m, Listener) and m.name)
    return out


def _patch_listener(context: int, patches: MergedPatches, listener: Listener) -> bool:
    """Patch ``listener`` in place; False when a patch removes it."""
    for patch in patches.of(ApplyTo.LISTENER):
        if not context_matches(context, patch) or not _listener_matches(listener, patch):
            continue
        if patch.operation == Operation.REMOVE:
            return False
        if is_merge(patch.operation):
            merge_value(patch, listener)
    _patch_listener_filters(context, patches.of(ApplyTo.LISTENER_FILTER), listener)
    _patch_filter_chains(context, patches, listener)
    return True


def _patch_listener_filters(context: int, patches: Sequence[ConfigPatch], listener: Listener) -> None:
    filters = listener.listener_filters
    for patch in patches:
        if not context_matches(context, patch) or not _listener_matches(listener, patch):
            continue
        wanted = patch.match.listener.listener_filter if patch.match.HasField("listener") else ""

        def found(f: ListenerFilter, name: str = wanted) -> bool:
            return bool(f.name == name)

        if patch.operation == Operation.MERGE:
            if wanted:
                for item in filters:  # every listener filter, as istiod's loop does
                    _merge_typed(item, patch.value, rename=False)
            continue
        replace_items(filters, list_operation(list(filters), patch.operation, bool(wanted), found, _maker(patch)))


def _patch_filter_chains(context: int, patches: MergedPatches, listener: Listener) -> None:
    kept = []
    for chain in listener.filter_chains:
        if len(chain.filters):
            _patch_filter_chain(context, patches, listener, chain)
        kept.append(chain)
    if listener.HasField("default_filter_chain") and len(listener.default_filter_chain.filters):
        _patch_filter_chain(context, patches, listener, listener.default_filter_chain)
        if not len(listener.default_filter_chain.filters):
            listener.ClearField("default_filter_chain")
    for patch in patches.of(ApplyTo.FILTER_CHAIN):
        if patch.operation == Operation.ADD and context_matches(context, patch) and _listener_matches(listener, patch):
            added = copy_of(patch)
            assert isinstance(added, FilterChain)
            kept.append(added)
    # a chain a patch removed (or one that had no filters) goes, as istiod filters them out
    replace_items(listener.filter_chains, [c for c in kept if len(c.filters)])


def _patch_filter_chain(context: int, patches: MergedPatches, listener: Listener, chain: FilterChain) -> None:
    for patch in patches.of(ApplyTo.FILTER_CHAIN):
        if not _applies(context, patch, listener, chain):
            continue
        if patch.operation == Operation.REMOVE:
            del chain.filters[:]
            return
        if is_merge(patch.operation) and not _merge_transport_socket(chain, patch):
            merge_value(patch, chain)
    _patch_network_filters(context, patches, listener, chain)


def _merge_transport_socket(chain: FilterChain, patch: ConfigPatch) -> bool:
    """mergeTransportSocketListener: a value with a transport socket merges into the chain's
    socket of the same name, and nothing else of it is merged; none of that name: the value is
    merged as a whole."""
    value = patch.value
    assert isinstance(value, FilterChain)
    if not value.HasField("transport_socket") or not chain.HasField("transport_socket"):
        return False
    if value.transport_socket.name != chain.transport_socket.name:
        return False
    socket = chain.transport_socket
    if socket.HasField("typed_config") and value.transport_socket.HasField("typed_config"):
        merged = merge_any(socket.typed_config, value.transport_socket.typed_config)
        if merged is None:
            return False
        socket.typed_config.CopyFrom(merged)
    return True


def _patch_network_filters(context: int, patches: MergedPatches, listener: Listener, chain: FilterChain) -> None:
    for patch in patches.of(ApplyTo.NETWORK_FILTER):
        if not _applies(context, patch, listener, chain):
            continue

        def found(f: Filter, p: ConfigPatch = patch) -> bool:
            return _network_filter_matches(f, p)

        items = list_operation(
            list(chain.filters), patch.operation, _has_network_filter_match(patch), found, _maker(patch)
        )
        replace_items(chain.filters, items)
    for item in chain.filters:
        _patch_network_filter(context, patches, listener, chain, item)


def _patch_network_filter(
    context: int, patches: MergedPatches, listener: Listener, chain: FilterChain, item: Filter
) -> None:
    for patch in patches.of(ApplyTo.NETWORK_FILTER):
        if (
            patch.operation == Operation.MERGE
            and _applies(context, patch, listener, chain)
            and _network_filter_matches(item, patch)
        ):
            _merge_typed(item, patch.value)
    if item.name == HCM:
        _patch_http_filters(context, patches, listener, chain, item)


def _patch_http_filters(
    context: int, patches: MergedPatches, listener: Listener, chain: FilterChain, item: Filter
) -> None:
    found_patches = [
        p
        for p in patches.of(ApplyTo.HTTP_FILTER)
        if _applies(context, p, listener, chain) and _network_filter_matches(item, p)
    ]
    if not found_patches:
        return
    manager = HttpConnectionManager()
    if item.HasField("typed_config"):
        if item.typed_config.type_url != _HCM_TYPE:
            return
        manager.ParseFromString(item.typed_config.value)
    items = list(manager.http_filters)
    for patch in found_patches:

        def found(f: HttpFilter, p: ConfigPatch = patch) -> bool:
            return _http_filter_matches(f, p)

        items = list_operation(items, patch.operation, _has_http_filter_match(patch), found, _maker(patch))
    for http_filter in items:
        for patch in found_patches:
            if patch.operation == Operation.MERGE and _http_filter_matches(http_filter, patch):
                _merge_typed(http_filter, patch.value)
    replace_items(manager.http_filters, items)
    if item.HasField("typed_config"):
        item.typed_config.Pack(manager, deterministic=True)


def _merge_typed(item: object, value: object, rename: bool = True) -> None:
    """A MERGE into a filter (listener, network or HTTP): the value's name replaces the filter's
    when set (not a listener filter's: istiod's mergeListenerFilter sets it on the value
    instead), its typed_config is merged into the filter's (MergeAnyWithAny; a filter without
    one is left alone, as istiod leaves it)."""
    if not item.HasField("typed_config"):  # type: ignore[attr-defined]
        return
    if rename and value.name:  # type: ignore[attr-defined]
        item.name = value.name  # type: ignore[attr-defined]
    if value.HasField("typed_config"):  # type: ignore[attr-defined]
        merged = merge_any(item.typed_config, value.typed_config)  # type: ignore[attr-defined]
        if merged is not None:
            item.typed_config.CopyFrom(merged)  # type: ignore[attr-defined]


def _maker(patch: ConfigPatch) -> Callable[[], object]:
    return lambda: copy_of(patch)


def _applies(context: int, patch: ConfigPatch, listener: Listener, chain: FilterChain) -> bool:
    """Whether a patch of a filter chain, or of a filter in it, applies there: its context,
    listener and filter chain match."""
    return (
        context_matches(context, patch)
        and _listener_matches(listener, patch)
        and _chain_matches(listener, chain, patch)
    )


def _listener_matches(listener: Listener, patch: ConfigPatch) -> bool:
    """istiod listenerMatch: the name, then (not for the virtual listeners, below LISTENER) the port."""
    if not patch.match.HasField("listener"):
        return True
    wanted = patch.match.listener
    if wanted.name and wanted.name != listener.name:
        return False
    if patch.apply_to != ApplyTo.LISTENER and listener.name in _VIRTUAL:
        return True
    if wanted.port_number:
        address = listener.address
        if not address.HasField("socket_address") or address.socket_address.port_value != wanted.port_number:
            return False
    return True


def _chain_matches(listener: Listener, chain: FilterChain, patch: ConfigPatch) -> bool:
    """istiod filterChainMatch."""
    if not patch.match.HasField("listener"):
        return True
    wanted = patch.match.listener
    match = chain.filter_chain_match
    has_match = chain.HasField("filter_chain_match")
    if listener.name in _VIRTUAL and wanted.port_number and match.destination_port.value != wanted.port_number:
        return False
    if not wanted.HasField("filter_chain"):
        return True
    fc = wanted.filter_chain
    if fc.name and fc.name != chain.name:
        return False
    if fc.sni and (not has_match or fc.sni not in match.server_names):
        return False
    if fc.transport_protocol and (not has_match or match.transport_protocol != fc.transport_protocol):
        return False
    if fc.application_protocols:
        if not has_match:
            return False
        if any(p not in match.application_protocols for p in fc.application_protocols.split(",")):
            return False
    if fc.destination_port > 0:
        if not has_match or not match.HasField("destination_port"):
            return False
        if match.destination_port.value != fc.destination_port:
            return False
    return True


def _has_network_filter_match(patch: ConfigPatch) -> bool:
    match = patch.match
    return (
        match.HasField("listener")
        and match.listener.HasField("filter_chain")
        and match.listener.filter_chain.HasField("filter")
    )


def _network_filter_matches(item: Filter, patch: ConfigPatch) -> bool:
    if not _has_network_filter_match(patch):
        return True
    return bool(patch.match.listener.filter_chain.filter.name == item.name)


def _has_http_filter_match(patch: ConfigPatch) -> bool:
    return _has_network_filter_match(patch) and patch.match.listener.filter_chain.filter.HasField("sub_filter")


def _http_filter_matches(item: HttpFilter, patch: ConfigPatch) -> bool:
    if not _has_http_filter_match(patch):
        return True
    return bool(patch.match.listener.filter_chain.filter.sub_filter.name == item.name)


def patch_inline_routes(listener: Listener, patch: Callable[[RouteConfiguration], RouteConfiguration]) -> Listener:
    """A copy of ``listener`` whose HTTP connection managers' inline route configurations are
    patched (a sidecar's inbound ones: istiod patches them as it builds them, before the
    listener's own patches)."""
    out = Listener()
    out.CopyFrom(listener)
    for chain in (*out.filter_chains, *([out.default_filter_chain] if out.HasField("default_filter_chain") else [])):
        for item in chain.filters:
            if item.name != HCM or not item.HasField("typed_config") or item.typed_config.type_url != _HCM_TYPE:
                continue
            manager = HttpConnectionManager.FromString(item.typed_config.value)
            if not manager.HasField("route_config"):
                continue
            manager.route_config.CopyFrom(patch(manager.route_config))
            item.typed_config.Pack(manager, deterministic=True)
    return out
