"""Two control planes' config for one proxy, compared type by type."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import any_pb2

from app.debug.xds_diff.diff import TYPES, Expected, Judged, judge
from app.debug.xds_diff.normalize import resource, substitute

Fetched = Mapping[str, Mapping[str, any_pb2.Any]]  # short type -> name -> resource (app/xds/fetch.py)


def plain(fetched: Fetched, type_: str, placeholders: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One type's resources as plain data, by name; ``placeholders`` replace what differs run to
    run (the differential test's random namespace names)."""
    out = {name: resource(r) for name, r in fetched.get(type_, {}).items()}
    return substitute(out, dict(placeholders)) if placeholders else out


def compare(
    istiod: Fetched, pilotfish: Fetched, expected: Sequence[Expected], proxy: str = "", types: Sequence[str] = TYPES
) -> list[Judged]:
    """Each type either side sent, judged against the reviewed list (``proxy``: the workload
    name the list's ``proxy`` globs match)."""
    return [
        judge(t, plain(istiod, t), plain(pilotfish, t), expected, proxy) for t in types if t in istiod or t in pilotfish
    ]
