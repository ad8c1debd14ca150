"""The iptables rules that send a pod's DNS to the agent, as istio-iptables writes them for DNS
capture (tools/istio-iptables/pkg/capture/run.go ``SetupDNSRedir``, ``addDNSConntrackZones``);
pure: the text is printed for ``iptables-restore --noflush`` (``ip6tables-restore`` for
``ipv6=True``), never applied here.

Only the DNS part: nat ``OUTPUT -> ISTIO_OUTPUT``, where the proxy's own uid/gid return first
(its upstream queries must not loop back to itself), then ``ISTIO_OUTPUT_DNS`` redirects TCP and
UDP port 53 to the agent; raw-table conntrack zones keep app<->agent and agent<->resolver UDP
flows apart (zone 2 and zone 1), avoiding the UDP conntrack races run.go describes. The rest of
istio's capture (inbound/outbound TCP to Envoy on 15006/15001) is not written here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

AGENT_DNS_PORT = 15053  # istio constants.IstioAgentDNSListenerPort
PROXY_UID = 1337
PROXY_GID = 1337


def dns_capture_rules(
    dns_servers: Iterable[str] = (),
    *,
    capture_all: bool = False,
    proxy_uids: Sequence[int] = (PROXY_UID,),
    proxy_gids: Sequence[int] = (PROXY_GID,),
    dns_port: int = AGENT_DNS_PORT,
    ipv6: bool = False,
) -> str:
    """iptables-save style text redirecting DNS (port 53, TCP and UDP) to the agent on
    ``dns_port``: for every server of the family (``ipv6``) in ``dns_servers`` (unparsable
    addresses ignored, as istio's IPsSplitV4V6), or for any destination with ``capture_all``.
    Empty when there is nothing to capture in either family (run.go: "DNS capture disabled")."""
    v4, v6 = _split_families(dns_servers)
    if not capture_all and not v4 and not v6:
        return ""
    servers, mask = (v6, 128) if ipv6 else (v4, 32)
    capture = capture_all or bool(servers)
    dests = [""] if capture_all else [f" -d {s}/{mask}" for s in servers]
    sources = [""] if capture_all else [f" -s {s}/{mask}" for s in servers]
    owners = [f"--uid-owner {uid}" for uid in proxy_uids] + [f"--gid-owner {gid}" for gid in proxy_gids]

    nat = ["-A OUTPUT -j ISTIO_OUTPUT"]
    # the proxy's own traffic (the agent's upstream DNS queries included) is never redirected
    nat += [f"-A ISTIO_OUTPUT -m owner {owner} -j RETURN" for owner in owners]
    if capture:
        nat.append("-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS")
    for proto in ("tcp", "udp"):
        nat += [f"-A ISTIO_OUTPUT_DNS -p {proto} --dport 53{d} -j REDIRECT --to-ports {dns_port}" for d in dests]

    raw = ["-A OUTPUT -j ISTIO_OUTPUT_DNS"]
    for owner in owners:
        # zone 1: the agent <-> upstream resolvers; zone 2: the agent's answers to the apps
        raw.append(f"-A ISTIO_OUTPUT_DNS -p udp --dport 53 -m owner {owner} -j CT --zone 1")
        raw.append(f"-A ISTIO_OUTPUT_DNS -p udp --sport {dns_port} -m owner {owner} -j CT --zone 2")
    if capture:
        raw.append("-A PREROUTING -j ISTIO_INBOUND")
        for d, s in zip(dests, sources, strict=True):
            raw.append(f"-A ISTIO_OUTPUT_DNS -p udp --dport 53{d} -j CT --zone 2")  # apps -> resolver
            raw.append(f"-A ISTIO_INBOUND -p udp --sport 53{s} -j CT --zone 1")  # resolver -> agent

    return _table("nat", nat) + _table("raw", raw)


def _split_families(addresses: Iterable[str]) -> tuple[list[str], list[str]]:
    v4: list[str] = []
    v6: list[str] = []
    for text in addresses:
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            continue
        (v6 if ip.version == 6 else v4).append(str(ip))
    return v4, v6


def _table(name: str, rules: list[str]) -> str:
    """One table as iptables-save prints it: user chains declared, then the rules, COMMIT."""
    chains = dict.fromkeys(rule.split()[1] for rule in rules if rule.split()[1].startswith("ISTIO_"))
    for rule in rules:
        target = rule.split()[-1]
        if target.startswith("ISTIO_"):
            chains.setdefault(target)
    lines = [f"*{name}", *(f":{chain} - [0:0]" for chain in chains), *rules, "COMMIT"]
    return "\n".join(lines) + "\n"
