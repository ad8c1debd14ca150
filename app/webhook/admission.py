"""Validating admission, as istiod's webhook answers it (pkg/webhooks/validation/server), with
the validation the file source applies (``load_object``): pure, no I/O.

An AdmissionReview v1 comes in; the same review goes out with ``response`` set: allowed, or not
with a message naming the object, the field and the reason. CREATE and UPDATE are validated,
other operations allowed; a top-level field other than apiVersion, kind, metadata, spec and
status is rejected, as istiod does. Kinds pilotfish does not read are allowed (istiod rejects
types outside its schema set, but that set holds every Istio kind; pilotfish's does not yet,
and must not block config istiod would accept).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.config.istio import istio_warnings
from app.config.loader import load_object
from app.config.model import INTERNAL_KINDS, Kind

ADMISSION_V1 = "admission.k8s.io/v1"
_TOP_LEVEL = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_VALIDATED = frozenset({"CREATE", "UPDATE"})


class ReviewError(ValueError):
    """The body is not an AdmissionReview that can be answered."""


def review(body: Any, *, system_namespace: str = "istio-system") -> dict[str, Any]:
    """The AdmissionReview answering ``body`` (a decoded JSON document)."""
    if not isinstance(body, Mapping) or body.get("kind") != "AdmissionReview":
        raise ReviewError("want an AdmissionReview object")
    request = body.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        raise ReviewError("an AdmissionReview needs a request with a uid")
    response = {"uid": request["uid"], **_decide(request, system_namespace)}
    return {"apiVersion": body.get("apiVersion", ADMISSION_V1), "kind": "AdmissionReview", "response": response}


def _decide(request: Mapping[str, Any], system_namespace: str) -> dict[str, Any]:
    if request.get("operation") not in _VALIDATED:
        return {"allowed": True}
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return _denied("cannot decode configuration: the request carries no object")
    kind = obj.get("kind")
    try:
        known = Kind(kind) if isinstance(kind, str) else None
    except ValueError:
        known = None
    if known is None or known in INTERNAL_KINDS:
        return {"allowed": True}  # not a kind pilotfish reads
    raw_meta = obj.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    name = f"{meta.get('namespace') or request.get('namespace') or ''}/{meta.get('name', '')}".lstrip("/")
    unknown = sorted(set(obj) - _TOP_LEVEL)
    if unknown:
        return _denied(f"unknown field {unknown[0]!r} on {kind} resource {name}")
    if not meta.get("namespace") and request.get("namespace"):
        obj = {**obj, "metadata": {**meta, "namespace": request["namespace"]}}
    result = load_object(obj, "", system_namespace=system_namespace)
    if result.rejected:
        return _denied(f"configuration is invalid: {result.rejected[0].error}")
    # what pilotfish cannot honour yet reaches the user as kubectl's "Warning:" lines
    warnings = [w for o in result.objects for w in istio_warnings(o.spec)]
    return {"allowed": True, **({"warnings": warnings} if warnings else {})}


def _denied(message: str) -> dict[str, Any]:
    return {"allowed": False, "status": {"code": 400, "message": message}}
