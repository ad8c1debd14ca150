"""A config object named as the cause of something the transport reports (a rejected resource):
plain strings, so the transport, the metrics and the tracer can carry it knowing nothing of the
model (app/xds/source.py's ``ResourceSource.rejected`` makes them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Cause:
    """A config object: its kind, namespace and name, and where this version came from (the file
    it was read from, or "" from Kubernetes) and its resourceVersion ("" when not known)."""

    kind: str
    namespace: str
    name: str
    file: str = ""
    resource_version: str = ""

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        origin = self.file or (f"resourceVersion {self.resource_version}" if self.resource_version else "")
        return f"{self.kind} {where}" + (f" ({origin})" if origin else "")

    def json(self) -> dict[str, str]:
        out = {"kind": self.kind, "namespace": self.namespace, "name": self.name}
        if self.file:
            out["file"] = self.file
        if self.resource_version:
            out["resourceVersion"] = self.resource_version
        return out
