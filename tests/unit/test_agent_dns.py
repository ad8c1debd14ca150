"""The agent's DNS proxy, pinned to istio's local DNS server (pkg/dns/client/dns.go): the lookup
cases of its dns_test.go (testDNS, TestBuildAlternateHosts) on the pure table, then the proxy on
real sockets against a small fake upstream resolver."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import AsyncIterator
from typing import Any

import dns.asyncquery
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from app.agent.dns import TTL, DnsProxy, LookupTable, answer, parse_resolv_conf
from app.api.nds import NameTable

A, AAAA = dns.rdatatype.A, dns.rdatatype.AAAA
RdataType = dns.rdatatype.RdataType
SEARCH = ("ns1.svc.cluster.local", "svc.cluster.local", "cluster.local")


def name_table(**entries: dict[str, Any]) -> NameTable:
    return NameTable(table={host: NameTable.NameInfo(**info) for host, info in entries.items()})


def k8s(name: str, ns: str, *ips: str, **extra: Any) -> dict[str, Any]:
    return {"ips": list(ips), "registry": "Kubernetes", "shortname": name, "namespace": ns, **extra}


def external(*ips: str) -> dict[str, Any]:
    return {"ips": list(ips), "registry": "External"}


# istio dns_test.go fillTable
ISTIO_TABLE = NameTable(
    table={
        "www.google.com": NameTable.NameInfo(**external("1.1.1.1")),
        "productpage.ns1.svc.cluster.local": NameTable.NameInfo(**k8s("productpage", "ns1", "9.9.9.9")),
        "example.ns2.svc.cluster.local": NameTable.NameInfo(**k8s("example", "ns2", "10.10.10.10")),
        "details.ns2.svc.cluster.remote": NameTable.NameInfo(
            **k8s("details", "ns2", "11.11.11.11", "12.12.12.12", "13.13.13.13", "14.14.14.14")
        ),
        "svc-with-alt.ns1.svc.cluster.local": NameTable.NameInfo(
            **k8s("svc-with-alt", "ns1", "15.15.15.15", alt_hosts=["svc-with-alt.ns1.svc.clusterset.local"])
        ),
        "ipv6.localhost": NameTable.NameInfo(**external("2001:db8:0:0:0:ff00:42:8329")),
        "dual.localhost": NameTable.NameInfo(**external("2.2.2.2", "2001:db8:0:0:0:ff00:42:8329")),
        "ipv4.localhost": NameTable.NameInfo(**external("2.2.2.2")),
        "*.b.wildcard": NameTable.NameInfo(**external("11.11.11.11")),
        "*.wildcard": NameTable.NameInfo(**external("10.10.10.10")),
        "*.svc.mesh.company.net": NameTable.NameInfo(**external("10.1.2.3")),
        "example.localhost.": NameTable.NameInfo(**external("3.3.3.3")),
    }
)


@pytest.fixture(scope="module")
def istio_table() -> LookupTable:
    return LookupTable.build(ISTIO_TABLE, "ns1", "ns1.svc.cluster.local", SEARCH)


def records(table: LookupTable, qname: str, qtype: RdataType = A) -> list[tuple[str, str, str]] | None:
    found = table.lookup(qname, qtype)
    if found is None:
        return None
    return [(str(r.name), dns.rdatatype.to_text(r.rdtype), rd.to_text()) for r in found for rd in r]


def a(name: str, *ips: str) -> list[tuple[str, str, str]]:
    return [(name, "A", ip) for ip in ips]


def cname(name: str, target: str) -> list[tuple[str, str, str]]:
    return [(name, "CNAME", target)]


# (istio testDNS case name, query, qtype, expected records; None = not ours, forwarded upstream)
SVC = "ns1.svc.cluster.local."
V6 = "2001:db8::ff00:42:8329"
ISTIO_CASES = [
    ("non k8s host in local cache", "www.google.com.", A, a("www.google.com.", "1.1.1.1")),
    (
        "non k8s host with search namespace yields cname+A record",
        "www.google.com." + SVC,
        A,
        cname("www.google.com." + SVC, "www.google.com.") + a("www.google.com.", "1.1.1.1"),
    ),
    ("non k8s host not in local cache", "www.bing.com.", A, None),
    ("k8s host - fqdn", "productpage." + SVC, A, a("productpage." + SVC, "9.9.9.9")),
    ("k8s host, fqdn with search namespace[0] is not ours", "productpage." + SVC[:-1] + "." + SVC, A, None),
    ("k8s host - name.namespace", "productpage.ns1.", A, a("productpage.ns1.", "9.9.9.9")),
    ("k8s host - shortname", "productpage.", A, a("productpage.", "9.9.9.9")),
    (
        "k8s host (name.namespace) with search namespace yields cname+A record",
        "productpage.ns1." + SVC,
        A,
        cname("productpage.ns1." + SVC, "productpage.ns1.") + a("productpage.ns1.", "9.9.9.9"),
    ),
    ("AAAA query for IPv4 k8s host with search namespace: NOERROR empty", "productpage.ns1." + SVC, AAAA, []),
    ("k8s host - non local namespace - name.namespace", "example.ns2.", A, a("example.ns2.", "10.10.10.10")),
    (
        "k8s host - non local namespace - fqdn",
        "example.ns2.svc.cluster.local.",
        A,
        a("example.ns2.svc.cluster.local.", "10.10.10.10"),
    ),
    ("k8s host - non local namespace - name.ns.svc", "example.ns2.svc.", A, a("example.ns2.svc.", "10.10.10.10")),
    ("k8s host - non local namespace - shortname is not ours", "example.", A, None),
    ("alt host - name", "svc-with-alt.", A, a("svc-with-alt.", "15.15.15.15")),
    (
        "alt host - name.namespace.svc.clusterset.local",
        "svc-with-alt.ns1.svc.clusterset.local.",
        A,
        a("svc-with-alt.ns1.svc.clusterset.local.", "15.15.15.15"),
    ),
    (
        "remote cluster k8s svc - other domain - fqdn",
        "details.ns2.svc.cluster.remote.",
        A,
        a("details.ns2.svc.cluster.remote.", "11.11.11.11", "12.12.12.12", "13.13.13.13", "14.14.14.14"),
    ),
    ("remote cluster k8s svc - other domain - name.namespace is not ours", "details.ns2.", A, None),
    ("TypeA query returns A records only", "dual.localhost.", A, a("dual.localhost.", "2.2.2.2")),
    ("TypeAAAA query returns AAAA records only", "dual.localhost.", AAAA, [("dual.localhost.", "AAAA", V6)]),
    ("only AAAA records exist for typeA: NOERROR empty", "ipv6.localhost.", A, []),
    ("only A records exist for typeAAAA: NOERROR empty", "ipv4.localhost.", AAAA, []),
    ("wild card returns A record correctly", "foo.wildcard.", A, a("foo.wildcard.", "10.10.10.10")),
    ("specific wild card returns A record correctly", "a.b.wildcard.", A, a("a.b.wildcard.", "11.11.11.11")),
    (
        "wild card with search namespace chained pointer",
        "foo.wildcard." + SVC,
        A,
        cname("foo.wildcard." + SVC, "*.wildcard.") + a("*.wildcard.", "10.10.10.10"),
    ),
    (
        "wild card with namespace with domain",
        "foo.foons.svc.mesh.company.net.",
        A,
        a("foo.foons.svc.mesh.company.net.", "10.1.2.3"),
    ),
    (
        "wild card with search domain",
        "foo.svc.mesh.company.net." + SVC,
        A,
        cname("foo.svc.mesh.company.net." + SVC, "*.svc.mesh.company.net.") + a("*.svc.mesh.company.net.", "10.1.2.3"),
    ),
    ("hostname with a period", "example.localhost.", A, a("example.localhost.", "3.3.3.3")),
]


@pytest.mark.parametrize(("qname", "qtype", "expected"), [c[1:] for c in ISTIO_CASES], ids=[c[0] for c in ISTIO_CASES])
def test_istio_testdns_lookup_cases(istio_table: LookupTable, qname: str, qtype: RdataType, expected: Any) -> None:
    assert records(istio_table, qname, qtype) == expected


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("www.google.com", {"www.google.com."}),
        ("example", {"example.ns2.", "example.ns2.svc.", "example.localhost.", "example.ns2.svc.cluster.local."}),
        ("details", {"details.ns2.svc.cluster.remote."}),
        ("productpage", {"productpage.", "productpage.ns1.", "productpage.ns1.svc.", "productpage." + SVC}),
        (
            "svc-with-alt",
            {
                "svc-with-alt.",
                "svc-with-alt.ns1.",
                "svc-with-alt.ns1.svc.",
                "svc-with-alt.ns1.svc.cluster.local.",
                "svc-with-alt.ns1.svc.clusterset.local.",
            },
        ),
        ("*.wildcard", {"*.wildcard."}),
    ],
)
def test_istio_build_alternate_hosts(istio_table: LookupTable, prefix: str, expected: set[str]) -> None:
    with_addresses = set(istio_table.ipv4) | set(istio_table.ipv6)
    assert {h for h in with_addresses if h.startswith(prefix)} == expected


def test_search_domain_cname_only_for_first_search_domain_and_not_for_names_already_under_it(
    istio_table: LookupTable,
) -> None:
    assert istio_table.cname["productpage.ns1.ns1.svc.cluster.local."] == "productpage.ns1."
    assert istio_table.cname["productpage.ns1.svc.ns1.svc.cluster.local."] == "productpage.ns1.svc."
    assert records(istio_table, "productpage.svc.cluster.local.") is None  # second search domain: upstream
    assert "productpage.ns1.svc.cluster.local.ns1.svc.cluster.local." not in istio_table.hosts


def test_kubernetes_shortname_only_in_proxy_namespace() -> None:
    table = name_table(**{"reviews.ns2.svc.cluster.local": k8s("reviews", "ns2", "10.0.0.2")})
    other = LookupTable.build(table, "ns1", "ns1.svc.cluster.local", ())
    same = LookupTable.build(table, "ns2", "ns2.svc.cluster.local", ())
    assert records(other, "reviews.") is None
    assert records(same, "reviews.") == a("reviews.", "10.0.0.2")
    assert records(other, "reviews.ns2.") == a("reviews.ns2.", "10.0.0.2")
    assert records(other, "reviews.ns2.svc.cluster.") is None  # istio expands only one more label (.svc)


def test_non_kubernetes_entry_gets_no_short_forms() -> None:
    table = name_table(**{"api.example.com": {**k8s("api", "ns1", "10.0.0.3"), "registry": "External"}})
    lookup = LookupTable.build(table, "ns1", "ns1.svc.cluster.local", ())
    assert records(lookup, "api.example.com.") == a("api.example.com.", "10.0.0.3")
    assert records(lookup, "api.") is None
    assert records(lookup, "api.ns1.") is None


def test_kubernetes_entry_written_fully_qualified_is_dropped_as_istio_generate_alt_hosts() -> None:
    table = name_table(**{"reviews.ns1.svc.cluster.local.": k8s("reviews", "ns1", "10.0.0.2")})
    assert LookupTable.build(table, "ns1", "ns1.svc.cluster.local", SEARCH).hosts == frozenset()


def test_entry_without_valid_ips_is_skipped() -> None:
    table = name_table(bad=external("not-an-ip"), good=external("not-an-ip", "10.0.0.9"))
    lookup = LookupTable.build(table, "ns1", "ns1.svc.cluster.local", ())
    assert records(lookup, "bad.") is None
    assert records(lookup, "good.") == a("good.", "10.0.0.9")


def test_empty_table_owns_nothing() -> None:
    lookup = LookupTable.build(NameTable(), "ns1", "ns1.svc.cluster.local", SEARCH)
    assert records(lookup, "productpage.") is None
    assert records(lookup, "www.google.com.ns1.svc.cluster.local.") is None


def test_other_query_types_for_mesh_names_are_forwarded_as_istio_lookup_host(istio_table: LookupTable) -> None:
    assert records(istio_table, "productpage.", dns.rdatatype.TXT) is None
    assert records(istio_table, "productpage.", dns.rdatatype.MX) is None


def test_lookup_is_case_insensitive(istio_table: LookupTable) -> None:
    assert records(istio_table, "ProductPage.NS1.") == a("ProductPage.NS1.", "9.9.9.9")


def test_answer_is_authoritative_with_ttl_30_and_echoes_the_query() -> None:
    query = dns.message.make_query("productpage.", A)
    response = answer(LookupTable.build(ISTIO_TABLE, "ns1", "ns1.svc.cluster.local", SEARCH), query)
    assert response is not None
    assert response.id == query.id and response.question == query.question
    assert response.flags & dns.flags.AA and response.flags & dns.flags.QR
    assert response.rcode() == dns.rcode.NOERROR
    assert [rrset.ttl for rrset in response.answer] == [TTL] == [30]


def test_answer_nodata_is_noerror_never_nxdomain_istio_31250(istio_table: LookupTable) -> None:
    response = answer(istio_table, dns.message.make_query("ipv4.localhost.", AAAA))
    assert response is not None and response.rcode() == dns.rcode.NOERROR and response.answer == []


def test_answer_returns_none_to_forward(istio_table: LookupTable) -> None:
    assert answer(None, dns.message.make_query("productpage.", A)) is None  # no table yet
    assert answer(istio_table, dns.message.make_query("www.bing.com.", A)) is None
    assert answer(istio_table, dns.message.make_query("productpage.", A, rdclass="CH")) is None


def test_answer_round_robins_addresses_as_istio_round_robin_response(istio_table: LookupTable) -> None:
    query = dns.message.make_query("details.ns2.svc.cluster.remote.", A)
    orders = set()
    for seed in range(20):
        response = answer(istio_table, query, rng=random.Random(seed))
        assert response is not None
        orders.add(tuple(rd.to_text() for rd in response.answer[0]))
    assert len(orders) > 1
    assert {frozenset(order) for order in orders} == {frozenset(f"{i}.{i}.{i}.{i}" for i in range(11, 15))}


def test_parse_resolv_conf_kubernetes_pod() -> None:
    conf = parse_resolv_conf(
        "# generated by kubelet\nsearch ns1.svc.cluster.local svc.cluster.local cluster.local\n"
        "nameserver 10.96.0.10\nnameserver fd00::a\noptions ndots:5\n"
    )
    assert conf.nameservers == (("10.96.0.10", 53), ("fd00::a", 53))
    assert conf.search == SEARCH
    assert conf.ndots == 5


def test_parse_resolv_conf_domain_line_and_defaults() -> None:
    conf = parse_resolv_conf("domain Corp.Example.\nnameserver 192.0.2.1\n")
    assert conf.search == ("corp.example",) and conf.ndots == 1
    assert parse_resolv_conf("nameserver 192.0.2.1\n").search == ()
    assert parse_resolv_conf("search a.b\n").nameservers == ()


# ---------------------------------------------------------------- real sockets


class FakeUpstream:
    """A resolver on 127.0.0.1 (UDP and TCP, one port): example.org. A 93.184.216.34, NXDOMAIN otherwise."""

    def __init__(self) -> None:
        self.queries: list[dns.message.Message] = []
        self.replies: list[bytes] = []
        self.port = 0
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None

    def reply(self, wire: bytes) -> bytes:
        query = dns.message.from_wire(wire)
        self.queries.append(query)
        response = dns.message.make_response(query, recursion_available=True)
        if query.question[0].name == dns.name.from_text("example.org."):
            response.answer.append(dns.rrset.from_text("example.org.", 300, "IN", "A", "93.184.216.34"))
        else:
            response.set_rcode(dns.rcode.NXDOMAIN)
        self.replies.append(response.to_wire())
        return self.replies[-1]

    async def start(self) -> None:
        upstream = self

        class Udp(asyncio.DatagramProtocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport

            def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
                self.transport.sendto(upstream.reply(data), addr)  # type: ignore[attr-defined]

        async def tcp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    size = int.from_bytes(await reader.readexactly(2), "big")
                    out = self.reply(await reader.readexactly(size))
                    writer.write(len(out).to_bytes(2, "big") + out)
                    await writer.drain()
            except (EOFError, OSError):
                pass
            finally:
                writer.close()

        self._tcp = await asyncio.start_server(tcp, "127.0.0.1", 0)
        self.port = self._tcp.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        self._udp, _ = await loop.create_datagram_endpoint(Udp, local_addr=("127.0.0.1", self.port))

    async def close(self) -> None:
        assert self._udp is not None and self._tcp is not None
        self._udp.close()
        self._tcp.close()


def dead_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
async def upstream() -> AsyncIterator[FakeUpstream]:
    fake = FakeUpstream()
    await fake.start()
    yield fake
    await fake.close()


def make_proxy(upstreams: list[tuple[str, int]], **kw: Any) -> DnsProxy:
    return DnsProxy(
        upstreams,
        proxy_namespace="ns1",
        proxy_domain="ns1.svc.cluster.local",
        search=SEARCH,
        address=("127.0.0.1", 0),
        **kw,
    )


@pytest.fixture
async def proxy(upstream: FakeUpstream) -> AsyncIterator[DnsProxy]:
    async with make_proxy([("127.0.0.1", upstream.port)]) as p:
        yield p


async def ask(proxy: DnsProxy, qname: str, *, tcp: bool = False, qtype: RdataType = A) -> dns.message.Message:
    query = dns.message.make_query(qname, qtype)
    host, port = proxy.address
    if tcp:
        return await dns.asyncquery.tcp(query, host, port=port, timeout=3)
    return await dns.asyncquery.udp(query, host, port=port, timeout=3)


async def raw_udp(proxy: DnsProxy, payload: bytes, timeout: float = 3) -> bytes:
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        await loop.sock_connect(s, proxy.address)
        await loop.sock_sendall(s, payload)
        return await asyncio.wait_for(loop.sock_recv(s, 65535), timeout)


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
async def test_mesh_names_answered_from_table_without_upstream(
    proxy: DnsProxy, upstream: FakeUpstream, tcp: bool
) -> None:
    proxy.update(ISTIO_TABLE)
    response = await ask(proxy, "productpage.", tcp=tcp)
    assert response.flags & dns.flags.AA
    assert [rd.to_text() for rd in response.answer[0]] == ["9.9.9.9"]
    chained = await ask(proxy, "productpage.ns1.ns1.svc.cluster.local.", tcp=tcp)
    assert [r.rdtype for r in chained.answer] == [dns.rdatatype.CNAME, A]
    nodata = await ask(proxy, "ipv4.localhost.", tcp=tcp, qtype=AAAA)
    assert nodata.rcode() == dns.rcode.NOERROR and nodata.answer == []
    assert upstream.queries == []


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
async def test_unknown_name_forwarded_and_upstream_answer_relayed(
    proxy: DnsProxy, upstream: FakeUpstream, tcp: bool
) -> None:
    proxy.update(ISTIO_TABLE)
    response = await ask(proxy, "example.org.", tcp=tcp)  # dnspython checks the id and question match
    assert [rd.to_text() for rd in response.answer[0]] == ["93.184.216.34"]
    assert response.answer[0].ttl == 300 and response.flags & dns.flags.RA
    assert (await ask(proxy, "www.bing.com.", tcp=tcp)).rcode() == dns.rcode.NXDOMAIN
    assert [str(q.question[0].name) for q in upstream.queries] == ["example.org.", "www.bing.com."]


async def test_forwarded_reply_is_the_upstreams_bytes_with_the_clients_id(
    proxy: DnsProxy, upstream: FakeUpstream
) -> None:
    query = dns.message.make_query("example.org.", A, use_edns=0)
    query.id = 0x1234
    reply = await raw_udp(proxy, query.to_wire())
    assert reply[:2] == b"\x12\x34"
    assert reply[2:] == upstream.replies[-1][2:]
    assert upstream.queries[-1].edns == 0  # the query went up unchanged too


async def test_forwards_everything_before_first_table_and_has_table(proxy: DnsProxy, upstream: FakeUpstream) -> None:
    assert not proxy.has_table
    assert (await ask(proxy, "productpage.")).rcode() == dns.rcode.NXDOMAIN  # upstream's answer
    assert len(upstream.queries) == 1
    proxy.update(ISTIO_TABLE)
    assert proxy.has_table
    assert [rd.to_text() for rd in (await ask(proxy, "productpage.")).answer[0]] == ["9.9.9.9"]
    assert len(upstream.queries) == 1


async def test_istio_default_servfail_before_first_table(upstream: FakeUpstream) -> None:
    async with make_proxy([("127.0.0.1", upstream.port)], forward_before_sync=False) as p:
        assert (await ask(p, "example.org.")).rcode() == dns.rcode.SERVFAIL
    assert upstream.queries == []


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
async def test_servfail_when_all_upstreams_fail(tcp: bool) -> None:
    async with make_proxy([("127.0.0.1", dead_port()), ("127.0.0.1", dead_port())], upstream_timeout=0.5) as p:
        p.update(ISTIO_TABLE)
        assert (await ask(p, "example.org.", tcp=tcp)).rcode() == dns.rcode.SERVFAIL
        assert [rd.to_text() for rd in (await ask(p, "productpage.", tcp=tcp)).answer[0]] == ["9.9.9.9"]


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
async def test_next_upstream_tried_on_failure(upstream: FakeUpstream, tcp: bool) -> None:
    upstreams = [("127.0.0.1", dead_port()), ("127.0.0.1", upstream.port)]
    for seed in range(4):  # istio shuffles the servers: whichever order, the live one answers
        async with make_proxy(upstreams, upstream_timeout=0.5, rng=random.Random(seed)) as p:
            assert (await ask(p, "example.org.", tcp=tcp)).answer


async def test_udp_local_answer_too_big_is_truncated_and_tcp_gets_all(proxy: DnsProxy) -> None:
    ips = [f"10.1.{i // 250}.{i % 250}" for i in range(100)]
    proxy.update(name_table(**{"headless.ns1.svc.cluster.local": k8s("headless", "ns1", *ips)}))
    udp = await ask(proxy, "headless.")
    assert udp.flags & dns.flags.TC
    tcp = await ask(proxy, "headless.", tcp=True)
    assert len(tcp.answer[0]) == 100


async def test_garbage_does_not_kill_the_server(proxy: DnsProxy) -> None:
    proxy.update(ISTIO_TABLE)
    # a header with one question and a broken body: FORMERR with the query's id
    broken = b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07examp"
    reply = dns.message.from_wire(await raw_udp(proxy, broken))
    assert reply.id == 0xABCD and reply.rcode() == dns.rcode.FORMERR
    # two questions: FORMERR; a non-QUERY opcode: NOTIMP
    assert dns.message.from_wire(await raw_udp(proxy, broken[:5] + b"\x02" + bytes(6))).rcode() == dns.rcode.FORMERR
    assert dns.message.from_wire(await raw_udp(proxy, b"\x00\x01\x28\x00" + bytes(8))).rcode() == dns.rcode.NOTIMP
    # too short to answer, or a response: dropped
    for junk in (b"\x00", b"\xff" * 11, b"\x00\x01\x80\x00" + bytes(8)):
        with pytest.raises(TimeoutError):
            await raw_udp(proxy, junk, timeout=0.2)
    # TCP: a framed broken query gets FORMERR; a short frame just ends the connection
    host, port = proxy.address
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(len(broken).to_bytes(2, "big") + broken + b"\x00\x02ab")
    size = int.from_bytes(await reader.readexactly(2), "big")
    assert dns.message.from_wire(await reader.readexactly(size)).rcode() == dns.rcode.FORMERR
    assert await reader.read() == b""
    writer.close()
    for tcp in (False, True):
        assert [rd.to_text() for rd in (await ask(proxy, "productpage.", tcp=tcp)).answer[0]] == ["9.9.9.9"]


async def test_close_ends_open_tcp_connections(upstream: FakeUpstream) -> None:
    p = make_proxy([("127.0.0.1", upstream.port)])
    await p.start()
    reader, writer = await asyncio.open_connection(*p.address)
    await asyncio.wait_for(p.close(), 3)
    assert await asyncio.wait_for(reader.read(), 3) == b""
    writer.close()
