"""Fields Istio defines and istiod applies, that pilotfish accepts but does not apply yet.

Istio's CRDs and istiod take them, so refusing them would veto valid config cluster-wide; taking
them in silence would leave a user believing they are in force. An object that sets one is
admitted with a warning naming the field (``/debug/configz`` and the log), and everything else
in it applies. tests/unit/test_not_applied.py checks the table names real fields and holds every
field of Istio's kinds that pilotfish's code never names.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from app.api import networking as net
from app.api.istio.telemetry.v1alpha1 import telemetry_pb2 as tpb

# message full name -> field name -> what pilotfish does without it
NOT_APPLIED: Mapping[str, Mapping[str, str]] = {
    net.TrafficPolicy.DESCRIPTOR.full_name: {"tunnel": "no HTTP CONNECT tunneling clusters"},
    net.LoadBalancerSettings.DESCRIPTOR.full_name: {"zone_aware_lb_setting": "Envoy's zone-aware defaults"},
    # the Envoy API the data-plane-api Python package pins has no RetryBudget.budget_interval
    net.TrafficPolicy.RetryBudget.DESCRIPTOR.full_name: {"budget_interval": "Envoy's default interval"},
    tpb.Telemetry.DESCRIPTOR.full_name: {
        # istiod's stats filter (istio.stats) is Istio-proxy-only: pilotfish builds none
        "metrics": "no Istio stats filter: an upstream Envoy has none",
    },
    # the Envoy API the data-plane-api Python package pins has no Tracing.no_context_propagation
    tpb.Tracing.DESCRIPTOR.full_name: {"disable_context_propagation": "trace context is propagated"},
}


def not_applied(spec: Message) -> list[str]:
    """One line per field ``spec`` sets that pilotfish does not apply, by its JSON path."""
    out: list[str] = []
    _walk(spec, "", out)
    return out


def _walk(msg: Message, path: str, out: list[str]) -> None:
    skipped = NOT_APPLIED.get(msg.DESCRIPTOR.full_name, {})
    for fd, value in msg.ListFields():
        here = f"{path}.{fd.json_name}" if path else fd.json_name
        if fd.name in skipped:
            out.append(f"{here}: accepted, not applied by pilotfish yet ({skipped[fd.name]})")
            continue
        target = _message_of(fd)
        if target is None or not _reaches(target):
            continue
        if _is_map(fd):
            for key, item in value.items():
                _walk(item, f"{here}[{key}]", out)
        elif fd.is_repeated:
            for i, item in enumerate(value):
                _walk(item, f"{here}[{i}]", out)
        else:
            _walk(value, here, out)


def _is_map(fd: FieldDescriptor) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def _message_of(fd: FieldDescriptor) -> Descriptor | None:
    """The message a field holds (a map's value message), None for scalars."""
    message = fd.message_type
    if message is not None and message.GetOptions().map_entry:
        message = message.fields_by_name["value"].message_type
    return message


@functools.cache
def _reaches(desc: Descriptor, seen: frozenset[str] = frozenset()) -> bool:
    """Whether a message of this type can hold a field of the table (the walk skips the rest)."""
    if desc.full_name in NOT_APPLIED:
        return True
    inner = seen | {desc.full_name}
    return any(
        (t := _message_of(fd)) is not None and t.full_name not in inner and _reaches(t, inner) for fd in desc.fields
    )
