"""Template: parse once, execute per data set (text/template's Template for one text)."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from app.gotemplate.builtins import BUILTINS
from app.gotemplate.errors import TemplateError
from app.gotemplate.executor import Executor
from app.gotemplate.nodes import ListNode
from app.gotemplate.parser import parse
from app.gotemplate.quoting import go_quote
from app.gotemplate.signature import Signature, signature_of

_BUILTIN_NAMES = frozenset(BUILTINS)
_BUILTIN_SIGNATURES = {name: signature_of(fn) for name, fn in BUILTINS.items()}


class Template:
    """A parsed template and the templates it defines; immutable, safe to execute concurrently."""

    __slots__ = ("_builtins", "_funcs", "_signatures", "_text", "_trees", "name")

    def __init__(
        self, name: str, text: str, trees: dict[str, ListNode], funcs: dict[str, Callable[..., Any]],
        signatures: dict[str, Signature], builtins: frozenset[str],
    ) -> None:  # fmt: skip
        self.name = name
        self._text = text
        self._trees = trees
        self._funcs = funcs
        self._signatures = signatures
        self._builtins = builtins

    @classmethod
    def parse(cls, name: str, text: str, funcs: Mapping[str, Callable[..., Any]] = {}) -> Template:
        """Parses ``text`` as Go's ``template.New(name).Funcs(funcs).Parse(text)``: a function in
        ``funcs`` overrides a builtin of the same name, as Go's FuncMap does."""
        for fname, fn in funcs.items():  # Go's FuncMap checks (it panics)
            if not _good_name(fname):
                raise TemplateError(f"function name {go_quote(fname)} is not a valid identifier")
            if not callable(fn):
                raise TemplateError(f"value for {fname} not a function")
        all_funcs: dict[str, Callable[..., Any]] = {**BUILTINS, **funcs}
        signatures = {**_BUILTIN_SIGNATURES, **{n: signature_of(f) for n, f in funcs.items()}}
        builtins = _BUILTIN_NAMES - set(funcs)
        trees = parse(name, text, all_funcs)
        return cls(name, text, trees, all_funcs, signatures, builtins)

    def defined_templates(self) -> list[str]:
        return sorted(self._trees)

    def execute(self, data: Any) -> str:
        """The output for ``data``; TemplateError as Go words it when execution fails."""
        ex = Executor(self.name, self.name, self._text, self._trees, self._funcs, self._signatures, self._builtins)
        try:
            return ex.run(self._trees[self.name], data)  # parsing always leaves the named tree
        except RecursionError:
            raise ex.error("exceeded maximum template depth") from None


def _good_name(name: str) -> bool:
    """text/template's goodName: a letter or underscore, then letters, digits, underscores."""
    return bool(name) and all(
        c == "_" or c.isalpha() or (i > 0 and unicodedata.category(c) == "Nd") for i, c in enumerate(name)
    )
