"""Every field Istio defines is accepted, and nothing else is.

The CRDs are Istio's own: manifests/charts/base/files/crd-all.gen.yaml of the istio.io/istio
module tools/peers/istio pins, read where the Go module cache holds it. Every node of the ``spec``
schema of every served version of each kind pilotfish reads (every field, object, list item and
map value, at any depth) becomes a document that sets only that node, to a valid value of its
type within the schema's bounds (so a oneOf is never set twice), and the fields the objects on
its way require. pilotfish's strict parse must take the document whole, the
loader must not refuse it as an unknown field or an unserved apiVersion, and the same document
with ``notAnIstioField`` beside the node must be refused as unknown, naming its path.

Then the fields users found refused, through the validating webhook, in realistic objects.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml

from app.config.loader import load_object
from app.config.objects import ISTIO_KINDS, Kind
from app.config.schema import parse_message
from app.config.validation.spec import SPEC_MESSAGES
from app.errors import FieldError
from app.webhook.admission import review
from tests.support.peers import istio_crds_file

UNKNOWN = "notAnIstioField"
# a step of a path: a field by name, a list's item, a map's value (under the key "1", which
# is a valid key of a string map and of an integer one)
Step = tuple[str, str]
ITEM, VALUE = ("[]", ""), ("{}", "")


@pytest.fixture(scope="session")
def crds() -> list[dict[str, Any]]:
    """Istio's CRDs for the kinds pilotfish reads."""
    with istio_crds_file().open() as f:
        found = [d for d in yaml.safe_load_all(f) if d and d["spec"]["names"]["kind"] in ISTIO_KINDS]
    assert {d["spec"]["names"]["kind"] for d in found} == set(ISTIO_KINDS) == set(SPEC_MESSAGES)
    return found


Chain = tuple[Mapping[str, Any], ...]  # the schemas from the spec's down to a node's


def nodes(
    schema: Mapping[str, Any], path: tuple[Step, ...] = (), chain: Chain = ()
) -> Iterator[tuple[tuple[Step, ...], Any, Chain]]:
    """Every node below ``schema`` (itself first) with a valid value of its type, and the
    schemas on its way."""
    chain = (*chain, schema)
    yield path, sample(schema), chain
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, (*path, ("field", name)), chain)
    if "items" in schema:
        yield from nodes(schema["items"], (*path, ITEM), chain)
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from nodes(schema["additionalProperties"], (*path, VALUE), chain)


# strings tried, in order, for one a string schema's pattern and lengths take (many of Istio's
# strings are durations: "1s" first)
_STRINGS = ("1s", "a", "Service")


def sample(schema: Mapping[str, Any]) -> Any:
    """A value the schema allows: its first enum name, an object with its required fields, a
    list or map of the fewest items it needs, or a scalar of its type within its bounds."""
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        out = required(schema)
        if len(out) < schema.get("minProperties", 0) and isinstance(schema.get("additionalProperties"), Mapping):
            out["1"] = sample(schema["additionalProperties"])
        return out
    if kind == "array":
        return [sample(schema["items"])] * schema.get("minItems", 0)
    if kind == "string":
        if schema.get("format") == "byte":
            return "AAAA"
        pattern = re.compile(schema.get("pattern", ""))
        return next(v for v in _STRINGS if pattern.search(v) and len(v) >= schema.get("minLength", 0))
    if kind == "integer":
        return min(max(1, schema.get("minimum", 1)), schema.get("maximum", 2**31))
    if kind == "number":
        return 0.5
    if kind == "boolean":
        return True
    raise AssertionError(f"no sample value for {schema}")


def required(schema: Mapping[str, Any]) -> dict[str, Any]:
    """An object of ``schema`` setting only the fields it requires (the CRD's ``required``)."""
    return {name: sample(schema["properties"][name]) for name in schema.get("required", ())}


def document(path: tuple[Step, ...], value: Any, chain: Chain, *, beside: bool = False) -> Any:
    """A spec setting ``path`` to ``value`` (and what the objects on its way require);
    ``beside``: with UNKNOWN next to its last field."""
    doc = value
    for i in reversed(range(len(path))):
        if path[i] == ITEM:
            doc = [doc]
        elif path[i] == VALUE:
            doc = {"1": doc}
        else:
            doc = {**required(chain[i]), path[i][1]: doc}
            if beside and i == len(path) - 1:
                doc[UNKNOWN] = True
    return {**doc, UNKNOWN: True} if beside and not path else doc


def rendered(path: tuple[Step, ...]) -> str:
    """The path as pilotfish's errors name it: ``http[0].headers.request.set.1``."""
    out = ""
    for step in path:
        out += "[0]" if step == ITEM else ".1" if step == VALUE else f".{step[1]}" if out else step[1]
    return out


def refusals(api_version: str, kind: str, spec: Any) -> list[tuple[str, str]]:
    """(field, reason) of what the loader (as the file source and the webhook run it) refuses."""
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "ns"}, "spec": spec}
    return [(r.error.field, r.error.reason) for r in load_object(obj, "crd").rejected]


def test_every_field_istio_defines_is_accepted_and_no_other(crds: list[dict[str, Any]]) -> None:
    walked: collections.Counter[str] = collections.Counter()
    accepted: collections.Counter[str] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    for crd in crds:
        kind = Kind(crd["spec"]["names"]["kind"])
        for version in (v for v in crd["spec"]["versions"] if v["served"]):
            api_version = f"{crd['spec']['group']}/{version['name']}"
            label = f"{kind} {api_version}"
            for path, value, chain in nodes(version["schema"]["openAPIV3Schema"]["properties"]["spec"]):
                walked[kind] += 1
                where = f"{label} spec.{rendered(path)}"
                spec = document(path, value, chain)
                try:
                    parse_message(spec, SPEC_MESSAGES[kind])
                except FieldError as e:
                    failures.append(f"{where} = {value!r}: not parsed: {e}")
                    continue
                loader = [
                    r for r in refusals(api_version, kind, spec) if r[1] == "unknown field" or r[0] == "apiVersion"
                ]
                if loader:
                    failures.append(f"{where}: refused by the loader: {loader}")
                    continue
                accepted[kind] += 1
                if path and path[-1] in (ITEM, VALUE):
                    continue  # a list item or a map value has no fields beside it
                extra = rendered((*path[:-1], ("field", UNKNOWN)))
                got = refusals(api_version, kind, document(path, value, chain, beside=True))
                if got != [(extra, "unknown field")]:
                    failures.append(f"{where}: {UNKNOWN} beside it gave {got}, not {extra} unknown")
                    continue
                refused[kind] += 1
    for kind in sorted(walked):
        print(f"{kind}: {walked[kind]} paths walked, {accepted[kind]} accepted, {refused[kind]} {UNKNOWN} refused")
    total = walked.total()
    print(f"all: {total} paths walked, {accepted.total()} accepted, {refused.total()} {UNKNOWN} refused")
    assert not failures, f"{len(failures)} of {total}:\n" + "\n".join(failures[:40])
    # Istio's eleven kinds, every served version: thousands of paths; each kind has its share
    # (ProxyConfig has four fields, one version)
    assert total > 2500 and refused.total() > 2000
    assert all(walked[kind] > (5 if kind is Kind.PROXY_CONFIG else 10) for kind in SPEC_MESSAGES), walked


def test_a_field_istio_does_not_define_is_refused_at_any_depth() -> None:
    # the walk's negative half, in one readable case: a misspelt field deep below a list
    spec = {"hosts": ["a"], "http": [{"headers": {"request": {"set": {"x": "1"}, "sett": {"x": "1"}}}}]}
    assert refusals("networking.istio.io/v1", "VirtualService", spec) == [
        ("http[0].headers.request.sett", "unknown field")
    ]


def admit(obj: dict[str, Any]) -> dict[str, Any]:
    """The webhook's answer to creating ``obj`` (namespace shop)."""
    request = {"uid": "u", "operation": "CREATE", "namespace": "shop", "object": obj}
    return review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})["response"]


def obj(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "shop"}, "spec": spec}


JWT = "https://login.example.com"
ISSUE_FIELDS = {
    "jwtRules[].spaceDelimitedClaims and jwks_uri": obj(
        "security.istio.io/v1",
        "RequestAuthentication",
        {
            "selector": {"matchLabels": {"app": "api"}},
            "jwtRules": [
                {"issuer": JWT, "jwks_uri": f"{JWT}/.well-known/jwks.json", "spaceDelimitedClaims": ["scope", "roles"]}
            ],
        },
    ),
    "http[].mirror_percent": obj(
        "networking.istio.io/v1",
        "VirtualService",
        {
            "hosts": ["reviews"],
            "http": [
                {
                    "route": [{"destination": {"host": "reviews", "subset": "v1"}}],
                    "mirror": {"host": "reviews", "subset": "v2"},
                    "mirror_percent": 25,
                }
            ],
        },
    ),
    "trafficPolicy.connectionPool.http.http2KeepAlive": obj(
        "networking.istio.io/v1",
        "DestinationRule",
        {
            "host": "reviews",
            "trafficPolicy": {
                "connectionPool": {
                    "http": {"http2MaxRequests": 100, "http2KeepAlive": {"interval": "30s", "timeout": "5s"}}
                }
            },
        },
    ),
    "trafficPolicy.loadBalancer.zoneAwareLbSetting": obj(
        "networking.istio.io/v1",
        "DestinationRule",
        {
            "host": "reviews",
            "trafficPolicy": {"loadBalancer": {"simple": "LEAST_REQUEST", "zoneAwareLbSetting": {"enabled": True}}},
        },
    ),
    "trafficPolicy.tls.insecureSkipVerify": obj(
        "networking.istio.io/v1",
        "DestinationRule",
        {"host": "api.example.com", "trafficPolicy": {"tls": {"mode": "SIMPLE", "insecureSkipVerify": True}}},
    ),
    "servers[].tls.insecureSkipVerify (Gateway)": obj(
        "networking.istio.io/v1",
        "Gateway",
        {
            "selector": {"istio": "ingressgateway"},
            "servers": [
                {
                    "port": {"number": 443, "name": "https", "protocol": "HTTPS"},
                    "hosts": ["shop/*.example.com"],
                    "tls": {"mode": "MUTUAL", "credentialName": "shop-cert", "insecureSkipVerify": True},
                }
            ],
        },
    ),
}


@pytest.mark.parametrize("name", ISSUE_FIELDS)
def test_fields_users_found_refused_are_admitted(name: str) -> None:
    # admitted; a field pilotfish does not apply yet comes with a warning (test_not_applied.py)
    response = admit(ISSUE_FIELDS[name])
    assert response["allowed"] is True and "status" not in response, response


@pytest.mark.parametrize(
    ("kind", "spec", "field"),
    [
        # the issue also named these, but the pinned istio.io/api defines neither: ecdhCurves is
        # MeshConfig's (meshMTLS / tlsDefaults), not a Gateway server's; backendUtilization is
        # nowhere. Refused as istiod's CRDs refuse them, until a pinned Istio defines them.
        (
            "Gateway",
            {
                "selector": {"istio": "ingressgateway"},
                "servers": [
                    {
                        "port": {"number": 443, "name": "https", "protocol": "HTTPS"},
                        "hosts": ["*"],
                        "tls": {"mode": "SIMPLE", "credentialName": "c", "ecdhCurves": ["X25519"]},
                    }
                ],
            },
            "servers[0].tls.ecdhCurves",
        ),
        (
            "DestinationRule",
            {
                "host": "reviews",
                "trafficPolicy": {"loadBalancer": {"simple": "LEAST_REQUEST", "backendUtilization": {}}},
            },
            "trafficPolicy.loadBalancer.backendUtilization",
        ),
    ],
)
def test_fields_the_pinned_istio_does_not_define_are_denied(kind: str, spec: dict[str, Any], field: str) -> None:
    response = admit(obj("networking.istio.io/v1", kind, spec))
    assert response["allowed"] is False
    assert response["status"]["message"] == f"configuration is invalid: {kind} shop/x: field {field}: unknown field"
