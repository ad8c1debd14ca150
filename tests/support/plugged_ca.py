"""Plugged-in CA material as operators make it for istiod's ``cacerts``: roots, intermediates
signed by them, and the Secret in either layout istiod reads."""

from __future__ import annotations

import base64
import datetime
import itertools
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

KeyPair = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def ca_cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: KeyPair | None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Istio"), x509.NameAttribute(NameOID.COMMON_NAME, subject)]
    )
    issuer_name, signer = (issuer[0].subject, issuer[1]) if issuer else (name, key)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(signer, hashes.SHA256())
    )


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    form = serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption()).decode()


def intermediate(root: KeyPair, name: str) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    return ca_cert(name, key, root), key


def new_root(name: str) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    return ca_cert(name, key, None), key


def cacerts(layout: str, signer: KeyPair, roots: list[x509.Certificate]) -> dict[str, Any]:
    """A ``cacerts`` Secret: istiod's layout (the chain up to the signer's root, as istiod's
    tooling writes it), or the kubernetes.io/tls one; ``roots`` is the root bundle."""
    cert, key = signer
    root_pem = "".join(pem(r) for r in roots)
    if layout == "istiod":
        issuing = next(r for r in roots if r.subject == cert.issuer)
        data = {
            "ca-cert.pem": pem(cert),
            "ca-key.pem": key_pem(key),
            "cert-chain.pem": pem(cert) + pem(issuing),
            "root-cert.pem": root_pem,
        }
        kind = "Opaque"
    else:
        data = {"tls.crt": pem(cert), "tls.key": key_pem(key), "ca.crt": root_pem}
        kind = "kubernetes.io/tls"
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cacerts"}, "type": kind, "data": encoded}


def chain_reaches(chain: list[str], root: x509.Certificate) -> bool:
    """Each certificate of an issued chain (leaf first) is issued by the next, up to ``root``."""
    certs = [x509.load_pem_x509_certificate(c.encode()) for c in chain]
    for child, parent in itertools.pairwise(certs):
        if child != parent:
            child.verify_directly_issued_by(parent)
    return certs[-1] == root
