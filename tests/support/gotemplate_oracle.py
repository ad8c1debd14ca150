"""Differential testing of app/gotemplate against Go: the gotemplate-oracle peer
(tools/peers/gotemplate) renders the same template over the same data with Go's text/template
and sprig, as istiod does.

A case's data is JSON with the oracle's two extensions: {"$stringmap": {...}} is a Go
map[string]string (StringMap here) and {"$obj": {...}} a *main.Obj (``Obj`` here: fields Name,
Count, Labels, Values, Items, Child, Any; methods Greet(string), Upper(), Fail()). A number
without fraction or exponent is a Go int, else a float64, on both sides.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.gotemplate import SPRIG_FUNCS, GoError, NilPointer, StringMap, Template, TemplateError, go_signature
from tests.support.peers import peer_binary


@dataclass(frozen=True)
class Case:
    template: str
    data: Any = None
    sprig: bool = True

    def __str__(self) -> str:
        return self.template if len(self.template) < 60 else self.template[:57] + "..."


@dataclass(frozen=True)
class Rendered:
    out: str | None
    err: str | None

    def __str__(self) -> str:
        return f"error: {self.err}" if self.err is not None else repr(self.out)


def go_render(cases: Sequence[Case]) -> list[Rendered]:
    """Every case rendered by Go, in one run of the oracle."""
    lines = [json.dumps({"name": "t", "template": c.template, "data": c.data, "sprig": c.sprig}) for c in cases]
    done = subprocess.run(
        [peer_binary("gotemplate-oracle")], input="\n".join(lines) + "\n", capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == len(cases), done.stderr
    return [Rendered(r.get("out"), r.get("err")) for r in results]


def py_render(case: Case) -> Rendered:
    funcs = SPRIG_FUNCS if case.sprig else {}
    try:
        return Rendered(Template.parse("t", case.template, funcs).execute(to_python(case.data)), None)
    except TemplateError as e:
        return Rendered(None, str(e))


class Obj:
    """The oracle's *main.Obj as a Go struct of app/gotemplate's data model."""

    go_type = "*main.Obj"

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields: dict[str, Any] = {
            "Name": "", "Count": 0, "Labels": StringMap(), "Values": {}, "Items": [],
            "Child": NilPointer("*main.Obj"), "Any": None,
        }  # fmt: skip
        self.fields.update(fields)

    def go_field(self, name: str) -> Any:
        if name in self.fields:
            return self.fields[name]
        if name == "Greet":
            return go_signature("string")(lambda who: f"hello {who} from {self.fields['Name']}")
        if name == "Upper":
            return lambda: str(self.fields["Name"]).upper()
        if name == "Fail":
            return self._fail
        raise KeyError(name)

    def _fail(self) -> str:
        raise GoError(f"failed on {self.fields['Name']}")


def to_python(v: Any) -> Any:
    if isinstance(v, dict):
        if len(v) == 1 and "$stringmap" in v:
            return StringMap(v["$stringmap"])
        if len(v) == 1 and "$obj" in v:
            return Obj({k: to_python(x) for k, x in v["$obj"].items()})
        return {k: to_python(x) for k, x in v.items()}
    if isinstance(v, list):
        return [to_python(x) for x in v]
    return v
