"""Istio's API as generated from the pinned modules (make api): the names on the wire that
Istio's own peers use, and what the hand-written facades of app/api name."""

from __future__ import annotations

from app.api import ca, nds
from app.api import networking as net
from app.api import security as sec
from app.api.mesh import MeshConfig
from app.xds.type_urls import NAME_TABLE


def test_the_wire_names_are_istios() -> None:
    # pilot-agent asks for this type URL and calls this method on the secure port
    assert f"type.googleapis.com/{nds.NameTable.DESCRIPTOR.full_name}" == NAME_TABLE
    assert nds.NameTable.DESCRIPTOR.full_name == "istio.networking.nds.v1.NameTable"
    service = ca.IstioCertificateRequest.DESCRIPTOR.file.services_by_name["IstioCertificateService"]
    assert service.full_name == "istio.v1.auth.IstioCertificateService"
    assert service.methods_by_name["CreateCertificate"].input_type is ca.IstioCertificateRequest.DESCRIPTOR
    assert service.methods_by_name["CreateCertificate"].output_type is ca.IstioCertificateResponse.DESCRIPTOR


def test_the_facades_name_istios_messages_under_app_api_istio() -> None:
    for message in (net.DestinationRule, net.Sidecar, sec.AuthorizationPolicy, MeshConfig, nds.NameTable):
        assert message.__module__.startswith("app.api.istio."), message
    assert net.DestinationRule.DESCRIPTOR.full_name == "istio.networking.v1alpha3.DestinationRule"
    # DestinationRule's selector is istio.type's, shared with the security kinds
    assert net.DestinationRule.DESCRIPTOR.fields_by_name["workload_selector"].message_type is (
        sec.WorkloadSelector.DESCRIPTOR
    )
    assert net.CaptureMode.Name(net.CaptureMode.NONE) == "NONE"
