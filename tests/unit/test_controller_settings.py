"""The controllers' settings, by istiod's names where istiod has them."""

from __future__ import annotations

import pytest

from app.errors import SettingsError
from app.settings import Settings


def test_defaults_are_istiods() -> None:
    settings = Settings.from_env(None, {})
    assert settings.kube_controllers and settings.leader_election
    assert settings.leader_lease_duration == 30.0 and settings.leader_identity == ""
    prefixes = (settings.ip_autoallocate_ipv4_prefix, settings.ip_autoallocate_ipv6_prefix)
    assert prefixes == ("240.240.0.0/16", "2001:2::/48")


def test_environment() -> None:
    settings = Settings.from_env(None, {
        "POD_NAME": "pilotfish-7d9f-abcde", "PILOTFISH_KUBE_CONTROLLERS": "false", "ENABLE_LEADER_ELECTION": "0",
        "PILOTFISH_LEADER_LEASE_DURATION": "2s", "PILOT_IP_AUTOALLOCATE_IPV4_PREFIX": "10.200.0.0/16",
    })  # fmt: skip
    assert settings.leader_identity == settings.pod_name == "pilotfish-7d9f-abcde"
    assert not settings.kube_controllers and not settings.leader_election
    assert settings.leader_lease_duration == 2.0 and settings.ip_autoallocate_ipv4_prefix == "10.200.0.0/16"


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("PILOTFISH_LEADER_LEASE_DURATION", "500ms", "a Lease counts whole seconds"),
        ("PILOTFISH_LEADER_LEASE_DURATION", "1.5s", "a Lease counts whole seconds"),
        ("PILOT_IP_AUTOALLOCATE_IPV6_PREFIX", "2001:2::/200", "does not appear to be an IPv4 or IPv6 network"),
        ("PILOT_IP_AUTOALLOCATE_IPV4_PREFIX", "2001:2::/48", "not an IPv4 prefix"),
        # what str.isdigit lets through and int() then refuses: a clear error, not a traceback
        ("PILOT_PUSH_THROTTLE", "\u00b2", "want a positive integer"),
        ("PILOT_CRL_CONFIGMAP", "Not_A_Name", "want a ConfigMap name"),
        ("PILOTFISH_TRACE_TIMEOUT", "0s", "above zero"),  # every trace would end unconverged at once
        ("CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE", "\u00b2", "want a whole percentage"),
        ("PILOT_DEBOUNCE_AFTER", "\u0663s", "want a duration"),
        ("PILOT_DEBOUNCE_AFTER", "1" * 16_000, "out of range"),
        ("PILOT_DEBOUNCE_AFTER", "2562048h", "out of range"),
    ],
)
def test_bad_values_name_the_variable(key: str, value: str, reason: str) -> None:
    with pytest.raises(SettingsError, match=key) as raised:
        Settings.from_env(None, {key: value})
    assert reason in str(raised.value)
