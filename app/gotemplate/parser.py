"""The parser of Go's text/template (text/template/parse/parse.go): tokens in, one tree per
template name (the top-level text and each ``define`` / ``block``) out. Errors are worded as Go's
(``template: NAME:LINE: unexpected ...``)."""

from __future__ import annotations

from collections.abc import Container

from app.gotemplate.errors import TemplateError
from app.gotemplate.lexer import Lexer, Tok, Token
from app.gotemplate.nodes import (
    ActionNode,
    BoolNode,
    BreakNode,
    ChainNode,
    CommandNode,
    CommentNode,
    ContinueNode,
    DotNode,
    ElseNode,
    EndNode,
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
from app.gotemplate.numeric import parse_number
from app.gotemplate.quoting import go_quote, unquote

MAX_STACK_DEPTH = 10000

Trees = dict[str, ListNode]


def parse(name: str, text: str, funcs: Container[str]) -> Trees:
    """The trees of ``text``: ``name`` for the top level plus one per definition. ``funcs`` are
    the function names a template may call (Go refuses an unknown one at parse time)."""
    trees: Trees = {}
    lexer = Lexer(name, text, break_ok="break" not in funcs, continue_ok="continue" not in funcs)
    _Parser(name, funcs, lexer, trees).parse_top()
    return trees


def is_empty_tree(node: Node | None) -> bool:
    """parse.IsEmptyTree: nothing but space and comments."""
    if node is None or isinstance(node, CommentNode):
        return True
    if isinstance(node, ListNode):
        return all(is_empty_tree(n) for n in node.nodes)
    if isinstance(node, TextNode):
        return node.text.strip(" \t\r\n\v\f\x85\xa0") == ""
    return False


class _Parser:
    def __init__(self, parse_name: str, funcs: Container[str], lexer: Lexer, trees: Trees) -> None:
        self.name = parse_name  # this tree's name (a definition's once known)
        self.parse_name = parse_name  # the top-level name, for error messages
        self.funcs = funcs
        self.lex = lexer
        self.trees = trees
        self.token: list[Token] = [Token(Tok.EOF, 0, "", 1)] * 3
        self.peek_count = 0
        self.vars = ["$"]
        self.action_line = 0
        self.range_depth = 0
        self.stack_depth = 0
        self.root: ListNode | None = None

    def _sub(self) -> _Parser:
        """A parser for a nested definition sharing this lexer (Go's startParse on a new Tree)."""
        sub = _Parser(self.parse_name, self.funcs, self.lex, self.trees)
        sub.name = "definition"
        return sub

    # -- tokens ------------------------------------------------------------------------------
    def next(self) -> Token:
        if self.peek_count > 0:
            self.peek_count -= 1
        else:
            self.token[0] = self.lex.next_item()
        return self.token[self.peek_count]

    def backup(self) -> None:
        self.peek_count += 1

    def backup2(self, t1: Token) -> None:
        self.token[1] = t1
        self.peek_count = 2

    def backup3(self, t2: Token, t1: Token) -> None:
        self.token[1] = t1
        self.token[2] = t2
        self.peek_count = 3

    def peek(self) -> Token:
        if self.peek_count > 0:
            return self.token[self.peek_count - 1]
        self.peek_count = 1
        self.token[0] = self.lex.next_item()
        return self.token[0]

    def next_non_space(self) -> Token:
        while True:
            token = self.next()
            if token.typ is not Tok.SPACE:
                return token

    def peek_non_space(self) -> Token:
        token = self.next_non_space()
        self.backup()
        return token

    # -- errors ------------------------------------------------------------------------------
    def errorf(self, msg: str) -> TemplateError:
        return TemplateError(f"template: {self.parse_name}:{self.token[0].line}: {msg}")

    def expect(self, expected: Tok, context: str) -> Token:
        token = self.next_non_space()
        if token.typ is not expected:
            raise self.unexpected(token, context)
        return token

    def unexpected(self, token: Token, context: str) -> TemplateError:
        if token.typ is Tok.ERROR:
            extra = ""
            if self.action_line != 0 and self.action_line != token.line:
                extra = f" in action started at {self.parse_name}:{self.action_line}"
                if token.val.endswith(" action"):
                    extra = extra[len(" in action") :]
            return self.errorf(f"{token}{extra}")
        return self.errorf(f"unexpected {token} in {context}")

    # -- structure ---------------------------------------------------------------------------
    def add(self) -> None:
        tree = self.trees.get(self.name)
        if tree is None or is_empty_tree(tree):
            assert self.root is not None
            self.trees[self.name] = self.root
            return
        if not is_empty_tree(self.root):
            raise self.errorf(f"template: multiple definition of template {go_quote(self.name)}")

    def parse_top(self) -> None:
        self.root = ListNode(self.peek().pos)
        while self.peek().typ is not Tok.EOF:
            if self.peek().typ is Tok.LEFT_DELIM:
                delim = self.next()
                if self.next_non_space().typ is Tok.DEFINE:
                    self._sub().parse_definition()
                    continue
                self.backup2(delim)
            node = self.text_or_action()
            if isinstance(node, (EndNode, ElseNode)):
                raise self.errorf(f"unexpected {node}")
            self.root.nodes.append(node)
        self.add()

    def parse_definition(self) -> None:
        context = "define clause"
        token = self.next_non_space()
        if token.typ not in (Tok.STRING, Tok.RAW_STRING):
            raise self.unexpected(token, context)
        try:
            self.name = unquote(token.val)
        except ValueError as e:
            raise self.errorf(str(e)) from None
        self.expect(Tok.RIGHT_DELIM, context)
        self.root, end = self.item_list()
        if not isinstance(end, EndNode):
            raise self.errorf(f"unexpected {end} in {context}")
        self.add()

    def item_list(self) -> tuple[ListNode, Node]:
        lst = ListNode(self.peek_non_space().pos)
        while self.peek_non_space().typ is not Tok.EOF:
            node = self.text_or_action()
            if isinstance(node, (EndNode, ElseNode)):
                return lst, node
            lst.nodes.append(node)
        raise self.errorf("unexpected EOF")

    def text_or_action(self) -> Node:
        token = self.next_non_space()
        if token.typ is Tok.TEXT:
            return TextNode(token.pos, token.val)
        if token.typ is Tok.LEFT_DELIM:
            self.action_line = token.line
            try:
                return self.action()
            finally:
                self.action_line = 0
        if token.typ is Tok.COMMENT:
            return CommentNode(token.pos, token.val)
        raise self.unexpected(token, "input")

    def action(self) -> Node:
        token = self.next_non_space()
        typ = token.typ
        if typ is Tok.BLOCK:
            return self.block_control()
        if typ is Tok.BREAK:
            return self.break_control(token, "break")
        if typ is Tok.CONTINUE:
            return self.break_control(token, "continue")
        if typ is Tok.ELSE:
            return self.else_control()
        if typ is Tok.END:
            return EndNode(self.expect(Tok.RIGHT_DELIM, "end").pos)
        if typ is Tok.IF:
            return IfNode(*self.parse_control("if"))
        if typ is Tok.RANGE:
            return RangeNode(*self.parse_control("range"))
        if typ is Tok.TEMPLATE:
            return self.template_control()
        if typ is Tok.WITH:
            return WithNode(*self.parse_control("with"))
        self.backup()
        token = self.peek()
        return ActionNode(token.pos, token.line, self.pipeline("command", Tok.RIGHT_DELIM))

    def break_control(self, token: Token, word: str) -> Node:
        after = self.next_non_space()
        if after.typ is not Tok.RIGHT_DELIM:
            raise self.unexpected(after, "{{" + word + "}}")
        if self.range_depth == 0:
            raise self.errorf("{{" + word + "}} outside {{range}}")
        return BreakNode(token.pos, token.line) if word == "break" else ContinueNode(token.pos, token.line)

    def pipeline(self, context: str, end: Tok) -> PipeNode:
        token = self.peek_non_space()
        pipe = PipeNode(token.pos, token.line)
        while True:  # declarations (Go's "goto decls")
            v = self.peek_non_space()
            if v.typ is not Tok.VARIABLE:
                break
            self.next()
            token_after = self.peek()
            nxt = self.peek_non_space()
            if nxt.typ in (Tok.ASSIGN, Tok.DECLARE):
                pipe.is_assign = nxt.typ is Tok.ASSIGN
                self.next_non_space()
                pipe.decl.append(VariableNode(v.pos, v.val.split(".")))
                self.vars.append(v.val)
            elif nxt.typ is Tok.CHAR and nxt.val == ",":
                self.next_non_space()
                pipe.decl.append(VariableNode(v.pos, v.val.split(".")))
                self.vars.append(v.val)
                if context == "range" and len(pipe.decl) < 2:
                    if self.peek_non_space().typ in (Tok.VARIABLE, Tok.RIGHT_DELIM, Tok.RIGHT_PAREN):
                        continue
                    raise self.errorf("range can only initialize variables")
                raise self.errorf(f"too many declarations in {context}")
            elif token_after.typ is Tok.SPACE:
                self.backup3(v, token_after)
            else:
                self.backup2(v)
            break
        while True:
            token = self.next_non_space()
            if token.typ is end:
                self.check_pipeline(pipe, context)
                return pipe
            if token.typ in _OPERAND_START:
                self.backup()
                pipe.cmds.append(self.command())
            else:
                raise self.unexpected(token, context)

    def check_pipeline(self, pipe: PipeNode, context: str) -> None:
        if not pipe.cmds:
            raise self.errorf(f"missing value for {context}")
        for i, c in enumerate(pipe.cmds[1:]):
            if isinstance(c.args[0], (BoolNode, DotNode, NilNode, NumberNode, StringNode)):
                raise self.errorf(f"non executable command in pipeline stage {i + 2}")

    def parse_control(self, context: str) -> tuple[int, int, PipeNode, ListNode, ListNode | None]:
        mark = len(self.vars)
        try:
            pipe = self.pipeline(context, Tok.RIGHT_DELIM)
            if context == "range":
                self.range_depth += 1
            lst, nxt = self.item_list()
            if context == "range":
                self.range_depth -= 1
            else_list: ListNode | None = None
            if isinstance(nxt, ElseNode):
                # "else if" / "else with" are {{else}}{{if ...}}...{{end}}{{end}} (Go's rewrite)
                if context == "if" and self.peek().typ is Tok.IF:
                    self.next()
                    else_list = ListNode(nxt.pos, [IfNode(*self.parse_control("if"))])
                elif context == "with" and self.peek().typ is Tok.WITH:
                    self.next()
                    else_list = ListNode(nxt.pos, [WithNode(*self.parse_control("with"))])
                else:
                    else_list, nxt = self.item_list()
                    if not isinstance(nxt, EndNode):
                        raise self.errorf(f"expected end; found {nxt}")
            return pipe.pos, pipe.line, pipe, lst, else_list
        finally:
            del self.vars[mark:]

    def else_control(self) -> Node:
        peek = self.peek_non_space()
        if peek.typ in (Tok.IF, Tok.WITH):
            return ElseNode(peek.pos, peek.line)
        token = self.expect(Tok.RIGHT_DELIM, "else")
        return ElseNode(token.pos, token.line)

    def block_control(self) -> Node:
        context = "block clause"
        token = self.next_non_space()
        name = self.template_name(token, context)
        pipe = self.pipeline(context, Tok.RIGHT_DELIM)
        block = self._sub()
        block.name = name
        block.root, end = block.item_list()
        if not isinstance(end, EndNode):
            raise self.errorf(f"unexpected {end} in {context}")
        block.add()
        return TemplateNode(token.pos, token.line, name, pipe)

    def template_control(self) -> Node:
        context = "template clause"
        token = self.next_non_space()
        name = self.template_name(token, context)
        pipe: PipeNode | None = None
        if self.next_non_space().typ is not Tok.RIGHT_DELIM:
            self.backup()
            pipe = self.pipeline(context, Tok.RIGHT_DELIM)
        return TemplateNode(token.pos, token.line, name, pipe)

    def template_name(self, token: Token, context: str) -> str:
        if token.typ not in (Tok.STRING, Tok.RAW_STRING):
            raise self.unexpected(token, context)
        try:
            return unquote(token.val)
        except ValueError as e:
            raise self.errorf(str(e)) from None

    def command(self) -> CommandNode:
        cmd = CommandNode(self.peek_non_space().pos)
        while True:
            self.peek_non_space()
            operand = self.operand()
            if operand is not None:
                cmd.args.append(operand)
            token = self.next()
            if token.typ is Tok.SPACE:
                continue
            if token.typ in (Tok.RIGHT_DELIM, Tok.RIGHT_PAREN):
                self.backup()
            elif token.typ is not Tok.PIPE:
                raise self.unexpected(token, "operand")
            break
        if not cmd.args:
            raise self.errorf("empty command")
        return cmd

    def operand(self) -> Node | None:
        node = self.term()
        if node is None:
            return None
        if self.peek().typ is Tok.FIELD:
            chain = ChainNode(self.peek().pos, node)
            while self.peek().typ is Tok.FIELD:
                chain.fields.append(self.next().val[1:])
            if isinstance(node, FieldNode):
                return FieldNode(chain.pos, [*node.ident, *chain.fields])
            if isinstance(node, VariableNode):
                return VariableNode(chain.pos, [*node.ident, *chain.fields])
            if isinstance(node, (BoolNode, StringNode, NumberNode, NilNode, DotNode)):
                raise self.errorf(f"unexpected . after term {go_quote(str(node))}")
            return chain
        return node

    def term(self) -> Node | None:
        token = self.next_non_space()
        typ = token.typ
        if typ is Tok.IDENTIFIER:
            if token.val not in self.funcs:
                raise self.errorf(f"function {go_quote(token.val)} not defined")
            return IdentifierNode(token.pos, token.val)
        if typ is Tok.DOT:
            return DotNode(token.pos)
        if typ is Tok.NIL:
            return NilNode(token.pos)
        if typ is Tok.VARIABLE:
            return self.use_var(token)
        if typ is Tok.FIELD:
            return FieldNode(token.pos, token.val[1:].split("."))
        if typ is Tok.BOOL:
            return BoolNode(token.pos, token.val == "true")
        if typ in (Tok.CHAR_CONSTANT, Tok.COMPLEX, Tok.NUMBER):
            try:
                return parse_number(token.pos, token.val, typ)
            except ValueError as e:
                raise self.errorf(str(e)) from None
        if typ is Tok.LEFT_PAREN:
            if self.stack_depth >= MAX_STACK_DEPTH:
                raise self.errorf("max expression depth exceeded")
            self.stack_depth += 1
            try:
                return self.pipeline("parenthesized pipeline", Tok.RIGHT_PAREN)
            finally:
                self.stack_depth -= 1
        if typ in (Tok.STRING, Tok.RAW_STRING):
            try:
                return StringNode(token.pos, token.val, unquote(token.val))
            except ValueError as e:
                raise self.errorf(str(e)) from None
        self.backup()
        return None

    def use_var(self, token: Token) -> VariableNode:
        v = VariableNode(token.pos, token.val.split("."))
        if v.ident[0] not in self.vars:
            raise self.errorf(f"undefined variable {go_quote(v.ident[0])}")
        return v


_OPERAND_START = frozenset(
    {
        Tok.BOOL,
        Tok.CHAR_CONSTANT,
        Tok.COMPLEX,
        Tok.DOT,
        Tok.FIELD,
        Tok.IDENTIFIER,
        Tok.NUMBER,
        Tok.NIL,
        Tok.RAW_STRING,
        Tok.STRING,
        Tok.VARIABLE,
        Tok.LEFT_PAREN,
    }
)
