"""The names the secure port's certificate carries are those injected proxies dial: pilot-agent
checks the server's certificate against the host of its discovery address (no ISTIOD_SAN in
istiod's template), which the injection template makes ``istiod[-REV].NS.svc``; istiod's DNS
certificate carries the revision's name (bootstrap getDNSNames)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from app.runtime import Runtime
from app.settings import Settings


@pytest.mark.parametrize(("revision", "service"), [("", "istiod"), ("default", "istiod"), ("canary", "istiod-canary")])
def test_the_secure_port_answers_to_the_service_injected_proxies_dial(
    tmp_path: Path, revision: str, service: str
) -> None:
    (tmp_path / "config").mkdir()
    settings = Settings(config_dir=tmp_path / "config", ca_dir=tmp_path / "ca", revision=revision,
                        system_namespace="mesh")  # fmt: skip
    runtime = Runtime(settings)
    assert runtime.secure is not None
    cert = x509.load_pem_x509_certificate(runtime.secure.serving_certificate.encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"{service}.mesh.svc" in names and "pilotfish.mesh.svc" in names, names
