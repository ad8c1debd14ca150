"""Random templates (a seeded generator of text, trim markers, actions, pipelines, variables,
control structures, builtins and sprig calls over a fixed data set), and sprig's string functions
over random strings of tricky runes (case mappings with no one-rune counterpart, Unicode spaces,
multi-byte runes cut by byte offsets), and fixed templates over random values (float64 edges,
int64 bounds, -0, nulls, nesting), random text through fromJson / mustFromJson (Go's syntax
errors), and random URLs through urlParse and urlJoin, rendered by
app/gotemplate and by Go (the gotemplate-oracle peer) must give the same output or the same
error."""

from __future__ import annotations

import random

import pytest

from tests.support.gotemplate_oracle import Case, Rendered, comparable, go_render, py_render

DATA = {
    "a": "A", "s": "hello world", "i": 3, "f": 1.5, "fi": 15020.0, "z": 0, "e": "", "b": True, "nullv": None,
    "l": [1, "two", None, 2.5], "strs": ["b", "a"], "el": [], "m": {"a": {"b": "B"}, "x": 1, "n": None}, "em": {},
    "sm": {"$stringmap": {"app": "web"}}, "neg": -2, "big": 1e6,
    "obj": {"$obj": {"Name": "pod", "Count": 2, "Labels": {"$stringmap": {"app": "web"}}, "Items": ["x"], "Any": 1.5}},
}  # fmt: skip

OPERANDS = [
    ".a", ".s", ".i", ".f", ".fi", ".z", ".e", ".b", ".nullv", ".l", ".strs", ".el", ".m", ".m.a", ".m.a.b", ".m.x",
    ".m.n", ".em", ".sm", ".sm.app", ".missing", ".missing.x", ".neg", ".big", "1", "0", "-1", "2.5", "1e6", "0x10",
    "'a'", '"x"', '""', '"a b"', "`r`", "true", "false", "nil", ".", "$", "$.a", "$v", "$v.a", "$k", "$e", "$e.a",
    ".obj.Name", ".obj.Count", ".obj.Labels", ".obj.Labels.app", ".obj.Items", ".obj.Any", ".obj.Child",
    ".obj.Child.Name", ".obj.Upper", '.obj.Greet "x"', "1.0", "-0.5", "1e-7", "017", "0b11", "1_0",
]  # fmt: skip
FUNCS = {  # name: arity (-1: any)
    "len": 1, "index": -1, "slice": -1, "print": -1, "printf": -1, "println": -1, "eq": -1, "ne": 2, "lt": 2, "le": 2,
    "gt": 2, "ge": 2, "and": -1, "or": -1, "not": 1, "html": -1, "js": -1, "urlquery": -1, "quote": -1, "squote": -1,
    "default": 2, "empty": 1, "coalesce": -1, "ternary": 3, "upper": 1, "lower": 1, "trim": 1, "trunc": 2,
    "nindent": 2, "indent": 2, "replace": 3, "toString": 1, "toJson": 1, "list": -1, "dict": -1, "first": 1,
    "last": 1, "join": 2, "splitList": 2, "hasKey": 2, "add": -1, "sub": 2, "mul": -1, "int": 1,
    "int64": 1, "float64": 1, "atoi": 1, "max": -1, "min": -1, "typeOf": 1, "kindOf": 1, "kindIs": 2, "contains": 2,
    "hasPrefix": 2, "hasSuffix": 2, "cat": -1, "b64enc": 1, "toStrings": 1, "compact": 1, "uniq": 1, "has": 2,
    "append": 2, "get": 2, "pick": -1, "omit": -1, "until": 1, "sortAlpha": 1, "title": 1, "repeat": 2, "substr": 3,
    "trimAll": 2, "trimPrefix": 2, "trimSuffix": 2, "plural": 3, "split": 2,
}  # fmt: skip
TEXTS = ["", "x", " ", "\n", "  a\n", "\t", "b ", "{{/* c */}}", "{{- /* c */ -}}"]
PRINTF_FORMATS = [
    '"%v"', '"%s-%d"', '"%q"', '"%5.2f|%x"', '"%T %v"', '"%-6v|"', '"%+d %x %X %o %b"', '"%08.3f"', '"%e %g %G"',
    '"%c %U"', '"%10.4s|"', '"%t"', '"%#x %#o"', '"% d"', '"%%"', '"%*d"', '"%.*f"', '"%!"', '"%v %v %v"',
]  # fmt: skip


class Generator:
    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)

    def operand(self, depth: int) -> str:
        if depth < 2 and self.rnd.random() < 0.2:
            return f"({self.pipeline(depth + 1)})"
        return self.rnd.choice(OPERANDS)

    def command(self, depth: int, piped: bool) -> str:
        if not piped and self.rnd.random() < 0.3:
            return self.operand(depth)
        name = self.rnd.choice(list(FUNCS)).strip()
        arity = FUNCS[name]
        n = self.rnd.randint(0, 3) if arity < 0 else arity - (1 if piped else 0)
        if self.rnd.random() < 0.1:
            n = max(0, n + self.rnd.choice((-1, 1)))  # a wrong arity now and then
        args = [self.operand(depth) for _ in range(n)]
        if name == "printf":
            args.insert(0, self.rnd.choice(PRINTF_FORMATS))
        return " ".join([name, *args])

    def pipeline(self, depth: int = 0) -> str:
        cmds = [self.command(depth, False)]
        while self.rnd.random() < 0.25:
            cmds.append(self.command(depth, True))
        return " | ".join(cmds)

    def action(self) -> str:
        left = self.rnd.choice(["{{", "{{", "{{- "])
        right = self.rnd.choice(["}}", "}}", " -}}"])
        pipe = self.pipeline()
        if self.rnd.random() < 0.1:
            pipe = f"$v := {pipe}" if self.rnd.random() < 0.5 else f"$v = {pipe}"
        return f"{left} {pipe} {right}"

    def body(self, depth: int) -> str:
        parts = []
        for _ in range(self.rnd.randint(1, 4)):
            roll = self.rnd.random()
            if roll < 0.35:
                parts.append(self.rnd.choice(TEXTS))
            elif roll < 0.75 or depth >= 2:
                parts.append(self.action())
            else:
                parts.append(self.control(depth + 1))
        return "".join(parts)

    def control(self, depth: int) -> str:
        kind = self.rnd.choice(["if", "with", "range", "range $k, $e :=", "range $e :=", "with $e :="])
        out = "{{ " + kind + " " + self.pipeline() + " }}" + self.body(depth)
        if kind in ("if", "with") and self.rnd.random() < 0.3:
            out += "{{ else " + kind + " " + self.pipeline() + " }}" + self.body(depth)
        if kind.startswith("range") and self.rnd.random() < 0.2:
            out += self.rnd.choice(["{{ break }}", "{{ continue }}"])
        if self.rnd.random() < 0.4:
            out += "{{ else }}" + self.body(depth)
        return out + "{{ end }}"

    def template(self) -> str:
        out = "{{ $v := 1 }}" + self.body(0)
        if self.rnd.random() < 0.2:
            out += '{{ template "d" ' + self.operand(1) + ' }}{{ define "d" }}' + self.body(1) + "{{ end }}"
        return out


CASES = [Case(Generator(seed).template(), DATA, sprig=True) for seed in range(4000)]


@pytest.fixture(scope="module")
def go_results() -> list[Rendered]:
    return go_render(CASES)


def test_random_templates_render_as_in_go(go_results: list[Rendered]) -> None:
    mismatches = [
        f"{case.template!r}\n  go:     {want}\n  python: {got}"
        for case, want in zip(CASES, map(comparable, go_results), strict=True)
        if (got := comparable(py_render(case))) != want
    ]
    assert not mismatches, f"{len(mismatches)} of {len(CASES)} differ:\n" + "\n".join(mismatches[:15])


RUNES = [
    *"aZ _-.,\t\n1BcH(", "\u00e9", "\u00df", "\u01c6", "\u01c5", "\u0130", "\u0131", "\u03a3", "\ufb01", "\u0149",
    "\u00b5", "\u65e5", "\u0663", "\u00b2", "\u212a", "\u00a0", "\u0085", "\u2028",
]  # fmt: skip
STRING_FUNCS = {  # name: how its arguments are written around the random string .a (and .b)
    "upper": "{} .a", "lower": "{} .a", "title": "{} .a", "untitle": "{} .a", "trim": "{} .a", "nospace": "{} .a",
    "initials": "{} .a", "swapcase": "{} .a", "quote": "{} .a", "squote": "{} .a", "b64enc": "{} .a",
    "toJson": "{} .a", "len": "{} .a", "html": "{} .a", "js": "{} .a", "urlquery": "{} .a", "sortAlpha": "{} .a",
    "contains": "{} .b .a", "hasPrefix": "{} .b .a", "hasSuffix": "{} .b .a", "trimAll": "{} .b .a",
    "trimPrefix": "{} .b .a", "trimSuffix": "{} .b .a", "splitList": "{} .b .a", "split": "{} .b .a",
    "replace": "{} .b .b .a", "trunc": "{} N .a", "abbrev": "{} N .a", "repeat": "{} N .a", "indent": "{} N .a",
    "nindent": "{} N .a", "substr": "{} N N .a", "abbrevboth": "{} N N .a", "regexQuoteMeta": "{} .a",
    "wrap": "{} N .a", "wrapWith": "{} N .b .a", "camelcase": "{} .a", "snakecase": "{} .a", "kebabcase": "{} .a",
}  # fmt: skip


def string_case(rnd: random.Random) -> Case:
    name = rnd.choice(list(STRING_FUNCS))
    args = STRING_FUNCS[name].format(name)
    while " N " in args:
        args = args.replace(" N ", f" {rnd.randint(-3, 12)} ", 1)
    data = {k: "".join(rnd.choice(RUNES) for _ in range(rnd.randint(0, n))) for k, n in (("a", 9), ("b", 2))}
    return Case("{{ " + args + " }}", data, sprig=True)


_rnd = random.Random(0)
STRING_CASES = [string_case(_rnd) for _ in range(2000)]


@pytest.fixture(scope="module")
def go_string_results() -> list[Rendered]:
    return go_render(STRING_CASES)


def test_string_functions_over_random_strings_as_in_go(go_string_results: list[Rendered]) -> None:
    mismatches = [
        f"{case.template} {case.data!r}\n  go:     {want}\n  python: {got}"
        for case, want in zip(STRING_CASES, go_string_results, strict=True)
        if (got := py_render(case)) != want
    ]
    assert not mismatches, f"{len(mismatches)} of {len(STRING_CASES)} differ:\n" + "\n".join(mismatches[:15])


SCALARS = [
    None, True, False, 0, 1, -1, 2**62, -(2**63), 2**63 - 1, 0.0, -0.0, 1.5, 1e6, 1e20, 1e21, 1e-7, 123456.789,
    5e-324, 1.7976931348623157e308, 0.1 + 0.2, 100.0, "", "x", "a b", "<&>", "\u00e9", "\t", "10", "0x1F", "1e3",
    " 5", "true", "-3.7",
]  # fmt: skip
VALUE_TEMPLATES = [
    "{{ . }}", "{{ .a }}", '{{ printf "%v|%d|%s|%q|%x|%e|%g|%T|%08.3f" .a .a .a .a .a .a .a .a .a }}', "{{ toJson . }}",
    "{{ toPrettyJson .a }}", "{{ if .a }}T{{ else }}F{{ end }}", "{{ eq .a .b }}", "{{ lt .a .b }}", "{{ ge .a .b }}",
    "{{ range $k, $v := . }}{{ $k }}={{ $v }};{{ end }}", "{{ len .a }}", '{{ index . "a" }}', '{{ default "d" .a }}',
    "{{ empty .a }}", "{{ quote .a }}", "{{ toString .a }}", "{{ int .a }}", "{{ int64 .a }}", "{{ float64 .a }}",
    "{{ add .a 1 }}", "{{ atoi .a }}", "{{ kindOf .a }}", "{{ typeOf .a }}", "{{ print .a .b }}", "{{ html .a }}",
    "{{ js .a }}", "{{ urlquery .a }}", "{{ first .a }}", '{{ join "," .a }}', "{{ has .b .a }}", "{{ uniq .a }}",
    "{{ compact .a }}", "{{ sortAlpha .a }}", "{{ coalesce .a .b }}", "{{ deepEqual .a .b }}", "{{ max .a .b }}",
    "{{ maxf .a .b }}", "{{ minf .a .b }}", "{{ floor .a }}", "{{ ceil .a }}", "{{ round .a 2 }}", "{{ toDecimal .a }}",
    "{{ with .a }}{{ . }}{{ end }}", "{{ .a.b }}", "{{ keys .a | sortAlpha }}", "{{ toStrings .a }}",
    "{{ slice .a 1 }}", "{{ cat .a .b }}", "{{ mul .a 2 }}", "{{ div .a 3 }}", "{{ mod .a 3 }}", "{{ sub .a .b }}",
    "{{ addf .a .b }}", "{{ mulf .a 2 }}", "{{ divf .a .b }}", "{{ subf .a .b }}", "{{ merge .a .b }}",
    "{{ mergeOverwrite .a .b }}",
]  # fmt: skip


def random_value(rnd: random.Random, depth: int = 0) -> object:
    roll = rnd.random()
    if depth < 2 and roll < 0.15:
        return [random_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    if depth < 2 and roll < 0.3:
        keys = ["a", "b", "B", "_x", "10", "9", " "]
        return {rnd.choice(keys): random_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))}
    return rnd.choice(SCALARS)


_vrnd = random.Random(0)
VALUE_CASES = [
    Case(_vrnd.choice(VALUE_TEMPLATES), {"a": random_value(_vrnd), "b": random_value(_vrnd)}, sprig=True)
    for _ in range(3000)
]


@pytest.fixture(scope="module")
def go_value_results() -> list[Rendered]:
    return go_render(VALUE_CASES)


def test_templates_over_random_values_as_in_go(go_value_results: list[Rendered]) -> None:
    mismatches = [
        f"{case.template} {case.data!r}\n  go:     {want}\n  python: {got}"
        for case, want in zip(VALUE_CASES, go_value_results, strict=True)
        if (got := py_render(case)) != want
    ]
    assert not mismatches, f"{len(mismatches)} of {len(VALUE_CASES)} differ:\n" + "\n".join(mismatches[:15])


URL_PIECES = [
    "http", "https", "foo", "HTTP", ":", "//", "/", "?", "#", "@", "[", "]", "::1", "%25", "%2F", "%zz", "%41", "a",
    "h", ":80", " ", "\u00e9", "!", "*", "+", "u:p", ".", "~", "=", "&", ";", "%20", "fe80::1", "1.2.3.4", "'", "\\",
]  # fmt: skip
URL_PARTS = ["scheme", "host", "path", "query", "opaque", "fragment", "userinfo"]


def url_case(rnd: random.Random) -> Case:
    def piece(n: int) -> str:
        return "".join(rnd.choice(URL_PIECES) for _ in range(rnd.randint(0, n)))

    if rnd.random() < 0.6:
        return Case("{{ urlParse .a }}", {"a": piece(8)}, sprig=True)
    return Case("{{ urlJoin .a }}", {"a": {k: piece(3) for k in rnd.sample(URL_PARTS, rnd.randint(0, 5))}}, sprig=True)


_urnd = random.Random(0)
URL_CASES = [url_case(_urnd) for _ in range(1500)]


@pytest.fixture(scope="module")
def go_url_results() -> list[Rendered]:
    return go_render(URL_CASES)


def test_urls_parse_and_join_as_in_go(go_url_results: list[Rendered]) -> None:
    mismatches = [
        f"{case.template} {case.data!r}\n  go:     {want}\n  python: {got}"
        for case, want in zip(URL_CASES, go_url_results, strict=True)
        if (got := py_render(case)) != want
    ]
    assert not mismatches, f"{len(mismatches)} of {len(URL_CASES)} differ:\n" + "\n".join(mismatches[:15])


JSON_PIECES = [
    "{", "}", "[", "]", '"', ":", ",", " ", "\n", "1", "0", "-", ".", "e", "+", "true", "tru", "null", "x", "\\",
    "\\u", "00e9", "\u00e9", "\\n", '"a"', "1e400", "-0", "\\ud800", "\x01", "'",
]  # fmt: skip
JSON_TEMPLATES = ["{{ mustFromJson .a }}", "{{ fromJson .a }}", "{{ mustFromJson .a | toJson }}"]
_jrnd = random.Random(0)
JSON_CASES = [
    Case(
        _jrnd.choice(JSON_TEMPLATES),
        {"a": "".join(_jrnd.choice(JSON_PIECES) for _ in range(_jrnd.randint(0, 8)))},
        True,
    )
    for _ in range(1500)
]


@pytest.fixture(scope="module")
def go_json_results() -> list[Rendered]:
    return go_render(JSON_CASES)


def test_json_decodes_and_fails_as_in_go(go_json_results: list[Rendered]) -> None:
    mismatches = [
        f"{case.template} {case.data!r}\n  go:     {want}\n  python: {got}"
        for case, want in zip(JSON_CASES, go_json_results, strict=True)
        if (got := py_render(case)) != want
    ]
    assert not mismatches, f"{len(mismatches)} of {len(JSON_CASES)} differ:\n" + "\n".join(mismatches[:15])
