"""What changed, for one push: ``PushRequest`` and why it was asked for (istiod model.PushRequest).

A pure value: the transport, the generators and the push filter read it; the push pipeline
(app/xds/push.py) merges and fans it out.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from app.config.objects import ConfigKey, Kind

_NO_REASONS: Mapping[str, int] = MappingProxyType({})
_NO_KEY_TYPES: Mapping[ConfigKey, frozenset[str]] = MappingProxyType({})


class TriggerReason(enum.StrEnum):
    """Why a push was requested; istiod's TriggerReason names, the keys of ``PushRequest.reasons``."""

    ENDPOINT = "endpoint"
    CONFIG = "config"
    PROXY = "proxy"  # istiod ProxyUpdate: a proxy's pod was relabelled
    UNKNOWN = "unknown"  # the Debouncer's label for a request that named none


UNKNOWN_REASON: Mapping[str, int] = MappingProxyType({TriggerReason.UNKNOWN.value: 1})


@dataclass(frozen=True, slots=True)
class PushRequest:
    """What changed, for one push; requests merge, so one push can answer many events.

    As istiod's ``ConfigsUpdated``, a full request names the config objects that changed as
    (kind, namespace, name) keys; a Service from any registry is named as
    ``(Service, namespace, hostname)``. A full request that names no keys means everything may
    have changed (a full rebuild). ``endpoint_services`` are the services whose endpoints
    changed (EDS); ``proxy_ips`` the workload IPs whose own service targets changed, whose
    proxies need their inbound config (istiod ``ProxyUpdate``); ``relabeled_pods`` the
    (namespace, name) of Pods whose labels changed (or that came): the proxies in them have
    their labels recomputed and everything they watch pushed (istiod ``ProxyUpdate``, a forced
    push to that proxy alone), whatever else the request says. ``key_types`` narrows, for some
    changed keys, the xDS types the change can affect below what their kind can (an update that
    left the parts other types read unchanged); a key it does not name affects what its kind
    does. ``start`` 0.0 means unknown, and merging keeps the oldest known start."""

    full: bool  # False: endpoints only (EDS fast path, no PushContext rebuild)
    configs_updated: frozenset[ConfigKey] = frozenset()
    endpoint_services: frozenset[tuple[str, str]] = frozenset()  # (hostname, namespace)
    proxy_ips: frozenset[str] = frozenset()
    relabeled_pods: frozenset[tuple[str, str]] = frozenset()
    key_types: Mapping[ConfigKey, frozenset[str]] = field(default_factory=lambda: _NO_KEY_TYPES, hash=False)
    reasons: Mapping[str, int] = field(default_factory=lambda: _NO_REASONS, hash=False)
    start: float = 0.0
    forced: bool = False  # push everything watched, changed or not
    # the observer's handles of the debounced pushes this request carries (app/xds/observe.py)
    traces: tuple[Hashable, ...] = field(default=(), compare=False, hash=False)
    # the snapshot versions of the debounced pushes it carries (/debug/push_status's history)
    pushes: tuple[int, ...] = field(default=(), compare=False, hash=False)

    @property
    def all_kinds(self) -> bool:
        """A full push that names no keys: treat every config object as changed."""
        return self.full and not self.configs_updated

    @property
    def config_kinds(self) -> frozenset[Kind]:
        """The kinds of the changed config keys."""
        return frozenset(key.kind for key in self.configs_updated)

    def merge(self, other: PushRequest) -> PushRequest:
        """Both requests in one (istiod PushRequest.Merge); the inputs are left unchanged."""
        if self.all_kinds or other.all_kinds:
            keys: frozenset[ConfigKey] = frozenset()  # "everything" absorbs any named keys
        else:
            keys = self.configs_updated | other.configs_updated
        reasons = dict(self.reasons)
        for reason, count in other.reasons.items():
            # counts add up, never dedupe: they feed per-reason push metrics
            reasons[reason] = reasons.get(reason, 0) + count
        return PushRequest(
            full=self.full or other.full,
            configs_updated=keys,
            endpoint_services=self.endpoint_services | other.endpoint_services,
            proxy_ips=self.proxy_ips | other.proxy_ips,
            relabeled_pods=self.relabeled_pods | other.relabeled_pods,
            key_types=_merge_key_types(self, other, keys),
            reasons=MappingProxyType(reasons),
            start=_oldest(self.start, other.start),
            forced=self.forced or other.forced,
            traces=self.traces + tuple(t for t in other.traces if t not in self.traces),
            pushes=self.pushes + tuple(v for v in other.pushes if v not in self.pushes),
        )


def _merge_key_types(a: PushRequest, b: PushRequest, keys: frozenset[ConfigKey]) -> Mapping[ConfigKey, frozenset[str]]:
    """A key stays narrowed only if every request naming it narrowed it: the union of those."""
    merged: dict[ConfigKey, frozenset[str]] = {}
    for key in keys:
        parts = [r.key_types.get(key) for r in (a, b) if key in r.configs_updated]
        narrowed = [p for p in parts if p is not None]
        if narrowed and len(narrowed) == len(parts):
            merged[key] = frozenset().union(*narrowed)
    return MappingProxyType(merged) if merged else _NO_KEY_TYPES


def _oldest(a: float, b: float) -> float:
    if not a:
        return b
    if not b:
        return a
    return min(a, b)
