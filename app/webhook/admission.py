"""Validating admission, as istiod's webhook answers it (pkg/webhooks/validation/server), with
the validation the file source applies (``load_object``): pure, no I/O.

An AdmissionReview v1 comes in; the same review goes out with ``response`` set: allowed, or not
with a message naming the object, the field and the reason. CREATE and UPDATE are validated,
other operations allowed; once the object is valid, a top-level field other than apiVersion,
kind, metadata, spec and status is rejected, as istiod does (after ValidateConfig, checkFields).
Kinds are told apart by API group and kind: kinds pilotfish does not read are allowed (istiod
rejects types outside its schema set, but that set holds every Istio kind; pilotfish's does not
yet, and must not block config istiod would accept). A field the CRD does not define is refused
(the API server has dropped or refused it before any webhook sees the object).

A body naming a key twice in one JSON object is refused, as Kubernetes' strict decoding refuses
it (Go's decoder, and Python's, would keep the last).

Whatever the body holds, the answer is a review: a body that is not JSON (nested too deep for
the decoder included), an envelope of the wrong shape (a list where the operation goes) or a
bug is refused with a message, never an HTTP 500 that a ``failurePolicy: Ignore`` would turn
into an admitted object. ``review_body`` is what the server runs in a worker process.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from app.config.loader import TOP_LEVEL_FIELDS, load_object
from app.config.objects import ISTIO_KINDS
from app.config.schema import printable_path, type_name
from app.config.validation.spec import object_warnings

logger = logging.getLogger(__name__)

ADMISSION_V1 = "admission.k8s.io/v1"
_API_VERSIONS = frozenset({ADMISSION_V1, "admission.k8s.io/v1beta1"})
_VALIDATED = frozenset({"CREATE", "UPDATE"})


# what a review tells the server to count (galley_validation_*), under this key of the answer,
# which the server takes off before it answers: {"resource": [group, version, resource],
# "reason": one of istiod's reasons, or "" for a pass}; absent: nothing counted
OUTCOME = "pilotfish.io/outcome"
# istiod's reasons (pkg/webhooks/validation/server/monitoring.go)
UNSUPPORTED_OPERATION = "unsupported_operation"
YAML_DECODE_ERROR = "yaml_decode_error"
INVALID_RESOURCE = "invalid_resource"


class ReviewError(ValueError):
    """The body is not an AdmissionReview that can be answered."""


def review(body: Any, *, system_namespace: str = "istio-system") -> dict[str, Any]:
    """The AdmissionReview answering ``body`` (a decoded JSON document)."""
    if not isinstance(body, Mapping) or body.get("kind") != "AdmissionReview":
        raise ReviewError("want an AdmissionReview object")
    request = body.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        raise ReviewError("an AdmissionReview needs a request with a uid")
    reason: str | None
    try:
        decision, reason = _decide(request, system_namespace)
    except RecursionError:
        decision = _denied("configuration is invalid: nested too deeply to validate")
        reason = INVALID_RESOURCE
    except Exception as e:  # a bug, not bad input: refused (admitting unvalidated config is worse)
        logger.exception("reviewing an admission request failed")
        decision = _denied(f"internal error validating this object ({type(e).__name__}); please report it")
        reason = None
    api_version = body.get("apiVersion")
    if not isinstance(api_version, str) or api_version not in _API_VERSIONS:
        api_version = ADMISSION_V1
    out = answer(request["uid"], decision, api_version)
    # as istiod's reportValidationFailed, a dry run's failure is not counted (its pass is)
    if reason is not None and not (reason and request.get("dryRun") is True):
        resource = request.get("resource")
        gvr = [resource.get(k) for k in ("group", "version", "resource")] if isinstance(resource, Mapping) else []
        out[OUTCOME] = {"resource": [v if isinstance(v, str) else "" for v in gvr] or ["", "", ""], "reason": reason}
    return out


def review_body(body: bytes, system_namespace: str = "istio-system") -> dict[str, Any]:
    """The AdmissionReview answering an HTTP body: ``review`` of its JSON, or a refusal saying
    why it could not be read (as istiod, with no uid when there is no request to take it from)."""
    try:
        decoded = json.loads(body, object_pairs_hook=_object)
    except RecursionError:
        return undecodable("could not decode body: JSON nested too deeply")
    except DuplicateKey as e:
        return undecodable(f"could not decode body: {e}", uid_in(body))
    except ValueError as e:
        return undecodable(f"could not decode body: {e}")
    try:
        return review(decoded, system_namespace=system_namespace)
    except ReviewError as e:
        return undecodable(f"could not decode body: {e}")


class DuplicateKey(ValueError):
    """A JSON object names a key twice."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when it names a key twice (sigs.k8s.io/json's strict decoding:
    'duplicate field')."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"duplicate key {printable_path(json.dumps(key))} in a JSON object")
            seen.add(key)
    return out


def answer(uid: str, decision: Mapping[str, Any], api_version: str = ADMISSION_V1) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": {"uid": uid, **decision}}


def undecodable(message: str, uid: str = "") -> dict[str, Any]:
    """A refusal of a body that is not a review pilotfish could read."""
    return answer(uid, _denied(message))


# the uid of a review the server will not decode (too large, or its validation failed): the API
# server writes ``request.uid`` first (Go marshals AdmissionRequest's fields in order), so it is in
# the first bytes; answering with it shows the user pilotfish's message instead of a call failure
_UID = re.compile(rb'"request"\s*:\s*\{\s*"uid"\s*:\s*"([0-9A-Za-z-]{1,128})"')


def uid_in(prefix: bytes) -> str:
    """The request uid at the start of a review's JSON text, or ""."""
    found = _UID.search(prefix[:1024])
    return found.group(1).decode() if found else ""


def _decide(request: Mapping[str, Any], system_namespace: str) -> tuple[dict[str, Any], str | None]:
    """The decision, and what istiod counts of it: "" a pass, a failure's reason, None nothing."""
    operation = request.get("operation")
    if operation is not None and not isinstance(operation, str):  # null reads as "", as in Go
        return _denied(f"could not decode request: operation must be a string, got {type_name(operation)}"), None
    if operation not in _VALIDATED:
        return {"allowed": True}, UNSUPPORTED_OPERATION  # allowed, and counted failed, as istiod
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return _denied("cannot decode configuration: the request carries no object"), YAML_DECODE_ERROR
    raw_meta = obj.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    if not meta.get("namespace") and request.get("namespace"):
        obj = {**obj, "metadata": {**meta, "namespace": request["namespace"]}}
    result = load_object(obj, "", system_namespace=system_namespace)
    if result.rejected:
        return _denied(f"configuration is invalid: {result.rejected[0].error}"), INVALID_RESOURCE
    if not result.objects:  # not a kind pilotfish reads (by API group and kind)
        # an Istio kind istiod would apply: admitted (istiod's webhook would), and the user told
        return {"allowed": True, **({"warnings": result.unsupported} if result.unsupported else {})}, ""
    [read] = result.objects
    unknown = sorted(str(key) for key in obj if key not in TOP_LEVEL_FIELDS) if read.kind in ISTIO_KINDS else []
    if unknown:
        name = f"{read.meta.namespace}/{read.meta.name}".lstrip("/")
        message = f"unknown field {printable_path(repr(unknown[0]))} on {read.kind} resource {name}"
        return _denied(message), INVALID_RESOURCE  # istiod's checkFields reason
    # what pilotfish cannot honour yet reaches the user as kubectl's "Warning:" lines
    warnings = [w for o in result.objects for w in object_warnings(o)]
    return {"allowed": True, **({"warnings": warnings} if warnings else {})}, ""


def _denied(message: str) -> dict[str, Any]:
    return {"allowed": False, "status": {"code": 400, "message": message}}
