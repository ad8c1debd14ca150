"""The node agent's DNS proxy: answers the pod's queries for mesh hosts from the NDS NameTable and
forwards the rest to the pod's own resolvers, like pilot-agent's local DNS server (istio
pkg/dns/client/dns.go and proxy.go).

The lookup half is pure: ``LookupTable.build`` expands every name istio's agent answers (the
Kubernetes short forms, one CNAME per host under the first search domain), so a query is a dict
look-up, and ``answer`` turns the result into a response. ``DnsProxy`` is the I/O: UDP and TCP on
one port (15053), the current table published by swapping one reference on every NDS push, and a
forwarder that relays the upstream's reply bytes. dnspython does the wire format.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import ipaddress
import logging
import random
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.resolver
import dns.rrset

from app.api.nds import NameTable

logger = logging.getLogger("pilotfish.agent.dns")

TTL = 30  # istio defaultTTLInSeconds: low, so a client that caches soon sees new IPs
UPSTREAM_TIMEOUT = 5.0  # istio DefaultUpstreamTimeout, per upstream tried
DEFAULT_ADDRESS = ("127.0.0.1", 15053)
KUBERNETES = "Kubernetes"
_A, _AAAA, _IN = dns.rdatatype.A, dns.rdatatype.AAAA, dns.rdataclass.IN
_UDP_LIMIT = 512  # a UDP reply without EDNS (RFC 1035), istio's ednsSize floor
_TCP_LIMIT = 65535
_TCP_IDLE = 8.0  # miekg/dns's default TCP idle timeout, which istio's agent runs with
_MAX_IN_FLIGHT = 1024  # queries and TCP connections at once; beyond that a UDP query is dropped (clients retry)
_QR = 0x8000


@dataclass(frozen=True)
class ResolvConf:
    nameservers: tuple[tuple[str, int], ...]
    search: tuple[str, ...]  # lower case, no trailing dot
    ndots: int = 1


def parse_resolv_conf(text: str) -> ResolvConf:
    """The pod's resolvers (port 53, as istio joins them), search domains and ndots."""
    resolver = dns.resolver.Resolver(configure=False)
    resolver.domain = dns.name.root  # reset() guesses one from the hostname; only a `domain` line may set it
    # no (valid) nameserver is not an error: every forwarded query then gets SERVFAIL
    with contextlib.suppress(dns.resolver.NoResolverConfiguration, ValueError):
        resolver.read_resolv_conf(io.StringIO(text))
    names = resolver.search or ([resolver.domain] if resolver.domain != dns.name.root else [])
    return ResolvConf(
        nameservers=tuple((str(ns), resolver.port) for ns in resolver.nameservers),
        search=tuple(n.to_text(omit_final_dot=True).lower() for n in names),
        ndots=resolver.ndots if resolver.ndots is not None else 1,
    )


def _under(name: str, domain: str) -> bool:
    """``name`` (with final dot) is ``domain`` (without) or below it. istio compares plain string
    suffixes here; we compare whole labels, so ``foo.xsvc.cluster.local`` is not under ``svc...``."""
    return name == domain + "." or name.endswith("." + domain + ".")


def _alt_hosts(hostname: str, info: NameTable.NameInfo, namespace: str, domain: str) -> set[str]:
    """Every name one NameTable entry answers to (istio generateAltHosts / BuildAlternateHosts)."""
    hostname = hostname.lower()
    if info.registry != KUBERNETES:
        return {hostname if hostname.endswith(".") else hostname + "."}
    if hostname.endswith("."):
        return set()  # istio: a Kubernetes host given fully qualified yields no name at all
    names = {hostname + "."}
    # a service of another cluster domain gets no short forms: name.ns would be ambiguous across domains
    if not domain or not _under(hostname + ".", domain) or not info.shortname or not info.namespace:
        return names
    short, ns = info.shortname.lower(), info.namespace.lower()
    names.add(f"{short}.{ns}.")
    if ns == namespace:
        names.add(f"{short}.")
    names.add(f"{short}.{ns}.{domain.split('.')[0]}.")  # only name.ns.svc, not every longer suffix
    names.update(alt.lower().rstrip(".") + "." for alt in info.alt_hosts if alt)
    return names


def _rdatas(ips: Sequence[str]) -> tuple[tuple[dns.rdata.Rdata, ...], tuple[dns.rdata.Rdata, ...]]:
    v4: list[dns.rdata.Rdata] = []
    v6: list[dns.rdata.Rdata] = []
    for ip in ips:
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            continue  # istio skips a malformed IP too
        if addr.version == 4:
            v4.append(dns.rdata.from_text(_IN, _A, str(addr)))
        else:
            v6.append(dns.rdata.from_text(_IN, _AAAA, str(addr)))
    return tuple(v4), tuple(v6)


@dataclass(frozen=True)
class LookupTable:
    """The names this agent answers, pre-expanded (istio LookupTable). Keys are lower case with a final dot."""

    hosts: frozenset[str]
    ipv4: Mapping[str, tuple[dns.rdata.Rdata, ...]]
    ipv6: Mapping[str, tuple[dns.rdata.Rdata, ...]]
    cname: Mapping[str, str]  # host under the first search domain -> the host it expands

    @classmethod
    def build(
        cls, table: NameTable, proxy_namespace: str, proxy_domain: str, search: Sequence[str] = ()
    ) -> LookupTable:
        """``proxy_domain`` is the proxy's DNS domain (``ns.svc.cluster.local``); ``search`` its resolv.conf search."""
        parts = proxy_domain.strip(".").lower().split(".")
        if parts[0] == proxy_namespace:
            parts = parts[1:]  # istio keeps only the svc.cluster.local piece
        domain = ".".join(parts)
        first = search[0].strip(".").lower() if search else ""
        hosts: set[str] = set()
        ipv4: dict[str, tuple[dns.rdata.Rdata, ...]] = {}
        ipv6: dict[str, tuple[dns.rdata.Rdata, ...]] = {}
        cname: dict[str, str] = {}
        for hostname, info in table.table.items():
            names = _alt_hosts(hostname, info, proxy_namespace, domain)
            v4, v6 = _rdatas(info.ips)
            if not v4 and not v6:
                continue
            for name in names:
                hosts.add(name)
                if v4:
                    ipv4[name] = v4
                if v6:
                    ipv6[name] = v6
                # The pod's resolver tries `name.<search[0]>` first, so answer that with a CNAME to the
                # real name instead of forwarding a query that can only fail upstream (istio
                # buildDNSAnswers, after coredns autopath). Only the first search domain, as istio.
                if first and not _under(name, first):
                    expanded = f"{name}{first}."
                    if expanded not in names:
                        cname[expanded] = name
                        hosts.add(expanded)
        return cls(frozenset(hosts), ipv4, ipv6, cname)

    def lookup(self, qname: dns.name.Name | str, qtype: int) -> tuple[dns.rrset.RRset, ...] | None:
        """The answer records; ``()`` for a name we own without records of this type (NOERROR, no
        answer); ``None`` when the query is not ours and goes upstream (istio lookupHost)."""
        question = dns.name.from_text(qname) if isinstance(qname, str) else qname
        canonical = question.canonicalize()
        key = canonical.to_text()
        if key not in self.hosts:
            # most specific wildcard first: a.b.c. tries *.b.c. then *.c.
            for i in range(1, len(canonical.labels) - 1):
                wildcard = dns.name.Name((b"*", *canonical.labels[i:])).to_text()
                if wildcard in self.hosts:
                    key = wildcard
                    break
            else:
                return None
        if qtype not in (_A, _AAAA):
            return None  # istio forwards every other type, even for its own names (PTR is a TODO there)
        target = self.cname.get(key)
        rdatas = (self.ipv4 if qtype == _A else self.ipv6).get(target or key, ())
        if not rdatas:
            return ()  # NOERROR, never NXDOMAIN: curl asks A and AAAA at once (istio #31250)
        if target is None:
            return (dns.rrset.from_rdata_list(question, TTL, rdatas),)
        # a chained reply, CNAME then the target's records, for clients that do not follow CNAMEs
        chain = dns.rrset.from_text_list(question, TTL, _IN, dns.rdatatype.CNAME, [target])
        return chain, dns.rrset.from_rdata_list(target, TTL, rdatas)


def answer(
    table: LookupTable | None, query: dns.message.Message | bytes, *, rng: random.Random | None = None
) -> dns.message.Message | None:
    """The response to ``query`` from ``table`` (authoritative, TTL 30), or None to forward it.
    ``rng`` shuffles addresses for DNS load balancing, as istio's roundRobinResponse. Wire bytes
    that do not parse raise dnspython's error; ``DnsProxy`` checks them first."""
    if table is None:
        return None
    if isinstance(query, bytes):
        query = dns.message.from_wire(query)
    if not query.question:
        return _reply(query, dns.rcode.SERVFAIL)  # istio ServeDNS
    q = query.question[0]  # clients send one question; istio reads only the first
    if q.rdclass != _IN:
        return None  # istio ignores the class; a CHAOS query is not about mesh hosts, so forward it
    records = table.lookup(q.name, q.rdtype)
    if records is None:
        return None
    response = dns.message.make_response(query)
    response.flags |= dns.flags.AA  # we are the authority for mesh names
    for rrset in records:
        if rng is not None and len(rrset) > 1:
            shuffled = list(rrset)
            rng.shuffle(shuffled)
            rrset = dns.rrset.from_rdata_list(rrset.name, rrset.ttl, shuffled)
        response.answer.append(rrset)
    return response


def _reply(query: dns.message.Message, rcode: dns.rcode.Rcode) -> dns.message.Message:
    response = dns.message.make_response(query)
    response.set_rcode(rcode)
    return response


def _header_reply(wire: bytes, rcode: dns.rcode.Rcode) -> bytes:
    """A reply of the query's header alone (id, opcode, RD), for a query too broken to echo; miekg's
    server, which istio uses, does the same."""
    flags = _QR | (int.from_bytes(wire[2:4], "big") & 0x7900) | int(rcode)
    return wire[:2] + flags.to_bytes(2, "big") + bytes(8)


def _fit(reply: bytes, query: dns.message.Message, limit: int) -> bytes:
    """A relayed reply too big for the client's UDP buffer, cut with TC set (istio truncates every reply)."""
    try:
        return dns.message.from_wire(reply).to_wire(max_size=limit, prefer_truncation=True)
    except Exception:  # a reply we cannot parse: say "truncated" and let the client retry over TCP
        response = dns.message.make_response(query)
        response.flags |= dns.flags.TC
        return response.to_wire(max_size=limit, prefer_truncation=True)


def _checked(reply: bytes, wire: bytes) -> bytes:
    if len(reply) < 12 or reply[:2] != wire[:2] or not reply[2] & 0x80:
        raise ValueError("not a DNS reply to our query")
    return reply


class _UpstreamReply(asyncio.DatagramProtocol):
    def __init__(self, qid: bytes) -> None:
        self.reply: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._qid = qid

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        # the socket is connected, so only the upstream reaches it; a late reply to another id is dropped
        if data[:2] == self._qid and not self.reply.done():
            self.reply.set_result(data)

    def error_received(self, exc: Exception) -> None:
        if not self.reply.done():  # e.g. ICMP port unreachable: fail now, not at the timeout
            self.reply.set_exception(exc)


async def _exchange_udp(wire: bytes, server: tuple[str, int]) -> bytes:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(lambda: _UpstreamReply(wire[:2]), remote_addr=server)
    try:
        transport.sendto(wire)
        return _checked(await protocol.reply, wire)
    finally:
        transport.close()


async def _exchange_tcp(wire: bytes, server: tuple[str, int]) -> bytes:
    reader, writer = await asyncio.open_connection(*server)
    try:
        writer.write(len(wire).to_bytes(2, "big") + wire)
        await writer.drain()
        size = int.from_bytes(await reader.readexactly(2), "big")
        return _checked(await reader.readexactly(size), wire)
    finally:
        writer.close()


class _DnsServerProtocol(asyncio.DatagramProtocol):
    def __init__(self, proxy: DnsProxy) -> None:
        self._proxy = proxy

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        self._proxy._on_datagram(data, addr)


class DnsProxy:
    """pilot-agent's LocalDNSServer: UDP and TCP on one address, answering from the latest table."""

    def __init__(
        self,
        upstreams: Sequence[tuple[str, int]],
        *,
        proxy_namespace: str,
        proxy_domain: str,
        search: Sequence[str] = (),
        address: tuple[str, int] = DEFAULT_ADDRESS,
        upstream_timeout: float = UPSTREAM_TIMEOUT,
        forward_before_sync: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        """``forward_before_sync=False`` is istio's default (SERVFAIL until the first table; istio
        forwards only when it serves port 53 itself)."""
        self._upstreams = tuple(upstreams)
        self._namespace = proxy_namespace
        self._domain = proxy_domain
        self._search = tuple(search)
        self._address = address
        self._timeout = upstream_timeout
        self._forward_before_sync = forward_before_sync
        self._rng = rng or random.Random()
        self._table: LookupTable | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._port = 0
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def has_table(self) -> bool:
        """The first NameTable arrived (istio IsReady)."""
        return self._table is not None

    @property
    def table(self) -> LookupTable | None:
        return self._table

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port), UDP and TCP alike; the port is real once started."""
        return self._address[0], self._port or self._address[1]

    def update(self, table: NameTable) -> None:
        """Answer from ``table`` from now on; the swap is one reference, so a query sees one table whole."""
        self._table = LookupTable.build(table, self._namespace, self._domain, self._search)
        logger.debug("dns: lookup table has %d names", len(self._table.hosts))

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self._address
        attempts = 5 if port == 0 else 1  # with port 0 the kernel's free UDP port may be taken for TCP
        for attempt in range(attempts):
            udp, _ = await loop.create_datagram_endpoint(lambda: _DnsServerProtocol(self), local_addr=(host, port))
            bound = int(udp.get_extra_info("sockname")[1])
            try:
                self._tcp = await asyncio.start_server(self._serve_tcp, host, bound)
            except OSError:
                udp.close()
                if attempt + 1 == attempts:
                    raise
                continue
            self._udp, self._port = udp, bound
            break
        logger.info("dns: serving on %s:%d (udp, tcp), %d upstream(s)", host, self._port, len(self._upstreams))

    async def close(self) -> None:
        if self._tcp is not None:
            self._tcp.close()
        if self._udp is not None:
            self._udp.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._tcp is not None:
            await self._tcp.wait_closed()
        self._tcp = self._udp = None

    async def __aenter__(self) -> DnsProxy:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _track(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_datagram(self, data: bytes, addr: tuple[Any, ...]) -> None:
        if len(self._tasks) >= _MAX_IN_FLIGHT:
            logger.debug("dns: %d queries in flight, dropped one from %s", len(self._tasks), addr)
            return
        self._track(asyncio.get_running_loop().create_task(self._answer_udp(data, addr)))

    async def _answer_udp(self, data: bytes, addr: tuple[Any, ...]) -> None:
        reply = await self._handle(data, tcp=False, peer=addr)
        if reply is not None and self._udp is not None:
            self._udp.sendto(reply, addr)

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._track(task)
        peer = writer.get_extra_info("peername")
        try:
            while True:
                try:
                    async with asyncio.timeout(_TCP_IDLE):
                        size = int.from_bytes(await reader.readexactly(2), "big")
                        wire = await reader.readexactly(size)
                except (EOFError, OSError, TimeoutError):
                    return  # the client is done, idle or gone
                reply = await self._handle(wire, tcp=True, peer=peer)
                if reply is None:
                    return  # unanswerable: the stream may be out of frame, so hang up
                writer.write(len(reply).to_bytes(2, "big") + reply)
                await writer.drain()
        except OSError:
            return
        finally:
            writer.close()

    async def _handle(self, wire: bytes, *, tcp: bool, peer: object) -> bytes | None:
        """The reply bytes for one query, or None to drop it. Never raises: bad input costs one log line."""
        if len(wire) < 12:
            logger.warning("dns: dropped %d bytes from %s: shorter than a header", len(wire), peer)
            return None
        flags = int.from_bytes(wire[2:4], "big")
        if flags & _QR:  # a response sent to a server: ignore, as miekg/dns does (answering could loop)
            logger.warning("dns: dropped a response message from %s", peer)
            return None
        if (flags >> 11) & 0xF != dns.opcode.QUERY:
            logger.warning("dns: NOTIMP to %s: opcode %d", peer, (flags >> 11) & 0xF)
            return _header_reply(wire, dns.rcode.NOTIMP)
        if int.from_bytes(wire[4:6], "big") != 1:
            logger.warning("dns: FORMERR to %s: %d questions", peer, int.from_bytes(wire[4:6], "big"))
            return _header_reply(wire, dns.rcode.FORMERR)
        try:
            query = dns.message.from_wire(wire)
        except Exception as err:  # hostile input raises many kinds
            logger.warning("dns: FORMERR to %s: %s", peer, err)
            return _header_reply(wire, dns.rcode.FORMERR)
        try:
            return await self._resolve(wire, query, tcp=tcp)
        except Exception:
            logger.exception("dns: SERVFAIL to %s for %s", peer, query.question[0])
            return _header_reply(wire, dns.rcode.SERVFAIL)

    async def _resolve(self, wire: bytes, query: dns.message.Message, *, tcp: bool) -> bytes:
        # istio size(): TCP takes 64 KiB; UDP what the query's EDNS advertises, at least 512
        limit = _TCP_LIMIT if tcp else max(_UDP_LIMIT, query.payload if query.edns >= 0 else 0)
        table = self._table
        response = answer(table, query, rng=self._rng)
        if response is not None:
            return response.to_wire(max_size=limit, prefer_truncation=True)
        if table is None and not self._forward_before_sync:
            return _reply(query, dns.rcode.SERVFAIL).to_wire()
        # Relay the upstream's bytes; only the id is ours, fresh per forward so a guessable client id
        # cannot be used to spoof the upstream's reply. TCP clients are forwarded over TCP (istio uses
        # the client's protocol), so a UDP reply with TC makes the client retry over TCP end to end.
        out = secrets.randbits(16).to_bytes(2, "big") + wire[2:]
        exchange = _exchange_tcp if tcp else _exchange_udp
        servers = list(self._upstreams)
        self._rng.shuffle(servers)  # istio shuffles the resolv.conf servers per query
        for server in servers:
            try:
                async with asyncio.timeout(self._timeout):
                    reply = await exchange(out, server)
            except (OSError, EOFError, TimeoutError, ValueError) as err:
                logger.info("dns: upstream %s:%d failed for %s: %r", *server, query.question[0].name, err)
                continue
            reply = wire[:2] + reply[2:]
            return reply if len(reply) <= limit else _fit(reply, query, limit)
        return _reply(query, dns.rcode.SERVFAIL).to_wire()
