"""Execution of a parsed template (text/template/exec.go): walks the tree over the data, writing
text and printed values, evaluating pipelines, fields, variables and function calls with Go's
rules and Go's error messages."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from app.gotemplate.errors import TemplateError
from app.gotemplate.nodes import (
    ActionNode,
    BoolNode,
    BreakNode,
    ChainNode,
    CommandNode,
    CommentNode,
    ContinueNode,
    DotNode,
    FieldNode,
    IdentifierNode,
    IfNode,
    ListNode,
    NilNode,
    Node,
    NumberNode,
    PipeNode,
    RangeNode,
    StringNode,
    TemplateNode,
    TextNode,
    VariableNode,
    WithNode,
)
from app.gotemplate.printing import sorted_items, sprint_value
from app.gotemplate.quoting import go_quote
from app.gotemplate.signature import (
    ANY,
    BOOL,
    FLOAT64,
    INT,
    INT64,
    NILLABLE,
    STRING,
    VALUE,
    Signature,
    assignable,
    signature_of,
)
from app.gotemplate.values import (
    NIL,
    Int64,
    NilPointer,
    has_interface_elements,
    is_struct,
    is_true,
    type_name,
)

MAX_EXEC_DEPTH: Final = 150  # Go allows 100000 nested {{template}} calls; Python's stack fewer


class _Missing:
    """No value from a previous pipeline stage (Go's missingVal)."""

    __slots__ = ()


MISSING: Final = _Missing()


class _Var:
    """A variable: its name, value, and whether its static Go type is interface {} (a range
    element of a map or slice)."""

    __slots__ = ("iface", "name", "value")

    def __init__(self, name: str, value: Any, iface: bool = False) -> None:
        self.name = name
        self.value = value
        self.iface = iface


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class Executor:
    """One execution: the output, the variable stack and the node being evaluated (for errors)."""

    def __init__(
        self, name: str, parse_name: str, text: str, trees: Mapping[str, ListNode],
        funcs: Mapping[str, Callable[..., Any]], signatures: Mapping[str, Signature],
        builtins: frozenset[str],
    ) -> None:  # fmt: skip
        self.name = name
        self.parse_name = parse_name
        self.text = text
        self.trees = trees
        self.funcs = funcs
        self.signatures = signatures
        self.builtins = builtins
        self.out: list[str] = []
        self.vars: list[_Var] = []
        self.node: Node | None = None
        # whether dot's static Go type is interface {} (a map value or slice element): Go names
        # that type, not the dynamic one, in "can't evaluate field X in type T"
        self.dot_iface = False
        self.depth = 0

    # -- errors ------------------------------------------------------------------------------
    def error(self, msg: str) -> TemplateError:
        node = self.node
        if node is None:
            return TemplateError(f"template: {self.name}: {msg}")
        before = self.text[: node.pos]
        nl = before.rfind("\n")
        col = len(before[nl + 1 :].encode("utf-8", "surrogateescape"))
        line = 1 + before.count("\n")
        location = f"{self.parse_name}:{line}:{col}"
        return TemplateError(f"template: {location}: executing {go_quote(self.name)} at <{node}>: {msg}")

    # -- variables ---------------------------------------------------------------------------
    def set_var(self, name: str, value: Any) -> None:
        for var in reversed(self.vars):
            if var.name == name:
                var.value, var.iface = value, False
                return
        raise self.error(f"undefined variable: {name}")

    def var_entry(self, name: str) -> _Var:
        for var in reversed(self.vars):
            if var.name == name:
                return var
        raise self.error(f"undefined variable: {name}")

    # -- walking -----------------------------------------------------------------------------
    def run(self, root: ListNode, data: Any) -> str:
        self.vars = [_Var("$", data)]
        self.walk(data, root)
        return "".join(self.out)

    def walk(self, dot: Any, node: Node) -> None:
        self.node = node
        if isinstance(node, TextNode):
            self.out.append(node.text)
        elif isinstance(node, ListNode):
            for n in node.nodes:
                self.walk(dot, n)
        elif isinstance(node, ActionNode):
            val = self.eval_pipeline(dot, node.pipe)
            if not node.pipe.decl:
                self.print_value(node, val)
        elif isinstance(node, IfNode | WithNode):
            self.walk_if_or_with(dot, node)
        elif isinstance(node, RangeNode):
            self.walk_range(dot, node)
        elif isinstance(node, TemplateNode):
            self.walk_template(dot, node)
        elif isinstance(node, BreakNode):
            raise _Break
        elif isinstance(node, ContinueNode):
            raise _Continue
        elif not isinstance(node, CommentNode):
            raise self.error(f"unknown node: {node}")

    def walk_if_or_with(self, dot: Any, node: IfNode | WithNode) -> None:
        mark = len(self.vars)
        try:
            val = self.eval_pipeline(dot, node.pipe)
            if is_true(val) and isinstance(node, WithNode):
                saved, self.dot_iface = self.dot_iface, False
                try:
                    self.walk(val, node.list)
                finally:
                    self.dot_iface = saved
            elif is_true(val):
                self.walk(dot, node.list)
            elif node.else_list is not None:
                self.walk(dot, node.else_list)
        finally:
            del self.vars[mark:]

    def walk_range(self, dot: Any, r: RangeNode) -> None:
        self.node = r
        outer = len(self.vars)
        saved_iface = self.dot_iface
        try:
            val = self.eval_pipeline(dot, r.pipe)
            mark = len(self.vars)
            decl = r.pipe.decl
            items: Iterable[tuple[Any, Any]]
            elem_iface = has_interface_elements(val)
            if isinstance(val, int) and not isinstance(val, bool):
                if len(decl) > 1:
                    raise self.error(f"can't use {val} to iterate over more than one variable")
                # counted as Go counts, never held: a huge count is time (the caller's deadline
                # stops it), not memory; an int64 counts in int64s
                items = ((None, type(val)(i)) for i in range(val))
            elif isinstance(val, (list, tuple)):
                items = [(i, NIL if e is None else e) for i, e in enumerate(val)]
            elif isinstance(val, dict):
                items = [(k, NIL if e is None else e) for k, e in sorted_items(val)]
            elif val is None:
                items = []
            else:
                raise self.error(f"range can't iterate over {sprint_value(val)}")
            for index, elem in items:
                if decl:
                    if r.pipe.is_assign:
                        self.set_var(decl[0].ident[0], index if len(decl) > 1 else elem)
                    else:
                        self.vars[mark - 1].value, self.vars[mark - 1].iface = elem, elem_iface
                if len(decl) > 1:
                    if r.pipe.is_assign:
                        self.set_var(decl[1].ident[0], elem)
                    else:
                        self.vars[mark - 2].value = index
                self.dot_iface = elem_iface
                try:
                    self.walk(elem, r.list)
                except _Continue:
                    pass
                except _Break:
                    return
                finally:
                    del self.vars[mark:]
                    self.dot_iface = saved_iface
            empty = val <= 0 if isinstance(val, int) and not isinstance(val, bool) else not items
            if empty and r.else_list is not None:
                self.walk(dot, r.else_list)
        finally:
            del self.vars[outer:]
            self.dot_iface = saved_iface

    def walk_template(self, dot: Any, t: TemplateNode) -> None:
        self.node = t
        tree = self.trees.get(t.name)
        if tree is None:
            raise self.error(f"template {go_quote(t.name)} not defined")
        if self.depth >= MAX_EXEC_DEPTH:
            raise self.error(f"exceeded maximum template depth ({MAX_EXEC_DEPTH})")
        dot = self.eval_pipeline(dot, t.pipe) if t.pipe is not None else None
        saved = (self.name, self.vars, self.dot_iface)
        self.name, self.vars, self.dot_iface = t.name, [_Var("$", dot)], False
        self.depth += 1
        try:
            self.walk(dot, tree)
        finally:
            self.depth -= 1
            self.name, self.vars, self.dot_iface = saved

    def print_value(self, node: Node, v: Any) -> None:
        self.node = node
        if v is None:
            self.out.append("<no value>")
        elif callable(v) and not is_struct(v):
            raise self.error(f"can't print {node} of type {type_name(v)}")
        else:
            self.out.append(sprint_value(v))

    # -- evaluation --------------------------------------------------------------------------
    def eval_pipeline(self, dot: Any, pipe: PipeNode) -> Any:
        self.node = pipe
        value: Any = MISSING
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, value)
            if value is NIL:
                value = None
        for var in pipe.decl:
            if pipe.is_assign:
                self.set_var(var.ident[0], value)
            else:
                self.vars.append(_Var(var.ident[0], value))
        return value

    def not_a_function(self, args: list[Node], final: Any) -> None:
        if len(args) > 1 or final is not MISSING:
            raise self.error(f"can't give argument to non-function {args[0]}")

    def eval_command(self, dot: Any, cmd: CommandNode, final: Any) -> Any:
        first = cmd.args[0]
        if isinstance(first, FieldNode):
            self.node = first
            return self.eval_field_chain(dot, dot, self.dot_iface, first, first.ident, cmd.args, final)
        if isinstance(first, ChainNode):
            return self.eval_chain(dot, first, cmd.args, final)
        if isinstance(first, IdentifierNode):
            return self.eval_function(dot, first, cmd, cmd.args, final)
        if isinstance(first, PipeNode):
            self.not_a_function(cmd.args, final)
            return self.eval_pipeline(dot, first)
        if isinstance(first, VariableNode):
            return self.eval_variable(dot, first, cmd.args, final)
        self.node = first
        self.not_a_function(cmd.args, final)
        if isinstance(first, BoolNode):
            return first.value
        if isinstance(first, DotNode):
            return dot
        if isinstance(first, NilNode):
            raise self.error("nil is not a command")
        if isinstance(first, NumberNode):
            return self.ideal_constant(first)
        if isinstance(first, StringNode):
            return first.text
        raise self.error(f"can't evaluate command {go_quote(str(first))}")

    def ideal_constant(self, c: NumberNode) -> Any:
        self.node = c
        text = c.text
        is_hex_int = len(text) > 2 and text[0] == "0" and text[1] in "xX" and not any(ch in text for ch in "pP")
        if c.is_float and not is_hex_int and not text.startswith("'") and any(ch in text for ch in ".eEpP"):
            return c.float_value
        if c.is_int:
            return c.int_value
        if c.is_uint:
            raise self.error(f"{text} overflows int")
        return None

    def eval_chain(self, dot: Any, chain: ChainNode, args: list[Node] | None, final: Any) -> Any:
        self.node = chain
        if isinstance(chain.node, NilNode):
            raise self.error(f"indirection through explicit nil in {chain}")
        pipe = self.eval_arg(dot, None, chain.node)
        return self.eval_field_chain(dot, pipe, False, chain, chain.fields, args, final)

    def eval_variable(self, dot: Any, var: VariableNode, args: list[Node] | None, final: Any) -> Any:
        self.node = var
        entry = self.var_entry(var.ident[0])
        value, iface = entry.value, entry.iface
        if len(var.ident) == 1:
            if args is not None:
                self.not_a_function(args, final)
            return value
        return self.eval_field_chain(dot, value, iface, var, var.ident[1:], args, final)

    def eval_field_chain(
        self, dot: Any, receiver: Any, iface: bool, node: Node, ident: list[str], args: list[Node] | None, final: Any
    ) -> Any:
        for name in ident[:-1]:
            receiver, iface = self.eval_field(dot, name, node, None, MISSING, receiver, iface)
        return self.eval_field(dot, ident[-1], node, args, final, receiver, iface)[0]

    def eval_field(
        self, dot: Any, name: str, node: Node, args: list[Node] | None, final: Any, receiver: Any, iface: bool
    ) -> tuple[Any, bool]:
        """``receiver.name`` (called when a method) and whether its static type is interface {}."""
        if receiver is None:
            return None, False
        if receiver is NIL or (isinstance(receiver, NilPointer) and receiver.has_field(name)):
            raise self.error(f"nil pointer evaluating {_static_type(receiver, iface)}.{name}")
        if isinstance(receiver, NilPointer):
            raise self.error(f"can't evaluate field {name} in type {_static_type(receiver, iface)}")
        has_args = (args is not None and len(args) > 1) or final is not MISSING
        if is_struct(receiver):
            try:
                value = receiver.go_field(name)
            except KeyError:
                raise self.error(f"can't evaluate field {name} in type {_static_type(receiver, iface)}") from None
            if callable(value) and not is_struct(value):
                return self.eval_call(dot, value, signature_of(value), False, node, name, args, final), False
            if has_args:
                raise self.error(f"{name} has arguments but cannot be invoked as function")
            return (NIL if value is None else value), False
        if isinstance(receiver, dict):
            if has_args:
                raise self.error(f"{name} is not a method but has arguments")
            if name not in receiver:
                return None, False
            value = receiver[name]
            return (NIL if value is None else value), has_interface_elements(receiver)
        raise self.error(f"can't evaluate field {name} in type {_static_type(receiver, iface)}")

    def eval_function(self, dot: Any, node: IdentifierNode, cmd: Node, args: list[Node] | None, final: Any) -> Any:
        self.node = node
        name = node.ident
        fn = self.funcs.get(name)
        if fn is None:
            raise self.error(f"{go_quote(name)} is not a defined function")
        return self.eval_call(dot, fn, self.signatures[name], name in self.builtins, cmd, name, args, final)

    def eval_call(
        self, dot: Any, fn: Callable[..., Any], sig: Signature, is_builtin: bool, node: Node, name: str,
        args: list[Node] | None, final: Any,
    ) -> Any:  # fmt: skip
        argn = args[1:] if args is not None else []
        num_in = len(argn) + (0 if final is MISSING else 1)
        num_fixed = len(argn)
        if sig.variadic is not None:
            num_fixed = len(sig.params)
            if num_in < num_fixed:
                raise self.error(f"wrong number of args for {name}: want at least {num_fixed} got {len(argn)}")
        elif num_in != len(sig.params):
            raise self.error(f"wrong number of args for {name}: want {len(sig.params)} got {num_in}")

        if is_builtin and name in ("and", "or"):
            v: Any = None
            for arg in argn:
                v = self.eval_arg(dot, VALUE, arg)
                if is_true(v) == (name == "or"):
                    return v
            if final is not MISSING:
                v = self.validate(final, VALUE)
            return v

        argv: list[Any] = []
        i = 0
        while i < num_fixed and i < len(argn):
            argv.append(self.eval_arg(dot, sig.params[i], argn[i]))
            i += 1
        if sig.variadic is not None:
            while i < len(argn):
                argv.append(self.eval_arg(dot, sig.variadic, argn[i]))
                i += 1
        if final is not MISSING:
            typ = sig.params[num_in - 1] if num_in - 1 < len(sig.params) else sig.variadic
            argv.append(self.validate(final, typ))
        # a nil interface reaches a function as nil, except as a reflect.Value, which keeps it
        # (len of it is "len of nil pointer", of a missing value another error)
        for i, a in enumerate(argv):
            if a is NIL and (sig.params[i] if i < len(sig.params) else sig.variadic) != VALUE:
                argv[i] = None

        if is_builtin and name == "call":  # the callee's name goes first, for the errors
            callee = str(argn[0]) if argn else sprint_value(final)
            return self._call(name, node, fn, [callee, *argv])
        return self._call(name, node, fn, argv)

    def _call(self, name: str, node: Node, fn: Callable[..., Any], argv: list[Any]) -> Any:
        try:
            result = fn(*argv)
        except TemplateError:
            raise
        except Exception as e:  # a GoError, or what a Go function's panic would be: safeCall recovers both
            self.node = node
            raise self.error(f"error calling {name}: {e}") from e
        return NIL if result is None else result

    def eval_arg(self, dot: Any, typ: str | None, n: Node) -> Any:
        self.node = n
        if isinstance(n, DotNode):
            return self.validate(dot, typ)
        if isinstance(n, NilNode):
            if typ is None or typ in NILLABLE:
                return None
            raise self.error(f"cannot assign nil to {typ}")
        if isinstance(n, FieldNode):
            return self.validate(self.eval_field_chain(dot, dot, self.dot_iface, n, n.ident, [n], MISSING), typ)
        if isinstance(n, VariableNode):
            return self.validate(self.eval_variable(dot, n, None, MISSING), typ)
        if isinstance(n, PipeNode):
            return self.validate(self.eval_pipeline(dot, n), typ)
        if isinstance(n, IdentifierNode):
            return self.validate(self.eval_function(dot, n, n, None, MISSING), typ)
        if isinstance(n, ChainNode):
            return self.validate(self.eval_chain(dot, n, None, MISSING), typ)
        if typ == BOOL:
            if isinstance(n, BoolNode):
                return n.value
            raise self.error(f"expected bool; found {n}")
        if typ == FLOAT64:
            if isinstance(n, NumberNode) and n.is_float:
                return n.float_value
            raise self.error(f"expected float; found {n}")
        if typ in (INT, INT64):
            if isinstance(n, NumberNode) and n.is_int:
                return Int64(n.int_value) if typ == INT64 else n.int_value
            raise self.error(f"expected integer; found {n}")
        if typ in (ANY, VALUE):
            if isinstance(n, BoolNode):
                return n.value
            if isinstance(n, NumberNode):
                return self.ideal_constant(n)
            if isinstance(n, StringNode):
                return n.text
        if typ == STRING:
            if isinstance(n, StringNode):
                return n.text
            raise self.error(f"expected string; found {n}")
        raise self.error(f"can't handle {n} for arg of type {typ}")

    def validate(self, value: Any, typ: str | None) -> Any:
        """validateType: the value as the parameter type takes it, or Go's error."""
        if value is None:
            if typ is None or typ in NILLABLE:
                return None
            raise self.error(f"invalid value; expected {typ}")
        if typ is None or typ in (ANY, VALUE) or assignable(value, typ):
            return value
        got = "interface {}" if value is NIL else type_name(value)
        raise self.error(f"wrong type for value; expected {typ}; got {got}")


def _static_type(value: Any, iface: bool) -> str:
    return "interface {}" if iface or value is NIL else type_name(value)
