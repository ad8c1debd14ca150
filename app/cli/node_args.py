"""The flags that describe one proxy's node (id and metadata as pilot-agent sends them), shared
by ``config-dump`` and ``compare-istiod``."""

from __future__ import annotations

import argparse
import json
from typing import Any


def _parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"label {part!r}: want key=value")
        labels[key] = value
    return labels


def _parse_metadata(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"metadata {text!r}: want KEY=VALUE")
    return key, value


def _parse_object(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--metadata-json: {e}") from None
    if not isinstance(found, dict):
        raise argparse.ArgumentTypeError("--metadata-json: want a JSON object")
    return found


def add_node_arguments(
    parser: argparse.ArgumentParser, id_flags: tuple[str, ...] = ("--node-id",), required: bool = True
) -> None:
    parser.add_argument(
        *id_flags, dest="node_id", required=required, help="TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local"
    )
    parser.add_argument("--namespace", help="the proxy's namespace (default: from the node id)")
    parser.add_argument("--labels", type=_parse_labels, default=None, help="k=v,k=v workload labels")
    parser.add_argument("--ip", help="the proxy's IPs, a,b (default: the node id's)")
    parser.add_argument(
        "--metadata",
        type=_parse_metadata,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="node metadata as the proxy sends it (repeatable): DNS_CAPTURE=true, NETWORK=n1, CLUSTER_ID=c1, ...",
    )
    parser.add_argument(
        "--metadata-json",
        type=_parse_object,
        default={},
        metavar="JSON",
        help="the node metadata as one JSON object (e.g. from the proxy's bootstrap); the flags above add to it",
    )


def node_metadata(args: argparse.Namespace) -> dict[str, Any]:
    """The node metadata the flags give (``--metadata-json``, ``--metadata`` pairs, then the
    dedicated flags)."""
    metadata: dict[str, Any] = {**args.metadata_json, **dict(args.metadata)}
    if args.namespace:
        metadata["NAMESPACE"] = args.namespace
    if args.labels is not None:
        metadata["LABELS"] = args.labels
    if args.ip:
        metadata["INSTANCE_IPS"] = args.ip
    return metadata
