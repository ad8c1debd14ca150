"""SDS generator: the ``credentialName`` secrets a proxy asks for by name over ADS, as istiod's
SecretGen serves them from Kubernetes Secrets (pilot/pkg/xds/sds.go, credentials/kube/secrets.go).

* ``kubernetes://NAME`` is the Secret NAME in the proxy's namespace, ``kubernetes://NS/NAME``
  one in NS; any other name is not served (istiod ParseResourceName).
* Only a proxy whose namespace the secure port authenticated gets any (istiod: no
  VerifiedIdentity, no secrets), and only from its own namespace: a cross-namespace reference
  is refused. A key pair also needs the API server's word that the proxy's service account may
  list Secrets there (a SubjectAccessReview the transport asked, ``Proxy.secrets_denied``); a
  CA-only name needs none (istiod filterAuthorizedResources). What is refused is logged once
  per generation in istiod's words, and left out.
* A key pair comes from ``cert``/``key`` (generic) or ``tls.crt``/``tls.key`` (with
  ``tls.ocsp-staple``); ``NAME-cacert`` is the Secret of that name, else NAME, read for a CA:
  ``cacert`` with ``crl``, or ``ca.crt`` with ``ca.crl``.
* A Secret that is missing or holds none of those keys is not served (Envoy keeps waiting for
  it, as with istiod); the reason is logged.

Synchronous and pure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from envoy.extensions.transport_sockets.tls.v3 import secret_pb2

from app.config.kube import SecretSpec
from app.model.proxy import Proxy
from app.translate.cluster.tls import KUBERNETES_SECRET, SDS_CA_SUFFIX

logger = logging.getLogger(__name__)

SecretLookup = Callable[[str, str], SecretSpec | None]  # (namespace, name) -> the Secret


def parse_resource_name(resource: str, namespace: str) -> tuple[str, str] | None:
    """(namespace, name) of a ``kubernetes://`` resource name; None for any other."""
    if not resource.startswith(KUBERNETES_SECRET):
        return None
    ns, sep, name = resource.removeprefix(KUBERNETES_SECRET).partition("/")
    if not sep:
        ns, name = namespace, ns
    return (ns, name) if ns and name else None


def generate_secrets(proxy: Proxy, secrets: SecretLookup, names: Iterable[str]) -> list[secret_pb2.Secret]:
    """The Secrets for the names the proxy may have, in the order asked."""
    if not proxy.verified:
        return []
    out = []
    denied: list[str] = []
    unauthorized = False
    for resource in names:
        parsed = parse_resource_name(resource, proxy.namespace)
        if parsed is None:
            continue
        namespace, name = parsed
        ca_only = name.endswith(SDS_CA_SUFFIX)
        if namespace != proxy.namespace or (proxy.secrets_denied and not ca_only):
            unauthorized = unauthorized or namespace == proxy.namespace
            denied.append(name)
            continue
        try:
            if ca_only:
                plain = name.removesuffix(SDS_CA_SUFFIX)
                found = secrets(namespace, name) or secrets(namespace, plain)
                out.append(_ca_secret(resource, found, f"{namespace}/{plain}"))
            else:
                out.append(_key_pair(resource, secrets(namespace, name), f"{namespace}/{name}"))
        except _Unusable as e:
            logger.warning("secret %s for proxy %s: %s", resource, proxy.id, e)
    if denied:
        why = proxy.secrets_denied if unauthorized else "cross namespace secret reference requires ReferenceGrant"
        names = _at_most(denied, 3)
        logger.warning("proxy %s attempted to access unauthorized certificates %s: %s", proxy.id, names, why)
    return out


def _at_most(names: list[str], limit: int) -> str:
    """istiod atMostNJoin: the first names, then how many others."""
    if len(names) < limit:
        return ", ".join(names)
    return ", ".join(names[: limit - 1]) + f", and {len(names) - limit + 1} others"


class _Unusable(Exception):
    pass


def _value(spec: SecretSpec, key: str) -> bytes:
    return spec.data.get(key, b"")


def _key_pair(resource: str, spec: SecretSpec | None, display: str) -> secret_pb2.Secret:
    """istiod ExtractCertInfo + toEnvoyTLSSecret."""
    if spec is None:
        raise _Unusable(f"secret {display} not found")
    for cert_key, key_key in (("cert", "key"), ("tls.crt", "tls.key")):
        if _value(spec, cert_key) and _value(spec, key_key):
            out = secret_pb2.Secret(name=resource)
            tls = out.tls_certificate
            tls.certificate_chain.inline_bytes = _value(spec, cert_key)
            tls.private_key.inline_bytes = _value(spec, key_key)
            if cert_key == "tls.crt" and _value(spec, "tls.ocsp-staple"):
                tls.ocsp_staple.inline_bytes = _value(spec, "tls.ocsp-staple")
            return out
    found = ", ".join(sorted(spec.data)) or "none"
    raise _Unusable(f"found neither cert/key nor tls.crt/tls.key (keys: {found})")


def _ca_secret(resource: str, spec: SecretSpec | None, display: str) -> secret_pb2.Secret:
    """istiod ExtractRoot + toEnvoyCaSecret."""
    if spec is None:
        raise _Unusable(f"secret {display} not found")
    out = secret_pb2.Secret(name=resource)
    context = out.validation_context
    for ca_key, crl_key in (("cacert", "crl"), ("ca.crt", "ca.crl")):
        if _value(spec, ca_key):
            context.trusted_ca.inline_bytes = _value(spec, ca_key)
            if _value(spec, crl_key):
                context.crl.inline_bytes = _value(spec, crl_key)
            return out
    found = ", ".join(sorted(spec.data)) or "none"
    raise _Unusable(f"found neither cacert nor ca.crt (keys: {found})")
