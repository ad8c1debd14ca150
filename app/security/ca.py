"""The workload CA, as istiod's Istio CA (security/pkg/pki/ca, security/pkg/server/ca/server.go).

Its files are istiod's plugged-in ``cacerts`` layout: ``ca-cert.pem`` and ``ca-key.pem`` sign,
``cert-chain.pem`` is what lies between the signing cert and the root (empty for a self-signed
root), ``root-cert.pem`` is the root every proxy trusts, and an optional ``ca-crl.pem`` lists
revoked certificates (the secure port refuses them). A directory holding them is used as
given; an empty one gets a self-signed root at first start, as istiod's self-signed CA (RSA
2048, organization = the trust domain, ten years).

Workload certificates are made from a CSR's public key alone: the identity (SAN URI) is the one
the caller authenticated as, never what the CSR asks for; key usage digital signature + key
encipherment, server and client auth, valid from two minutes ago (clock skew) for the requested
lifetime (24 h when none is asked for, at most ``max_ttl``), never past the signing cert.

What the CA refuses, and how (issue 24): a CSR that does not parse or verify, a key it does not
accept or a lifetime over the maximum is the caller's fault, istiod's CSRError / TTLError
(InvalidArgument, "CSR signing error (...)"), never an exception of this process. Keys: RSA of at
least 2048 bits (istiod's MinimumRsaKeySize, the least pilot-agent generates) and ECDSA on P-256,
P-384 or P-521, signed with SHA-256/384/512. istiod itself refuses less (Go's x509 and crypto/rsa
refuse RSA under 1024 bits, SHA-1 and MD5 signatures and curves other than P-224/256/384/521, so
it signs RSA-1024 and P-224, and Ed25519); pilotfish deliberately refuses those too.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from app.errors import SettingsError

DEFAULT_CERT_TTL = datetime.timedelta(hours=24)  # istiod DEFAULT_WORKLOAD_CERT_TTL
MAX_CERT_TTL = datetime.timedelta(days=90)  # istiod MAX_WORKLOAD_CERT_TTL
ROOT_TTL = datetime.timedelta(days=3650)  # istiod CITADEL_SELF_SIGNED_CA_CERT_TTL
CLOCK_SKEW = datetime.timedelta(minutes=2)  # istiod ClockSkewGracePeriod
CA_FILES = ("ca-cert.pem", "ca-key.pem", "cert-chain.pem", "root-cert.pem")
CRL_FILE = "ca-crl.pem"  # optional, as in istiod's plugged-in cacerts
MIN_RSA_BITS = 2048  # istiod MinimumRsaKeySize (security/pkg/pki/util/generate_csr.go)
EC_CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
SIGNATURE_HASHES = {"sha256": "SHA-256", "sha384": "SHA-384", "sha512": "SHA-512"}

# istiod's caerror.ErrType names (security/pkg/pki/error/error.go), its metric's ``error`` label
CSR_ERROR, TTL_ERROR, CERT_GEN_ERROR = "CSR_ERROR", "TTL_ERROR", "CERT_GEN_ERROR"


class CaError(Exception):
    """A request the CA refuses, as istiod's caerror: a bad CSR (``CSR_ERROR``) or a lifetime
    over the maximum (``TTL_ERROR``) are the caller's fault (InvalidArgument); what it cannot
    serve, such as an expired signing certificate (``CERT_GEN_ERROR``), is Internal."""

    def __init__(self, message: str, *, kind: str = CSR_ERROR) -> None:
        super().__init__(message)
        self.kind = kind

    @property
    def internal(self) -> bool:
        return self.kind not in (CSR_ERROR, TTL_ERROR)


def go_duration(delta: datetime.timedelta | int) -> str:
    """A duration as Go's time.Duration prints it (``24h0m0s``, ``1m30s``, ``1.5s``); an int is
    seconds, of any size (a request's lifetime may be more than a timedelta holds)."""
    if isinstance(delta, datetime.timedelta):
        micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    else:
        micros = delta * 1_000_000
    sign, micros = ("-", -micros) if micros < 0 else ("", micros)
    hours, rest = divmod(micros, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    whole, fraction = divmod(rest, 1_000_000)
    secs = f"{whole}.{fraction:06d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}"
    return f"{sign}{minutes}m{secs}" if minutes else sign + secs


def spiffe_id(trust_domain: str, namespace: str, service_account: str) -> str:
    return f"spiffe://{trust_domain}/ns/{namespace}/sa/{service_account}"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def split_pem(text: str) -> list[str]:
    """Each certificate of a concatenated PEM, one string each (ending in a newline)."""
    return [_pem(c) for c in x509.load_pem_x509_certificates(text.encode())] if text.strip() else []


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    signing_cert: x509.Certificate
    signing_key: CertificateIssuerPrivateKeyTypes
    cert_chain_pem: str  # between the signing cert and the root; "" for a self-signed root
    root_pem: str
    default_ttl: datetime.timedelta = DEFAULT_CERT_TTL
    max_ttl: datetime.timedelta = MAX_CERT_TTL
    # istiod's optional ca-crl.pem: certificates the secure port refuses (read at start)
    crl_pem: str = ""

    # --- loading ----------------------------------------------------------------------------

    @classmethod
    def load_or_create(cls, ca_dir: Path, trust_domain: str) -> CertificateAuthority:
        """The CA in ``ca_dir``: its files if present, else a new self-signed root written there
        (the key readable by the owner only). A partial or unreadable set is an error."""
        if not any((ca_dir / name).exists() for name in CA_FILES):
            ca = cls.self_signed(trust_domain)
            ca.write(ca_dir)
            return ca
        return cls.load(ca_dir)

    @classmethod
    def load(cls, ca_dir: Path) -> CertificateAuthority:
        """The CA in ``ca_dir``'s files; SettingsError naming the dir when they are not all there
        or do not make a CA."""
        present = [name for name in CA_FILES if (ca_dir / name).exists()]
        missing = [name for name in CA_FILES if name not in present]
        if missing:
            raise SettingsError(
                f"CA dir {ca_dir}: {', '.join(missing)} missing (it holds {', '.join(present) or 'none'})"
            )
        try:
            ca = cls.from_pem(*((ca_dir / name).read_text() for name in CA_FILES))
            crl = ca_dir / CRL_FILE
            if crl.exists():
                text = crl.read_text()
                x509.load_pem_x509_crl(text.encode())  # a bad CRL is an error, not ignored
                ca = dataclasses.replace(ca, crl_pem=text)
            return ca
        except OSError as e:
            raise SettingsError(f"CA dir {ca_dir}: cannot read {e.filename}: {e.strerror}") from e
        except (ValueError, TypeError) as e:
            raise SettingsError(f"CA dir {ca_dir}: {e}") from e

    def same_material(self, other: CertificateAuthority) -> bool:
        """Whether ``other`` signs and chains as this one (its key object aside)."""
        return (self.signing_cert, self.cert_chain_pem, self.root_pem, self.crl_pem) == (
            other.signing_cert,
            other.cert_chain_pem,
            other.root_pem,
            other.crl_pem,
        )

    @classmethod
    def from_pem(cls, cert_pem: str, key_pem: str, chain_pem: str, root_pem: str) -> CertificateAuthority:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
        # an RSA key is checked as istiod's Go checks it (_check_rsa), not by OpenSSL on load
        key = serialization.load_pem_private_key(key_pem.encode(), password=None, unsafe_skip_rsa_key_validation=True)
        if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
            raise ValueError("ca-key.pem: want an RSA or ECDSA key")
        if isinstance(key, rsa.RSAPrivateKey):
            _check_rsa(key)
        spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        if cert.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
            raise ValueError("ca-key.pem does not match ca-cert.pem")
        roots = split_pem(root_pem)
        if not roots:
            raise ValueError("root-cert.pem holds no certificate")
        return cls(cert, key, "".join(split_pem(chain_pem)), "".join(roots))

    @classmethod
    def self_signed(
        cls,
        trust_domain: str,
        now: datetime.datetime | None = None,
        *,
        ttl: datetime.timedelta = ROOT_TTL,
        key_size: int = MIN_RSA_BITS,
    ) -> CertificateAuthority:
        """A new root (istiod's self-signed CA: RSA, O = the trust domain; ``ttl`` and
        ``key_size`` are its CITADEL_SELF_SIGNED_CA_CERT_TTL and _RSA_KEY_SIZE)."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=key_size)
        return cls._root(key, trust_domain, now or _now(), ttl)

    def renewed_root(
        self, now: datetime.datetime | None = None, ttl: datetime.timedelta = ROOT_TTL
    ) -> CertificateAuthority:
        """This self-signed root again, from its own key and organization, valid ``ttl`` from
        now (istiod's root rotator, GenRootCertFromExistingKey): what the old root signed still
        verifies under the new one, which has the same name and key."""
        orgs = self.signing_cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        org = str(orgs[0].value) if orgs else ""
        return self._root(self.signing_key, org, now or _now(), ttl)

    @classmethod
    def _root(
        cls, key: CertificateIssuerPrivateKeyTypes, org: str, now: datetime.datetime, ttl: datetime.timedelta
    ) -> CertificateAuthority:
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)])
        public = key.public_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(_serial())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + ttl)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key, "", _pem(cert))

    def expiry(self) -> tuple[float, float | None]:
        """When (unix seconds) the first root expires, and the first certificate of the chain
        (None without one), as istiod's RecordCertsExpiry reads its bundle."""
        root = x509.load_pem_x509_certificates(self.root_pem.encode())[0].not_valid_after_utc.timestamp()
        chain = split_pem(self.cert_chain_pem)
        if not chain:
            return root, None
        return root, x509.load_pem_x509_certificate(chain[0].encode()).not_valid_after_utc.timestamp()

    def rotation_due_in(self, grace_percent: float, now: datetime.datetime | None = None) -> float:
        """Seconds until this root enters its grace period, the last ``grace_percent`` of its
        life, when istiod's rotator renews it; 0 once in it (istiod CertUtil.GetWaitTime)."""
        cert = self.signing_cert
        lifetime = (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds()
        left = (cert.not_valid_after_utc - (now or _now())).total_seconds()
        return max(0.0, left - lifetime * grace_percent / 100)

    def write(self, ca_dir: Path) -> None:
        ca_dir.mkdir(parents=True, exist_ok=True)
        key_pem = self.signing_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        key_path = ca_dir / "ca-key.pem"
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem)
        (ca_dir / "ca-cert.pem").write_text(_pem(self.signing_cert))
        (ca_dir / "cert-chain.pem").write_text(self.cert_chain_pem)
        (ca_dir / "root-cert.pem").write_text(self.root_pem)

    # --- signing ----------------------------------------------------------------------------

    def sign_csr(
        self,
        csr_pem: str,
        identities: Sequence[str],
        ttl: datetime.timedelta | int = 0,
        now: datetime.datetime | None = None,
    ) -> list[str]:
        """istiod CreateCertificate: a certificate for the CSR's key naming ``identities``,
        returned as istiod returns it: the leaf, each cert of the chain, then the root.
        ``ttl`` (a timedelta, or seconds as a request carries them, any int64): none or a
        negative one is the default lifetime, one over ``max_ttl`` is refused (istiod sign)."""
        public = _checked_public_key(csr_pem)
        lifetime = self._lifetime(ttl)
        uris = [x509.UniformResourceIdentifier(i) for i in identities]
        cert = self._issue(public, uris, lifetime, now, client=True)
        return [_pem(cert), *split_pem(self.cert_chain_pem), self.root_pem]

    def _lifetime(self, ttl: datetime.timedelta | int) -> datetime.timedelta:
        seconds = ttl.total_seconds() if isinstance(ttl, datetime.timedelta) else ttl
        if seconds > self.max_ttl.total_seconds():
            wanted, most = go_duration(ttl), go_duration(self.max_ttl)
            raise CaError(f"requested TTL {wanted} is greater than the max allowed TTL {most}", kind=TTL_ERROR)
        if seconds <= 0:
            return self.default_ttl
        return ttl if isinstance(ttl, datetime.timedelta) else datetime.timedelta(seconds=ttl)

    def server_certificate(
        self, key: ec.EllipticCurvePrivateKey, dns_names: Sequence[str], ips: Sequence[str], ttl: datetime.timedelta
    ) -> list[str]:
        """The control plane's own serving certificate (istiod's DNS cert for 15012), with its
        chain up to, not including, the root."""
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        cert = self._issue(key.public_key(), names, ttl, None, client=False)
        return [_pem(cert), *split_pem(self.cert_chain_pem)]

    def _issue(
        self,
        public: rsa.RSAPublicKey | ec.EllipticCurvePublicKey,
        names: Sequence[x509.GeneralName],
        ttl: datetime.timedelta,
        now: datetime.datetime | None,
        *,
        client: bool,
    ) -> x509.Certificate:
        now = now or _now()
        signer = self.signing_cert
        if now >= signer.not_valid_after_utc:
            raise CaError(f"signing certificate has expired at {signer.not_valid_after_utc}", kind=CERT_GEN_ERROR)
        not_after = min(now + ttl, signer.not_valid_after_utc)  # never outlives its signer
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, *([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])]
        authority = _authority_key_id(signer)
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(signer.subject)
            .public_key(public)
            .serial_number(_serial())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            # the subject is empty, so the names are the identity: critical (RFC 5280 4.2.1.6)
            .add_extension(x509.SubjectAlternativeName(names), critical=True)
            .add_extension(authority, critical=False)
            .sign(self.signing_key, hashes.SHA256())
        )


def _checked_public_key(csr_pem: str) -> rsa.RSAPublicKey | ec.EllipticCurvePublicKey:
    """The CSR's public key, once the CSR parses, its key is one the CA accepts and its
    signature verifies (istiod: ParsePemEncodedCSR, then CheckSignature); else a CSR_ERROR
    that says why, never an exception of the libraries."""
    if "-----BEGIN" not in csr_pem:
        raise CaError("CSR: certificate signing request is not properly encoded")  # istiod's words
    try:
        csr = x509.load_pem_x509_csr(csr_pem.encode())
    except (ValueError, UnicodeError):
        raise CaError("CSR: failed to parse X.509 certificate signing request") from None
    try:
        public = csr.public_key()
    except (UnsupportedAlgorithm, ValueError) as e:  # a curve OpenSSL does not know, a bad point
        raise CaError(f"CSR: unsupported public key: {e}") from None
    if isinstance(public, rsa.RSAPublicKey):
        if public.key_size < MIN_RSA_BITS:
            raise CaError(f"CSR: RSA key of {public.key_size} bits is too small: at least {MIN_RSA_BITS} bits")
    elif isinstance(public, ec.EllipticCurvePublicKey):
        if public.curve.name not in EC_CURVES:
            raise CaError(f"CSR: elliptic curve {public.curve.name} is not accepted: want {_either(EC_CURVES)}")
    else:
        raise CaError("CSR: want an RSA or ECDSA key")
    try:
        digest = csr.signature_hash_algorithm
    except UnsupportedAlgorithm:
        digest = None
    if digest is None or digest.name not in SIGNATURE_HASHES:
        name = digest.name if digest is not None else csr.signature_algorithm_oid.dotted_string
        raise CaError(f"CSR: signature hash {name} is not accepted: want {_either(SIGNATURE_HASHES)}")
    try:
        valid = csr.is_signature_valid
    except (UnsupportedAlgorithm, ValueError):
        valid = False
    if not valid:
        raise CaError("CSR: its signature does not verify")
    return public


def _either(names: dict[str, str]) -> str:
    *first, last = names.values()
    return f"{', '.join(first)} or {last}"


def _authority_key_id(signer: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    """The signer's own SubjectKeyIdentifier, as Go's x509 copies it (a plugged-in CA may
    have computed it another way than a hash of its key); its key's hash when it has none."""
    try:
        ski = signer.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key())  # type: ignore[arg-type]
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def _serial() -> int:
    return secrets.randbits(127) | 1  # positive, non-zero, under 20 octets


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """A CA signs certificates and CRLs; a leaf signs and enciphers keys (istiod's templates)."""
    return x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=not ca,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _check_rsa(key: rsa.RSAPrivateKey) -> None:
    """The check Go makes of a parsed RSA key, as istiod's x509.ParsePKCS1PrivateKey does
    (crypto/internal/fips140/rsa checkPrivateKey): p * q is the modulus, the CRT exponents, the
    coefficient and d agree, p and q are not close, d is not small. OpenSSL's check, which
    cryptography makes on load unless told not to, also tests p and q for primality: 27 ms of a
    2048-bit key on the event loop, at start and at every reload of the CA Secret."""
    numbers = key.private_numbers()
    e, n = numbers.public_numbers.e, numbers.public_numbers.n
    p, q, d = numbers.p, numbers.q, numbers.d
    if p <= 1 or q <= 1 or p * q != n:
        raise ValueError("ca-key.pem: invalid RSA key: p * q != n")
    if (numbers.dmp1 * e) % (p - 1) != 1 or (numbers.dmq1 * e) % (q - 1) != 1:
        raise ValueError("ca-key.pem: invalid RSA key: invalid CRT exponent")
    if (numbers.iqmp * q) % p != 1:
        raise ValueError("ca-key.pem: invalid RSA key: invalid CRT coefficient")
    if d % (p - 1) != numbers.dmp1 or d % (q - 1) != numbers.dmq1:
        raise ValueError("ca-key.pem: invalid RSA key: d does not match its CRT exponents")
    if abs(p - q).bit_length() <= n.bit_length() // 2 - 100:
        raise ValueError("ca-key.pem: invalid RSA key: |p - q| too small")
    if d.bit_length() <= n.bit_length() // 2:
        raise ValueError("ca-key.pem: invalid RSA key: d too small")
