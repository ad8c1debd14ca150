"""Go's text/template, with the sprig functions, in Python: what istiod renders its injection
templates with (``template.New("inject").Funcs(sprig.TxtFuncMap()).Funcs(funcs).Parse(text)``).

    tmpl = Template.parse(name, text, {**SPRIG_FUNCS, **own_funcs})   # TemplateError
    out = tmpl.execute(data)                                            # TemplateError

The full syntax of text/template (lexer.py, parser.py -> nodes.py, executor.py), Go's builtins
(builtins.py), fmt's printing (printing.py) and sprig v3's TxtFuncMap (sprig*.py). Errors read
as Go's: ``template: NAME:LINE:COL: executing "NAME" at <.X>: reason``.

The data model (values.py):

* ``dict`` is a Go map (``map[string]interface {}``; ``StringMap`` for ``map[string]string``): a
  missing key is nil, which prints ``<no value>`` at top level (Go's default missingkey);
  ``list`` / ``tuple`` is a slice (``StringSlice``, ``IntSlice`` for ``[]string``, ``[]int``);
  ``str``, ``int`` (Go int; ``Int64``, ``Uint8`` for those types), ``float`` (float64, as JSON
  numbers decode in Go), ``bool``; ``None`` is nil; ``NilPointer("*v1.PodSpec")`` a typed nil
  pointer.
* An object with ``go_field(self, name: str) -> Any`` is a Go struct or pointer: ``.Name`` calls
  ``go_field("Name")``, which raises ``KeyError`` when there is no such field or method (Go's
  "can't evaluate field Name in type T"; T is the object's ``go_type`` attribute, else its class
  name). A callable it returns is a method and is called with the arguments the template gives
  (``{{ .Foo.Bar "x" }}``). Its ``str()`` is what the template prints for it; an optional
  ``go_json()`` returns what encoding/json would marshal (a dict in field order) for toJson.
* A template function is any callable; ``@go_signature("int", "string")`` declares its Go
  parameter types so arguments are converted and checked as Go does (else they are
  ``interface {}``). It returns Go's error by raising ``GoError``.

Deliberate differences: complex constants are refused at parse time; nested ``{{template}}``
calls stop at depth 150 (Go: 100000); a regular-expression syntax error (mustRegex*) is worded
by RE2, not Go's regexp/syntax; sprig's clock, random, crypto, network
and environment functions are not provided (sprig.py); Go's float-to-integer conversion is
amd64's (out of range gives the minimum int64), where istiod runs.

Verified against Go itself: tools/peers/gotemplate is a Go program rendering the same template
over the same data with text/template and sprig at istiod's versions; tests/unit/test_gotemplate_*
compare the two case by case and over random templates, strings, values and URLs.
"""

from app.gotemplate.errors import GoError, TemplateError
from app.gotemplate.signature import go_signature
from app.gotemplate.sprig import SPRIG_FUNCS
from app.gotemplate.template import Template
from app.gotemplate.values import NIL, GoStruct, Int64, IntSlice, NilPointer, StringMap, StringSlice, Uint8

__all__ = [
    "NIL",
    "SPRIG_FUNCS",
    "GoError",
    "GoStruct",
    "Int64",
    "IntSlice",
    "NilPointer",
    "StringMap",
    "StringSlice",
    "Template",
    "TemplateError",
    "Uint8",
    "go_signature",
]
