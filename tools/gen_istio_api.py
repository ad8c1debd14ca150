"""Generate Python for Istio's API from the .proto files of the pinned Go modules.

    python tools/gen_istio_api.py OUTDIR [--istio-api DIR --istio DIR]

What pilotfish reads of istio.io/api (the networking, security and telemetry kinds, MeshConfig, the CA
service and what they import) and istio.io/istio's NDS NameTable are compiled with grpc_tools'
protoc into the package ``app.api.istio`` (``OUTDIR``, normally app/api/istio): protoc's
absolute imports (``from networking.v1alpha3 import ...``) are rewritten under that package.
``alt_names.py`` lists the extra field names Istio's CRDs accept (``+kubebuilder:altName``), and
``crd_constraints.py`` the OpenAPI bounds their schemas put on each field (required fields, lengths,
patterns, ranges, item and property counts: what the Kubernetes API server refuses before
istiod's webhook sees an object), read from istio.io/istio's CRDs. ``inject/`` holds the sidecar
injection templates istiod's chart ships (``INJECT_TEMPLATES``) and the chart's values.yaml, as
package data for app/inject (never copied into the repository).

The module directories come from ``go mod download -json`` in tools/peers/istio (the versions
its go.sum pins) unless given. The tree is built in a temporary directory beside OUTDIR and
swapped in at the end, so a failed run leaves the previous tree (or none) in place.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import descriptor_pb2
from grpc_tools import protoc  # type: ignore[import-untyped]

PEERS = Path(__file__).resolve().parent / "peers" / "istio"
API_PROTOS = [
    "networking/v1alpha3/*.proto",
    "networking/v1beta1/proxy_config.proto",
    "security/v1beta1/*.proto",
    "security/v1alpha1/ca.proto",
    "telemetry/v1alpha1/telemetry.proto",
    "mesh/v1alpha1/*.proto",
    "type/v1beta1/selector.proto",
    "meta/v1alpha1/status.proto",
    "analysis/v1alpha1/message.proto",
    # the Istio proxy's own filter configs istiod links (so an EnvoyFilter's value may name them)
    "envoy/config/filter/http/alpn/v2alpha1/config.proto",
    "envoy/config/filter/http/jwt_auth/v2alpha1/config.proto",
    "envoy/config/filter/network/tcp_cluster_rewrite/v2alpha1/config.proto",
    "envoy/extensions/stats/config.proto",
]
ISTIO_PROTOS = ["pkg/dns/proto/nds.proto"]
PACKAGE = "app.api.istio"
# istiod's chart: its injection templates (the ConfigMap's `templates`, by name) and its values
DISCOVERY_CHART = "manifests/charts/istio-control/istio-discovery"
INJECT_TEMPLATES = {
    "sidecar": "injection-template.yaml",
    "gateway": "gateway-injection-template.yaml",
    "grpc-simple": "grpc-simple.yaml",
    "grpc-agent": "grpc-agent.yaml",
}
ALT_NAME = re.compile(r"\+kubebuilder:altName=(\w+)")
# DescriptorProto field numbers in SourceCodeInfo paths
MESSAGE_TYPE, NESTED_TYPE, FIELD = 4, 3, 2
CRDS = "manifests/charts/base/files/crd-all.gen.yaml"
# the proto packages a CRD's kind may be defined in (its spec message is PACKAGE.Kind)
SPEC_PACKAGES = (
    "istio.networking.v1alpha3", "istio.networking.v1beta1", "istio.security.v1beta1", "istio.telemetry.v1alpha1",
)  # fmt: skip
# the OpenAPI keywords the API server checks on a value, kept per field; CEL rules
# (x-kubernetes-validations) are not data: app/config checks them as istiod's webhook does
VALUE_KEYWORDS = (
    "minimum", "maximum", "minLength", "maxLength", "pattern", "minItems", "maxItems", "minProperties", "maxProperties",
)  # fmt: skip


def module_dir(module: str) -> Path:
    """The module's source directory, as `go mod download -json` reports it (downloading it if
    the Go module cache lacks it)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", module], cwd=PEERS, check=True, capture_output=True, text=True
    ).stdout
    return Path(json.loads(out)["Dir"])


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, name
    return Path(spec.submodule_search_locations[0])


def compile_protos(api: Path, istio: Path, out: Path) -> descriptor_pb2.FileDescriptorSet:
    files: list[str] = []
    for pattern in API_PROTOS:
        found = sorted(str(p.relative_to(api)) for p in api.glob(pattern))
        if not found:
            raise SystemExit(f"gen_istio_api: no {pattern} in {api}")
        files += found
    files += ISTIO_PROTOS
    # google/protobuf from grpc_tools, google/api from googleapis-common-protos
    includes = [api, package_dir("grpc_tools") / "_proto", package_dir("google.api").parent.parent, istio]
    descriptors = out / "descriptors.pb"
    args = ["protoc", *(f"-I{d}" for d in includes), f"--python_out={out}", f"--pyi_out={out}"]
    args += [f"--descriptor_set_out={descriptors}", "--include_source_info", *files]
    if protoc.main(args) != 0:
        raise SystemExit("gen_istio_api: protoc failed")
    fds = descriptor_pb2.FileDescriptorSet.FromString(descriptors.read_bytes())
    descriptors.unlink()
    return fds


def alt_names(fds: descriptor_pb2.FileDescriptorSet) -> dict[str, dict[str, str]]:
    """Message full name -> {alt name: proto field name} from the fields' `+kubebuilder:altName`."""
    found: dict[str, dict[str, str]] = {}
    for f in fds.file:
        for loc in f.source_code_info.location:
            m = ALT_NAME.search(loc.leading_comments)
            path = list(loc.path)
            if not m or len(path) < 4 or path[0] != MESSAGE_TYPE or path[-2] != FIELD:
                continue
            msg = f.message_type[path[1]]
            names = [f.package, msg.name]
            for i in range(2, len(path) - 2, 2):  # nested messages: (NESTED_TYPE, index) pairs
                assert path[i] == NESTED_TYPE, path
                msg = msg.nested_type[path[i + 1]]
                names.append(msg.name)
            found.setdefault(".".join(names), {})[m.group(1)] = msg.field[path[-1]].name
    return found


F = descriptor_pb2.FieldDescriptorProto
# (minimum, maximum) of the integer types: a CRD bound that only restates one is protobuf's own check
_TYPE_RANGES = {
    F.TYPE_UINT32: (0, 2**32 - 1), F.TYPE_FIXED32: (0, 2**32 - 1), F.TYPE_UINT64: (0, 2**64 - 1),
    F.TYPE_FIXED64: (0, 2**64 - 1), F.TYPE_INT32: (-(2**31), 2**31 - 1), F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
}  # fmt: skip
_WRAPPER_TYPES = {"google.protobuf.UInt32Value": F.TYPE_UINT32, "google.protobuf.Int32Value": F.TYPE_INT32,
                  "google.protobuf.UInt64Value": F.TYPE_UINT64}  # fmt: skip


def _fields(fds: descriptor_pb2.FileDescriptorSet) -> dict[str, dict[str, tuple[str, str, int]]]:
    """Message full name -> {JSON name and proto name: (label, message type or "", scalar type)}."""
    out: dict[str, dict[str, tuple[str, str, int]]] = {}

    def add(prefix: str, msg: descriptor_pb2.DescriptorProto) -> None:
        name = f"{prefix}.{msg.name}"
        fields = out[name] = {}
        for f in msg.field:
            type_name = f.type_name.lstrip(".")
            typed = (
                (f.label == f.LABEL_REPEATED and "repeated") or "",
                type_name,
                _WRAPPER_TYPES.get(type_name, f.type),
            )
            fields[f.json_name] = fields[f.name] = typed
        for nested in msg.nested_type:
            add(name, nested)

    for f in fds.file:
        for msg in f.message_type:
            add(f.package, msg)
    return out


def _keywords(schema: Mapping[str, Any], scalar: int = 0) -> dict[str, Any]:
    """The bounds of ``schema``, less a minimum or maximum that is the range of the field's
    integer type ``scalar`` (protobuf checks that one, with its own words)."""
    out = {k: schema[k] for k in VALUE_KEYWORDS if k in schema}
    if scalar in _TYPE_RANGES:
        low, high = _TYPE_RANGES[scalar]
        if out.get("minimum") == low:
            del out["minimum"]
        if out.get("maximum") == high:
            del out["maximum"]
    return out


def crd_constraints(fds: descriptor_pb2.FileDescriptorSet, crds: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(message full name -> {field name as the CRD spells it: bounds}, message full name ->
    [required field names]) from the ``spec`` schemas of every served version of the CRDs whose
    spec message was compiled. A field's bounds are its OpenAPI keywords, with ``items`` for a
    list's elements and ``values`` for a map's; a message reached on several paths (or kinds)
    must get the same bounds on each, else the generator stops."""
    messages = _fields(fds)
    bounds: dict[str, dict[str, Any]] = {}
    required: dict[str, list[str]] = {}

    def merge(table: dict[str, Any], key: str, value: Any, where: str) -> None:
        if table.setdefault(key, value) != value:
            raise SystemExit(f"gen_istio_api: {where}: {value} differs from {table[key]} on another path")

    def walk(schema: Mapping[str, Any], message: str, where: str) -> None:
        if message not in messages:  # a well-known type (Duration, a wrapper, Struct): no fields
            return
        if schema.get("required"):
            merge(required, message, sorted(schema["required"]), where)
        for name, sub in schema.get("properties", {}).items():
            if name not in messages[message]:
                raise SystemExit(f"gen_istio_api: {where}.{name}: no such field of {message}")
            label, field_type, scalar = messages[message][name]
            values = sub.get("additionalProperties")
            entry = messages.get(field_type, {}).get("value") if isinstance(values, Mapping) else None
            field = _keywords(sub, 0 if label else scalar)
            element = sub.get("items") if label else None
            if isinstance(element, Mapping) and (inner := _keywords(element, scalar)):
                field["items"] = inner
            if isinstance(values, Mapping) and (inner := _keywords(values, entry[2] if entry else 0)):
                field["values"] = inner
            if field:
                merge(bounds.setdefault(message, {}), name, field, f"{where}.{name}")
            if isinstance(values, Mapping):  # a map: its value type is the entry's "value" field
                if entry is not None and entry[1]:
                    walk(values, entry[1], f"{where}.{name}{{}}")
            elif isinstance(element, Mapping):
                walk(element, field_type, f"{where}.{name}[]")
            elif field_type:
                walk(sub, field_type, f"{where}.{name}")

    with crds.open() as f:
        for crd in yaml.safe_load_all(f):
            if not crd:
                continue
            kind = crd["spec"]["names"]["kind"]
            spec_message = next((f"{p}.{kind}" for p in SPEC_PACKAGES if f"{p}.{kind}" in messages), None)
            if spec_message is None:
                continue
            for version in crd["spec"]["versions"]:
                if version.get("served"):
                    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
                    walk(spec, spec_message, f"{kind} {version['name']} spec")
    return dict(sorted(bounds.items())), dict(sorted(required.items()))


def rewrite_imports(root: Path) -> None:
    """Put protoc's top-level packages under PACKAGE, and give every directory an __init__.py."""
    tops = "|".join(sorted(p.name for p in root.iterdir() if p.is_dir()))
    absolute = re.compile(rf"^from ({tops})\.", re.MULTILINE)
    module_name = re.compile(rf"(BuildTopDescriptorsAndMessages\(DESCRIPTOR, ')(?=(?:{tops})\.)")
    for path in [*root.rglob("*_pb2.py"), *root.rglob("*_pb2.pyi")]:
        text = absolute.sub(rf"from {PACKAGE}.\1.", path.read_text())
        path.write_text(module_name.sub(rf"\g<1>{PACKAGE}.", text))
    for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        (directory / "__init__.py").touch()


def copy_injection_files(istio: Path, out: Path) -> None:
    """istiod's injection templates as ``NAME.yaml`` (the template name) and the chart's values.yaml."""
    out.mkdir()
    for name, file in INJECT_TEMPLATES.items():
        shutil.copyfile(istio / DISCOVERY_CHART / "files" / file, out / f"{name}.yaml")
    shutil.copyfile(istio / DISCOVERY_CHART / "values.yaml", out / "values.yaml")
    (out / "__init__.py").touch()


def generate(out: Path, api: Path, istio: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        fds = compile_protos(api, istio, tmp)
        rewrite_imports(tmp)
        (tmp / "alt_names.py").write_text(
            '"""Field names Istio\'s CRDs accept besides the JSON name (generated from the protos\' '
            '`+kubebuilder:altName`):\nmessage full name -> {alt name: proto field name}."""\n\n'
            f"ALT_NAMES: dict[str, dict[str, str]] = {alt_names(fds)!r}\n"
        )
        bounds, required = crd_constraints(fds, istio / CRDS)
        (tmp / "crd_constraints.py").write_text(
            '"""What the ``spec`` schemas of Istio\'s CRDs (istio.io/istio ' + CRDS + ") bound, per message\n"
            "(generated): the API server refuses a value out of these bounds before istiod sees it.\n\n"
            "BOUNDS: message full name -> {field name as the CRD spells it: {OpenAPI keyword: bound}}, with\n"
            "``items`` for a list's elements and ``values`` for a map's. REQUIRED: message full name ->\n"
            'the fields it must set."""\n\n'
            "from typing import Any\n\n"
            f"BOUNDS: dict[str, dict[str, dict[str, Any]]] = {bounds!r}\n\n"
            f"REQUIRED: dict[str, list[str]] = {required!r}\n"
        )
        copy_injection_files(istio, tmp / "inject")
        old = out.with_name(f"{tmp.name}-old")
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--istio-api", type=Path, help="istio.io/api source (default: from go mod download)")
    parser.add_argument("--istio", type=Path, help="istio.io/istio source (default: from go mod download)")
    args = parser.parse_args()
    api = args.istio_api or module_dir("istio.io/api")
    istio = args.istio or module_dir("istio.io/istio")
    generate(args.outdir, api, istio)
    print(f"gen_istio_api: {args.outdir} from {api} and {istio}", file=sys.stderr)


if __name__ == "__main__":
    main()
