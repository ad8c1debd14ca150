"""The parse tree (text/template/parse/node.go). ``str(node)`` is Go's ``Node.String()``: execution
errors quote it as their context (``at <.Values.x>``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.gotemplate.quoting import go_quote


@dataclass(eq=False, slots=True)
class Node:
    pos: int


@dataclass(eq=False, slots=True)
class TextNode(Node):
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(eq=False, slots=True)
class ListNode(Node):
    nodes: list[Node] = field(default_factory=list)

    def __str__(self) -> str:
        return "".join(str(n) for n in self.nodes)


@dataclass(eq=False, slots=True)
class DotNode(Node):
    def __str__(self) -> str:
        return "."


@dataclass(eq=False, slots=True)
class NilNode(Node):
    def __str__(self) -> str:
        return "nil"


@dataclass(eq=False, slots=True)
class BoolNode(Node):
    value: bool

    def __str__(self) -> str:
        return "true" if self.value else "false"


@dataclass(eq=False, slots=True)
class StringNode(Node):
    quoted: str
    text: str

    def __str__(self) -> str:
        return self.quoted


@dataclass(eq=False, slots=True)
class NumberNode(Node):
    """A constant kept as every Go type that can hold it, as Go's ideal constants."""

    text: str
    is_int: bool = False
    is_uint: bool = False
    is_float: bool = False
    is_complex: bool = False
    int_value: int = 0
    uint_value: int = 0
    float_value: float = 0.0
    complex_value: complex = 0j

    def __str__(self) -> str:
        return self.text


@dataclass(eq=False, slots=True)
class IdentifierNode(Node):
    ident: str

    def __str__(self) -> str:
        return self.ident


@dataclass(eq=False, slots=True)
class VariableNode(Node):
    ident: list[str]  # the variable name ($x) then its fields

    def __str__(self) -> str:
        return ".".join(self.ident)


@dataclass(eq=False, slots=True)
class FieldNode(Node):
    ident: list[str]

    def __str__(self) -> str:
        return "".join("." + i for i in self.ident)


@dataclass(eq=False, slots=True)
class CommandNode(Node):
    args: list[Node] = field(default_factory=list)

    def __str__(self) -> str:
        return " ".join(f"({a})" if isinstance(a, PipeNode) else str(a) for a in self.args)


@dataclass(eq=False, slots=True)
class PipeNode(Node):
    line: int
    is_assign: bool = False
    decl: list[VariableNode] = field(default_factory=list)
    cmds: list[CommandNode] = field(default_factory=list)

    def __str__(self) -> str:
        head = ""
        if self.decl:
            head = ", ".join(str(v) for v in self.decl) + (" = " if self.is_assign else " := ")
        return head + " | ".join(str(c) for c in self.cmds)


@dataclass(eq=False, slots=True)
class ChainNode(Node):
    """A term followed by field accesses: ``(pipeline).A.B``."""

    node: Node
    fields: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = f"({self.node})" if isinstance(self.node, PipeNode) else str(self.node)
        return head + "".join("." + f for f in self.fields)


@dataclass(eq=False, slots=True)
class ActionNode(Node):
    line: int
    pipe: PipeNode

    def __str__(self) -> str:
        return "{{" + str(self.pipe) + "}}"


@dataclass(eq=False, slots=True)
class CommentNode(Node):
    text: str

    def __str__(self) -> str:
        return "{{" + self.text + "}}"


@dataclass(eq=False, slots=True)
class BranchNode(Node):
    line: int
    pipe: PipeNode
    list: ListNode
    else_list: ListNode | None
    keyword = ""

    def __str__(self) -> str:
        out = "{{" + self.keyword + " " + str(self.pipe) + "}}" + str(self.list)
        if self.else_list is not None:
            out += "{{else}}" + str(self.else_list)
        return out + "{{end}}"


@dataclass(eq=False, slots=True)
class IfNode(BranchNode):
    keyword = "if"


@dataclass(eq=False, slots=True)
class RangeNode(BranchNode):
    keyword = "range"


@dataclass(eq=False, slots=True)
class WithNode(BranchNode):
    keyword = "with"


@dataclass(eq=False, slots=True)
class BreakNode(Node):
    line: int

    def __str__(self) -> str:
        return "{{break}}"


@dataclass(eq=False, slots=True)
class ContinueNode(Node):
    line: int

    def __str__(self) -> str:
        return "{{continue}}"


@dataclass(eq=False, slots=True)
class TemplateNode(Node):
    line: int
    name: str
    pipe: PipeNode | None

    def __str__(self) -> str:
        out = "{{template " + go_quote(self.name)
        if self.pipe is not None:
            out += " " + str(self.pipe)
        return out + "}}"


@dataclass(eq=False, slots=True)
class EndNode(Node):
    """{{end}}: ends a list while parsing, never in a finished tree."""

    def __str__(self) -> str:
        return "{{end}}"


@dataclass(eq=False, slots=True)
class ElseNode(Node):
    """{{else}}: ends a list while parsing, never in a finished tree."""

    line: int

    def __str__(self) -> str:
        return "{{else}}"
