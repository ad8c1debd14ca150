"""The security.istio.io kinds pilotfish reads (PeerAuthentication, AuthorizationPolicy,
RequestAuthentication) and their parts: Istio's own messages, generated from istio.io/api
security/v1beta1 (v1 is the same schema), with the istio.type.v1beta1 selectors they use."""

from app.api.istio.security.v1beta1.authorization_policy_pb2 import (
    AuthorizationPolicy,
    Condition,
    Operation,
    Rule,
    Source,
)
from app.api.istio.security.v1beta1.peer_authentication_pb2 import PeerAuthentication
from app.api.istio.security.v1beta1.request_authentication_pb2 import (
    ClaimToHeader,
    JWTHeader,
    JWTRule,
    RequestAuthentication,
)
from app.api.istio.type.v1beta1.selector_pb2 import PolicyTargetReference, WorkloadSelector

__all__ = [
    "AuthorizationPolicy",
    "ClaimToHeader",
    "Condition",
    "JWTHeader",
    "JWTRule",
    "Operation",
    "PeerAuthentication",
    "PolicyTargetReference",
    "RequestAuthentication",
    "Rule",
    "Source",
    "WorkloadSelector",
]
