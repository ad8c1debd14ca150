"""app/gotemplate's Python side, where the Go oracle cannot reach: function values in the data,
functions callers add (typed with go_signature, returning Go errors), overriding builtins, and a
template shared between executions."""

from __future__ import annotations

import resource
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from app.gotemplate import SPRIG_FUNCS, GoError, NilPointer, StringMap, Template, TemplateError, go_signature


def render(text: str, data: Any = None, funcs: dict[str, Any] | None = None) -> str:
    return Template.parse("t", text, {**SPRIG_FUNCS, **(funcs or {})}).execute(data)


def test_call_invokes_a_function_value_from_the_data() -> None:
    data = {"f": lambda a, b: f"{a}+{b}", "g": go_signature("int")(lambda n: n * 2)}
    assert render('{{ call .f 1 "x" }} {{ call .g 21 }}', data) == "1+x 42"
    with pytest.raises(TemplateError, match=r"error calling call: wrong number of args for \.f: got 1 want 2$"):
        render("{{ call .f 1 }}", data)
    with pytest.raises(TemplateError, match=r"error calling call: non-function \.x of type string$"):
        render("{{ call .x }}", {"x": "s"})


def test_a_function_prints_as_an_error_not_a_value() -> None:
    with pytest.raises(TemplateError, match=r"can't print \{\{\.f\}\} of type func$"):
        render("{{.f}}", {"f": lambda: 1})


def test_caller_functions_take_typed_arguments_and_return_go_errors() -> None:
    @go_signature("int", "string")
    def pad(n: int, s: str) -> str:
        if n > 10:
            raise GoError("too wide")
        return s.rjust(n)

    funcs = {"pad": pad, "upper2": lambda s: str(s).upper() * 2}
    assert render('[{{ pad 4 "ab" }}] {{ "x" | upper2 }}', funcs=funcs) == "[  ab] XX"
    with pytest.raises(TemplateError, match=r'at <pad 11 "ab">: error calling pad: too wide$'):
        render('{{ pad 11 "ab" }}', funcs=funcs)
    with pytest.raises(TemplateError, match=r'at <"ab">: expected integer; found "ab"$'):
        render('{{ pad "ab" "ab" }}', funcs=funcs)
    with pytest.raises(TemplateError, match=r"wrong number of args for upper2: want 1 got 2$"):
        render('{{ upper2 "a" "b" }}', funcs=funcs)


def test_a_python_exception_in_a_function_is_an_error_of_the_call() -> None:
    def broken(s: str) -> str:
        return {"a": "b"}[s]

    with pytest.raises(TemplateError, match=r"error calling broken: 'x'$"):
        render('{{ broken "x" }}', funcs={"broken": broken})


def test_caller_functions_override_sprig_and_builtins() -> None:
    """As istiod's funcmap over sprig's: a caller's entry replaces sprig's and a builtin of the
    same name."""
    funcs = {"contains": lambda a, b: f"{b}>{a}", "len": lambda v: -1}
    assert render('{{ contains "a" "xa" }} {{ len "abc" }}', funcs=funcs) == "xa>a -1"
    assert render('{{ contains "a" "xa" }} {{ len "abc" }}') == "true 3"


def test_break_and_continue_are_functions_when_the_funcmap_defines_them() -> None:
    assert render("{{ break }}", funcs={"break": lambda: "b"}) == "b"


def test_nil_pointers_and_string_maps() -> None:
    class Pod:
        go_type = "*v1.Pod"

        def go_field(self, name: str) -> Any:
            return {"Spec": NilPointer("*v1.PodSpec"), "Labels": StringMap(app="web")}[name]

    assert render("{{ .Spec }} {{ if .Spec }}x{{ else }}nil{{ end }} {{ eq .Spec nil }}", Pod()) == "<nil> nil true"
    assert render('{{ index .Labels "version" | quote }} {{ .Labels.version }}', Pod()) == '"" <no value>'
    with pytest.raises(TemplateError, match=r"nil pointer evaluating \*v1\.PodSpec\.Containers$"):
        render("{{ .Spec.Containers }}", Pod())
    with pytest.raises(TemplateError, match=r"can't evaluate field Status in type \*v1\.Pod$"):
        render("{{ .Status }}", Pod())


def test_tuples_are_slices() -> None:
    assert render("{{ range . }}{{ . }}{{ end }} {{ len . }} {{ index . 1 }}", (1, "b")) == "1b 2 b"


def test_json_syntax_errors_are_errors() -> None:
    with pytest.raises(TemplateError, match=r"error calling mustFromJson: "):
        render('{{ mustFromJson "nope" }}')
    with pytest.raises(TemplateError, match=r"error calling mustRegexMatch: error parsing regexp: "):
        render('{{ mustRegexMatch "(" "x" }}')


def test_recursion_stops_with_an_error() -> None:
    with pytest.raises(TemplateError, match=r"exceeded maximum template depth \(150\)$"):
        render('{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" . }}')


def test_one_template_executes_concurrently() -> None:
    tmpl = Template.parse("t", "{{ range . }}{{ . }}{{ end }}{{ $x := len . }}{{ $x }}", SPRIG_FUNCS)
    inputs = [list(range(n)) for n in range(40)]
    with ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(tmpl.execute, inputs))
    assert outputs == ["".join(map(str, i)) + str(len(i)) for i in inputs]


def test_defined_templates() -> None:
    tmpl = Template.parse("main", '{{ define "a" }}A{{ end }}{{ block "b" . }}B{{ end }}x', {})
    assert tmpl.defined_templates() == ["a", "b", "main"]
    assert tmpl.execute(None) == "Bx"


def test_a_function_map_is_checked_as_go_checks_it() -> None:
    with pytest.raises(TemplateError, match=r'^function name "a-b" is not a valid identifier$'):
        Template.parse("t", "", {"a-b": len})
    with pytest.raises(TemplateError, match=r"^value for x not a function$"):
        Template.parse("t", "", {"x": "not callable"})


def test_ranging_over_a_huge_int_counts_without_holding_the_range() -> None:
    """Go 1.22's range over an int counts; it never makes a slice of the numbers. A template
    ranging over 10^12 that breaks at once renders at once; one that does not is CPU that the
    webhook's deadline stops, never memory (the worker, in a 1 GiB address space here, is not
    killed for it)."""
    program = (
        "from app.gotemplate import Template\n"
        "print(Template.parse('t', '{{ range $i := 1000000000000 }}{{ $i }}{{ break }}{{ end }}"
        "{{ range 0 }}x{{ else }}empty{{ end }}').execute(None))\n"
    )

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, preexec_fn=limit
    )
    assert (done.returncode, done.stdout) == (0, "0empty\n"), done.stderr[-2000:]
