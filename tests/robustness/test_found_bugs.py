"""Bad input that once hurt, found by the corpus and the fuzzing (they were strict xfails until
fixed): each test states what DESIGN §5 asks. They run on the file source alone, not on the
shared runtime: before the fixes some of them stopped its watch."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from envoy.config.core.v3 import base_pb2

from app.config.loader import load_documents, load_object
from app.inject.validate import AnnotationError, validate_annotations
from app.model.proxy import InvalidNodeError
from app.sources.files import FileSource
from app.xds.mesh_source import proxy_from_node

GOOD = """apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: other, namespace: ns}
spec:
  hosts: [other.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
"""


# was: schema._locate descended into a map field given as a list with the map-entry type and
# looked the list item's keys up in it; the KeyError escaped load_documents and stopped `pilotfish
# serve` at start (and the file watch, restarted forever, afterwards). istiod rejects the object
@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        ("WorkloadEntry", "  address: 10.0.0.1\n  ports: [{http: 80}]\n"),
        ("Gateway", "  selector: [{istio: ingressgateway}]\n  servers: [{port: {number: 80, protocol: HTTP}}]\n"),
    ],
    ids=["workloadentry-ports-a-list", "gateway-selector-a-list"],
)
def test_a_map_field_written_as_a_list_is_rejected(tmp_path: Path, kind: str, spec: str) -> None:
    (tmp_path / "a-good.yaml").write_text(GOOD)
    bad = tmp_path / "b-bad.yaml"
    meta = "metadata: {name: x, namespace: ns}"
    bad.write_text(f"apiVersion: networking.istio.io/v1\nkind: {kind}\n{meta}\nspec:\n{spec}")
    source = FileSource(tmp_path)
    source.load()
    [error] = source.rejections()
    assert str(error).startswith(f"{bad}: {kind} ns/x: field ")
    assert "expected a map, got a list" in str(error)
    assert [o.meta.name for o in source.objects()] == ["other"]


# was: PyYAML's problem marks made 'invalid YAML: ...' span 4-5 lines
@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("kind: [unclosed\n", "at line 2, column 1: did not find expected ',' or ']'"),
        ("a: 1\n\tb: 2\n", "at line 2, column 1: found a tab character"),
        ("a: *nope\n", "at line 1, column 4: found undefined alias"),
        ("a: 1\nb: x\x07\n", "at line 2, column 5: unacceptable character #x0007"),
    ],
)
def test_an_invalid_yaml_rejection_is_one_line(text: str, says: str) -> None:
    [rejection] = load_documents(text, "f.yaml").rejected
    assert "\n" not in str(rejection.error), str(rejection.error)
    assert str(rejection.error).startswith(f"f.yaml: invalid YAML {says}"), str(rejection.error)


# was: a FIFO named *.yaml was read like a file: the read blocked until a writer came, so
# `pilotfish serve` did not start and the file watch stalled (every other file's changes waited)
def test_a_fifo_in_the_config_dir_is_named_and_does_not_block(tmp_path: Path) -> None:
    (tmp_path / "a-good.yaml").write_text(GOOD)
    fifo = tmp_path / "b-pipe.yaml"
    os.mkfifo(fifo)

    def unblock() -> None:  # the test must end either way: a writer that closes at once
        time.sleep(1.0)
        with contextlib.suppress(OSError):  # ENXIO: nobody is reading it, nothing to unblock
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    writer = threading.Thread(target=unblock, daemon=True)
    writer.start()
    source = FileSource(tmp_path)
    began = time.monotonic()
    source.load()
    took = time.monotonic() - began
    writer.join()
    assert took < 0.5, f"the load waited {took:.1f}s for a writer"
    assert [str(e) for e in source.rejections()] == [f"{fifo}: not a regular file (a FIFO): not read"]
    assert [o.meta.name for o in source.objects()] == ["other"]


# was: json_format.MessageToDict raised ValueError for a metadata Struct holding Infinity or NaN
# (valid protobuf); the server turned it into UNKNOWN with a traceback (test_xds_limits checks
# the wire: INVALID_ARGUMENT with a short message)
@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")])
def test_a_node_with_non_finite_metadata_is_an_invalid_node(number: float) -> None:
    node = base_pb2.Node(id="sidecar~10.0.0.1~a.ns~ns.svc.cluster.local")
    node.metadata.fields["LABELS"].struct_value.fields["x"].number_value = number
    with pytest.raises(InvalidNodeError, match="unreadable metadata"):
        proxy_from_node(node)


# was: libyaml's composer (C) recursed once per level before the loader's depth bound could act:
# ~30,000 levels of nesting overflowed the C stack and killed the process (a segfault, not an
# exception). Run in a child process, so a regression fails this test, not the whole run
@pytest.mark.parametrize(
    "text",
    ["a: " + "[" * 200_000 + "]" * 200_000, "- " * 200_000 + "x\n", "a: " + "{a: " * 200_000 + "}" * 200_000],
    ids=["flow-sequences", "block-sequences", "flow-mappings"],
)
def test_nesting_deep_enough_to_overflow_the_c_stack_is_refused(tmp_path: Path, text: str) -> None:
    file = tmp_path / "deep.yaml"
    file.write_text(text)
    code = (
        "import sys; from app.config.loader import load_documents;"
        "r = load_documents(open(sys.argv[1]).read(), 'deep.yaml'); print(r.rejected[0].error)"
    )
    root = Path(__file__).resolve().parents[2]  # where `app` imports from
    done = subprocess.run([sys.executable, "-c", code, str(file)], capture_output=True, text=True, timeout=60, cwd=root)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.startswith("deep.yaml: invalid YAML at line 1, column "), done.stdout
    assert "nested deeper than 100 levels" in done.stdout


def _ports(value: str) -> dict[str, Any]:
    return {"rules": [{"to": [{"operation": {"ports": [value]}}]}]}


def _endpoint(value: str) -> dict[str, Any]:
    port = {"number": 80, "protocol": "HTTP", "name": "http"}
    return {"ingress": [{"port": port, "defaultEndpoint": f"127.0.0.1:{value}"}]}


def _retry_on(value: str) -> dict[str, Any]:
    route = {"retries": {"attempts": 1, "retryOn": value}, "route": [{"destination": {"host": "a"}}]}
    return {"hosts": ["a"], "http": [route]}


_SPECS = {
    "security.istio.io/v1/AuthorizationPolicy": (_ports, "rules[0].to[0].operation.ports[0]"),
    "networking.istio.io/v1/Sidecar": (_endpoint, "ingress[0].defaultEndpoint"),
    "networking.istio.io/v1/VirtualService": (_retry_on, "http[0].retries.retryOn"),
}


# was: str.isdigit (true for '²', which int refuses) or a number of more than 4,300 digits (int
# refuses those too) made the loader's "internal error reading this document; please report it",
# with a traceback, where istiod's strconv.Atoi/ParseUint rejects the field
@pytest.mark.parametrize("kind", list(_SPECS), ids=lambda k: k.rpartition("/")[2])
@pytest.mark.parametrize("value", ["²", "9" * 5000], ids=["superscript-two", "5000-digits"])
def test_a_number_python_cannot_read_is_rejected_by_its_field(kind: str, value: str) -> None:
    api_version, _, name = kind.rpartition("/")
    make, field = _SPECS[kind]
    doc = {"apiVersion": api_version, "kind": name, "metadata": {"name": "a", "namespace": "n"}, "spec": make(value)}
    [rejection] = load_object(doc, "kube:n/a", strict=False).rejected
    message = str(rejection.error)
    assert f"field {field}: " in message and len(message) < 300, message


# what Go reads and istiod takes: leading zeros (however many), and a sign where Atoi takes one
@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("security.istio.io/v1/AuthorizationPolicy", "0" * 5000 + "80"),
        ("networking.istio.io/v1/Sidecar", "+8080"),
        ("networking.istio.io/v1/VirtualService", "0" * 5000 + "503"),
    ],
    ids=["ports-leading-zeros", "endpoint-signed", "retry-on-leading-zeros"],
)
def test_numbers_go_reads_are_taken(kind: str, value: str) -> None:
    api_version, _, name = kind.rpartition("/")
    make, _ = _SPECS[kind]
    doc = {"apiVersion": api_version, "kind": name, "metadata": {"name": "a", "namespace": "n"}, "spec": make(value)}
    result = load_object(doc, "kube:n/a", strict=False)
    assert not result.rejected and len(result.objects) == 1, result.rejected


# was: the same isdigit-then-int in the injection webhook's annotation check: a ValueError the
# pipeline does not expect, so the pod's review failed "please report it" instead of naming it
@pytest.mark.parametrize("value", ["²", "9" * 5000], ids=["superscript-two", "5000-digits"])
def test_an_injection_annotation_python_cannot_read_is_named(value: str) -> None:
    name = "readiness.status.sidecar.istio.io/periodSeconds"
    with pytest.raises(AnnotationError, match=f"for annotation '{name}'"):
        validate_annotations({name: value})
