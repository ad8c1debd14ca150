"""``/debug/push_status``'s history: the latest pushes, each with what triggered it (its config
keys and endpoint shards), the proxies it reached and the resources it sent them by type.

A push is recorded when it fires (``fired``) and filled in as each stream it was queued for
writes its responses (``reached``; a request merged in the push queue carries the versions of
every push it answers, and counts for each). Bounded: ``limit`` pushes, and per push at most
``max_proxies`` proxy ids (the count stays exact). Pure: the runtime feeds it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_PUSHES = 100
MAX_PROXY_IDS = 1000


@dataclass(slots=True)
class _Record:
    summary: dict[str, Any]
    proxies: list[str] = field(default_factory=list)
    reached: int = 0
    resources: dict[str, int] = field(default_factory=dict)  # short type -> resources sent


class PushHistory:
    def __init__(self, limit: int = MAX_PUSHES, max_proxies: int = MAX_PROXY_IDS) -> None:
        self._limit = limit
        self._max_proxies = max_proxies
        self._records: OrderedDict[int, _Record] = OrderedDict()

    def fired(self, version: int, summary: dict[str, Any]) -> None:
        """The push of snapshot ``version`` fired; ``summary`` is its request and times."""
        self._records[version] = _Record(summary)
        while len(self._records) > self._limit:
            self._records.popitem(last=False)

    def reached(self, versions: Iterable[int], proxy: str, sent: Mapping[str, int]) -> None:
        """A stream of ``proxy`` wrote ``sent`` resources by type for the pushes ``versions``."""
        for version in versions:
            record = self._records.get(version)
            if record is None:
                continue  # fell out of the history
            record.reached += 1
            if len(record.proxies) < self._max_proxies:
                record.proxies.append(proxy)
            for type_name, count in sent.items():
                record.resources[type_name] = record.resources.get(type_name, 0) + count

    def json(self) -> list[dict[str, Any]]:
        """The pushes, newest first."""
        return [
            {
                **r.summary,
                "proxiesReached": r.reached,
                "proxies": sorted(r.proxies),
                "resourcesSentByType": dict(sorted(r.resources.items())),
            }
            for r in reversed(self._records.values())
        ]
