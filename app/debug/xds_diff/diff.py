"""A structured, per-resource diff of two control planes' plain resources (normalize.py), and the
reviewed list of intended differences (expected_differences.yaml) it is judged against.

A path names a field the way a reader finds it in a config dump: ``filter_chains[0].filters
[name=envoy.filters.network.tcp_proxy].typed_config.stat_prefix``. A list whose items all have
a ``name`` is matched by name (``[name=X]``; a repeated name by its occurrence, ``[name=X#2]``),
and a different order of the common names is one difference at ``PATH[<order>]``; a listener's
filter chains are matched by their ``filter_chain_match`` (Envoy never reads their order); any
other list is compared item by item, and as a whole when the lengths differ.

An entry of the reviewed list covers a difference when its ``proxy`` glob (default ``*``) matches
the workload whose sidecar asked, its ``type`` matches, its ``resource``
glob matches the resource name, and its ``path`` glob matches the difference's path or one of its
ancestors (``*`` matches any characters). An entry that gives ``istiod`` and/or ``pilotfish``
values covers only a difference with exactly those values: a changed value is a new difference.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ABSENT = "<absent>"
EXPECTED_FILE = Path(__file__).with_name("expected_differences.yaml")
TYPES = ("cds", "eds", "lds", "rds", "nds")


@dataclass(frozen=True)
class Difference:
    type: str
    resource: str
    path: str  # "" for the whole resource
    istiod: Any
    pilotfish: Any

    def render(self) -> str:
        where = f"{self.type} {self.resource}" + (f" {self.path}" if self.path else "")
        return f"{where}\n    istiod:    {_short(self.istiod)}\n    pilotfish: {_short(self.pilotfish)}"


@dataclass(frozen=True)
class Expected:
    """One reviewed entry of expected_differences.yaml."""

    type: str
    resource: str  # a glob over resource names
    path: str  # a glob over paths; covers the path and everything under it
    reason: str
    defect: bool = False
    values: Mapping[str, Any] = field(default_factory=dict)  # "istiod" / "pilotfish" -> the exact value
    proxy: str = "*"  # a glob over the workloads whose sidecar the entry is about

    def covers(self, d: Difference) -> bool:
        if d.type != self.type or not fnmatch.fnmatchcase(d.resource, self.resource):
            return False
        if not any(_glob(self.path).fullmatch(p) for p in _ancestors(d.path)):
            return False
        return all(_same(getattr(d, side), value) for side, value in self.values.items())


def load_expected(path: Path = EXPECTED_FILE) -> list[Expected]:
    """The reviewed list; a malformed entry fails with its index and what is wrong."""
    entries = yaml.safe_load(path.read_text()) or []
    out = []
    for i, entry in enumerate(entries):
        missing = {"type", "resource", "path", "reason"} - set(entry)
        if missing or entry["type"] not in TYPES or not str(entry["reason"]).strip():
            need = f"needs type (one of {TYPES}), resource, path and a reason"
            raise ValueError(f"{path.name} entry {i}: {need}: {entry}")
        values = {side: entry[side] for side in ("istiod", "pilotfish") if side in entry}
        if entry.get("defect") and len(values) != 2:
            raise ValueError(f"{path.name} entry {i}: a defect gives both values (istiod, pilotfish): {entry}")
        out.append(Expected(entry["type"], entry["resource"], entry["path"], entry["reason"],
                            bool(entry.get("defect")), values, str(entry.get("proxy", "*"))))  # fmt: skip
    return out


def diff_resources(type_: str, istiod: Mapping[str, Any], pilotfish: Mapping[str, Any]) -> list[Difference]:
    """Every difference between two sets of one type's plain resources, by resource name."""
    out = []
    for name in sorted(istiod.keys() | pilotfish.keys()):
        if name not in pilotfish:
            out.append(Difference(type_, name, "", "present", ABSENT))
        elif name not in istiod:
            out.append(Difference(type_, name, "", ABSENT, "present"))
        else:
            out.extend(Difference(type_, name, p, a, b) for p, a, b in diff_values(istiod[name], pilotfish[name]))
    return out


def diff_values(a: Any, b: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            sub = f"{path}.{key}" if path else key
            if key not in b:
                yield sub, a[key], ABSENT
            elif key not in a:
                yield sub, ABSENT, b[key]
            else:
                yield from diff_values(a[key], b[key], sub)
    elif isinstance(a, list) and isinstance(b, list):
        yield from _diff_lists(a, b, path)
    elif a != b:
        yield path, a, b


def _diff_lists(a: list[Any], b: list[Any], path: str) -> Iterator[tuple[str, Any, Any]]:
    matches_a, matches_b = _chain_matches(path, a), _chain_matches(path, b)
    if matches_a is not None and matches_b is not None:
        # Envoy picks a listener's filter chain by its match criteria, most specific first,
        # never by list order: chains are compared by match, and their order is no difference
        by_a, by_b = dict(zip(matches_a, a, strict=True)), dict(zip(matches_b, b, strict=True))
        for match in [*matches_a, *(m for m in matches_b if m not in by_a)]:
            yield from diff_values(by_a.get(match, ABSENT), by_b.get(match, ABSENT), f"{path}[match={match}]")
        return
    names_a, names_b = _names(a), _names(b)
    if names_a is not None and names_b is not None:
        by_a, by_b = dict(zip(names_a, a, strict=True)), dict(zip(names_b, b, strict=True))
        common_a = [n for n in names_a if n in by_b]
        common_b = [n for n in names_b if n in by_a]
        if common_a != common_b:
            yield f"{path}[<order>]", common_a, common_b
        for name in [*names_a, *(n for n in names_b if n not in by_a)]:
            sub = f"{path}[name={name}]"
            yield from diff_values(by_a.get(name, ABSENT), by_b.get(name, ABSENT), sub)
    elif len(a) != len(b):
        yield path, a, b
    else:
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from diff_values(x, y, f"{path}[{i}]")


def _chain_matches(path: str, items: Sequence[Any]) -> list[str] | None:
    """A listener's filter chains' distinct ``filter_chain_match``es (compact JSON), if that is
    what ``items`` are and no two chains share one."""
    if not path.endswith("filter_chains") or not all(isinstance(i, dict) for i in items):
        return None
    matches = [json.dumps(i.get("filter_chain_match", {}), sort_keys=True, separators=(",", ":")) for i in items]
    return matches if len(set(matches)) == len(matches) else None


def _names(items: Sequence[Any]) -> list[str] | None:
    """The items' names, if every item is a dict with one; a name repeated (three RBAC filters
    in a row) is told apart by its occurrence: ``rbac``, ``rbac#2``, ``rbac#3``."""
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    seen: dict[str, int] = {}
    out = []
    for item in items:
        count = seen[item["name"]] = seen.get(item["name"], 0) + 1
        out.append(item["name"] if count == 1 else f"{item['name']}#{count}")
    return out


def _ancestors(path: str) -> Iterator[str]:
    """``path`` and every path above it (``a.b[name=x].c`` -> itself, ``a.b[name=x]``, ``a.b``, ``a``);
    dots inside a ``[...]`` are part of a name, not separators."""
    yield path
    depth = 0
    for i in range(len(path) - 1, 0, -1):
        char = path[i]
        if char == "]":
            depth += 1
        elif char == "[":
            depth -= 1
            if depth == 0:
                yield path[:i]
        elif char == "." and depth == 0:
            yield path[:i]


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def _same(actual: Any, reviewed: Any) -> bool:
    return json.dumps(actual, sort_keys=True) == json.dumps(reviewed, sort_keys=True)


def _short(value: Any, limit: int = 600) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@dataclass
class Judged:
    """One type's comparison for one proxy: what was compared and how each difference is judged."""

    type: str
    compared: int  # resources on either side
    identical: int
    listed: list[tuple[Difference, Expected]]
    unlisted: list[Difference]

    @property
    def defects(self) -> list[tuple[Difference, Expected]]:
        return [(d, e) for d, e in self.listed if e.defect]

    @property
    def defective(self) -> int:
        """Resources with a known defect or an unlisted difference."""
        return len({d.resource for d, _ in self.defects} | {d.resource for d in self.unlisted})

    @property
    def intended_only(self) -> int:
        """Resources that differ, but only as the list intends."""
        return self.compared - self.identical - self.defective


def judge(
    type_: str, istiod: Mapping[str, Any], pilotfish: Mapping[str, Any], expected: Sequence[Expected], proxy: str = ""
) -> Judged:
    """One type's resources of one proxy (the workload name ``proxy``) judged against the list."""
    differences = diff_resources(type_, istiod, pilotfish)
    expected = [e for e in expected if fnmatch.fnmatchcase(proxy, e.proxy)]
    differing = {d.resource for d in differences}
    names = istiod.keys() | pilotfish.keys()
    listed, unlisted = [], []
    for d in differences:
        entry = next((e for e in expected if e.covers(d)), None)
        if entry is None:
            unlisted.append(d)
        else:
            listed.append((d, entry))
    return Judged(type_, len(names), len(names - differing), listed, unlisted)


def report(title: str, judged: Judged, show_intended: bool = False) -> str:
    """A readable account: counts, each unlisted difference in full, the listed ones by entry
    (each in full too with ``show_intended``)."""
    lines = [
        f"{title} {judged.type}: {judged.compared} resources: {judged.identical} identical, "
        f"{judged.intended_only} differ only as intended, {judged.defective} with defects; differences: "
        f"{len(judged.listed)} listed ({len(judged.defects)} known defects), {len(judged.unlisted)} unlisted",
    ]
    for d in judged.unlisted:
        lines.append("  UNLISTED " + d.render())
    by_entry: dict[int, list[Difference]] = {}
    entries: dict[int, Expected] = {}
    for d, e in judged.listed:
        by_entry.setdefault(id(e), []).append(d)
        entries[id(e)] = e
    for key, ds in by_entry.items():
        e = entries[key]
        kind = "defect" if e.defect else "intended"
        lines.append(f"  {kind} x{len(ds)}: {e.resource} {e.path}: {e.reason.strip().splitlines()[0]}")
        if show_intended:
            lines.extend("    " + d.render().replace("\n", "\n    ") for d in ds)
    return "\n".join(lines)


def judged_json(judged: Judged, show_intended: bool = False) -> dict[str, Any]:
    """``report`` as data: the counts, the unlisted differences, and the listed ones by reason."""
    out: dict[str, Any] = {
        "type": judged.type,
        "resources": judged.compared,
        "identical": judged.identical,
        "intended_only": judged.intended_only,
        "with_defects": judged.defective,
        "unlisted": [dataclasses.asdict(d) for d in judged.unlisted],
    }
    listed = [{**dataclasses.asdict(d), "reason": e.reason.strip(), "defect": e.defect} for d, e in judged.listed]
    out["listed"] = listed if show_intended else len(listed)
    return out
