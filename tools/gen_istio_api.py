"""Generate Python for Istio's API from the .proto files of the pinned Go modules.

    python tools/gen_istio_api.py OUTDIR [--istio-api DIR --istio DIR]

What pilotfish reads of istio.io/api (the networking and security kinds, MeshConfig, the CA
service and what they import) and istio.io/istio's NDS NameTable are compiled with grpc_tools'
protoc into the package ``app.api.istio`` (``OUTDIR``, normally app/api/istio): protoc's
absolute imports (``from networking.v1alpha3 import ...``) are rewritten under that package.
``alt_names.py`` lists the extra field names Istio's CRDs accept (``+kubebuilder:altName``).

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
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc  # type: ignore[import-untyped]

PEERS = Path(__file__).resolve().parent / "peers" / "istio"
API_PROTOS = [
    "networking/v1alpha3/*.proto",
    "networking/v1beta1/proxy_config.proto",
    "security/v1beta1/*.proto",
    "security/v1alpha1/ca.proto",
    "mesh/v1alpha1/*.proto",
    "type/v1beta1/selector.proto",
    "meta/v1alpha1/status.proto",
    "analysis/v1alpha1/message.proto",
]
ISTIO_PROTOS = ["pkg/dns/proto/nds.proto"]
PACKAGE = "app.api.istio"
ALT_NAME = re.compile(r"\+kubebuilder:altName=(\w+)")
# DescriptorProto field numbers in SourceCodeInfo paths
MESSAGE_TYPE, NESTED_TYPE, FIELD = 4, 3, 2


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
