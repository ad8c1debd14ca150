"""The CA Secrets' rules, pure (app/security/ca_secret.py): which keys make a plugged-in CA in
each layout istiod reads, when a reloaded root may replace the one in force (istiod
handleEvent), the istio-ca-secret round trip, and the settings that choose the CA."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from app.errors import SettingsError
from app.security.ca import CertificateAuthority
from app.security.ca_secret import (
    CaSecretError,
    istio_ca_secret,
    plugged_in,
    root_change_refusal,
    secret_data,
    self_signed,
)
from app.settings import Settings
from tests.support.plugged_ca import cacerts, intermediate, key_pem, new_root, pem


def data_of(secret: dict[str, Any]) -> dict[str, bytes]:
    return secret_data(secret)


def test_no_plugged_in_keys_is_no_plugged_in_ca() -> None:
    assert plugged_in("ns/cacerts", {"unrelated": b"x"}) is None


def test_the_tls_layout_needs_its_key_and_root_and_chains_through_tls_crt() -> None:
    root = new_root("A")
    signer = intermediate(root, "A1")
    data = data_of(cacerts("tls", signer, [root[0]]))
    ca = plugged_in("ns/cacerts", data)
    assert ca is not None and ca.cert_chain_pem == pem(signer[0]) + pem(root[0]) and ca.root_pem == pem(root[0])
    del data["tls.key"]
    with pytest.raises(CaSecretError, match=r"Secret ns/cacerts: incomplete signing CA bundle detected"):
        plugged_in("ns/cacerts", data)


def test_a_signing_certificate_that_is_no_ca_is_refused() -> None:
    ca = CertificateAuthority.self_signed("cluster.local")
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = ca.server_certificate(key, ["x.example"], [], datetime.timedelta(days=1))[0]
    data = {"tls.crt": leaf.encode(), "tls.key": key_pem(key).encode(), "ca.crt": ca.root_pem.encode()}
    with pytest.raises(CaSecretError, match="certificate is not authorized to sign other certificates"):
        plugged_in("ns/cacerts", data)


def test_istio_ca_secret_round_trip_and_its_errors() -> None:
    ca = CertificateAuthority.self_signed("example.org")
    back = self_signed("ns/istio-ca-secret", data_of(istio_ca_secret(ca, "istio-ca-secret", "ns")))
    assert back.root_pem == ca.root_pem and back.signing_cert == ca.signing_cert and back.cert_chain_pem == ""
    assert "istio-generated" in istio_ca_secret(ca, "cacerts", "ns")["data"]  # istiod BuildSecret marks cacerts
    with pytest.raises(CaSecretError, match=r"Secret ns/istio-ca-secret: want ca-cert.pem and ca-key.pem"):
        self_signed("ns/istio-ca-secret", {"ca-cert.pem": ca.root_pem.encode()})
    other = CertificateAuthority.self_signed("example.org")
    mismatched = data_of(istio_ca_secret(ca, "istio-ca-secret", "ns"))
    mismatched["ca-key.pem"] = data_of(istio_ca_secret(other, "istio-ca-secret", "ns"))["ca-key.pem"]
    with pytest.raises(CaSecretError, match=r"ca-key\.pem does not match ca-cert\.pem"):
        self_signed("ns/istio-ca-secret", mismatched)


def test_a_root_may_change_only_to_a_bundle_related_by_inclusion_with_multi_root() -> None:
    a, b = pem(new_root("A")[0]), pem(new_root("B")[0])
    assert root_change_refusal(a, a, multi_root=False) is None
    assert (
        root_change_refusal(a, a + b, multi_root=False) == "Multi root is disabled, updating new ROOT-CA not supported"
    )
    assert root_change_refusal(a, a + b, multi_root=True) is None  # rotation: the new root added
    assert root_change_refusal(a + b, b, multi_root=True) is None  # then the old one removed
    assert root_change_refusal(a, b, multi_root=True) == "Updating new ROOT-CA not supported"


def test_the_ca_settings_as_istiod_reads_them() -> None:
    env = {"CITADEL_SELF_SIGNED_CA_CERT_TTL": "87600h0m0s", "ISTIO_MULTIROOT_MESH": "true"}
    settings = Settings.from_env(None, env)
    assert settings.ca_server and settings.multi_root_mesh  # ENABLE_CA_SERVER defaults to true
    assert settings.self_signed_ca_cert_ttl == 87600 * 3600 and settings.self_signed_ca_rsa_key_size == 2048
    assert not Settings.from_env(None, {"ENABLE_CA_SERVER": "false"}).ca_server
    with pytest.raises(SettingsError, match="CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE='1024': want at least 2048 bits"):
        Settings.from_env(None, {"CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE": "1024"})
