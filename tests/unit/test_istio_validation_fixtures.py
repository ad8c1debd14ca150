"""Istio's verdicts on Istio's own validation fixtures, and pilotfish's.

The fixtures are read where the pinned istio.io/istio module is (tests/support/peers.py), never
copied:

* ``pkg/config/validation/testdata/crds/*.yaml``: what Istio checks its CRD schemas and its
  webhook against (openapi_test.go TestCRDs). Each file is split as Istio's test splits it
  (yml.SplitString: at lines starting with ``---``, empty parts dropped); a document with an
  ``_err`` key is one the API server must refuse, any other one it must take. The key is
  removed before the document is judged, as Istio's test removes it.
* ``tests/testdata/config/*.yaml``: the config istiod's own tests load as a config dir
  (crd.ParseInputs, which refuses a file holding anything invalid): every document is valid.

Each document of a kind pilotfish reads must get Istio's verdict from the file source (the
loader as ``serve --config-dir`` runs it), and each ``crds`` one from the validating webhook too
(an AdmissionReview, CREATE, of the object as the API server would send it). Documents of kinds
pilotfish does not read (EnvoyFilter, WasmPlugin, WorkloadGroup, ProxyConfig, a
Deployment...) are out of scope: the file source skips them and the webhook admits them
unvalidated, as istiod does any kind outside its schemas; they are counted apart.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config.loader import load_documents
from app.config.objects import INTERNAL_KINDS, Kind
from app.config.yaml_documents import GoFlowYamlLoader, KubeYamlLoader
from app.webhook.admission import review
from tests.support.peers import istio_module_dir

CRDS = "pkg/config/validation/testdata/crds"
CONFIG = "tests/testdata/config"
READ_KINDS = frozenset(str(k) for k in Kind) - {str(k) for k in INTERNAL_KINDS}
_ERR_LINE = re.compile(r"^_err:.*\n?", re.MULTILINE)


@dataclass(frozen=True)
class Fixture:
    set: str  # CRDS or CONFIG
    where: str  # file#index
    kind: str
    api_version: str
    text: str  # the document, its _err line removed
    obj: dict[str, Any]  # the same, decoded
    valid: bool  # Istio's verdict


def split(text: str) -> list[str]:
    """Istio's yml.SplitString: parts between lines starting with ``---``, trimmed, non-empty."""
    parts, active = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("---"):
            parts.append("".join(active))
            active = []
        else:
            active.append(line)
    parts.append("".join(active))
    return [p.strip() for p in parts if p.strip()]


def decode(text: str) -> Any:
    """A document as Go's YAML decodes it (pilotfish's loader, Go's flow-colon rule if needed)."""
    try:
        return yaml.load(text, Loader=KubeYamlLoader)
    except yaml.YAMLError:
        return yaml.load(text, Loader=GoFlowYamlLoader)


def fixtures() -> Iterator[Fixture]:
    root = istio_module_dir()
    for subdir in (CRDS, CONFIG):
        files = sorted((root / subdir).glob("*.yaml"))
        assert files, f"no fixtures in {root / subdir}"
        for path in files:
            for i, part in enumerate(split(path.read_text())):
                obj = decode(part)
                if not isinstance(obj, dict):
                    continue  # comments only
                valid = "_err" not in obj if subdir == CRDS else True
                obj.pop("_err", None)
                text = _ERR_LINE.sub("", part) + "\n"
                yield Fixture(subdir, f"{path.name}#{i}", obj["kind"], obj["apiVersion"], text, obj, valid)


@pytest.fixture(scope="module")
def all_fixtures() -> list[Fixture]:
    return list(fixtures())


def file_verdict(f: Fixture) -> bool | None:
    """True: the file source takes it; False: it refuses it; None: a kind it does not read."""
    result = load_documents(f.text, f"{f.set}/{f.where}", strict=False)
    if not result.parsed or result.rejected:
        return False
    return True if result.objects else None


def webhook_verdict(f: Fixture) -> tuple[bool, str]:
    request = {"uid": "u", "operation": "CREATE", "namespace": "default", "object": f.obj}
    response = review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    answer = response["response"]
    return answer["allowed"], answer.get("status", {}).get("message", "")


def in_scope(f: Fixture) -> bool:
    group = f.api_version.rpartition("/")[0]
    groups = ("networking.istio.io", "security.istio.io", "telemetry.istio.io", "", "discovery.k8s.io")
    return f.kind in READ_KINDS and group in groups


def test_the_fixtures_are_where_istio_keeps_them(all_fixtures: list[Fixture]) -> None:
    by_set = collections.Counter(f.set for f in all_fixtures)
    # 22 files of CRD fixtures (9 kinds valid and invalid), 30 of config: a few hundred documents
    assert by_set[CRDS] > 100 and by_set[CONFIG] > 50, by_set
    assert sum(not f.valid for f in all_fixtures) > 70


def test_pilotfish_gives_istio_s_verdict_on_every_fixture_of_a_kind_it_reads(all_fixtures: list[Fixture]) -> None:
    agree: collections.Counter[tuple[str, str, str]] = collections.Counter()
    total: collections.Counter[tuple[str, str]] = collections.Counter()
    out_of_scope: collections.Counter[tuple[str, str]] = collections.Counter()
    disagreements: list[str] = []
    for f in all_fixtures:
        if not in_scope(f):
            out_of_scope[f.set, f.kind] += 1
            # the file source skips it, the webhook admits it: neither judges it
            assert file_verdict(f) is None, f"{f.where}: a {f.kind} was read"
            continue
        total[f.set, f.kind] += 1
        want = "valid" if f.valid else "invalid"
        got = file_verdict(f)
        if got is f.valid:
            agree[f.set, f.kind, "file source"] += 1
        else:
            result = load_documents(f.text, f.where, strict=False)
            disagreements.append(f"file source {f.set}/{f.where} ({f.kind}): Istio {want}, pilotfish {result.rejected}")
        if f.set == CRDS:
            allowed, message = webhook_verdict(f)
            if allowed is f.valid:
                agree[f.set, f.kind, "webhook"] += 1
            else:
                disagreements.append(f"webhook {f.set}/{f.where} ({f.kind}): Istio {want}, pilotfish {message!r}")
    print("\nagreements with Istio's verdicts, per fixture set and kind:")
    for (fixture_set, kind), n in sorted(total.items()):
        file_agree = agree[fixture_set, kind, "file source"]
        line = f"  {fixture_set}: {kind}: {n} documents, file source {file_agree}/{n}"
        if fixture_set == CRDS:
            line += f", webhook {agree[fixture_set, kind, 'webhook']}/{n}"
        print(line)
    for fixture_set in (CRDS, CONFIG):
        n = sum(v for (s, _), v in total.items() if s == fixture_set)
        got = sum(v for (s, _, how), v in agree.items() if s == fixture_set and how == "file source")
        hooked = sum(v for (s, _, how), v in agree.items() if s == fixture_set and how == "webhook")
        print(
            f"  {fixture_set}: all: {n} documents, file source {got}/{n}"
            + (f", webhook {hooked}/{n}" if fixture_set == CRDS else "")
        )
    print("out of scope (kinds pilotfish does not read: skipped by the file source, admitted by the webhook):")
    for (fixture_set, kind), n in sorted(out_of_scope.items()):
        print(f"  {fixture_set}: {kind}: {n}")
    assert not disagreements, f"{len(disagreements)} disagreements:\n" + "\n".join(disagreements)
    # every kind pilotfish reads that Istio has fixtures for was judged
    assert {k for (_, k) in total} >= {
        "AuthorizationPolicy", "DestinationRule", "PeerAuthentication", "RequestAuthentication",
        "ServiceEntry", "WorkloadEntry", "VirtualService", "Gateway", "Telemetry",
    }  # fmt: skip
    assert sum(total.values()) > 140


def test_the_invalid_fixtures_are_refused_with_a_reason_naming_the_field(all_fixtures: list[Fixture]) -> None:
    # a refusal is one line naming the object and, where one is to blame, the field
    for f in all_fixtures:
        if in_scope(f) and not f.valid:
            result = load_documents(f.text, f.where, strict=False)
            [rejection] = result.rejected
            assert "\n" not in str(rejection.error) and rejection.error.reason, rejection.error


def test_a_go_style_ipv6_address_in_a_flow_list_is_read_as_go_reads_it() -> None:
    # serviceentry-valid.yaml: `addresses: [1.2.3.4, 001:db8::]`; libyaml refuses the text
    # ("found unexpected ':'"), Go's YAML (kubectl, the API server, istiod) reads a string
    text = (Path(istio_module_dir()) / CRDS / "serviceentry-valid.yaml").read_text()
    with pytest.raises(yaml.YAMLError, match="found unexpected ':'"):
        list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    [first, *_] = load_documents(text, "serviceentry-valid.yaml", strict=False).objects
    assert list(first.spec.addresses) == ["1.2.3.4", "001:db8::"]


def test_pilotfish_validate_gives_istioctl_validate_s_verdicts(all_fixtures: list[Fixture]) -> None:
    # `pilotfish validate` reads strictly, as istioctl validate (ApplyJSONStrict): the same verdicts
    # on the CRD fixtures; of the config istiod's tests load, it refuses only what Istio does not
    # define (`websocketUpgrade`, gone from HTTPRoute), which istiod's file source ignores
    refused = []
    for f in all_fixtures:
        if not in_scope(f):
            continue
        result = load_documents(f.text, f.where, strict=True)
        ok = result.parsed and not result.rejected and bool(result.objects)
        if f.set == CRDS:
            assert ok is f.valid, (f.where, result.rejected)
        elif not ok:
            refused.append((f.where, result.rejected[0].error.field, result.rejected[0].error.reason))
    assert refused == [
        ("rule-websocket-route.yaml#2", "http[0].websocketUpgrade", "unknown field"),
        ("rule-websocket-route.yaml#3", "http[0].websocketUpgrade", "unknown field"),
    ]
