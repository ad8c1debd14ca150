"""The bad-input corpus: hostile versions of every kind pilotfish reads, as data.

Each ``Case`` names a kind, how to turn the file holding a good version of one object of that
kind into the bad state (a YAML text, raw bytes or a file-system state), and what must follow:
``rejected`` (one error line naming the file, and the object where its identity is readable;
the last good version stays in force), ``accepted`` (valid after all: the new version is in
force) or ``deleted`` (the file no longer holds the object, as istiod reads it too). A case
with ``gap`` is one pilotfish accepts and istiod (or, for Kubernetes kinds, the API server)
rejects; one with ``bug`` is rejected but its last good version is not what stays in force.
Both are marked xfail(strict) with that reason: the test asserts what istiod does.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

NS = "corpus"
GOOD, BAD = "good", "bad"
DELETE = object()  # as a value in a mutation: remove the key

# kind -> (Kind as pilotfish names it, namespaced)
KINDS: dict[str, tuple[str, bool]] = {
    "dr": ("DestinationRule", True),
    "vs": ("VirtualService", True),
    "se": ("ServiceEntry", True),
    "we": ("WorkloadEntry", True),
    "sidecar": ("Sidecar", True),
    "gw": ("Gateway", True),
    "pa": ("PeerAuthentication", True),
    "tel": ("Telemetry", True),
    "svc": ("Service", True),
    "pod": ("Pod", True),
    "eps": ("EndpointSlice", True),
    "ns": ("Namespace", False),
    "mesh": ("MeshConfig", False),
}


def good(kind: str, name: str, rv: str) -> dict[str, Any]:
    """A valid object of ``kind`` named ``name`` with resourceVersion ``rv``."""
    host = f"{name}.{NS}.svc.cluster.local"
    meta: dict[str, Any] = {"name": name, "namespace": NS, "resourceVersion": rv}
    networking = "networking.istio.io/v1"
    if kind == "dr":
        spec: dict[str, Any] = {
            "host": host,
            "trafficPolicy": {
                "loadBalancer": {"simple": "ROUND_ROBIN"},
                "connectionPool": {"tcp": {"connectTimeout": "5s"}, "http": {"http2MaxRequests": 100}},
                "outlierDetection": {"consecutive5xxErrors": 5, "interval": "10s", "maxEjectionPercent": 50},
            },
            "subsets": [{"name": "v1", "labels": {"version": "v1"}}],
        }
        return {"apiVersion": networking, "kind": "DestinationRule", "metadata": meta, "spec": spec}
    if kind == "vs":
        route = {
            "match": [{"uri": {"prefix": "/"}}],
            "route": [{"destination": {"host": host, "subset": "v1", "port": {"number": 80}}, "weight": 100}],
            "timeout": "5s",
            "retries": {"attempts": 3, "perTryTimeout": "2s"},
        }
        spec = {"hosts": [host], "http": [route]}
        return {"apiVersion": networking, "kind": "VirtualService", "metadata": meta, "spec": spec}
    if kind == "se":
        spec = {
            "hosts": [f"{name}.example.com"],
            "ports": [{"number": 443, "name": "tls", "protocol": "TLS"}],
            "resolution": "DNS",
            "location": "MESH_EXTERNAL",
        }
        return {"apiVersion": networking, "kind": "ServiceEntry", "metadata": meta, "spec": spec}
    if kind == "we":
        spec = {"address": "10.9.0.1", "labels": {"app": name}, "ports": {"http": 8080}}
        return {"apiVersion": networking, "kind": "WorkloadEntry", "metadata": meta, "spec": spec}
    if kind == "sidecar":
        spec = {"workloadSelector": {"labels": {"app": name}}, "egress": [{"hosts": ["./*", "istio-system/*"]}]}
        return {"apiVersion": networking, "kind": "Sidecar", "metadata": meta, "spec": spec}
    if kind == "gw":
        server = {"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": [f"{name}.example.com"]}
        spec = {"selector": {"istio": "ingressgateway"}, "servers": [server]}
        return {"apiVersion": networking, "kind": "Gateway", "metadata": meta, "spec": spec}
    if kind == "pa":
        spec = {"selector": {"matchLabels": {"app": name}}, "mtls": {"mode": "STRICT"}}
        return {"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication", "metadata": meta, "spec": spec}
    if kind == "tel":
        logs = {
            "providers": [{"name": "envoy"}],
            "match": {"mode": "SERVER"},
            "filter": {"expression": "response.code >= 400"},
        }
        spec = {"selector": {"matchLabels": {"app": name}}, "accessLogging": [logs]}
        return {"apiVersion": "telemetry.istio.io/v1", "kind": "Telemetry", "metadata": meta, "spec": spec}
    if kind == "svc":
        spec = {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
        return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}
    if kind == "pod":
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**meta, "labels": {"app": name}},
            "spec": {"serviceAccountName": name, "containers": [{"name": "app", "ports": [{"containerPort": 8080}]}]},
            "status": {"podIP": "10.8.0.1", "phase": "Running"},
        }
    if kind == "eps":
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {**meta, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.8.0.2"], "conditions": {"ready": True}}],
            "ports": [{"name": "http", "port": 8080}],
        }
    if kind == "ns":
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "resourceVersion": rv}}
    if kind == "mesh":
        # the mesh has one identity; its good version is told by its connect timeout
        timeout = "7s" if rv == GOOD else "9s"
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "istio", "namespace": "istio-system", "resourceVersion": rv},
            "data": {"mesh": f"rootNamespace: istio-system\nconnectTimeout: {timeout}\n"},
        }
    raise ValueError(kind)


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


def good_text(kind: str, name: str, rv: str = BAD) -> str:
    return dump(good(kind, name, rv))


def mutated(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``doc`` with the value at dotted ``path`` (``[i]`` indexes a list) replaced or removed."""
    out = copy.deepcopy(doc)
    parts = path.replace("[", ".[").split(".")
    here: Any = out
    for part in parts[:-1]:
        here = here[int(part[1:-1])] if part.startswith("[") else here[part]
    last = parts[-1]
    key: Any = int(last[1:-1]) if last.startswith("[") else last
    if value is DELETE:
        del here[key]
    else:
        here[key] = value
    return out


Make = Callable[[str, Path], None]  # (object name, case file) -> write the bad state


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    make: Make
    expect: str = "rejected"  # or "accepted", "deleted"
    says: str = ""  # a substring the error line holds: the field, or the reason
    names_object: bool = True  # the identity is readable: the line names kind and name
    gap: str = ""  # accepted by pilotfish, rejected by istiod: what istiod says
    bug: str = ""  # rejected, but the last good version is not kept: what happens instead


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_bytes(path: Path, data: bytes) -> None:
    """Replace the file atomically (a hidden temp file is not config), as editors and kubectl do."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def at(kind: str, id: str, path: str, value: Any, says: str = "", **kw: Any) -> Case:
    """The good object with one field replaced (or removed: ``DELETE``)."""

    def make(name: str, file: Path) -> None:
        write_text(file, dump(mutated(good(kind, name, BAD), path, value)))

    return Case(id, kind, make, says=says or path, **kw)


def text(kind: str, id: str, edit: Callable[[str], str], says: str = "", **kw: Any) -> Case:
    """The good object's YAML text, edited."""

    def make(name: str, file: Path) -> None:
        write_text(file, edit(good_text(kind, name)))

    return Case(id, kind, make, says=says, **kw)


def raw(kind: str, id: str, data: Callable[[str], bytes], says: str = "", **kw: Any) -> Case:
    def make(name: str, file: Path) -> None:
        write_bytes(file, data(good_text(kind, name)))

    return Case(id, kind, make, says=says, **kw)


def state(kind: str, id: str, act: Callable[[Path, str], None], says: str = "", **kw: Any) -> Case:
    """A file-system state of the case file (given the good object's text, to keep around)."""

    def make(name: str, file: Path) -> None:
        act(file, good_text(kind, name))

    return Case(id, kind, make, says=says, **kw)


# --- file-level inputs: the file is not read as YAML at all -------------------------------

FILE = {"names_object": False}


def _deep(text: str) -> str:
    return text.replace("spec:\n", "spec:\n  deep: " + "[" * 200 + "]" * 200 + "\n", 1)


def _bomb(text: str) -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        prev = "a" if i == 1 else f"l{i - 1}"
        refs = ", ".join([f"*{prev}"] * 10)
        lines.append(f"l{i}: &l{i} [{refs}]")
    return text + "bomb:\n" + "".join(f"  {line}\n" for line in lines)


def _dangling(file: Path, _: str) -> None:
    tmp = file.with_name(f".{file.name}.link")
    tmp.symlink_to(file.with_name("nowhere-at-all.yaml"))
    os.replace(tmp, file)


def _loop(file: Path, _: str) -> None:
    other = file.with_name(f"{file.stem}-loop.yml")
    other.symlink_to(file)
    tmp = file.with_name(f".{file.name}.link")
    tmp.symlink_to(other)
    os.replace(tmp, file)


def _unreadable(file: Path, text: str) -> None:
    if os.geteuid() != 0:
        write_text(file, text)
        file.chmod(0)
        return
    # root reads any mode: a link to a file every read of which fails (EIO) instead
    tmp = file.with_name(f".{file.name}.link")
    tmp.symlink_to("/proc/self/mem")
    os.replace(tmp, file)


def _fifo(file: Path, _: str) -> None:
    tmp = file.with_name(f".{file.name}.fifo")
    os.mkfifo(tmp)
    os.replace(tmp, file)


def _huge(file: Path, text: str) -> None:
    tmp = file.with_name(f".{file.name}.tmp")
    with tmp.open("wb") as f:
        f.write(text.encode())
        f.truncate(17 * 2**20)  # sparse: nothing more is written
    os.replace(tmp, file)


FILE_CASES = [
    text("dr", "yaml-unclosed-flow", lambda t: t + "extra: [unclosed\n", "invalid YAML", **FILE),
    text("vs", "yaml-tab-indentation", lambda t: t.replace("\n  ", "\n\t", 1), "invalid YAML", **FILE),
    text("se", "yaml-bad-indentation", lambda t: t.replace("\n  name:", "\n name:", 1), "invalid YAML", **FILE),
    text("we", "yaml-unterminated-quote", lambda t: t.replace("address: 10.9.0.1", 'address: "10.9.0.1'),
         "invalid YAML", **FILE),
    text("gw", "yaml-undefined-alias", lambda t: t.replace("protocol: HTTP", "protocol: *nope"), "undefined alias",
         **FILE),
    text("dr", "yaml-nested-200-levels", _deep, "nested deeper than 100 levels", **FILE),
    text("sidecar", "yaml-alias-bomb", _bomb, "expands to more than", **FILE),
    text("pa", "yaml-python-tag", lambda t: t + "x: !!python/object/apply:os.system [echo]\n", "invalid YAML", **FILE),
    text("svc", "yaml-unknown-local-tag", lambda t: t.replace("port: 80", "port: !port 80"), "invalid YAML", **FILE),
    text("pod", "yaml-merge-of-a-scalar", lambda t: t.replace("spec:\n", "spec:\n  <<: 5\n", 1), "for merging",
         **FILE),
    text("eps", "yaml-control-character", lambda t: t.replace("10.8.0.2", "10.8\x07.0.2"), "invalid YAML", **FILE),
    raw("ns", "bytes-invalid-utf8", lambda t: t.encode() + b"\xff\xfe\xfa\n", "cannot read file", **FILE),
    raw("dr", "bytes-latin1-label", lambda t: t.replace("version: v1", "version: v\xe9").encode("latin-1"),
        "cannot read file", **FILE),
    # pilotfish reads UTF-8 only; Go's YAML (istiod, kubectl) would also take UTF-16 with a BOM
    raw("vs", "bytes-utf16", lambda t: t.encode("utf-16"), "cannot read file", **FILE),
    raw("se", "bytes-binary", lambda _: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), "cannot read file",
        **FILE),
    state("we", "fs-dangling-symlink", _dangling, "cannot read file", **FILE),
    state("sidecar", "fs-symlink-loop", _loop, "cannot read file", **FILE),
    state("gw", "fs-unreadable", _unreadable, "cannot read file", **FILE),
    # a file's size is not bounded, a document's is (3 MiB, the API server's limit): this one
    # document grows to 17 MiB and is refused unread
    state("pa", "fs-17MiB-document", _huge, "more than the 3 MiB an object may hold, not read", **FILE),

    # never opened: a FIFO's open waits for a writer
    state("se", "fs-fifo", _fifo, "not a regular file (a FIFO)", **FILE),
]

# --- document-level: YAML, but not an object pilotfish can identify --------------------------

DOC = {"names_object": False}

DOCUMENT_CASES = [
    text("dr", "doc-a-list", lambda t: "- " + t.replace("\n", "\n  "), "a document must be an object", **DOC),
    text("vs", "doc-a-scalar", lambda _: "just some words\n", "a document must be an object", **DOC),
    at("se", "doc-no-kind", "kind", DELETE, "apiVersion/kind", **DOC),
    at("we", "doc-kind-a-list", "kind", ["WorkloadEntry"], "apiVersion/kind", **DOC),
    at("gw", "doc-no-apiversion", "apiVersion", DELETE, "apiVersion/kind", **DOC),
    at("sidecar", "doc-no-name", "metadata.name", DELETE, "metadata.name", **DOC),
    at("pa", "doc-name-an-int", "metadata.name", 12345, "metadata.name", **DOC),
    at("svc", "doc-metadata-a-list", "metadata", ["name", "x"], "metadata.name", **DOC),
    # a typo in the kind: a kind pilotfish does not read is skipped, as istiod's file reader
    # skips unrecognized types, so the file no longer holds the object
    at("dr", "doc-unknown-kind", "kind", "DestinationRul", expect="deleted"),
    # an empty file (or one of comments) holds nothing: its objects are deleted, not kept
    text("se", "doc-empty-file", lambda _: "", expect="deleted"),
    text("vs", "doc-only-separators-and-comments", lambda _: "# nothing\n---\n---\n", expect="deleted"),
]

# --- object-level: identified, then refused field by field ---------------------------------

OBJECT_CASES = [
    # identity and metadata
    at("dr", "meta-wrong-api-version", "apiVersion", "networking.istio.io/v2", "is not served"),
    # a kind is told by its API group: networking.istio.io has no PeerAuthentication, so this is no
    # kind pilotfish reads and the file no longer holds the object (istiod's file source skips it too)
    at("pa", "meta-pa-wrong-group", "apiVersion", "networking.istio.io/v1", expect="deleted"),
    at("eps", "meta-eps-wrong-version", "apiVersion", "discovery.k8s.io/v1beta2", "is not served"),
    at("pod", "meta-namespace-a-list", "metadata.namespace", ["a"], "metadata.namespace"),
    at("vs", "meta-label-an-int", "metadata.labels", {"version": 1}, "metadata.labels.version"),
    at("ns", "meta-labels-a-list", "metadata.labels", ["a", "b"], "metadata.labels"),
    at("se", "meta-annotations-a-string", "metadata.annotations", "x", "metadata.annotations"),
    at("gw", "meta-generation-a-string", "metadata.generation", "seven", "metadata.generation"),
    # DestinationRule
    at("dr", "dr-spec-missing", "spec", DELETE, "spec"),
    at("dr", "dr-spec-a-list", "spec", [1, 2], "expected an object"),
    # a field Istio does not define is ignored, with a warning, as istiod's file source ignores it
    # (jsonpb AllowUnknownFields); `pilotfish validate` refuses it, as istioctl validate does
    at("dr", "dr-unknown-field", "spec.hostt", "x", expect="accepted"),
    at("dr", "dr-unknown-nested-field", "spec.trafficPolicy.loadBalancer.foo", "bar", expect="accepted"),
    at("dr", "dr-host-a-list", "spec.host", ["a", "b"], "host: expected a string, got a list"),
    at("dr", "dr-host-a-bool", "spec.host", True, "host: expected a string, got true"),
    at("dr", "dr-host-empty", "spec.host", "", "host"),
    at("dr", "dr-host-invalid", "spec.host", "bad host!.example", "host"),
    at("dr", "dr-host-10k-chars", "spec.host", "a" * 10_000, "host"),
    at("dr", "dr-bad-enum", "spec.trafficPolicy.loadBalancer.simple", "ROUND_ROBINN", "loadBalancer"),
    at("dr", "dr-bad-duration", "spec.trafficPolicy.connectionPool.tcp.connectTimeout", "5 parsecs", "connectTimeout"),
    at("dr", "dr-duration-an-int", "spec.trafficPolicy.connectionPool.tcp.connectTimeout", 5,
       "connectTimeout: expected a duration such as 5s or 100ms, got 5"),
    at("dr", "dr-huge-int", "spec.trafficPolicy.outlierDetection.consecutive5xxErrors", 10**30, "consecutive5xxErrors"),
    at("dr", "dr-float-for-int", "spec.trafficPolicy.outlierDetection.maxEjectionPercent", 50.5,
       "maxEjectionPercent: expected an integer, got 50.5"),
    at("dr", "dr-ejection-over-100", "spec.trafficPolicy.outlierDetection.maxEjectionPercent", 101,
       "must be between 0 and 100"),
    at("dr", "dr-subsets-a-map", "spec.subsets", {"v1": {"labels": {}}}, "subsets"),
    at("dr", "dr-subset-null", "spec.subsets", [None], "subsets"),
    at("dr", "dr-duplicate-subset", "spec.subsets", [{"name": "v1"}, {"name": "v1"}], "duplicate subset name"),
    at("dr", "dr-subset-name-invalid", "spec.subsets[0].name", "V 1", "subsets[0].name"),
    at("dr", "dr-oneof-twice", "spec.trafficPolicy.loadBalancer.consistentHash", {"useSourceIp": True}, "loadBalancer"),
    at("dr", "dr-export-to-invalid", "spec.exportTo", ["not a namespace!"], "exportTo[0]"),
    at("dr", "dr-export-to-star-and-dot", "spec.exportTo", ["*", "."], "exportTo"),
    at("dr", "dr-mutual-without-certs", "spec.trafficPolicy.tls", {"mode": "MUTUAL"}, "tls.clientCertificate"),
    at("dr", "dr-distribute-not-100", "spec.trafficPolicy.loadBalancer.localityLbSetting",
       {"distribute": [{"from": "a/*", "to": {"a/*": 90}}]}, "weights must total 100"),
    # istiod validateConnectionPool: durations as ValidateDuration (at least 1ms), counts non-negative
    at("dr", "dr-negative-connect-timeout", "spec.trafficPolicy.connectionPool.tcp.connectTimeout", "-1s",
       "connectionPool.tcp.connectTimeout: duration must be greater than 1ms"),
    at("dr", "dr-negative-http2-max-requests", "spec.trafficPolicy.connectionPool.http.http2MaxRequests", -1,
       "connectionPool.http.http2MaxRequests: must be non-negative"),
    at("dr", "dr-keepalive-interval-0s", "spec.trafficPolicy.connectionPool.tcp", {"tcpKeepalive": {"interval": "0s"}},
       "tcp.tcpKeepalive.interval: duration must be greater than 1ms"),
    # istiod validateOutlierDetection
    at("dr", "dr-outlier-interval-0s", "spec.trafficPolicy.outlierDetection.interval", "0s",
       "outlierDetection.interval: duration must be greater than 1ms"),
    at("dr", "dr-outlier-ejection-time-sub-ms", "spec.trafficPolicy.outlierDetection.baseEjectionTime", "1.5ms",
       "outlierDetection.baseEjectionTime: only durations to ms precision"),
    # a key written twice is refused, naming it, as Kubernetes' strict decoding refuses it
    # (sigs.k8s.io/yaml YAMLToJSONStrict, kubectl's default): istiod's file reader would take the
    # last value, silently. The whole file keeps what it held, as for any YAML error
    text("dr", "dr-duplicate-key", lambda t: t.replace("  host: ", "  host: x.corpus.svc.cluster.local\n  host: ", 1),
         "duplicate key 'host'", **FILE),
    # istiod validateSubset: labels.Instance(subset.Labels).Validate()
    at("dr", "dr-subset-label-key-invalid", "spec.subsets[0].labels", {"bad key!": "v1"},
       "subsets[0].labels: invalid label key"),
    at("dr", "dr-subset-label-value-invalid", "spec.subsets[0].labels", {"version": "v 1"},
       "subsets[0].labels.version: invalid label value"),
    # VirtualService
    at("vs", "vs-no-routes", "spec.http", DELETE, "http, tcp or tls must be provided"),  # istiod's
    at("vs", "vs-bad-regex", "spec.http[0].match[0].uri", {"regex": "([a-z"}, "not a valid RE2 regex"),
    at("vs", "vs-empty-prefix", "spec.http[0].match[0].uri", {"prefix": ""}, "should not be empty"),
    at("vs", "vs-zero-total-weight", "spec.http[0].route",
       [{"destination": {"host": "a"}, "weight": 0}, {"destination": {"host": "b"}, "weight": 0}],
       "total destination weight"),
    at("vs", "vs-negative-weight", "spec.http[0].route[0].weight", -10, "weight"),
    at("vs", "vs-timeout-under-1ms", "spec.http[0].timeout", "0.5ms", "timeout"),
    at("vs", "vs-no-destination", "spec.http[0].route[0]", {"weight": 100}, "destination"),
    at("vs", "vs-gateways-without-hosts", "spec", {"gateways": ["gw"], "http": []}, "hosts"),
    at("vs", "vs-star-host-for-mesh", "spec.hosts", ["*"], "hosts[0]"),
    at("vs", "vs-status-600", "spec.http[0]", {"directResponse": {"status": 600}}, "directResponse.status"),
    at("vs", "vs-negative-retries", "spec.http[0].retries.attempts", -1, "retries.attempts"),
    at("vs", "vs-port-70000", "spec.http[0].route[0].destination.port.number", 70_000, "port"),
    at("vs", "vs-http-a-map", "spec.http", {"route": []}, "http"),
    # istiod validateHTTPRoute, validateHTTPMirrors, validateHTTPFaultInjection, agent.ValidateHTTPRetry
    at("vs", "vs-mirror-percent-150", "spec.http[0].mirrorPercentage", {"value": 150},
       "http[0].mirrorPercentage: mirror percentage must have a max value of 100"),
    at("vs", "vs-mirrors-percent-negative", "spec.http[0].mirrors",
       [{"destination": {"host": "m.corpus.svc.cluster.local"}, "percentage": {"value": -5}}],
       "http[0].mirrors[0].percentage: mirror percentage must have a min value of 0"),
    at("vs", "vs-fault-percent-200", "spec.http[0].fault", {"abort": {"httpStatus": 503, "percentage": {"value": 200}}},
       "http[0].fault.abort.percentage: percentage 200 is neither 0.0, nor in range [0.0001, 100.0]"),
    at("vs", "vs-fault-delay-0s", "spec.http[0].fault", {"delay": {"fixedDelay": "0s", "percentage": {"value": 5}}},
       "http[0].fault.delay.fixedDelay: duration must be greater than 1ms"),
    at("vs", "vs-per-try-timeout-0s", "spec.http[0].retries.perTryTimeout", "0s",
       "http[0].retries.perTryTimeout: duration must be greater than 1ms"),
    at("vs", "vs-retry-backoff-sub-ms", "spec.http[0].retries.backoff", "0.5ms",
       "http[0].retries.backoff: duration must be greater than 1ms"),
    # what one object may cost (issue 24, item 6): Envoy (re2.max_program_size.error_level 32768,
    # Istio's bootstrap) NACKs a regex past its program size; an object's regexes have a budget;
    # host overlaps are found without comparing every pair (thousands of hosts froze the loop)
    at("vs", "vs-regex-program-too-large", "spec.http[0].match[0].uri", {"regex": "\\pN{1000}"},
       "32768 instructions Envoy accepts"),
    at("vs", "vs-regexes-over-budget", "spec.http",
       [{"match": [{"uri": {"regex": f"/{i}/\\pN{{128}}"}}], "route": [{"destination": {"host": "a"}}]}
        for i in range(100)], "RE2 instructions together"),
    at("vs", "vs-thousands-of-hosts-one-overlap", "spec.hosts",
       [f"h{i}.example.com" for i in range(5000)] + ["*.example.com"],
       "hosts[5000]: '*.example.com' overlaps hosts[0]"),
    # ServiceEntry
    at("se", "se-port-0", "spec.ports[0].number", 0, "ports[0].number"),
    at("se", "se-port-70000", "spec.ports[0].number", 70_000, "ports[0].number"),
    at("se", "se-port-a-word", "spec.ports[0].number", "https", "ports[0].number: expected an integer, got 'https'"),
    # proto3 JSON takes a 64-bit-safe number as a string, as Go's jsonpb does: valid
    at("se", "se-port-a-quoted-number", "spec.ports[0].number", "443", expect="accepted"),
    at("se", "se-bad-resolution", "spec.resolution", "DNZ", "resolution"),
    at("se", "se-bad-location", "spec.location", "OUTSIDE", "location"),
    at("se", "se-no-hosts", "spec.hosts", [], "hosts"),
    at("se", "se-star-host", "spec.hosts", ["*"], "hosts[0]"),
    at("se", "se-bad-address", "spec.addresses", ["10.0.0.300"], "addresses[0]"),
    at("se", "se-duplicate-port", "spec.ports", [{"number": 443, "name": "a"}, {"number": 443, "name": "b"}],
       "port 443 already defined"),
    at("se", "se-unknown-protocol", "spec.ports[0].protocol", "FTP", "protocol"),
    # istiod ValidateServiceEntry, per resolution
    at("se", "se-none-with-endpoints", "spec", {"hosts": ["x.example.com"], "resolution": "NONE",
       "ports": [{"number": 80, "name": "http"}], "endpoints": [{"address": "10.0.0.1"}]},
       "no endpoints should be provided for resolution type NONE"),
    at("se", "se-cidr-with-dns", "spec.addresses", ["10.0.0.0/24"], "CIDR addresses are allowed only for NONE/STATIC"),
    at("se", "se-two-hosts-tcp-port", "spec", {"hosts": ["a.example.com", "b.example.com"], "resolution": "DNS",
       "ports": [{"number": 5432, "name": "tcp", "protocol": "TCP"}]},
       "multiple hosts provided with non-HTTP, non-TLS ports"),
    at("se", "se-dynamic-dns-exact-host", "spec.resolution", "DYNAMIC_DNS",
       "host must be wildcarded for resolution mode DYNAMIC_DNS"),
    at("se", "se-dynamic-dns-tcp-port", "spec", {"hosts": ["*.example.com"], "resolution": "DYNAMIC_DNS",
       "ports": [{"number": 5432, "name": "tcp", "protocol": "TCP"}]},
       "only HTTP, TLS, GRPC, and HTTP2 protocols are supported"),
    at("se", "se-port-name-not-a-label", "spec.ports[0].name", "TLS_PORT", "invalid port name"),
    at("se", "se-unix-endpoint-with-ports", "spec", {"hosts": ["x.example.com"], "resolution": "STATIC",
       "ports": [{"number": 80, "name": "http"}], "endpoints": [{"address": "unix:///var/run/x.sock",
       "ports": {"http": 8080}}]}, "must not include ports"),
    at("se", "se-static-hostname-endpoint", "spec", {"hosts": ["x.example.com"], "resolution": "STATIC",
       "ports": [{"number": 80, "name": "http"}], "endpoints": [{"address": "db.example.com"}]},
       "endpoints[0].address"),
    # WorkloadEntry
    at("we", "we-no-address", "spec.address", DELETE, "address"),
    at("we", "we-port-0", "spec.ports.http", 0, "ports.http"),
    at("we", "we-weight-2-to-the-32", "spec.weight", 2**32, "weight"),
    at("we", "we-address-invalid", "spec.address", "bad address!", "address"),
    at("we", "we-label-a-list", "spec.labels", {"app": ["a"]}, "labels.app: expected a string, got a list"),
    # a map written as a list: rejected naming the field, never an exception out of the loader
    at("we", "we-ports-a-list", "spec.ports", [{"http": 80}], "field ports: expected a map, got a list"),
    # istiod validateWorkloadEntry: labels.Instance(we.Labels).Validate()
    at("we", "we-label-key-invalid", "spec.labels", {"bad key!": "a"}, "labels: invalid label key"),
    # Sidecar
    at("sidecar", "sidecar-no-egress-hosts", "spec.egress[0].hosts", [], "egress[0].hosts"),
    at("sidecar", "sidecar-egress-port-0", "spec.egress[0].port", {"number": 0, "name": "x"}, "egress[0].bind"),
    at("sidecar", "sidecar-two-portless-egress", "spec.egress", [{"hosts": ["./*"]}, {"hosts": ["*/*"]}], "egress"),
    at("sidecar", "sidecar-bind-not-an-ip", "spec.egress[0]", {"hosts": ["./*"], "port": {"number": 80, "name": "h",
       "protocol": "HTTP"}, "bind": "not-an-ip"}, "bind"),
    at("sidecar", "sidecar-bad-traffic-mode", "spec.outboundTrafficPolicy", {"mode": "ALLOW_SOME"},
       "outboundTrafficPolicy"),
    # istiod ValidateSidecar only warns that an empty workloadSelector applies to the whole namespace
    at("sidecar", "sidecar-empty-selector", "spec.workloadSelector.labels", {}, expect="accepted"),
    at("sidecar", "sidecar-egress-proxy-registry-only", "spec.outboundTrafficPolicy",
       {"mode": "REGISTRY_ONLY", "egressProxy": {"host": "egress.example", "port": {"number": 443}}},
       "outboundTrafficPolicy.egressProxy"),
    # accepted with the entry skipped: istiod's webhook (ValidateSidecar) refuses the whole Sidecar ("host must
    # be of form namespace/dnsName"), but istiod's SidecarScope (sidecar.go), reading what got past a webhook,
    # skips the entry with a warning and keeps the rest. Files have no webhook, so pilotfish does as the scope
    # does (commit 11db1c1, app/model/sidecar_scope.py parse_egress_hosts): one bad entry does not take the
    # whole Sidecar away
    at("sidecar", "sidecar-host-without-namespace", "spec.egress[0].hosts", ["foo.example.com"], expect="accepted"),
    # Gateway
    at("gw", "gw-port-name-missing", "spec.servers[0].port.name", DELETE, "servers[0].port.name"),  # istiod's
    at("gw", "gw-no-servers", "spec.servers", [], "servers"),
    at("gw", "gw-server-without-port", "spec.servers[0].port", DELETE, "servers[0].port"),
    at("gw", "gw-https-without-tls", "spec.servers[0].port", {"number": 443, "name": "https", "protocol": "HTTPS"},
       "servers[0].tls"),
    at("gw", "gw-unknown-protocol", "spec.servers[0].port.protocol", "FTP", "protocol"),
    at("gw", "gw-empty-host-after-namespace", "spec.servers[0].hosts", ["ns/"], "hosts[0]"),
    at("gw", "gw-selector-value-an-int", "spec.selector", {"istio": 1}, "selector.istio: expected a string, got 1"),
    at("gw", "gw-selector-a-list", "spec.selector", [{"istio": "ingressgateway"}], "selector: expected a map"),

    # PeerAuthentication
    at("pa", "pa-empty-port-level-mtls", "spec.portLevelMtls", {}, "portLevelMtls: must not be empty"),  # the CRD's
    at("pa", "pa-bad-mode", "spec.mtls.mode", "SORTOF", "mtls"),
    at("pa", "pa-port-level-without-selector", "spec", {"mtls": {"mode": "STRICT"},
       "portLevelMtls": {"8080": {"mode": "DISABLE"}}}, "portLevelMtls"),
    at("pa", "pa-port-0", "spec.portLevelMtls", {"0": {"mode": "DISABLE"}}, "portLevelMtls"),
    # istiod treats an empty selector as namespace-wide (and warns)
    at("pa", "pa-empty-match-labels", "spec.selector.matchLabels", {}, expect="accepted"),
    # Telemetry
    at("tel", "tel-empty-provider", "spec.accessLogging[0].providers[0].name", "", "providers[0].name"),
    at("tel", "tel-unbalanced-filter", "spec.accessLogging[0].filter.expression", "has(request.headers", "expression"),
    at("tel", "tel-mode-sometimes", "spec.accessLogging[0].match.mode", "SOMETIMES", "match.mode"),
    at("tel", "tel-sampling-200", "spec.tracing", [{"randomSamplingPercentage": 200}], "randomSamplingPercentage"),
    at("tel", "tel-access-logging-a-map", "spec.accessLogging", {"providers": []}, "accessLogging"),
    # a provider the mesh config does not define logs nothing, as istiod
    at("tel", "tel-unknown-provider", "spec.accessLogging[0].providers[0].name", "nowhere", expect="accepted"),
    # Service
    at("svc", "svc-port-70000", "spec.ports[0].port", 70_000, "spec.ports[0].port"),
    at("svc", "svc-port-a-name", "spec.ports[0].port", "http", "spec.ports[0].port"),
    at("svc", "svc-bad-type", "spec.type", "Balancer", "spec.type"),
    at("svc", "svc-unnamed-ports", "spec.ports", [{"port": 80}, {"port": 81}], "name"),
    at("svc", "svc-spec-a-list", "spec", [], "spec"),
    at("svc", "svc-target-port-a-bool", "spec.ports[0].targetPort", True, "targetPort"),
    at("svc", "svc-selector-a-list", "spec.selector", ["app"], "spec.selector"),
    at("svc", "svc-external-name-missing", "spec.type", "ExternalName", "spec.externalName"),
    # as the Kubernetes API server: a clusterIP is an IP, "None" or ""
    at("svc", "svc-cluster-ip-invalid", "spec.clusterIP", "banana", "spec.clusterIP: 'banana' is not a valid IP"),
    at("svc", "svc-cluster-ips-invalid", "spec.clusterIPs", ["10.0.0.1", "fd00::x"], "spec.clusterIPs[1]"),
    at("svc", "svc-headless", "spec.clusterIP", "None", expect="accepted"),
    # Pod
    at("pod", "pod-container-port-0", "spec.containers[0].ports[0].containerPort", 0, "containerPort"),
    at("pod", "pod-containers-a-map", "spec.containers", {"app": {}}, "spec.containers"),
    at("pod", "pod-pod-ips-a-string", "status.podIPs", "10.0.0.1", "status.podIPs"),
    # as the Kubernetes API server: pod IPs are IPs
    at("pod", "pod-ip-invalid", "status.podIP", "banana", "status.podIP: 'banana' is not a valid IP"),
    at("pod", "pod-ips-entry-invalid", "status.podIPs", [{"ip": "10.8.0.1"}, {"ip": "banana"}],
       "status.podIPs[1].ip"),
    # EndpointSlice
    at("eps", "eps-no-service-label", "metadata.labels", {}, "kubernetes.io/service-name"),
    at("eps", "eps-bad-address-type", "addressType", "IPv5", "addressType"),
    at("eps", "eps-endpoint-without-addresses", "endpoints[0].addresses", [], "endpoints[0].addresses"),
    at("eps", "eps-port-0", "ports[0].port", 0, "ports[0].port"),
    at("eps", "eps-ready-a-string", "endpoints[0].conditions.ready", "yes", "conditions.ready"),
    # as the Kubernetes API server: addresses of the slice's addressType
    at("eps", "eps-address-invalid", "endpoints[0].addresses", ["banana"], "endpoints[0].addresses[0]"),
    at("eps", "eps-ipv6-address-in-ipv4-slice", "endpoints[0].addresses", ["fd00::1"],
       "endpoints[0].addresses[0]: 'fd00::1' is not a valid IPv4 address"),
    # Namespace
    at("ns", "ns-label-a-map", "metadata.labels", {"team": {"a": "b"}}, "metadata.labels.team"),
    # mesh config (the istio ConfigMap's `mesh` key)
    at("mesh", "mesh-invalid-yaml", "data.mesh", "connectTimeout: [7s\n", "data.mesh: invalid YAML at line 2"),
    at("mesh", "mesh-a-list", "data.mesh", "- a\n- b\n", "mesh config must be an object"),
    at("mesh", "mesh-empty-root-namespace", "data.mesh", "rootNamespace: ''\n", "rootNamespace"),
    at("mesh", "mesh-bad-duration", "data.mesh", "connectTimeout: soon\n", "connectTimeout"),
    at("mesh", "mesh-bad-traffic-mode", "data.mesh", "outboundTrafficPolicy: {mode: SOMETIMES}\n",
       "outboundTrafficPolicy"),
    at("mesh", "mesh-data-a-list", "data", ["mesh"], "field data: expected an object, got a list"),
    at("mesh", "mesh-value-a-map", "data.mesh", {"rootNamespace": "x"}, "data.mesh"),
    # istiod ValidateMeshConfig (run on the mesh config merged over the defaults)
    at("mesh", "mesh-connect-timeout-0s", "data.mesh", "connectTimeout: 0s\n",
       "connectTimeout: duration must be greater than 1ms"),
    at("mesh", "mesh-connect-timeout-2h", "data.mesh", "connectTimeout: 2h\n", "connectTimeout: must be between"),
    at("mesh", "mesh-bad-trust-domain-alias", "data.mesh", "trustDomainAliases: [ok.local, 'bad domain']\n",
       "trustDomainAliases[1]"),
    at("mesh", "mesh-locality-failover-same-region", "data.mesh",
       "localityLbSetting: {failover: [{from: us-east, to: us-east}]}\n", "localityLbSetting.failover[0]"),
    # valid after all: a BOM and CRLF line ends are YAML
    raw("dr", "bytes-utf8-bom", lambda t: b"\xef\xbb\xbf" + t.encode(), expect="accepted"),
    raw("svc", "bytes-crlf", lambda t: t.replace("\n", "\r\n").encode(), expect="accepted"),
]

CASES: list[Case] = FILE_CASES + DOCUMENT_CASES + OBJECT_CASES
