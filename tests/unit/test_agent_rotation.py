"""When the agent renews its workload certificate, as pilot-agent's rotateTime
(security/pkg/nodeagent/cache/secretcache.go): half the lifetime (SECRET_GRACE_PERIOD_RATIO 0.5,
jitter 0.01) counted from when the certificate was received, never from its ``notBefore``, which
the CA backdates two minutes (istiod ClockSkewGracePeriod). A certificate living at most two
minutes was renewed in a hot loop (195 in 5 s); with an injected clock and sleep, renewals of
60-second certificates from pilotfish's own CA come 30 s apart."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from app.agent.certs import CertificateManager, WorkloadCertificate, rotation_delay
from app.security.ca import CLOCK_SKEW, CertificateAuthority

IDENTITY = "spiffe://cluster.local/ns/demo/sa/sleep"
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class FakeClock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now


class ClockedCa:
    """pilotfish's CA signing at the fake clock's time (so ``notBefore`` is two minutes back)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.ca = CertificateAuthority.self_signed("cluster.local", START - datetime.timedelta(days=1))
        self.signed = 0

    async def sign(self, csr_pem: str, ttl: datetime.timedelta, current: WorkloadCertificate | None) -> list[str]:
        self.signed += 1
        return self.ca.sign_csr(csr_pem, [IDENTITY], ttl, self.clock())


@pytest.mark.parametrize("ttl_seconds", [20, 60, 120, 3600])
async def test_renewal_counts_the_lifetime_from_when_the_certificate_arrived(ttl_seconds: int) -> None:
    clock = FakeClock()
    ca = ClockedCa(clock)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 5:
            raise asyncio.CancelledError
        clock.now += datetime.timedelta(seconds=seconds)

    ttl = datetime.timedelta(seconds=ttl_seconds)
    certs = CertificateManager(ca, IDENTITY, ttl=ttl, clock=clock, sleep=sleep)
    with pytest.raises(asyncio.CancelledError):
        await certs.run()
    assert ca.signed == 5
    assert certs.current is not None
    assert certs.current.not_after - certs.current.not_before == ttl + CLOCK_SKEW  # backdated, as istiod
    assert certs.current.received == clock.now
    # the grace ratio is 0.5 +- 0.01 of the lifetime, which may be up to a second short: X.509
    # times have whole seconds, and the clock moved on by fractions
    assert all(ttl_seconds * 0.49 - 1 <= s <= ttl_seconds * 0.51 for s in slept), slept


def test_rotate_time_as_pilot_agent() -> None:
    received = START
    cert = WorkloadCertificate(b"", "", "", received - CLOCK_SKEW, received + datetime.timedelta(seconds=100), received)
    # no jitter: the grace period is the ratio of (expiry - received), renew that long before expiry
    assert rotation_delay(cert, received, 0.5, 0.0) == 50.0
    assert rotation_delay(cert, received, 0.2, 0.0) == 80.0
    assert rotation_delay(cert, received + datetime.timedelta(seconds=30), 0.5, 0.0) == 20.0
    assert rotation_delay(cert, received + datetime.timedelta(seconds=90), 0.5, 0.0) == 0.0
    # the jittered ratio stays within 0..1
    assert rotation_delay(cert, received, 1.0, 0.5) >= 0.0
    assert rotation_delay(cert, received, 0.0, 0.5) <= 100.0
    assert rotation_delay(cert, received, 1.5, 0.0) == 0.0
    assert rotation_delay(cert, received, -0.5, 0.0) == 100.0
    # the default jitter moves the ratio up or down by at most 0.01, both ways over many draws
    delays = [rotation_delay(cert, received) for _ in range(200)]
    assert all(49.0 <= d <= 51.0 for d in delays)
    assert min(delays) < 50.0 < max(delays)
