"""Field checks shared by the Istio kinds (spec.py, traffic.py, security.py) and the mesh config
(mesh.py), each named after the istiod helper it matches (pilot pkg/config/validation, its
agent package, pkg/config/labels). Each raises FieldError naming the field path; the caller
passes the path of the field it checks, with list indexes (``http[0].retries.perTryTimeout``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping

from google.protobuf import duration_pb2

from app.api import networking as net
from app.config.host import is_ip_address, validate_fqdn, validate_wildcard_host
from app.config.labels import REGION_LABEL, SUBZONE_LABEL, ZONE_LABEL
from app.errors import FieldError

PROTOCOLS = frozenset({"HTTP", "HTTPS", "HTTP2", "GRPC", "GRPC-WEB", "TCP", "TLS", "MONGO", "REDIS", "MYSQL", "UDP"})


def fail(path: str, reason: str) -> FieldError:
    return FieldError(path, reason)


def check_host(path: str, host: str, *, ip_ok: bool = False) -> None:
    if not host:
        raise fail(path, "is required")
    if ip_ok and is_ip_address(host):
        return
    reason = validate_wildcard_host(host)
    if reason:
        raise fail(path, reason)


def check_export_to(export_to: Iterable[str], path: str, namespace: str, *, none_ok: bool = False) -> None:
    seen: set[str] = set()
    values = list(export_to)
    for i, ns in enumerate(values):
        here = f"{path}[{i}]"
        same = namespace if ns == "." else ns  # "." and the object's own namespace are the same entry
        if same in seen:
            raise fail(here, f"duplicate entry {ns!r}")
        seen.add(same)
        if ns == "~" and not none_ok:
            raise fail(here, "'~' is only allowed for services")
        if ns in (".", "*", "~"):
            continue
        if validate_fqdn(ns) or "." in ns:
            raise fail(here, f"{ns!r} is not '.', '*' or a namespace name")
    if "~" in seen and len(values) > 1:
        raise fail(path, "'~' cannot be combined with other entries")
    if "*" in seen and len(values) > 1:
        raise fail(path, "'*' cannot be combined with other entries")


def check_port_number(path: str, number: int) -> None:
    """agent.ValidatePort."""
    if not 1 <= number <= 65535:
        raise fail(path, f"port {number} out of range 1-65535")


def check_protocol(path: str, protocol: str) -> None:
    if protocol.upper() not in PROTOCOLS:
        raise fail(path, f"unknown protocol {protocol!r}")


def check_address(path: str, address: str, *, cidr: bool) -> None:
    try:
        if cidr:
            ipaddress.ip_network(address, strict=False)
        else:
            ipaddress.ip_address(address)
    except ValueError:
        raise fail(path, f"{address!r} is not a valid IP {'address or CIDR' if cidr else 'address'}") from None


# --- durations and percentages ------------------------------------------------------------

_MS = 1_000_000  # nanoseconds


def _nanos(d: duration_pb2.Duration) -> int:
    return d.seconds * 1_000_000_000 + d.nanos


def check_duration(path: str, d: duration_pb2.Duration) -> None:
    """agent.ValidateDuration: at least 1ms, in whole milliseconds."""
    total = _nanos(d)
    if total < _MS:
        raise fail(path, "duration must be greater than 1ms")
    if total % _MS:
        raise fail(path, "only durations to ms precision are supported")


def check_connect_timeout(path: str, d: duration_pb2.Duration) -> None:
    """agent.ValidateConnectTimeout: ValidateDuration, and at most an hour."""
    check_duration(path, d)
    if _nanos(d) > 3600 * 1_000_000_000:
        raise fail(path, "must be between 1ms and 1h")


def check_percent(path: str, value: int) -> None:
    """ValidatePercent: an integer percentage."""
    if not 0 <= value <= 100:
        raise fail(path, f"must be between 0 and 100, got {value}")


def check_percentage(path: str, p: net.Percent) -> None:
    """validatePercentage: 0, or between 0.0001 and 100 (Envoy's finest fraction is a millionth)."""
    v = p.value  # finite: the schema takes no NaN or Infinity
    if not (v == 0 or 0.0001 <= v <= 100):
        raise fail(path, f"percentage {v:g} is neither 0.0, nor in range [0.0001, 100.0]")


# --- labels (pkg/config/labels) -------------------------------------------------------------

_DNS1123_LABEL = r"[a-zA-Z0-9](?:[-a-zA-Z0-9]*[a-zA-Z0-9])?"
_QUALIFIED_NAME = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY = re.compile(rf"((?:{_DNS1123_LABEL}(?:\.{_DNS1123_LABEL})*)/)?({_QUALIFIED_NAME})")
_LABEL_VALUE = re.compile(rf"(?:{_QUALIFIED_NAME})?")
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL)
DNS1123_LABEL_MAX = 63
_DNS_PREFIX_MAX = 253


def is_dns1123_label(text: str) -> bool:
    """labels.IsDNS1123Label."""
    return len(text) <= DNS1123_LABEL_MAX and _DNS1123_LABEL_RE.fullmatch(text) is not None


def check_labels(path: str, labels: Mapping[str, str]) -> None:
    """labels.Instance.Validate: every key a Kubernetes qualified name (an optional DNS prefix
    and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a
    letter or digit), every value empty or such a name (istiod does not cap its length)."""
    for key in sorted(labels):
        m = _LABEL_KEY.fullmatch(key)
        if m is None:
            reason = "want [prefix/]name, a name of letters, digits, '-', '_' or '.' that starts and ends with a "
            raise fail(path, f"invalid label key {quoted(key)}: {reason}letter or digit")
        if m.group(1) and len(m.group(1)) - 1 > _DNS_PREFIX_MAX:
            raise fail(path, f"invalid label key {quoted(key)}: the DNS prefix is longer than {_DNS_PREFIX_MAX}")
        if len(m.group(2)) > DNS1123_LABEL_MAX:
            raise fail(path, f"invalid label key {quoted(key)}: the name is longer than {DNS1123_LABEL_MAX}")
        value = labels[key]
        if _LABEL_VALUE.fullmatch(value) is None:
            reason = "want letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
            raise fail(f"{path}.{key}", f"invalid label value {quoted(value)}: {reason}")


def check_workload_selector(path: str, labels: Mapping[str, str]) -> None:
    """istiod validateWorkloadSelector and ValidateAlphaWorkloadSelector: no empty key and no
    ``*`` in a key or a value (a selector without labels is istiod's warning, not an error: it
    selects every workload of the namespace)."""
    if not labels:
        return
    for key in sorted(labels):
        value = labels[key]
        if not key:
            raise fail(path, f"empty key is not supported in selector: {quoted('=' + value)}")
        if "*" in key or "*" in value:
            raise fail(f"{path}.{key}", f"wildcard is not supported in selector: {quoted(f'{key}={value}')}")


def quoted(text: str, limit: int = 64) -> str:
    """A value as a rejection quotes it: repr'd, cut at ``limit`` characters."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


# --- locality load balancing (agent.ValidateLocalityLbSetting) -----------------------------

_TOPOLOGY_LABELS = (REGION_LABEL, ZONE_LABEL, SUBZONE_LABEL)


def check_locality_lb_setting(path: str, lls: net.LocalityLoadBalancerSetting) -> None:
    """agent.ValidateLocalityLbSetting: distribute or failover, not both; failover with
    failoverPriority naming no topology label; each distribute weight 1-100, totalling 100;
    localities well-formed and not overlapping; failover between distinct regions."""
    if lls.distribute and lls.failover:
        raise fail(path, "distribute and failover cannot both be set")
    if lls.failover:
        for i, label in enumerate(lls.failover_priority):
            if label in _TOPOLOGY_LABELS:
                raise fail(f"{path}.failoverPriority[{i}]", f"cannot name topology label {label!r} with failover set")
    for i, d in enumerate(lls.distribute):
        here = f"{path}.distribute[{i}]"
        for loc in sorted(d.to):
            if not 1 <= d.to[loc] <= 100:
                raise fail(f"{here}.to.{loc}", "locality weight must be in range [1, 100]")
        total = sum(d.to.values())
        if total != 100:
            raise fail(f"{here}.to", f"weights must total 100, got {total}")
        _check_localities(f"{here}.to", sorted(d.to))
    _check_localities(f"{path}.distribute", [getattr(d, "from") for d in lls.distribute])
    for i, f in enumerate(lls.failover):
        here = f"{path}.failover[{i}]"
        source, target = getattr(f, "from"), f.to
        if source == target:
            raise fail(here, "locality lb failover settings must specify different regions")
        if "/" in source or "/" in target:
            raise fail(here, "locality lb failover only specify region")
        if "*" in source or "*" in target:
            raise fail(here, "locality lb failover region should not contain '*' wildcard")


def _check_localities(path: str, localities: list[str]) -> None:
    """validateLocalities: ``region[/zone[/subzone]]`` with at most one trailing ``*``, none
    overlapping another (a region, then a zone of it)."""
    seen: dict[str, dict[str, set[str]]] = {}  # region -> zone -> subzones; "*" for all
    for locality in localities:
        stars = locality.count("*")
        if stars and (stars > 1 or not locality.endswith("*")):
            raise fail(path, f"locality {locality!r}: the wildcard '*' may appear once, at the end")
        overlap = fail(path, f"locality {locality!r} overlaps one given before")
        if "*" in seen:
            raise overlap
        items = locality.split("/", 2)
        if any(not item for item in items):
            raise fail(path, f"locality {locality!r} must not contain an empty region, zone or subzone")
        region = items[0]
        if len(items) == 1:
            if region in seen:
                raise overlap
            seen[region] = {"*": {"*"}}
            continue
        zones = seen.setdefault(region, {})
        if "*" in zones:
            raise overlap
        zone = items[1]
        if len(items) == 2:
            if zone in zones:
                raise overlap
            zones[zone] = {"*"}
            continue
        subzones = zones.setdefault(zone, set())
        if "*" in subzones or items[2] in subzones:
            raise overlap
        subzones.add(items[2])
