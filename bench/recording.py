"""What the transport floor replays: the serialized responses pilotfish sent to one sidecar per
namespace (the first one of the namespace in the fleet), recorded by the load client.

``initial`` holds each namespace's first response of every type (what a connecting sidecar is
answered), once its sidecar got them all; ``pushes`` holds, per push scenario, every response
that namespace's sidecar received in the push's window, in order. The floor server answers every
sidecar of a namespace with that namespace's bytes (a namespace whose sidecar did not get them
all, e.g. in a connect storm that timed out, borrows the first recorded namespace's). Only Envoy's
own types are recorded (CDS, EDS, LDS, RDS): the floor's sidecars are Envoy-only, so a recorded
agent's name tables (NDS) would reach sidecars that never asked for them. The file is a pickle
of plain dicts: written and read by this benchmark only.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app.xds.client import ENVOY_ORDER

if TYPE_CHECKING:
    from bench.envoy import SimulatedEnvoy


@dataclass
class Recording:
    protocol: str
    initial: dict[str, dict[str, bytes]] = field(default_factory=dict)  # namespace -> type_url -> response
    pushes: dict[str, dict[str, list[bytes]]] = field(default_factory=dict)  # scenario -> namespace -> responses

    def initial_for(self, namespace: str) -> dict[str, bytes]:
        return self.initial.get(namespace) or next(iter(self.initial.values()), {})

    def push_for(self, scenario: str, namespace: str) -> list[bytes]:
        recorded = self.pushes.get(scenario, {})
        if namespace in self.initial:
            return recorded.get(namespace, [])
        return recorded.get(next(iter(self.initial), ""), [])

    def save(self, path: Path) -> None:
        path.write_bytes(pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL))

    @staticmethod
    def load(path: Path) -> Recording:
        recording = pickle.loads(path.read_bytes())
        assert isinstance(recording, Recording)
        return recording


class Recorder:
    """Attached to one sidecar per namespace; ``window`` names the push being measured, if any.
    A namespace's first responses count only once its sidecar has them all (CDS, EDS, LDS, RDS)."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.window: str | None = None
        self._first: dict[str, dict[str, bytes]] = {}  # namespace -> type_url -> response, until complete

    def __call__(self, envoy: SimulatedEnvoy, raw: bytes) -> None:
        namespace = envoy.identity.namespace
        envoy_type = envoy.events[-1].type_url in ENVOY_ORDER
        if namespace not in self.recording.initial:
            first = self._first.setdefault(namespace, {})
            if envoy_type:
                first.setdefault(envoy.events[-1].type_url, raw)
            if envoy.complete_at is not None:  # an agent may complete on its name table
                self.recording.initial[namespace] = self._first.pop(namespace)
        if self.window is not None and envoy_type:
            self.recording.pushes.setdefault(self.window, {}).setdefault(namespace, []).append(raw)
