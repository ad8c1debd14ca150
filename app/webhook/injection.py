"""The mutating admission webhook's decision, as istiod's ``/inject`` answers (pkg/kube/inject
webhook.go inject): an AdmissionReview of a Pod in, the same review out with ``response`` allowed
and, when the pod gets a sidecar, the JSONPatch that injects it. A pod the policy skips is allowed
unchanged; one that cannot be injected is refused with istiod's reason. Pure; the server runs
``inject_review_body`` in a worker process.

Whether the proxy is a native sidecar is the server's decision (``inputs.native_sidecars``). With
ENABLE_NATIVE_SIDECARS=auto it may hang on the pod's node, which only the decoded review says: the
server decides for an unbound pod (``decided_for=""``), and a pod bound to another node is not
injected but answered ``{BOUND_NODE: its node}``, for the server to decide for that node and ask
again."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from typing import Any

from app.errors import PilotfishError, SettingsError
from app.inject.inputs import InjectionInputs, injector_for
from app.inject.patch import create_patch
from app.inject.pipeline import InjectionError
from app.inject.podjson import go_pod
from app.webhook.admission import ADMISSION_V1, answer, undecodable

logger = logging.getLogger(__name__)
_API_VERSIONS = frozenset({ADMISSION_V1, "admission.k8s.io/v1beta1"})
# the key of the answer that asks the server for the decision on the pod's node
BOUND_NODE = "boundNode"


def inject_review_body(
    body: bytes, inputs: InjectionInputs, path: str = "/inject", decided_for: str | None = None
) -> dict[str, Any]:
    """The review answered; ``decided_for``: the node ("" none) ``inputs.native_sidecars`` was
    decided for, when it holds only for pods bound there (None: for every pod)."""
    try:
        review = json.loads(body)
    except (ValueError, RecursionError) as e:
        return undecodable(f"could not decode body: {e}")
    if not isinstance(review, Mapping) or review.get("kind") != "AdmissionReview":
        return undecodable("could not decode body: want an AdmissionReview object")
    request = review.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        return undecodable("could not decode body: an AdmissionReview needs a request with a uid")
    node = _node_name(request)
    if decided_for is not None and node != decided_for:
        return {BOUND_NODE: node}
    api_version = review.get("apiVersion")
    if api_version not in _API_VERSIONS:
        api_version = ADMISSION_V1
    return answer(request["uid"], inject_decision(request, inputs, path), str(api_version))


def inject_decision(request: Mapping[str, Any], inputs: InjectionInputs, path: str) -> dict[str, Any]:
    pod = request.get("object")
    if not isinstance(pod, Mapping) or not isinstance(pod.get("metadata", {}), Mapping):
        return _refused("could not unmarshal raw object: the request carries no pod")
    # the patch is from the pod as istiod holds it: no managedFields (large, and no part of
    # injection), the request's namespace when the pod names none
    original = go_pod(pod)
    meta = original.setdefault("metadata", {})
    meta.pop("managedFields", None)
    namespace = str(meta.get("namespace") or request.get("namespace") or "")
    if namespace:
        meta["namespace"] = namespace
    try:
        injected = injector_for(inputs).inject(original, namespace, path, inputs.proxy_configs)
    except (InjectionError, SettingsError, PilotfishError) as e:
        logger.info("pod injection failed: %s", e)
        return _refused(str(e))
    except Exception as e:  # a bug, or a pod field of the wrong type: refused, with the reason
        logger.exception("injecting a pod failed")
        return _refused(f"internal error injecting this pod ({type(e).__name__}: {e}); please report it")
    if injected is None:
        return {"allowed": True}
    patch = create_patch(original, injected)
    return {"allowed": True, "patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(patch).encode()).decode()}


def _node_name(request: Mapping[str, Any]) -> str:
    """The pod's ``spec.nodeName`` ("" when unbound, or when the pod is too malformed to say:
    then it is refused as such)."""
    pod = request.get("object")
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) else ""


def _refused(message: str) -> dict[str, Any]:
    """toAdmissionResponse: allowed false, with the error as the status message."""
    return {"allowed": False, "status": {"message": message}}
