"""Fuzzing, in bounded time (hypothesis): no input makes the YAML loader or an xDS stream's
handlers raise anything but their documented errors.

* ``load_documents`` / ``load_mesh_file`` / ``load_object`` on random text, YAML-ish token soup,
  and random objects shaped by the real Istio message descriptors (right and wrong types at
  every level): always a LoadResult, every rejection one line naming its source, in words a
  user reads (no Python internals, never the loader's internal-error net);
* a Connection (SotW and Delta, ADS and per-type) fed random DiscoveryRequest /
  DeltaDiscoveryRequest sequences and pushes: responses, or ProtocolError;
* the node a first request carries: a Proxy, or InvalidNodeError;
* request bytes as the server parses them: a message, or Undecodable.

Example counts are small and fixed so the module runs in seconds; under CI the examples are
derandomized, so a run is repeatable (a failure prints the example to reproduce it).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from typing import Any

import yaml
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.api import networking as net
from app.api import security as sec
from app.config.loader import LoadResult, load_documents, load_mesh_file, load_object
from app.model.proxy import InvalidNodeError, build_proxy
from app.xds.connection import Connection
from app.xds.delta import DeltaSession
from app.xds.errors import ProtocolError
from app.xds.mesh_source import proxy_from_node
from app.xds.push_request import PushRequest
from app.xds.server import Undecodable, _parser
from app.xds.sotw import SotwSession
from app.xds.type_urls import CLUSTER, ENDPOINT, LISTENER, NAME_TABLE, ROUTE
from app.xds.watch import counter_nonces
from tests.support.bookinfo import NODE, RATINGS, REVIEWS
from tests.support.bookinfo_mesh import Mesh

FUZZ = settings(
    # PILOTFISH_FUZZ_EXAMPLES=5000 for a longer hunt; the suite's runs stay within seconds
    max_examples=int(os.environ.get("PILOTFISH_FUZZ_EXAMPLES", "200")),
    deadline=None,
    database=None,  # nothing written to the work tree
    derandomize=os.environ.get("CI") == "true",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
SOURCE = "fuzz.yaml"

# --- YAML loader --------------------------------------------------------------------------

ISTIO_MESSAGES: dict[str, tuple[str, Any]] = {
    "DestinationRule": ("networking.istio.io/v1", net.DestinationRule),
    "VirtualService": ("networking.istio.io/v1beta1", net.VirtualService),
    "ServiceEntry": ("networking.istio.io/v1alpha3", net.ServiceEntry),
    "WorkloadEntry": ("networking.istio.io/v1", net.WorkloadEntry),
    "Sidecar": ("networking.istio.io/v1", net.Sidecar),
    "Gateway": ("networking.istio.io/v1", net.Gateway),
    "PeerAuthentication": ("security.istio.io/v1", sec.PeerAuthentication),
}
KUBE_KINDS = {
    "Service": "v1",
    "Pod": "v1",
    "Namespace": "v1",
    "ConfigMap": "v1",
    "EndpointSlice": "discovery.k8s.io/v1",
}
KUBE_FIELDS = [
    "spec", "status", "ports", "port", "targetPort", "name", "selector", "clusterIP", "clusterIPs", "type",
    "containers", "containerPort", "podIP", "podIPs", "ip", "phase", "conditions", "ready", "endpoints",
    "addresses", "addressType", "targetRef", "data", "mesh", "labels", "externalName", "serviceAccountName",
]  # fmt: skip
STRINGS = [
    "", "*", "5s", "-1s", "0s", "1h30m", "250ms", "1.5", "ROUND_ROBIN", "HTTP", "TLS", "STRICT", "DNS", "STATIC",
    "10.0.0.1", "::1", "10.0.0.0/8", "a/b", "./*", "*/*", "~", ".", "reviews", "reviews.bookinfo.svc.cluster.local",
    "*.example.com", "([a-z", "^/api", "None", "IPv4", "True", "v1", "8080", "http", "0x1F", "\u00e9\u00e8", "a" * 300,
]  # fmt: skip
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(STRINGS),
    st.text(max_size=12),
)


@functools.cache
def field_names() -> list[str]:
    """Every JSON field name of the Istio messages: random keys then reach real fields."""
    names: set[str] = set(KUBE_FIELDS)
    seen: set[str] = set()

    def walk(desc: Descriptor) -> None:
        if desc.full_name in seen:
            return
        seen.add(desc.full_name)
        for fd in desc.fields:
            names.add(fd.json_name)
            if fd.message_type is not None:
                walk(fd.message_type)

    for _, message in ISTIO_MESSAGES.values():
        walk(message.DESCRIPTOR)
    return sorted(names)


keys = st.one_of(st.sampled_from(field_names()), st.text(max_size=8), st.integers(-3, 3))
json_like = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=5)),
    max_leaves=25,
)


def value_for(fd: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    """A value for one field: mostly of its type, sometimes anything (a wrong type)."""
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        inner = value_for(fd.message_type.fields_by_name["value"], depth + 1)
        map_keys = st.one_of(st.sampled_from(STRINGS), st.text(max_size=6))
        typed: st.SearchStrategy[Any] = st.dictionaries(map_keys, inner, max_size=3)
    else:
        if fd.message_type is not None:
            name = fd.message_type.full_name
            if name == "google.protobuf.Duration":
                one: st.SearchStrategy[Any] = st.sampled_from(["5s", "1ms", "0.5ms", "-1s", "0s", "1h", "x", "5"])
            elif name.startswith("google.protobuf."):
                one = json_like
            elif depth >= 4:
                one = st.just({})
            else:
                one = message_dict(fd.message_type, depth + 1)
        elif fd.enum_type is not None:
            labels = [v.name for v in fd.enum_type.values]
            one = st.one_of(st.sampled_from(labels), st.integers(-1, 5), st.text(max_size=6))
        elif fd.type == FieldDescriptor.TYPE_BOOL:
            one = st.booleans()
        elif fd.type == FieldDescriptor.TYPE_STRING:
            one = st.one_of(st.sampled_from(STRINGS), st.text(max_size=12))
        elif fd.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
            one = st.floats(allow_nan=True, allow_infinity=True)
        else:
            one = st.one_of(st.integers(-(2**33), 2**33), st.sampled_from([0, 1, 80, 65535, 65536, "80", "x"]))
        typed = st.lists(one, max_size=3) if fd.is_repeated else one
    return st.one_of(typed, typed, typed, json_like)  # a wrong type one time in four


@functools.cache
def message_dict(desc: Descriptor, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Some of the message's fields (by JSON name), each with a value from ``value_for``."""

    def field(fd: FieldDescriptor) -> st.SearchStrategy[Any]:
        return st.deferred(lambda: value_for(fd, depth))  # built when first drawn: messages nest

    return st.fixed_dictionaries({}, optional={fd.json_name: field(fd) for fd in desc.fields})


@st.composite
def objects(draw: st.DrawFn) -> dict[str, Any]:
    """A Kubernetes-style object of a kind pilotfish reads, with a random body."""
    kind = draw(st.sampled_from([*ISTIO_MESSAGES, *KUBE_KINDS]))
    if kind in ISTIO_MESSAGES:
        api_version, message = ISTIO_MESSAGES[kind]
        body: dict[str, Any] = {"spec": draw(message_dict(message.DESCRIPTOR))}
    else:
        api_version = KUBE_KINDS[kind]
        body = draw(st.dictionaries(st.sampled_from(KUBE_FIELDS), json_like, max_size=4))
    meta = draw(
        st.fixed_dictionaries(
            {"name": st.one_of(st.just("x"), st.sampled_from(["istio", "a.b", ""]), scalars)},
            optional={
                "namespace": st.one_of(st.sampled_from(["istio-system", "bookinfo"]), scalars),
                "labels": json_like,
                "annotations": json_like,
                "generation": scalars,
                "creationTimestamp": scalars,
            },
        )
    )
    doc = {"apiVersion": draw(st.one_of(st.just(api_version), st.text(max_size=8))), "kind": kind, "metadata": meta}
    return {**doc, **body}


YAML_TOKENS = [
    ":", ": ", " ", "\n", "  ", "- ", "---\n", "...\n", "[", "]", "{", "}", ",", "&a ", "*a", "&b ", "*b", "!!str ",
    "!!binary ", "!!python/name:os.system ", "!x ", "<<: ", "<<: *a", "? ", "|\n", ">-\n", "'", '"', "#", "\t",
    "%YAML 1.1\n", "%TAG ! tag:x,2000:\n", "~", "null", "true", "yes", "0x1F", "0o17", "1e999", "-.inf", ".nan",
    "2001-12-14t21:59:43.10-05:00", "=", "kind: ", "apiVersion: ", "metadata:\n  name: x\n", "spec:\n",
    "DestinationRule", "Service", "ConfigMap", "networking.istio.io/v1", "v1", "host: ", "ports: ", "\ufeff", "\x85",
]  # fmt: skip
yamlish = st.lists(st.one_of(st.sampled_from(YAML_TOKENS), st.text(max_size=4)), max_size=40).map("".join)


# what a reason that leaks Python or protobuf internals looks like
PYTHON_INTERNALS = (
    "invalid literal for",
    "bytes-like object",
    "argument must be",
    "unhashable type",
    "NoneType",
    "has no attribute",
    "object is not",
    "Traceback",
    "Failed to parse",
    "internal error",  # the loader's net for a bug: never reached by any input
)


def check(result: LoadResult, source: str = SOURCE) -> None:
    assert isinstance(result, LoadResult)
    for rejection in result.rejected:
        text = str(rejection.error)
        assert rejection.error.source.startswith(source), text
        assert text and "\n" not in text, text
        assert not [leak for leak in PYTHON_INTERNALS if leak in text], text
    for obj in result.objects:
        assert obj.source.startswith(source)


def dumped(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


@FUZZ
@given(st.one_of(st.text(max_size=200), yamlish))
def test_random_text_is_a_load_result(text: str) -> None:
    check(load_documents(text, SOURCE))
    check(load_mesh_file(text, SOURCE))


@FUZZ
@given(st.lists(objects(), min_size=1, max_size=3))
def test_random_objects_are_loaded_or_rejected_by_name(docs: list[dict[str, Any]]) -> None:
    text = "---\n".join(dumped(d) for d in docs)
    check(load_documents(text, SOURCE))
    for doc in docs:
        check(load_object(doc, "api"), "api")


@FUZZ
@given(json_like)
def test_random_structures_as_documents_and_mesh_configs(doc: Any) -> None:
    text = dumped(doc)
    check(load_documents(text, SOURCE))
    check(load_mesh_file(text, SOURCE))
    meta = {"name": "istio", "namespace": "istio-system"}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"mesh": text}}
    check(load_documents(dumped(configmap), SOURCE))


# --- xDS handlers -------------------------------------------------------------------------

SECRET = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
TYPES = [CLUSTER, ENDPOINT, LISTENER, ROUTE, NAME_TABLE, SECRET]
type_urls = st.one_of(st.sampled_from(TYPES), st.sampled_from(["", "x", "t" * 600]), st.text(max_size=10))
names = st.one_of(st.sampled_from([REVIEWS, RATINGS, "*", "9080", "", "kubernetes://c"]), st.text(max_size=8))
resource_names = st.lists(names, max_size=6)
nonces = st.one_of(st.sampled_from(["", "1", "2", "3", "4", "5"]), st.text(max_size=6))


@st.composite
def sotw_requests(draw: st.DrawFn) -> discovery_pb2.DiscoveryRequest:
    req = discovery_pb2.DiscoveryRequest(
        type_url=draw(type_urls),
        resource_names=draw(resource_names),
        response_nonce=draw(nonces),
        version_info=draw(st.text(max_size=6)),
    )
    if draw(st.booleans()):
        req.error_detail.code = draw(st.integers(0, 16))
        req.error_detail.message = draw(st.text(max_size=20))
    return req


@st.composite
def delta_requests(draw: st.DrawFn) -> discovery_pb2.DeltaDiscoveryRequest:
    req = discovery_pb2.DeltaDiscoveryRequest(
        type_url=draw(type_urls),
        resource_names_subscribe=draw(resource_names),
        resource_names_unsubscribe=draw(resource_names),
        response_nonce=draw(nonces),
        initial_resource_versions=draw(st.dictionaries(names, st.text(max_size=4), max_size=2)),
    )
    if draw(st.booleans()):
        req.error_detail.code = draw(st.integers(0, 16))
        req.error_detail.message = draw(st.text(max_size=20))
    return req


pushes = st.builds(PushRequest, full=st.booleans(), forced=st.booleans())


@functools.cache
def mesh() -> Mesh:
    """bookinfo behind a cached generator in assertion mode, built once for every example."""
    return Mesh()


def drive(conn: Connection[Any, Any, Any, Any], steps: list[Any]) -> None:
    """Feed requests and pushes; a ProtocolError ends the stream, as the server ends it."""
    for step in steps:
        try:
            out = conn.on_push(step) if isinstance(step, PushRequest) else conn.on_request(step)
        except ProtocolError:
            event("ended by a protocol error")
            return
        assert isinstance(out, list)
        if out:
            event("answered")


allowed = st.one_of(st.none(), st.sampled_from([frozenset({CLUSTER}), frozenset({ENDPOINT}), frozenset({ROUTE})]))


@FUZZ
@given(allowed, st.lists(st.one_of(sotw_requests(), pushes), min_size=1, max_size=8))
def test_a_sotw_connection_answers_or_raises_protocol_error(types: frozenset[str] | None, steps: list[Any]) -> None:
    drive(Connection("c", build_proxy(NODE), SotwSession(counter_nonces(), types), mesh().source), steps)


@FUZZ
@given(allowed, st.lists(st.one_of(delta_requests(), pushes), min_size=1, max_size=8))
def test_a_delta_connection_answers_or_raises_protocol_error(types: frozenset[str] | None, steps: list[Any]) -> None:
    drive(Connection("c", build_proxy(NODE), DeltaSession(counter_nonces(), types), mesh().source), steps)


id_parts = st.one_of(st.sampled_from(["sidecar", "router", "10.1.0.1", "::1", "p.ns", "ns.svc"]), st.text(max_size=6))
node_ids = st.one_of(st.text(max_size=40), st.lists(id_parts, max_size=5).map("~".join))
METADATA_KEYS = ["NAMESPACE", "LABELS", "CLUSTER_ID", "NETWORK", "INSTANCE_IPS", "ISTIO_VERSION", "INTERCEPTION_MODE"]
# any number a Struct holds, Infinity and NaN included (JSON has neither)
struct_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(STRINGS),
    st.text(max_size=12),
)
struct_json = st.recursive(
    struct_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=15,
)
metadata = st.dictionaries(st.sampled_from([*METADATA_KEYS, "DNS_CAPTURE", "x"]), struct_json, max_size=4)


@FUZZ
@given(node_ids, metadata)
def test_a_node_is_a_proxy_or_an_invalid_node_error(node_id: str, meta: dict[str, Any]) -> None:
    node = base_pb2.Node(id=node_id)
    node.metadata.update(meta)
    with contextlib.suppress(InvalidNodeError):
        proxy_from_node(node)


parse_sotw: Callable[[bytes], Any] = _parser(discovery_pb2.DiscoveryRequest)
parse_delta: Callable[[bytes], Any] = _parser(discovery_pb2.DeltaDiscoveryRequest)


@FUZZ
@given(st.one_of(st.binary(max_size=200), sotw_requests().map(lambda r: r.SerializeToString()[:-1])))
def test_request_bytes_parse_or_are_undecodable(data: bytes) -> None:
    for parse in (parse_sotw, parse_delta):
        out = parse(data)
        assert isinstance(out, Undecodable | discovery_pb2.DiscoveryRequest | discovery_pb2.DeltaDiscoveryRequest)
