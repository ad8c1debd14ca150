"""Print how much of pilotfish each xDS transport module pulls in, and the largest modules.

For every transport module (the ones the import-linter contract "the xDS transport knows nothing
of the model" names): how many ``app`` modules it imports, directly or through others (grimp's
import graph, the one import-linter checks). Then the ten largest ``app`` modules by lines.

    PYTHONPATH=. .venv/bin/python tools/import_closure.py [--root DIR]

``--root`` is a checkout whose ``app`` package is measured (default: this one); run it against
an older checkout to compare before and after.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grimp

TRANSPORT = (
    "app.xds.server",
    "app.xds.connection",
    "app.xds.sotw",
    "app.xds.delta",
    "app.xds.watch",
    "app.xds.response",
    "app.xds.resource",
    "app.xds.limits",
    "app.xds.errors",
    "app.xds.source",
    "app.xds.type_urls",
)
LARGEST = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    if not (root / "app" / "__init__.py").is_file():
        parser.error(f"{root}: no app package there")
    sys.path.insert(0, str(root))
    graph = grimp.build_graph("app", cache_dir=None)
    print(f"import closure of the xDS transport modules ({root})")
    for module in TRANSPORT:
        if module not in graph.modules:
            print(f"  {module:<22} (absent)")
            continue
        closure = {m for m in graph.find_upstream_modules(module) if m.split(".")[0] == "app"}
        print(f"  {module:<22} {len(closure):>4} app modules")
    sizes = sorted(
        (
            (sum(1 for _ in path.open(encoding="utf-8")), path.relative_to(root))
            for path in (root / "app").rglob("*.py")
        ),
        reverse=True,
    )
    print(f"the {LARGEST} largest app modules (lines)")
    for lines, path in sizes[:LARGEST]:
        print(f"  {lines:>6}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
