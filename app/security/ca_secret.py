"""The CA as istiod keeps it in Kubernetes Secrets (pure): which Secret decides, how its keys
make a CA, and the ``istio-ca-secret`` istiod writes (security/pkg/pki/ca/ca.go,
pilot/pkg/bootstrap/istio_ca.go).

* ``cacerts`` (plugged in) wins when its bundle is complete, in either layout istiod reads:
  its own (``ca-cert.pem``, ``ca-key.pem``, ``cert-chain.pem``, ``root-cert.pem``, optional
  ``ca-crl.pem``) or a ``kubernetes.io/tls`` one (``tls.crt`` signs with ``tls.key``, ``ca.crt``
  is the root, and the chain is ``tls.crt`` + ``ca.crt``: istiod detectSigningCABundleAndCRL).
  Some keys without the others is istiod's "incomplete signing CA bundle detected", an error.
* Otherwise the self-signed root in ``istio-ca-secret``: ``ca-cert.pem`` + ``ca-key.pem``, the
  root being ``ca-cert.pem`` itself (istiod loadSelfSignedCaSecret).
* A change of ``cacerts`` may change the signing certificate freely; its root only with
  ``ISTIO_MULTIROOT_MESH`` and when one root bundle holds the other (istiod handleEvent).
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from app.security.ca import CRL_FILE, CertificateAuthority

CACERTS = "cacerts"  # istiod ca.CACertsSecret
ISTIO_CA_SECRET = "istio-ca-secret"  # istiod ca.CASecret
ISTIO_CA_SECRET_TYPE = "istio.io/ca-root"  # istiod istioCASecretType
ISTIO_GENERATED = "istio-generated"  # istiod ca.IstioGenerated: a cacerts holding a self-signed root
ISTIO_LAYOUT = ("ca-key.pem", "ca-cert.pem", "root-cert.pem", "cert-chain.pem")
TLS_LAYOUT = ("tls.key", "tls.crt", "ca.crt")


class CaSecretError(Exception):
    """A CA Secret that cannot be used: the message names the Secret and why."""


def plugged_in(name: str, data: Mapping[str, bytes]) -> CertificateAuthority | None:
    """The plugged-in CA of a ``cacerts`` Secret's data; None when it holds none of its keys.
    Raises CaSecretError for an incomplete or unusable bundle."""
    if data.get("tls.crt") is not None:  # istiod: the kubernetes.io/tls layout, when tls.crt exists
        key, cert, root = (_text(data, k) for k in TLS_LAYOUT)
        if not key or not root:
            raise CaSecretError(f"Secret {name}: incomplete signing CA bundle detected (want {', '.join(TLS_LAYOUT)})")
        return _verified(name, cert, key, cert + root, root, "")
    present = [k for k in ISTIO_LAYOUT if k in data]
    if not present:
        return None
    # istiod checkCABundleCompleteness: the key, the cert, the root and the chain must exist (the
    # chain may be empty: a self-signed plugged-in root has nothing between)
    missing = [k for k in ISTIO_LAYOUT if k not in data]
    if missing:
        raise CaSecretError(
            f"Secret {name}: incomplete signing CA bundle detected: {', '.join(missing)} missing "
            f"(it holds {', '.join(present)})"
        )
    key, cert, root, chain = (_text(data, k) for k in ISTIO_LAYOUT)
    return _verified(name, cert, key, chain, root, _text(data, CRL_FILE))


def self_signed(name: str, data: Mapping[str, bytes]) -> CertificateAuthority:
    """The CA of an ``istio-ca-secret``: ``ca-cert.pem`` signs and is the root."""
    cert, key = _text(data, "ca-cert.pem"), _text(data, "ca-key.pem")
    if not cert or not key:
        raise CaSecretError(f"Secret {name}: want ca-cert.pem and ca-key.pem (it holds {', '.join(sorted(data))})")
    return _verified(name, cert, key, "", cert, "")


def _verified(name: str, cert: str, key: str, chain: str, root: str, crl: str) -> CertificateAuthority:
    """istiod NewVerifiedKeyCertBundleFromPem: the key matches the cert, the cert is a CA and
    reaches a root of the bundle through the chain, the CRL parses."""
    try:
        ca = CertificateAuthority.from_pem(cert, key, chain, root)
        if crl:
            x509.load_pem_x509_crl(crl.encode())
            ca = dataclasses.replace(ca, crl_pem=crl)
    except (ValueError, TypeError) as e:
        raise CaSecretError(f"Secret {name}: {e}") from None
    if not _is_ca(ca.signing_cert):
        raise CaSecretError(f"Secret {name}: certificate is not authorized to sign other certificates")
    if not _chains_to_root(ca):
        raise CaSecretError(f"Secret {name}: cannot verify the cert with the provided root chain and cert pool")
    return ca


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _chains_to_root(ca: CertificateAuthority) -> bool:
    """Whether the signing certificate is, or is issued (through the chain) by, a root."""
    roots = x509.load_pem_x509_certificates(ca.root_pem.encode())
    pool = roots + (x509.load_pem_x509_certificates(ca.cert_chain_pem.encode()) if ca.cert_chain_pem.strip() else [])
    cert = ca.signing_cert
    for _ in range(len(pool) + 1):
        if cert in roots:
            return True
        issuer = next((c for c in pool if c.subject == cert.issuer and _issued_by(cert, c)), None)
        if issuer is None or issuer == cert:
            return False
        cert = issuer
    return False


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def root_change_refusal(current: str, new: str, multi_root: bool) -> str | None:
    """Why a reloaded ``cacerts`` may not bring the root bundle ``new`` in place of ``current``
    (None: it may): istiod handleEvent's rule, in its words."""
    if _der_set(current) == _der_set(new):
        return None
    if not multi_root:
        return "Multi root is disabled, updating new ROOT-CA not supported"
    old, fresh = _der_set(current), _der_set(new)
    if old and fresh and (old <= fresh or fresh <= old):
        return None
    return "Updating new ROOT-CA not supported"


def _der_set(pem: str) -> frozenset[bytes]:
    if not pem.strip():
        return frozenset()
    return frozenset(c.public_bytes(serialization.Encoding.DER) for c in x509.load_pem_x509_certificates(pem.encode()))


def istio_ca_secret(ca: CertificateAuthority, name: str, namespace: str) -> dict[str, Any]:
    """The Secret istiod writes for its self-signed root (istiod BuildSecret), as sent to the API
    server: ``ca-cert.pem`` and ``root-cert.pem`` the root, ``ca-key.pem`` its key (PKCS#1 or
    SEC 1, as Go's x509 marshals it), ``cert-chain.pem`` and ``key.pem`` empty, type
    ``istio.io/ca-root``; a ``cacerts`` one is marked ``istio-generated``."""
    key_pem = ca.signing_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    cert_pem = ca.signing_cert.public_bytes(serialization.Encoding.PEM)
    data = {
        "cert-chain.pem": b"",
        "key.pem": b"",
        "root-cert.pem": cert_pem,
        "ca-cert.pem": cert_pem,
        "ca-key.pem": key_pem,
    }
    if name == CACERTS:
        data[ISTIO_GENERATED] = b""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": ISTIO_CA_SECRET_TYPE,
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def secret_data(obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A Secret's ``data`` as the API server sends it (base64), decoded; a value that is not
    base64 is left out."""
    out: dict[str, bytes] = {}
    for key, value in (obj.get("data") or {}).items():
        try:
            out[str(key)] = base64.b64decode(value or "", validate=True)
        except (ValueError, TypeError):
            continue
    return out


def _text(data: Mapping[str, bytes], key: str) -> str:
    return (data.get(key) or b"").decode("utf-8", errors="replace")
