"""sprig's urlParse and urlJoin, with Go's net/url: Parse (scheme, opaque, authority, userinfo,
host and port checks, percent-decoding by URL part) and URL.String (percent-encoding by part),
as Go 1.26 does them (a second colon in an http(s) host is an invalid port)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any, Final

from app.gotemplate.errors import GoError
from app.gotemplate.quoting import go_quote
from app.gotemplate.signature import MAP, STRING, go_signature
from app.gotemplate.sprig_convert import NIL_DEREFERENCE
from app.gotemplate.values import is_nil, kind_name

PATH, PATH_SEGMENT, HOST, ZONE, USER_PASSWORD, QUERY_COMPONENT, FRAGMENT = range(7)
_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")


def _should_escape(c: int, mode: int) -> bool:
    """net/url's shouldEscape (RFC 3986 by URL part)."""
    if c in _ALNUM:
        return False
    ch = chr(c)
    if mode in (HOST, ZONE) and ch in "!$&'()*+,;=:[]<>\"":
        return False
    if ch in "-_.~":
        return False
    if ch in "$&+,/:;=?@":
        if mode == PATH:
            return ch == "?"
        if mode == PATH_SEGMENT:
            return ch in "/;,?"
        if mode == USER_PASSWORD:
            return ch in "@/?:"
        if mode == QUERY_COMPONENT:
            return True
        if mode == FRAGMENT:
            return False
    return not (mode == FRAGMENT and ch in "!()*")


def _unhex(c: int) -> int:
    return int(chr(c), 16)


def unescape(s: bytes, mode: int) -> bytes:
    """net/url's unescape; GoError with Go's EscapeError / InvalidHostError text."""
    n = 0
    has_plus = False
    i = 0
    while i < len(s):
        c = s[i]
        if c == 0x25:  # %
            n += 1
            if i + 2 >= len(s) or s[i + 1] not in _HEX or s[i + 2] not in _HEX:
                raise GoError("invalid URL escape " + go_quote(_text(s[i : i + 3])))
            if mode == HOST and _unhex(s[i + 1]) < 8 and s[i : i + 3] != b"%25":
                raise GoError("invalid URL escape " + go_quote(_text(s[i : i + 3])))
            if mode == ZONE:
                v = _unhex(s[i + 1]) << 4 | _unhex(s[i + 2])
                if s[i : i + 3] != b"%25" and v != 0x20 and _should_escape(v, HOST):
                    raise GoError("invalid URL escape " + go_quote(_text(s[i : i + 3])))
            i += 3
        elif c == 0x2B:  # +
            has_plus = mode == QUERY_COMPONENT
            i += 1
        else:
            if mode in (HOST, ZONE) and c < 0x80 and _should_escape(c, mode):
                raise GoError("invalid character " + go_quote(chr(c)) + " in host name")
            i += 1
    if n == 0 and not has_plus:
        return s
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c == 0x25:
            out.append(_unhex(s[i + 1]) << 4 | _unhex(s[i + 2]))
            i += 3
            continue
        out.append((0x20 if mode == QUERY_COMPONENT else 0x2B) if c == 0x2B else c)
        i += 1
    return bytes(out)


def escape(s: bytes, mode: int) -> bytes:
    out = bytearray()
    for c in s:
        if c == 0x20 and mode == QUERY_COMPONENT:
            out.append(0x2B)
        elif _should_escape(c, mode):
            out += b"%%%02X" % c
        else:
            out.append(c)
    return bytes(out)


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _valid_optional_port(port: bytes) -> bool:
    return port == b"" or (port[:1] == b":" and all(0x30 <= c <= 0x39 for c in port[1:]))


def _valid_userinfo(s: bytes) -> bool:
    return all(c in _ALNUM or chr(c) in "-._:~!$&'()*+,;=%@" for c in s)


class URL:
    """The parts of a net/url URL that urlParse reports and urlJoin builds from."""

    def __init__(self) -> None:
        self.scheme = self.opaque = self.host = self.path = self.raw_path = b""
        self.raw_query = self.fragment = self.raw_fragment = b""
        self.user: tuple[bytes, bytes | None] | None = None  # username, password if set
        self.force_query = self.omit_host = False

    def hostname(self) -> bytes:
        host = self.host
        colon = host.rfind(b":")
        if colon != -1 and _valid_optional_port(host[colon:]):
            host = host[:colon]
        if host.startswith(b"[") and host.endswith(b"]"):
            host = host[1:-1]
        return host

    def userinfo(self) -> bytes:
        if self.user is None:
            return b""
        name, password = self.user
        out = escape(name, USER_PASSWORD)
        return out + b":" + escape(password, USER_PASSWORD) if password is not None else out

    def escaped_path(self) -> bytes:
        if self.raw_path and _valid_encoded(self.raw_path, PATH):
            try:
                if unescape(self.raw_path, PATH) == self.path:
                    return self.raw_path
            except GoError:
                pass
        return b"*" if self.path == b"*" else escape(self.path, PATH)

    def escaped_fragment(self) -> bytes:
        if self.raw_fragment and _valid_encoded(self.raw_fragment, FRAGMENT):
            try:
                if unescape(self.raw_fragment, FRAGMENT) == self.fragment:
                    return self.raw_fragment
            except GoError:
                pass
        return escape(self.fragment, FRAGMENT)

    def string(self) -> bytes:
        """URL.String."""
        out = bytearray()
        if self.scheme:
            out += self.scheme + b":"
        if self.opaque:
            out += self.opaque
        else:
            if (self.scheme or self.host or self.user is not None) and not (
                self.omit_host and not self.host and self.user is None
            ):
                if self.host or self.path or self.user is not None:
                    out += b"//"
                if self.user is not None:
                    out += self.userinfo() + b"@"
                if self.host:
                    out += escape(self.host, HOST)
            path = self.escaped_path()
            if path and path[:1] != b"/" and self.host:
                out += b"/"
            if not out and b":" in path.split(b"/", 1)[0]:
                out += b"./"
            out += path
        if self.force_query or self.raw_query:
            out += b"?" + self.raw_query
        if self.fragment:
            out += b"#" + self.escaped_fragment()
        return bytes(out)


def _valid_encoded(s: bytes, mode: int) -> bool:
    return all(chr(c) in "!$&'()*+,;=:@[]%" or not _should_escape(c, mode) for c in s)


def _get_scheme(raw: bytes) -> tuple[bytes, bytes]:
    for i, c in enumerate(raw):
        if 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A:
            continue
        if 0x30 <= c <= 0x39 or chr(c) in "+-.":
            if i == 0:
                return b"", raw
            continue
        if c == 0x3A:  # :
            if i == 0:
                raise GoError("missing protocol scheme")
            return raw[:i], raw[i + 1 :]
        return b"", raw
    return b"", raw


def _parse_host(scheme: bytes, host: bytes) -> bytes:
    open_bracket = host.rfind(b"[")
    if open_bracket > 0:
        raise GoError("invalid IP-literal")
    if open_bracket == 0:
        close = host.rfind(b"]")
        if close < 0:
            raise GoError("missing ']' in host")
        colon_port = host[close + 1 :]
        if not _valid_optional_port(colon_port):
            raise GoError(f"invalid port {go_quote(_text(colon_port))} after host")
        colon_port = unescape(colon_port, HOST)
        name = host[1:close]
        zone = name.find(b"%25")
        name = unescape(name[:zone], HOST) + unescape(name[zone:], ZONE) if zone >= 0 else unescape(name, HOST)
        try:
            addr = ipaddress.ip_address(_text(name))
        except ValueError:
            raise GoError(f"invalid host: ParseAddr({go_quote(_text(name))}): unable to parse IP") from None
        if addr.version == 4:
            raise GoError("invalid IP-literal")
        return b"[" + name + b"]" + colon_port
    i = host.find(b":")
    if i != -1:
        last = host.rfind(b":")
        if last != i and scheme not in (b"http", b"https"):
            i = last
        colon_port = host[i:]
        if not _valid_optional_port(colon_port):
            raise GoError(f"invalid port {go_quote(_text(colon_port))} after host")
    return unescape(host, HOST)


def _parse_authority(u: URL, authority: bytes) -> None:
    at = authority.rfind(b"@")
    u.host = _parse_host(u.scheme, authority[at + 1 :] if at >= 0 else authority)
    if at < 0:
        return
    info = authority[:at]
    if not _valid_userinfo(info):
        raise GoError("net/url: invalid userinfo")
    if b":" not in info:
        u.user = (unescape(info, USER_PASSWORD), None)
    else:
        name, _, password = info.partition(b":")
        u.user = (unescape(name, USER_PASSWORD), unescape(password, USER_PASSWORD))


def _parse(raw: bytes) -> URL:
    if any(c < 0x20 or c == 0x7F for c in raw):
        raise GoError("net/url: invalid control character in URL")
    u = URL()
    if raw == b"*":
        u.path = b"*"
        return u
    scheme, rest = _get_scheme(raw)
    u.scheme = scheme.lower()
    if rest.endswith(b"?") and rest.count(b"?") == 1:
        u.force_query, rest = True, rest[:-1]
    else:
        rest, _, u.raw_query = rest.partition(b"?")
    if not rest.startswith(b"/"):
        if u.scheme:
            u.opaque = rest
            return u
        if b":" in rest.split(b"/", 1)[0]:
            raise GoError("first path segment in URL cannot contain colon")
    if (u.scheme or not rest.startswith(b"///")) and rest.startswith(b"//"):
        authority, slash, tail = rest[2:].partition(b"/")
        rest = slash + tail
        _parse_authority(u, authority)
    elif u.scheme and rest.startswith(b"/"):
        u.omit_host = True
    u.path = unescape(rest, PATH)
    u.raw_path = b"" if escape(u.path, PATH) == rest else rest
    return u


def parse_url(raw: str) -> URL:
    """url.Parse; GoError worded as Go's *url.Error."""
    data = raw.encode("utf-8", "surrogateescape")
    before, hash_, frag = data.partition(b"#")
    try:
        u = _parse(before)
    except GoError as e:
        raise GoError(f"parse {go_quote(_text(before))}: {e}") from None
    if not hash_ or not frag:
        return u
    try:
        u.fragment = unescape(frag, FRAGMENT)
    except GoError as e:
        raise GoError(f"parse {go_quote(raw)}: {e}") from None
    u.raw_fragment = b"" if escape(u.fragment, FRAGMENT) == frag else frag
    return u


@go_signature(STRING)
def url_parse(v: str) -> dict[str, Any]:
    try:
        u = parse_url(v)
    except GoError as e:
        raise GoError(f"unable to parse url: {e}") from None
    return {
        "scheme": _text(u.scheme), "host": _text(u.host), "hostname": _text(u.hostname()), "path": _text(u.path),
        "query": _text(u.raw_query), "opaque": _text(u.opaque), "fragment": _text(u.fragment),
        "userinfo": _text(u.userinfo()),
    }  # fmt: skip


def _dict_get(d: dict[str, Any], key: str) -> bytes:
    """sprig's dictGetOrEmpty."""
    if key not in d:
        return b""
    value = d[key]
    if is_nil(value):
        raise GoError(NIL_DEREFERENCE)
    if not isinstance(value, str):
        raise GoError(f"unable to parse {key} key, must be of type string, but {kind_name(value)} found")
    return value.encode("utf-8", "surrogateescape")


@go_signature(MAP)
def url_join(d: dict[str, Any] | None) -> str:
    d = d or {}
    u = URL()
    u.scheme, u.host, u.path = _dict_get(d, "scheme"), _dict_get(d, "host"), _dict_get(d, "path")
    u.raw_query, u.opaque, u.fragment = _dict_get(d, "query"), _dict_get(d, "opaque"), _dict_get(d, "fragment")
    userinfo = _dict_get(d, "userinfo")
    if userinfo:
        try:
            u.user = parse_url(f"proto://{_text(userinfo)}@host").user
        except GoError as e:
            raise GoError(f"unable to parse userinfo in dict: {e}") from None
    return _text(u.string())


URL_FUNCS: Final[dict[str, Callable[..., Any]]] = {"urlParse": url_parse, "urlJoin": url_join}
