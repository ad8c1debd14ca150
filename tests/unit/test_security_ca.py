"""The workload CA and the certificate service on the secure port, with real TLS: keys made by
cryptography, gRPC SSL channels, the CA's own certificates as client certificates."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from app.api import ca as ca_api
from app.errors import SettingsError
from app.security.authn import Caller, TrustedTokenFile, authorize_proxy, parse_spiffe
from app.security.ca import CaError, CertificateAuthority
from app.security.server import Authenticator, CertificateService, SecurePort

TD = "cluster.local"
METHOD = "/istio.v1.auth.IstioCertificateService/CreateCertificate"


def csr(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, san: str = "spiffe://evil/ns/x/sa/y") -> str:
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
    builder = builder.add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(san)]), critical=True)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()


def leaf(chain: list[str]) -> x509.Certificate:
    return x509.load_pem_x509_certificate(chain[0].encode())


def uris(cert: x509.Certificate) -> list[str]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return list(san.get_values_for_type(x509.UniformResourceIdentifier))


# --- the CA -----------------------------------------------------------------------------------


def test_an_empty_ca_dir_gets_a_self_signed_root_that_later_starts_reuse(tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "ca", TD)
    files = sorted(p.name for p in (tmp_path / "ca").iterdir())
    assert files == ["ca-cert.pem", "ca-key.pem", "cert-chain.pem", "root-cert.pem"]
    assert stat.S_IMODE((tmp_path / "ca" / "ca-key.pem").stat().st_mode) == 0o600
    root = x509.load_pem_x509_certificate(ca.root_pem.encode())
    assert root.subject.rfc4514_string() == f"O={TD}"  # istiod's self-signed root: O = trust domain
    assert root.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert CertificateAuthority.load_or_create(tmp_path / "ca", TD).root_pem == ca.root_pem


def test_an_inconsistent_rsa_key_is_refused_as_go_refuses_it(tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "ca", TD)
    cert_pem = (tmp_path / "ca" / "ca-cert.pem").read_text()
    key = ca.signing_key
    assert isinstance(key, rsa.RSAPrivateKey)
    good = key.private_numbers()

    def pem(numbers: rsa.RSAPrivateNumbers) -> str:
        bad = numbers.private_key(unsafe_skip_rsa_key_validation=True)
        return bad.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        ).decode()

    assert CertificateAuthority.from_pem(cert_pem, pem(good), "", ca.root_pem).root_pem == ca.root_pem
    changed = {
        "invalid CRT coefficient": {"iqmp": good.iqmp + 1},
        "invalid CRT exponent": {"dmp1": good.dmp1 + 2},
        "d does not match": {"d": good.d + (good.p - 1) * (good.q - 1) // 2 + 1},
    }
    for reason, fields in changed.items():
        numbers = rsa.RSAPrivateNumbers(**{**_fields(good), **fields})
        with pytest.raises(ValueError, match=f"ca-key.pem: invalid RSA key: {reason}"):
            CertificateAuthority.from_pem(cert_pem, pem(numbers), "", ca.root_pem)


def _fields(numbers: rsa.RSAPrivateNumbers) -> dict[str, object]:
    names = ("p", "q", "d", "dmp1", "dmq1", "iqmp", "public_numbers")
    return {name: getattr(numbers, name) for name in names}


def test_a_partial_ca_dir_is_an_error_naming_what_is_missing(tmp_path: Path) -> None:
    CertificateAuthority.load_or_create(tmp_path, TD)
    (tmp_path / "ca-key.pem").unlink()
    with pytest.raises(SettingsError, match=r"ca-key\.pem missing"):
        CertificateAuthority.load_or_create(tmp_path, TD)


def test_the_identity_comes_from_the_caller_never_from_the_csr() -> None:
    ca = CertificateAuthority.self_signed(TD)
    key = ec.generate_private_key(ec.SECP256R1())
    chain = ca.sign_csr(csr(key), ["spiffe://cluster.local/ns/a/sa/b"])
    cert = leaf(chain)
    assert uris(cert) == ["spiffe://cluster.local/ns/a/sa/b"]
    assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).critical
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert chain[-1] == ca.root_pem and len(chain) == 2  # istiod: the leaf, then the root last
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert lifetime == datetime.timedelta(hours=24, minutes=2)  # 24 h default, 2 min clock skew


def test_requested_ttl_is_honoured_up_to_the_maximum() -> None:
    ca = CertificateAuthority.self_signed(TD)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.UTC)
    cert = leaf(ca.sign_csr(csr(key), ["spiffe://cluster.local/ns/a/sa/b"], datetime.timedelta(hours=1), now))
    assert cert.not_valid_after_utc - now < datetime.timedelta(hours=1, seconds=1)
    with pytest.raises(CaError, match=r"requested TTL 2184h0m0s is greater than the max allowed TTL 2160h0m0s"):
        ca.sign_csr(csr(key), ["spiffe://x/ns/a/sa/b"], datetime.timedelta(days=91))
    with pytest.raises(CaError, match="CSR"):
        ca.sign_csr("not a csr", ["spiffe://x/ns/a/sa/b"])


def test_a_plugged_in_intermediate_signs_and_the_chain_reaches_the_root(tmp_path: Path) -> None:
    root = CertificateAuthority.self_signed(TD)
    inter_key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    inter = (
        x509.CertificateBuilder()
        .subject_name(x509.Name.from_rfc4514_string("CN=intermediate,O=cluster.local"))
        .issuer_name(root.signing_cert.subject)
        .public_key(inter_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(root.signing_key, hashes.SHA256())
    )
    inter_pem = inter.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = inter_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    for name, text in [("ca-cert.pem", inter_pem), ("ca-key.pem", key_pem), ("cert-chain.pem", inter_pem),
                       ("root-cert.pem", root.root_pem)]:  # fmt: skip
        (tmp_path / name).write_text(text)
    ca = CertificateAuthority.load_or_create(tmp_path, TD)
    chain = ca.sign_csr(csr(ec.generate_private_key(ec.SECP256R1())), ["spiffe://cluster.local/ns/a/sa/b"])
    assert chain[1:] == [inter_pem, root.root_pem]
    leaf(chain).verify_directly_issued_by(inter)


def test_proxy_authorization_as_istiod_check_connection_identity() -> None:
    caller = Caller(("spiffe://cluster.local/ns/a/sa/web",), "certificate")
    assert authorize_proxy(caller, "a", "") is None
    assert authorize_proxy(caller, "a", "web") is None
    assert authorize_proxy(caller, "b", "") == "no identities ([spiffe://cluster.local/ns/a/sa/web]) matched b/"
    assert authorize_proxy(caller, "a", "db") is not None
    assert parse_spiffe("spiffe://td/ns/a/sa/b") is not None and parse_spiffe("spiffe://td/a/b") is None


def test_token_file_lines_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# comment\nt0k3n shop web\n")
    assert TrustedTokenFile(path)._tokens == {"t0k3n": ("shop", "web")}
    path.write_text("t0k3n shop\n")
    with pytest.raises(SettingsError, match=r"tokens:1: want TOKEN NAMESPACE SERVICEACCOUNT"):
        TrustedTokenFile(path)


# --- the certificate service over real TLS ----------------------------------------------------


@dataclass
class Secure:
    ca: CertificateAuthority
    port: int
    inner: int
    issued: list[str]
    front: SecurePort


@asynccontextmanager
async def serving(ca: CertificateAuthority, tokens: TrustedTokenFile | None) -> AsyncIterator[Secure]:
    """The certificate service behind the TLS front, as the runtime wires them."""
    front = SecurePort(ca, ("pilotfish.istio-system.svc",), ("127.0.0.1",))
    issued: list[str] = []
    service = CertificateService(ca, Authenticator(front, tokens, lambda: TD), issued.append)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([service.handler()])
    inner = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await front.start(("127.0.0.1", 0), ("127.0.0.1", inner))
    try:
        yield Secure(ca, front.port, inner, issued, front)
    finally:
        await front.stop()
        await server.stop(0)


@pytest.fixture
async def secure(tmp_path: Path) -> AsyncIterator[Secure]:
    tokens = tmp_path / "tokens"
    tokens.write_text("good-token shop web\n")
    async with serving(CertificateAuthority.self_signed(TD), TrustedTokenFile(tokens)) as s:
        yield s


def channel(s: Secure, cert: tuple[str, bytes] | None = None, root: str | None = None) -> grpc.aio.Channel:
    creds = grpc.ssl_channel_credentials(
        (root or s.ca.root_pem).encode(),
        private_key=cert[1] if cert else None,
        certificate_chain=cert[0].encode() if cert else None,
    )
    options = [("grpc.ssl_target_name_override", "pilotfish.istio-system.svc")]
    return grpc.aio.secure_channel(f"127.0.0.1:{s.port}", creds, options=options)


async def create(ch: grpc.aio.Channel, token: str | None, key: ec.EllipticCurvePrivateKey, ttl: int = 0) -> list[str]:
    call = ch.unary_unary(
        METHOD,
        request_serializer=ca_api.IstioCertificateRequest.SerializeToString,
        response_deserializer=ca_api.IstioCertificateResponse.FromString,
    )
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    req = ca_api.IstioCertificateRequest(csr=csr(key), validity_duration=ttl)
    resp = await call(req, metadata=metadata, timeout=10)
    return list(resp.cert_chain)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    encoding, form = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    return key.private_bytes(encoding, form, serialization.NoEncryption())


async def test_first_issue_by_token_then_rotation_by_the_issued_certificate(secure: Secure) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    async with channel(secure) as ch:
        chain = await create(ch, "good-token", key, ttl=3600)
    assert uris(leaf(chain)) == ["spiffe://cluster.local/ns/shop/sa/web"]
    assert chain[-1] == secure.ca.root_pem
    # rotation: the certificate is the credential, no token needed
    key2 = ec.generate_private_key(ec.SECP256R1())
    async with channel(secure, ("".join(chain[:-1]), key_pem(key))) as ch:
        rotated = await create(ch, None, key2)
    assert uris(leaf(rotated)) == ["spiffe://cluster.local/ns/shop/sa/web"]
    assert secure.issued == ["success", "success"]


@pytest.mark.parametrize("token", [None, "bad-token"])
async def test_no_or_an_unknown_token_is_unauthenticated(secure: Secure, token: str | None) -> None:
    async with channel(secure) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await create(ch, token, ec.generate_private_key(ec.SECP256R1()))
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert secure.issued == ["authn_error"]


async def test_a_foreign_root_or_expired_client_certificate_is_refused(secure: Secure) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    foreign = CertificateAuthority.self_signed(TD)
    stranger = foreign.sign_csr(csr(key), ["spiffe://cluster.local/ns/shop/sa/web"])
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=3)
    expired = secure.ca.sign_csr(csr(key), ["spiffe://cluster.local/ns/shop/sa/web"], datetime.timedelta(hours=1), past)
    for chain in (stranger, expired):
        async with channel(secure, ("".join(chain[:-1]), key_pem(key))) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await create(ch, "good-token", key)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE  # the TLS handshake fails
    assert secure.issued == []


async def test_the_certificate_service_answers_only_over_tls(secure: Secure) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{secure.inner}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await create(ch, "good-token", ec.generate_private_key(ec.SECP256R1()))
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and "not over TLS" in (e.value.details() or "")


async def test_a_client_must_trust_the_mesh_root(secure: Secure) -> None:
    other = CertificateAuthority.self_signed(TD)
    async with channel(secure, root=other.root_pem) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await create(ch, "good-token", ec.generate_private_key(ec.SECP256R1()))
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_revoked_client_certificate_is_refused_by_the_ca_crl(tmp_path: Path) -> None:
    # istiod's plugged-in cacerts may carry ca-crl.pem; the secure port checks client leaves against it
    ca = CertificateAuthority.self_signed(TD)
    ca.write(tmp_path / "ca")
    key = ec.generate_private_key(ec.SECP256R1())
    revoked = ca.sign_csr(csr(key), ["spiffe://cluster.local/ns/shop/sa/web"])
    kept = ca.sign_csr(csr(key), ["spiffe://cluster.local/ns/shop/sa/web"])
    now = datetime.datetime.now(datetime.UTC)
    entry = (
        x509.RevokedCertificateBuilder()
        .serial_number(leaf(revoked).serial_number)
        .revocation_date(now - datetime.timedelta(minutes=1))
        .build()
    )
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.signing_cert.subject)
        .last_update(now - datetime.timedelta(minutes=1))
        .next_update(now + datetime.timedelta(days=1))
        .add_revoked_certificate(entry)
        .sign(ca.signing_key, hashes.SHA256())
    )
    (tmp_path / "ca" / "ca-crl.pem").write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    loaded = CertificateAuthority.load_or_create(tmp_path / "ca", TD)
    async with serving(loaded, None) as s:
        async with channel(s, ("".join(revoked[:-1]), key_pem(key))) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await create(ch, None, key)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        async with channel(s, ("".join(kept[:-1]), key_pem(key))) as ch:
            assert uris(leaf(await create(ch, None, key))) == ["spiffe://cluster.local/ns/shop/sa/web"]


def test_the_leaf_names_its_signer_by_the_signers_own_key_identifier(tmp_path: Path) -> None:
    # Go's x509.CreateCertificate copies the parent's SubjectKeyIdentifier into the AKI; a
    # plugged-in CA whose SKI is not a SHA-1 of its key must still chain
    root = CertificateAuthority.self_signed(TD)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    odd_ski = x509.SubjectKeyIdentifier(b"\x01" * 20)
    inter = (
        x509.CertificateBuilder()
        .subject_name(x509.Name.from_rfc4514_string("CN=intermediate,O=cluster.local"))
        .issuer_name(root.signing_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(odd_ski, critical=False)
        .sign(root.signing_key, hashes.SHA256())
    )
    ca = CertificateAuthority(inter, key, inter.public_bytes(serialization.Encoding.PEM).decode(), root.root_pem)
    issued = leaf(ca.sign_csr(csr(ec.generate_private_key(ec.SECP256R1())), ["spiffe://cluster.local/ns/a/sa/b"]))
    aki = issued.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == odd_ski.digest


async def test_the_serving_certificate_is_renewed_for_new_handshakes() -> None:
    ca = CertificateAuthority.self_signed(TD)
    async with serving(ca, None) as s:
        context = ssl.create_default_context(cadata=ca.root_pem)

        async def presented() -> bytes:
            _, writer = await asyncio.open_connection(
                "127.0.0.1", s.port, ssl=context, server_hostname="pilotfish.istio-system.svc"
            )
            der: bytes = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            writer.close()
            return der

        first = await presented()
        assert s.front.serving_certificate
        s.front.renew_serving_certificate()
        second = await presented()
        served = x509.load_der_x509_certificate(second)
        assert x509.load_der_x509_certificate(first).serial_number != served.serial_number
        assert served.not_valid_after_utc - served.not_valid_before_utc > datetime.timedelta(days=89)


async def test_the_secure_port_needs_no_writable_temporary_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    # the chart runs pilotfish with readOnlyRootFilesystem and no emptyDir for /tmp: the serving
    # key pair and the CRL must load without a file written anywhere
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", "/nonexistent/read-only")
    monkeypatch.setenv("TMPDIR", "/nonexistent/read-only")
    ca = CertificateAuthority.self_signed(TD)
    async with serving(ca, None) as s:
        first = s.front.serving_certificate
        s.front.renew_serving_certificate()
        assert s.front.serving_certificate != first
        key = ec.generate_private_key(ec.SECP256R1())
        client = ca.sign_csr(csr(key), ["spiffe://cluster.local/ns/shop/sa/web"])
        async with channel(s, ("".join(client[:-1]), key_pem(key))) as ch:
            assert uris(leaf(await create(ch, None, key))) == ["spiffe://cluster.local/ns/shop/sa/web"]
