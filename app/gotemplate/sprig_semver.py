"""sprig's semver and semverCompare: github.com/Masterminds/semver/v3 (v3.5.0, what istiod's
build resolves) versions and constraints, with its coercing parser (1.2 is 1.2.0, a v prefix is
allowed), its ranges (1.2 - 1.4), wildcards (1.x, *), ~, ^, ||, and its prerelease rule (a
prerelease version satisfies only a constraint group that names a prerelease)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import re2

from app.gotemplate.errors import GoError
from app.gotemplate.signature import STRING, go_signature
from app.gotemplate.values import Int64

_LOOSE = re2.compile(
    r"^v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?$"
)
_CV = (
    r"v?([0-9|x|X|\*]+)(\.[0-9|x|X|\*]+)?(\.[0-9|x|X|\*]+)?"
    r"(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
)
_OPS = r"=||!=|>|<|>=|=>|<=|=<|~|~>|\^"
_CONSTRAINT = re2.compile(rf"^\s*({_OPS})\s*({_CV})\s*$")
_RANGE = re2.compile(rf"\s*({_CV})\s+-\s+({_CV})\s*")
_FIND = re2.compile(rf"({_OPS})\s*({_CV})")
_VALID = re2.compile(rf"^(\s*({_OPS})\s*({_CV})\s*)((?:\s+|,\s*)({_OPS})\s*({_CV})\s*)*$")
_NUM = set("0123456789")
_ALLOWED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")
_UINT64_MAX = (1 << 64) - 1


class Version:
    """A *semver.Version: its methods are what a template can call (Major, Minor, Patch,
    Prerelease, Metadata, Original, String, Compare, LessThan, GreaterThan, Equal...)."""

    go_type = "*semver.Version"

    def __init__(self, major: int, minor: int, patch: int, pre: str, metadata: str, original: str) -> None:
        self.major, self.minor, self.patch = major, minor, patch
        self.pre, self.metadata, self.original = pre, metadata, original

    def __str__(self) -> str:
        out = f"{self.major}.{self.minor}.{self.patch}"
        out += f"-{self.pre}" if self.pre else ""
        return out + (f"+{self.metadata}" if self.metadata else "")

    def compare(self, o: Version) -> int:
        for a, b in ((self.major, o.major), (self.minor, o.minor), (self.patch, o.patch)):
            if a != b:
                return -1 if a < b else 1
        if not self.pre and not o.pre:
            return 0
        if not self.pre:
            return 1
        if not o.pre:
            return -1
        return _compare_prerelease(self.pre, o.pre)

    def go_field(self, name: str) -> Any:
        methods: dict[str, Callable[..., Any]] = {
            "Major": lambda: self.major,
            "Minor": lambda: self.minor,
            "Patch": lambda: self.patch,
            "Prerelease": lambda: self.pre,
            "Metadata": lambda: self.metadata,
            "Original": lambda: self.original,
            "String": lambda: str(self),
            "Compare": lambda o: Int64(self.compare(_version_arg(o))),
            "LessThan": lambda o: self.compare(_version_arg(o)) < 0,
            "LessThanEqual": lambda o: self.compare(_version_arg(o)) <= 0,
            "GreaterThan": lambda o: self.compare(_version_arg(o)) > 0,
            "GreaterThanEqual": lambda o: self.compare(_version_arg(o)) >= 0,
            "Equal": lambda o: self.compare(_version_arg(o)) == 0,
        }
        return methods[name]


def _version_arg(o: Any) -> Version:
    if not isinstance(o, Version):
        raise GoError(f"wrong type for value; expected *semver.Version; got {type(o).__name__}")
    return o


def _compare_pre_part(s: str, o: str) -> int:
    if s == o:
        return 0
    if s == "":
        return -1
    if o == "":
        return 1
    s_num = s.isdigit() and s.isascii() and int(s) <= _UINT64_MAX
    o_num = o.isdigit() and o.isascii() and int(o) <= _UINT64_MAX
    if not s_num and not o_num:
        return 1 if s.encode() > o.encode() else -1
    if not o_num:
        return -1
    if not s_num:
        return 1
    return 1 if int(s) > int(o) else -1


def _compare_prerelease(v: str, o: str) -> int:
    sparts, oparts = v.split("."), o.split(".")
    for i in range(max(len(sparts), len(oparts))):
        d = _compare_pre_part(sparts[i] if i < len(sparts) else "", oparts[i] if i < len(oparts) else "")
        if d:
            return d
    return 0


def _validate_prerelease(p: str) -> None:
    for part in p.split("."):
        if part == "":
            raise GoError("invalid prerelease string")
        if set(part) <= _NUM:
            if len(part) > 1 and part[0] == "0":
                raise GoError("version segment starts with 0")
        elif not set(part) <= _ALLOWED:
            raise GoError("invalid prerelease string")


def _validate_metadata(m: str) -> None:
    for part in m.split("."):
        if part == "" or not set(part) <= _ALLOWED:
            raise GoError("invalid metadata string")


def _segment(text: str) -> int:
    n = int(text)
    if n > _UINT64_MAX:
        raise GoError(f'error parsing version segment: strconv.ParseUint: parsing "{text}": value out of range')
    return n


def new_version(v: str) -> Version:
    """semver.NewVersion (coercing)."""
    if len(v.encode()) > 256:
        raise GoError("version string is too long (max 256 bytes)")
    m = _LOOSE.search(v)
    if m is None:
        raise GoError("invalid semantic version")
    major = _segment(m.group(1))
    minor = _segment(m.group(2)[1:]) if m.group(2) else 0
    patch = _segment(m.group(3)[1:]) if m.group(3) else 0
    pre, meta = m.group(5) or "", m.group(8) or ""
    if pre:
        _validate_prerelease(pre)
    if meta:
        _validate_metadata(meta)
    return Version(major, minor, patch, pre, meta, v)


class _Constraint:
    def __init__(self, con: Version, orig: str, op: str, dirty: bool, minor_dirty: bool, patch_dirty: bool) -> None:
        self.con, self.orig, self.op = con, orig, op
        self.dirty, self.minor_dirty, self.patch_dirty = dirty, minor_dirty, patch_dirty

    def check(self, v: Version, include_pre: bool) -> bool:
        if v.pre and not include_pre:
            return False
        return _OPERATIONS[self.op](v, self)


def _is_x(s: str) -> bool:
    return s in ("x", "*", "X")


def _parse_constraint(c: str) -> _Constraint:
    m = _CONSTRAINT.search(c)
    if m is None:
        raise GoError(f'improper constraint: "{c}"')
    op, ver = m.group(1), m.group(2)
    major, minor, patch, rest = m.group(3), m.group(4) or "", m.group(5) or "", m.group(6) or ""
    dirty = minor_dirty = patch_dirty = False
    if _is_x(major):
        ver, dirty = f"0.0.0{rest}", True
    elif _is_x(minor.removeprefix(".")) or minor == "":
        ver, dirty, minor_dirty = f"{major}.0.0{rest}", True, True
    elif _is_x(patch.removeprefix(".")) or patch == "":
        ver, dirty, patch_dirty = f"{major}{minor}.0{rest}", True, True
    try:
        con = new_version(ver)
    except GoError:
        raise GoError("constraint parser error") from None
    return _Constraint(con, m.group(2), op, dirty, minor_dirty, patch_dirty)


def _not_equal(v: Version, c: _Constraint) -> bool:
    if c.dirty:
        if c.con.major != v.major:
            return True
        if c.con.minor != v.minor and not c.minor_dirty:
            return True
        if c.minor_dirty:
            return False
        if c.con.patch != v.patch and not c.patch_dirty:
            return True
        if c.patch_dirty:
            return (bool(v.pre) or bool(c.con.pre)) and _compare_prerelease(v.pre, c.con.pre) != 0
    return v.compare(c.con) != 0


def _greater_than(v: Version, c: _Constraint) -> bool:
    if not c.dirty:
        return v.compare(c.con) == 1
    if v.major != c.con.major:
        return v.major > c.con.major
    if c.minor_dirty:
        return False
    if c.patch_dirty:
        return v.minor > c.con.minor
    return v.compare(c.con) == 1


def _less_than_equal(v: Version, c: _Constraint) -> bool:
    if not c.dirty:
        return v.compare(c.con) <= 0
    if v.major > c.con.major:
        return False
    return not (v.major == c.con.major and v.minor > c.con.minor and not c.minor_dirty)


def _tilde(v: Version, c: _Constraint) -> bool:
    if v.compare(c.con) < 0:
        return False
    if (c.con.major, c.con.minor, c.con.patch) == (0, 0, 0) and not c.minor_dirty and not c.patch_dirty:
        return True
    if v.major != c.con.major:
        return False
    return not (v.minor != c.con.minor and not c.minor_dirty)


def _tilde_or_equal(v: Version, c: _Constraint) -> bool:
    return _tilde(v, c) if c.dirty else v.compare(c.con) == 0


def _caret(v: Version, c: _Constraint) -> bool:
    if v.compare(c.con) < 0:
        return False
    if c.con.major > 0 or c.minor_dirty:
        return v.major == c.con.major
    if v.major > 0:
        return False
    if c.con.minor > 0 or c.patch_dirty:
        return v.minor == c.con.minor
    if v.minor > 0:
        return False
    return c.con.patch == v.patch


_OPERATIONS: Final[dict[str, Callable[[Version, _Constraint], bool]]] = {
    "": _tilde_or_equal,
    "=": _tilde_or_equal,
    "!=": _not_equal,
    ">": _greater_than,
    "<": lambda v, c: v.compare(c.con) < 0,
    ">=": lambda v, c: v.compare(c.con) >= 0,
    "=>": lambda v, c: v.compare(c.con) >= 0,
    "<=": _less_than_equal,
    "=<": _less_than_equal,
    "~": _tilde,
    "~>": _tilde,
    "^": _caret,
}


def new_constraint(c: str) -> list[tuple[list[_Constraint], bool]]:
    """semver.NewConstraint: OR groups of AND-ed constraints, each group with whether it names a
    prerelease."""
    if len(c.encode()) > 512:
        raise GoError("constraint string is too long (max 512 bytes)")
    for m in list(_RANGE.finditer(c)):
        c = c.replace(m.group(0), f">= {m.group(1)}, <= {m.group(11)} ", 1)
    groups = c.split("||")
    if len(groups) > 32:
        raise GoError("too many constraint groups (max 32)")
    out = []
    for group in groups:
        if _VALID.search(group) is None:
            raise GoError(f'improper constraint: "{group}"')
        found = [m.group(0) for m in _FIND.finditer(group)] or [group]
        parsed = [_parse_constraint(s) for s in found]
        out.append((parsed, any(p.con.pre for p in parsed)))
    return out


@go_signature(STRING, STRING)
def semver_compare(constraint: str, version: str) -> bool:
    groups = new_constraint(constraint)
    v = new_version(version)
    return any(all(c.check(v, has_pre) for c in group) for group, has_pre in groups)


@go_signature(STRING)
def semver(version: str) -> Version:
    return new_version(version)


SEMVER_FUNCS: Final[dict[str, Callable[..., Any]]] = {"semver": semver, "semverCompare": semver_compare}
