"""Istio's certificate service (istio.io/api security/v1alpha1 ca.proto, package istio.v1.auth):
what pilot-agent calls on the secure port, ``/istio.v1.auth.IstioCertificateService/CreateCertificate``."""

from app.api.istio.security.v1alpha1.ca_pb2 import IstioCertificateRequest, IstioCertificateResponse

__all__ = ["IstioCertificateRequest", "IstioCertificateResponse"]
