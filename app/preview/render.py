"""A preview as ``-o json`` (the shape documented in the README), as a readable summary (read
from that JSON, so ``--server`` prints the same) and as the unified diffs of ``--show-diff``."""

from __future__ import annotations

from typing import Any

from app.preview.push import Preview
from app.xds.type_urls import SHORT_NAMES


def preview_json(preview: Preview) -> dict[str, Any]:
    """``{"change": [...], "rejected": [...], "proxies": [{"id", "types": {...}}], "unaffected": N}``."""
    proposal = preview.proposal
    return {
        "change": [{"kind": c.kind, "namespace": c.namespace, "name": c.name, "op": c.op} for c in proposal.change],
        "rejected": [
            {"kind": r.kind, "namespace": r.namespace, "name": r.name, "field": r.field, "reason": r.reason}
            for r in proposal.rejected
        ],
        "proxies": [
            {
                "id": p.id,
                "types": {
                    type_url: {
                        "added": list(d.added),
                        "modified": list(d.modified),
                        "removed": list(d.removed),
                        "bytes": d.bytes,
                    }
                    for type_url, d in p.types.items()
                },
            }
            for p in preview.proxies
        ],
        "unaffected": preview.unaffected,
    }


def rejection_messages(preview: Preview) -> list[str]:
    """Each rejected object's line, as ``pilotfish validate`` prints it."""
    return [r.message for r in preview.proposal.rejected]


def unified_diffs(preview: Preview) -> str:
    """Every modified resource's unified diff, proxy by proxy."""
    out: list[str] = []
    for p in preview.proxies:
        for d in p.types.values():
            out.extend(f"# {p.id}\n{text}" for text in d.diffs)
    return "".join(out)


def summary(doc: dict[str, Any], messages: list[str]) -> str:
    """The readable summary of a preview's JSON (``messages``: the rejections' lines)."""
    lines = [f"{c['op']} {c['kind']} {c['namespace']}/{c['name']}".replace(" /", " ") for c in doc["change"]]
    lines.extend(f"rejected: {m}" for m in messages)
    proxies = doc["proxies"]
    lines.append(f"proxies reached: {len(proxies)} of {len(proxies) + doc['unaffected']}")
    for p in proxies:
        lines.append(f"  {p['id']}")
        for type_url, d in p["types"].items():
            short = SHORT_NAMES.get(type_url, type_url)
            counts = f"added {len(d['added'])}, modified {len(d['modified'])}, removed {len(d['removed'])}"
            lines.append(f"    {short}: {counts}, {d['bytes']} bytes")
    return "\n".join(lines) + "\n"


def report(preview: Preview) -> dict[str, Any]:
    """What ``POST /debug/diff`` answers: the preview's JSON, the rejections' lines and the
    unified diffs (empty unless asked for)."""
    return {"preview": preview_json(preview), "messages": rejection_messages(preview), "diff": unified_diffs(preview)}
