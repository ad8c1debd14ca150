"""The push after a change, as data: the ``PushRequest`` a change makes and the build of the
snapshot that request leads to from the one served. ``Discovery`` runs them to push; the change
preview (app/preview/) runs the same two to compute a push it never publishes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import MappingProxyType

from app.environment import Change, Environment
from app.model.push_context import PushContext
from app.xds.needs_push import update_types
from app.xds.push_request import PushRequest, TriggerReason


def push_request(change: Change, events: int) -> PushRequest | None:
    """The request a change makes; the Debouncer stamps its start time."""
    delta = change.registry
    if change.configs:
        narrowed = {key: types for key, (old, new) in change.replaced.items() if (types := update_types(old, new))}
        return PushRequest(
            full=True,
            configs_updated=change.configs,
            endpoint_services=delta.endpoints_changed,
            proxy_ips=delta.target_ips,
            relabeled_pods=delta.relabeled_pods,
            key_types=MappingProxyType(narrowed),
            reasons={TriggerReason.CONFIG: events},
        )
    if delta.endpoints_changed or delta.target_ips:
        return PushRequest(
            full=False,
            endpoint_services=delta.endpoints_changed,
            proxy_ips=delta.target_ips,
            relabeled_pods=delta.relabeled_pods,
            reasons={TriggerReason.ENDPOINT: events},
        )
    if delta.relabeled_pods:
        # the proxies of relabelled pods alone: no snapshot change, a forced push to each
        return PushRequest(
            full=False, relabeled_pods=delta.relabeled_pods, reasons={TriggerReason.PROXY: len(delta.relabeled_pods)}
        )
    return None


def next_push_context(previous: PushContext, env: Environment, request: PushRequest) -> Callable[[], PushContext]:
    """The build of the snapshot after ``previous`` for ``request``: a full request rebuilds the
    slices its keys affect, an endpoint-only one reads the registry's new endpoints. The inputs
    (and the scope memo) are taken now, from ``env`` as it is; the returned build may run on
    another thread."""
    if request.full:
        keys = None if request.all_kinds else request.configs_updated
        return functools.partial(PushContext.build, previous, env.push_inputs(), keys, previous.scopes())
    return functools.partial(previous.with_endpoints, env.registry.snapshot())
