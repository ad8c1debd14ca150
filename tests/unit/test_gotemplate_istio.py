"""Istio's own templates through app/gotemplate: every file of the istiod chart's ``files/``
(the injection templates, the gateway and waypoint templates, the profiles) parses with istiod's
function map (sprig's TxtFuncMap, then Istio's InjectionFuncmap over it), read from the pinned
module; and istiod's parse errors are Go's."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.gotemplate import SPRIG_FUNCS, Template, TemplateError
from app.inject.funcs import INJECTION_FUNCS
from tests.support.peers import istio_module_dir


def chart_files() -> list[Path]:
    files = istio_module_dir() / "manifests" / "charts" / "istio-control" / "istio-discovery" / "files"
    return sorted(files.glob("*.yaml"))


def test_the_chart_has_the_injection_templates() -> None:
    names = {p.name for p in chart_files()}
    assert {
        "injection-template.yaml",
        "gateway-injection-template.yaml",
        "grpc-simple.yaml",
        "grpc-agent.yaml",
    } <= names


@pytest.mark.parametrize("path", chart_files(), ids=lambda p: p.name)
def test_chart_file_parses_with_istiods_funcs(path: Path) -> None:
    tmpl = Template.parse("inject", path.read_text(), {**SPRIG_FUNCS, **INJECTION_FUNCS})
    assert "inject" in tmpl.defined_templates()


def test_a_function_istiod_lacks_is_a_parse_error() -> None:
    with pytest.raises(TemplateError, match=r'^template: inject:2: function "toPrettyYaml" not defined$'):
        Template.parse("inject", "a: 1\nb: {{ toPrettyYaml .Values }}\n", {**SPRIG_FUNCS, **INJECTION_FUNCS})
