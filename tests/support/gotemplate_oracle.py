"""Differential testing of app/gotemplate against Go: the gotemplate-oracle peer
(tools/peers/gotemplate) renders the same template over the same data with Go's text/template
and sprig, as istiod does.

A case's data is JSON with the oracle's two extensions: {"$stringmap": {...}} is a Go
map[string]string (StringMap here) and {"$obj": {...}} a *main.Obj (``Obj`` here: fields Name,
Count, Labels, Values, Items, Child, Any; methods Greet(string), Upper(), Fail()). A number
without fraction or exponent is a Go int, else a float64, on both sides.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.gotemplate import (
    SPRIG_FUNCS,
    GoError,
    NilPointer,
    StringMap,
    StringSlice,
    Template,
    TemplateError,
    go_signature,
)
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
    results = [json.loads(line) for line in done.stdout.split("\n") if line]
    assert len(results) == len(cases), done.stderr
    return [Rendered(_text(r.get("out")), _text(r.get("err"))) for r in results]


def _text(b64: str | None) -> str | None:
    """The oracle's bytes as a Go string is here: UTF-8, an invalid byte as a lone surrogate."""
    return None if b64 is None else base64.b64decode(b64).decode("utf-8", "surrogateescape")


def py_render(case: Case) -> Rendered:
    funcs = SPRIG_FUNCS if case.sprig else {}
    try:
        return Rendered(Template.parse("t", case.template, funcs).execute(to_python(case.data)), None)
    except TemplateError as e:
        return Rendered(None, str(e))


OBJ_FIELDS = ("Name", "Count", "Labels", "Values", "Items", "Child", "Any")


class Obj:
    """The oracle's *main.Obj as a Go struct of app/gotemplate's data model. Go prints a struct
    pointer inside a map as its address (and at top level as &{...}): renderings are compared
    after ``comparable`` replaces those with PTR."""

    go_type = "*main.Obj"

    def __init__(self, fields: dict[str, Any]) -> None:
        self.given = set(fields)
        self.fields: dict[str, Any] = {
            "Name": "", "Count": 0, "Labels": StringMap(), "Values": {}, "Items": StringSlice(),
            "Child": NilPointer("*main.Obj", OBJ_FIELDS), "Any": None,
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

    def go_json(self) -> dict[str, Any]:
        """encoding/json of the struct: a nil map or slice field is null."""
        unset_nil = ("Labels", "Values", "Items", "Child")
        return {k: (None if k in unset_nil and k not in self.given else v) for k, v in self.fields.items()}

    def __str__(self) -> str:
        return "0xc000abcdef"  # an address, as Go prints one inside a map

    def _fail(self) -> str:
        raise GoError(f"failed on {self.fields['Name']}")


_ADDRESS = re.compile(r"0x[0-9a-f]{8,}|&\{[^{}]*\}")


def comparable(r: Rendered) -> Rendered:
    """A rendering with struct pointers' addresses (and &{...} dumps) as PTR."""
    return Rendered(
        None if r.out is None else _ADDRESS.sub("PTR", r.out), None if r.err is None else _ADDRESS.sub("PTR", r.err)
    )


def to_python(v: Any) -> Any:
    if isinstance(v, dict):
        if len(v) == 1 and "$stringmap" in v:
            return StringMap(v["$stringmap"])
        if len(v) == 1 and "$obj" in v:
            fields = {k: to_python(x) for k, x in v["$obj"].items()}
            if "Items" in fields:
                fields["Items"] = StringSlice(fields["Items"])
            return Obj(fields)
        return {k: to_python(x) for k, x in v.items()}
    if isinstance(v, list):
        return [to_python(x) for x in v]
    return v
