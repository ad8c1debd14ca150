"""The scanner of Go's text/template (text/template/parse/lex.go): template text in, tokens out.

Positions are offsets into the Python string; the parser turns them into Go's byte columns only
when it reports an error. Trim markers (``{{- `` / `` -}}``) are applied here, as Go does.
"""

from __future__ import annotations

import enum
import unicodedata
from dataclasses import dataclass

from app.gotemplate.quoting import go_quote, is_print


class Tok(enum.Enum):
    ERROR = "error"
    BOOL = "bool"
    CHAR = "char"  # a printable ASCII character: ',' and the like
    CHAR_CONSTANT = "char constant"
    COMMENT = "comment"
    COMPLEX = "complex"
    ASSIGN = "="
    DECLARE = ":="
    EOF = "EOF"
    FIELD = "field"
    IDENTIFIER = "identifier"
    LEFT_DELIM = "{{"
    LEFT_PAREN = "("
    NUMBER = "number"
    PIPE = "|"
    RAW_STRING = "raw string"
    RIGHT_DELIM = "}}"
    RIGHT_PAREN = ")"
    SPACE = "space"
    STRING = "string"
    TEXT = "text"
    VARIABLE = "variable"
    # keywords
    BLOCK = "block"
    BREAK = "break"
    CONTINUE = "continue"
    DOT = "."
    DEFINE = "define"
    ELSE = "else"
    END = "end"
    IF = "if"
    NIL = "nil"
    RANGE = "range"
    TEMPLATE = "template"
    WITH = "with"


KEYWORDS = {
    Tok.BLOCK, Tok.BREAK, Tok.CONTINUE, Tok.DOT, Tok.DEFINE, Tok.ELSE, Tok.END, Tok.IF, Tok.NIL,
    Tok.RANGE, Tok.TEMPLATE, Tok.WITH,
}  # fmt: skip
_KEYWORD_OF = {t.value: t for t in KEYWORDS}

LEFT_DELIM = "{{"
RIGHT_DELIM = "}}"
LEFT_COMMENT = "/*"
RIGHT_COMMENT = "*/"
SPACE_CHARS = " \t\r\n"


@dataclass(frozen=True, slots=True)
class Token:
    typ: Tok
    pos: int
    val: str
    line: int

    def __str__(self) -> str:  # Go's item.String(), as parse errors quote tokens
        if self.typ is Tok.EOF:
            return "EOF"
        if self.typ is Tok.ERROR:
            return self.val
        if self.typ in KEYWORDS:
            return f"<{self.val}>"
        if len(self.val) > 10:
            return go_quote(self.val[:10]) + "..."
        return go_quote(self.val)


def is_space(ch: str) -> bool:
    return ch in SPACE_CHARS and ch != ""


def is_alnum(ch: str) -> bool:
    return ch == "_" or (ch != "" and (ch.isalpha() or unicodedata.category(ch) == "Nd"))


def _has_left_trim(s: str, at: int) -> bool:
    return len(s) >= at + 2 and s[at] == "-" and s[at + 1] in SPACE_CHARS


def _has_right_trim(s: str, at: int) -> bool:
    return len(s) >= at + 2 and s[at] in SPACE_CHARS and s[at + 1] == "-"


class Lexer:
    """Go's lexer, driven by the parser one token at a time (``next_item``)."""

    def __init__(self, name: str, text: str, *, break_ok: bool = True, continue_ok: bool = True) -> None:
        self.name = name
        self.input = text
        self.pos = 0
        self.start = 0
        self.line = 1
        self.start_line = 1
        self.paren_depth = 0
        self.inside_action = False
        self.break_ok = break_ok
        self.continue_ok = continue_ok
        self._item: Token | None = None

    # -- rune access -------------------------------------------------------------------------
    def _next(self) -> str:
        if self.pos >= len(self.input):
            self.pos = len(self.input) + 1  # past the end: backup() returns to len(input)
            return ""
        ch = self.input[self.pos]
        self.pos += 1
        if ch == "\n":
            self.line += 1
        return ch

    def _backup(self) -> None:
        if self.pos > len(self.input):
            self.pos = len(self.input)
            return
        if self.pos > 0:
            self.pos -= 1
            if self.input[self.pos] == "\n":
                self.line -= 1

    def _peek(self) -> str:
        return self.input[self.pos] if self.pos < len(self.input) else ""

    def _emit(self, typ: Tok) -> None:
        self._item = Token(typ, self.start, self.input[self.start : self.pos], self.start_line)
        self.start = self.pos
        self.start_line = self.line

    def _ignore(self) -> None:
        self.line += self.input.count("\n", self.start, self.pos)
        self.start = self.pos
        self.start_line = self.line

    def _accept(self, valid: str) -> bool:
        ch = self._next()
        if ch != "" and ch in valid:
            return True
        self._backup()
        return False

    def _accept_run(self, valid: str) -> None:
        while True:
            ch = self._next()
            if ch == "" or ch not in valid:
                break
        self._backup()

    def _error(self, msg: str) -> None:
        self._item = Token(Tok.ERROR, self.start, msg, self.start_line)
        self.input = ""
        self.pos = self.start = 0

    def next_item(self) -> Token:
        self._item = None
        self.pos = min(self.pos, len(self.input))
        while self._item is None:
            if self.inside_action:
                self._lex_inside_action()
            else:
                self._lex_text()
        return self._item

    # -- states ------------------------------------------------------------------------------
    def _at_right_delim(self) -> tuple[bool, bool]:
        if _has_right_trim(self.input, self.pos) and self.input.startswith(RIGHT_DELIM, self.pos + 2):
            return True, True
        if self.input.startswith(RIGHT_DELIM, self.pos):
            return True, False
        return False, False

    def _lex_text(self) -> None:
        x = self.input.find(LEFT_DELIM, self.pos)
        if x >= 0:
            if x > self.pos:
                self.pos = x
                trim = 0
                if _has_left_trim(self.input, x + len(LEFT_DELIM)):
                    text = self.input[self.start : self.pos]
                    trim = len(text) - len(text.rstrip(SPACE_CHARS))
                self.pos -= trim
                self.line += self.input.count("\n", self.start, self.pos)
                item = Token(Tok.TEXT, self.start, self.input[self.start : self.pos], self.start_line)
                self.start = self.pos
                self.start_line = self.line
                self.pos += trim
                self._ignore()
                if item.val:
                    self._item = item
                    return
            self._lex_left_delim()
            return
        self.pos = len(self.input)
        if self.pos > self.start:
            self.line += self.input.count("\n", self.start, self.pos)
            self._emit(Tok.TEXT)
            return
        self._emit(Tok.EOF)

    def _lex_left_delim(self) -> None:
        self.pos += len(LEFT_DELIM)
        trim = _has_left_trim(self.input, self.pos)
        after = 2 if trim else 0
        if self.input.startswith(LEFT_COMMENT, self.pos + after):
            self.pos += after
            self._ignore()
            self._lex_comment()
            return
        item = Token(Tok.LEFT_DELIM, self.start, self.input[self.start : self.pos], self.start_line)
        self.start = self.pos
        self.start_line = self.line
        self.inside_action = True
        self.pos += after
        self._ignore()
        self.paren_depth = 0
        self._item = item

    def _lex_comment(self) -> None:
        self.pos += len(LEFT_COMMENT)
        x = self.input.find(RIGHT_COMMENT, self.pos)
        if x < 0:
            self._error("unclosed comment")
            return
        self.pos = x + len(RIGHT_COMMENT)
        delim, trim = self._at_right_delim()
        if not delim:
            self._error("comment ends before closing delimiter")
            return
        self.line += self.input.count("\n", self.start, self.pos)
        self.start = self.pos
        self.start_line = self.line
        if trim:
            self.pos += 2
        self.pos += len(RIGHT_DELIM)
        if trim:
            rest = self.input[self.pos :]
            self.pos += len(rest) - len(rest.lstrip(SPACE_CHARS))
        self._ignore()  # comments are not kept (Go's default mode)

    def _lex_right_delim(self) -> None:
        _, trim = self._at_right_delim()
        if trim:
            self.pos += 2
            self._ignore()
        self.pos += len(RIGHT_DELIM)
        item = Token(Tok.RIGHT_DELIM, self.start, self.input[self.start : self.pos], self.start_line)
        self.start = self.pos
        self.start_line = self.line
        if trim:
            rest = self.input[self.pos :]
            self.pos += len(rest) - len(rest.lstrip(SPACE_CHARS))
            self._ignore()
        self.inside_action = False
        self._item = item

    def _lex_inside_action(self) -> None:
        delim, _ = self._at_right_delim()
        if delim:
            if self.paren_depth == 0:
                self._lex_right_delim()
            else:
                self._error("unclosed left paren")
            return
        ch = self._next()
        if ch == "":
            self._error("unclosed action")
        elif is_space(ch):
            self._backup()
            self._lex_space()
        elif ch == "=":
            self._emit(Tok.ASSIGN)
        elif ch == ":":
            if self._next() != "=":
                self._error("expected :=")
                return
            self._emit(Tok.DECLARE)
        elif ch == "|":
            self._emit(Tok.PIPE)
        elif ch == '"':
            self._lex_quote()
        elif ch == "`":
            self._lex_raw_quote()
        elif ch == "$":
            self._lex_variable()
        elif ch == "'":
            self._lex_char()
        elif ch == "." and self.pos < len(self.input) and not ("0" <= self.input[self.pos] <= "9"):
            self._lex_field_or_variable(Tok.FIELD)
        elif ch == "." or ch in "+-" or "0" <= ch <= "9":
            self._backup()
            self._lex_number()
        elif is_alnum(ch):
            self._backup()
            self._lex_identifier()
        elif ch == "(":
            self.paren_depth += 1
            self._emit(Tok.LEFT_PAREN)
        elif ch == ")":
            self.paren_depth -= 1
            if self.paren_depth < 0:
                self._error("unexpected right paren")
                return
            self._emit(Tok.RIGHT_PAREN)
        elif ord(ch) < 0x80 and ch.isprintable():
            self._emit(Tok.CHAR)
        else:
            self._error(f"unrecognized character in action: {_rune_desc(ch)}")

    def _lex_space(self) -> None:
        spaces = 0
        while is_space(self._peek()):
            self._next()
            spaces += 1
        if _has_right_trim(self.input, self.pos - 1) and self.input.startswith(RIGHT_DELIM, self.pos + 1):
            self._backup()
            if spaces == 1:
                self._lex_right_delim()
                return
        self._emit(Tok.SPACE)

    def _at_terminator(self) -> bool:
        ch = self._peek()
        if is_space(ch) or ch in ("", ".", ",", "|", ":", ")", "("):
            return True
        return self.input.startswith(RIGHT_DELIM, self.pos)

    def _lex_identifier(self) -> None:
        while is_alnum(self._next()):
            pass
        self._backup()
        word = self.input[self.start : self.pos]
        if not self._at_terminator():
            self._error(f"bad character {_rune_desc(self._peek())}")
            return
        kw = _KEYWORD_OF.get(word)
        if kw is not None and kw is not Tok.DOT:
            if (kw is Tok.BREAK and not self.break_ok) or (kw is Tok.CONTINUE and not self.continue_ok):
                self._emit(Tok.IDENTIFIER)
            else:
                self._emit(kw)
        elif word in ("true", "false"):
            self._emit(Tok.BOOL)
        else:
            self._emit(Tok.IDENTIFIER)

    def _lex_variable(self) -> None:
        if self._at_terminator():
            self._emit(Tok.VARIABLE)
            return
        self._lex_field_or_variable(Tok.VARIABLE)

    def _lex_field_or_variable(self, typ: Tok) -> None:
        if self._at_terminator():
            self._emit(Tok.VARIABLE if typ is Tok.VARIABLE else Tok.DOT)
            return
        while True:
            ch = self._next()
            if not is_alnum(ch):
                self._backup()
                break
        if not self._at_terminator():
            self._error(f"bad character {_rune_desc(self._peek())}")
            return
        self._emit(typ)

    def _lex_char(self) -> None:
        while True:
            ch = self._next()
            if ch == "\\":
                ch = self._next()
                if ch not in ("", "\n"):
                    continue
                self._error("unterminated character constant")
                return
            if ch in ("", "\n"):
                self._error("unterminated character constant")
                return
            if ch == "'":
                break
        self._emit(Tok.CHAR_CONSTANT)

    def _lex_number(self) -> None:
        if not self._scan_number():
            self._error(f"bad number syntax: {go_quote(self.input[self.start : self.pos])}")
            return
        if self._peek() in ("+", "-") and self._peek() != "":
            if not self._scan_number() or self.input[self.pos - 1] != "i":
                self._error(f"bad number syntax: {go_quote(self.input[self.start : self.pos])}")
                return
            self._emit(Tok.COMPLEX)
            return
        self._emit(Tok.NUMBER)

    def _scan_number(self) -> bool:
        self._accept("+-")
        digits = "0123456789_"
        if self._accept("0"):
            if self._accept("xX"):
                digits = "0123456789abcdefABCDEF_"
            elif self._accept("oO"):
                digits = "01234567_"
            elif self._accept("bB"):
                digits = "01_"
        self._accept_run(digits)
        if self._accept("."):
            self._accept_run(digits)
        if len(digits) == 11 and self._accept("eE"):
            self._accept("+-")
            self._accept_run("0123456789_")
        if len(digits) == 23 and self._accept("pP"):
            self._accept("+-")
            self._accept_run("0123456789_")
        self._accept("i")
        if is_alnum(self._peek()):
            self._next()
            return False
        return True

    def _lex_quote(self) -> None:
        while True:
            ch = self._next()
            if ch == "\\":
                ch = self._next()
                if ch not in ("", "\n"):
                    continue
                self._error("unterminated quoted string")
                return
            if ch in ("", "\n"):
                self._error("unterminated quoted string")
                return
            if ch == '"':
                break
        self._emit(Tok.STRING)

    def _lex_raw_quote(self) -> None:
        while True:
            ch = self._next()
            if ch == "":
                self._error("unterminated raw quoted string")
                return
            if ch == "`":
                break
        self._emit(Tok.RAW_STRING)


def _rune_desc(ch: str) -> str:
    """fmt's %#U: U+0041 'A'."""
    if ch == "":
        return "U+FFFFFFFFFFFFFFFF"
    o = ord(ch)
    code = f"U+{o:04X}"
    return f"{code} '{ch}'" if is_print(ch) else code
