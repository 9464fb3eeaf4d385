"""Text to AST: the Lark parser for ``grammar/tile.lark`` and the Transformer that builds
:mod:`tilec.frontend.ast` nodes.

Every failure is a :class:`TileSyntaxError` naming ``file:line:col`` in the original file,
the line and a caret: syntax errors say what was expected in words (from examples of common
mistakes, else from the parser's expected tokens), and Python the parser understood but tile
programs refuse (``if``, ``while``, strings...) says so where it appears.
"""
from __future__ import annotations

import functools
import importlib.resources
import os
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from lark import Lark, Token, Transformer, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, VisitError
from lark.indenter import DedentError, PythonIndenter
from lark.visitors import Discard, v_args

from tilec.errors import TileError, TileSyntaxError
from tilec.frontend import ast
from tilec.frontend.diagnostics import clamp_loc, split_lines
from tilec.frontend.lexer import PLUGINS
from tilec.frontend.parse_tables import load_parser
from tilec.ir.core import Loc

GRAMMAR_FILE = "tile.lark"
# Decorators that mark a tile function; anything else on a tile function is refused.
TILE_DECORATORS = ("tile", "tilec.tile")
# Integer literals are i32; the one larger literal allowed is the magnitude of i32's minimum.
_LARGEST_LITERAL = 2**31


# ------------------------------------------------------------------------------- parsing

class _Place:
    """Where a piece of text sits in its file, so positions in the text map back to it."""

    def __init__(self, filename: str, first_line: int, col_offset: int,
                 source_lines: tuple[str, ...], line_count: int):
        self.filename = filename
        self.first_line = first_line
        self.col_offset = col_offset
        self.source_lines = source_lines
        # The text's last line in the file: an error at the end of the input is reported
        # there, not on whatever follows the function in a .py file.
        self.last_line = first_line + max(line_count, 1) - 1

    def loc(self, line: int, column: int) -> Loc:
        return Loc(self.filename, line + self.first_line - 1, column + self.col_offset)

    def error(self, message: str, loc: Loc, hint: str = "") -> TileSyntaxError:
        loc = clamp_loc(loc, self.source_lines, self.last_line)
        line = ""
        if 1 <= loc.line <= len(self.source_lines):
            line = self.source_lines[loc.line - 1]
        return TileSyntaxError(message, loc, line, hint)


class _IndentationError(Exception):
    def __init__(self, token: Token):
        super().__init__("inconsistent dedent")
        self.token = token


class _TileIndenter(PythonIndenter):
    """Python's indentation rules, made re-entrant (each parse gets fresh counters) and with
    the position of a bad dedent kept (lark's DedentError carries none)."""

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        return _TileIndenter()._process(stream)

    def handle_NL(self, token: Token) -> Iterator[Token]:
        try:
            yield from super().handle_NL(token)
        except DedentError:
            raise _IndentationError(token) from None


def _grammar_text() -> str:
    try:
        return importlib.resources.files("tilec.grammar").joinpath(GRAMMAR_FILE).read_text()
    except ModuleNotFoundError:
        # An uninstalled checkout: `tilec.grammar` is mapped from grammar/ only by setuptools'
        # package-dir, so read the file next to the package instead.
        return (Path(__file__).resolve().parents[2] / "grammar" / GRAMMAR_FILE).read_text()


# Lark's options for the grammar (the post-lexer apart: it is code, made fresh on each load).
_PARSER_OPTIONS = {"parser": "lalr", "start": "module", "propagate_positions": True,
                   "maybe_placeholders": True}


@functools.cache
def grammar_parser() -> Lark:
    """The one Lark parser, made on first use from tables cached on disk (see
    :mod:`tilec.frontend.parse_tables`), or built when there are none yet."""
    return load_parser(_grammar_text(), _PARSER_OPTIONS, _TileIndenter, plugins=PLUGINS)


def parse_module(text: str, filename: str = "<tile>", first_line: int = 1,
                 col_offset: int = 0,
                 source_lines: Optional[Sequence[str]] = None) -> ast.Module:
    """Parse a whole ``.tile`` file (or a piece of one: ``first_line`` and ``col_offset``
    say where ``text`` starts in the file, ``source_lines`` are the file's lines)."""
    lines = _source_lines(text, first_line, col_offset, source_lines)
    text, margin = dedent(text)
    place = _Place(filename, first_line, col_offset + margin, lines, _line_count(text))
    if not text.endswith("\n"):
        text += "\n"  # the Indenter closes blocks on a final newline
    try:
        tree = grammar_parser().parse(text)
    except UnexpectedInput as err:
        raise _syntax_error(err, text, place) from None
    except _IndentationError as err:
        line = err.token.end_line
        raise place.error("this line's indentation matches no enclosing block",
                          place.loc(line, err.token.end_column),
                          "indent it like the block it belongs to") from None
    except Exception as err:  # a parser bug still names the file rather than leaking
        raise place.error(f"internal parser error: {err!r}", place.loc(1, 1)) from err
    try:
        module = _ToAst(place).transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, TileError):
            raise err.orig_exc from None
        meta = getattr(err.obj, "meta", None)
        loc = place.loc(meta.line, meta.column) if meta and not meta.empty else None
        raise place.error(f"internal parser error in '{err.rule}': {err.orig_exc!r}",
                          loc or place.loc(1, 1)) from err
    _refuse_unsupported(module, place)
    return module


def parse_function(text: str, filename: str = "<tile>", first_line: int = 1,
                   col_offset: int = 0,
                   source_lines: Optional[Sequence[str]] = None) -> ast.FunctionDef:
    """Parse the text of one ``@tile`` function (decorators and import lines allowed).

    ``first_line`` is the line of the file where ``text`` starts and ``col_offset`` the
    indentation already removed from it, so locations are those of the original file
    (``parse_function(*function_source(fn))`` does the right thing). Text still indented, as
    a method's is, is dedented here and its columns kept.
    """
    module = parse_module(text, filename, first_line, col_offset, source_lines=source_lines)
    functions = module.functions
    if len(functions) != 1:
        where = functions[1].loc if len(functions) > 1 else Loc(filename, first_line, 1)
        place = _Place(filename, first_line, col_offset,
                       _source_lines(text, first_line, col_offset, source_lines),
                       _line_count(text))
        found = "no function" if not functions else f"{len(functions)} functions"
        raise place.error(f"expected one tile function, found {found}", where,
                          "parse a file with several functions with parse_file")
    return functions[0]


def dedent(text: str) -> tuple[str, int]:
    """Remove the indentation common to the code lines of ``text`` (blank and comment lines
    do not count, as in Python); returns the text and the width removed."""
    lines = text.split("\n")
    code = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    margin = os.path.commonprefix([line[:len(line) - len(line.lstrip())] for line in code])
    if not margin:
        return text, 0
    kept = [line[len(margin):] if line.startswith(margin) else line.lstrip(" \t")
            for line in lines]
    return "\n".join(kept), len(margin)


def _line_count(text: str) -> int:
    return len(text.rstrip("\n").split("\n"))


def _source_lines(text: str, first_line: int, col_offset: int,
                  source_lines: Optional[Sequence[str]]) -> tuple[str, ...]:
    """The file's lines when given, else lines rebuilt from ``text`` at the places it came
    from (indentation put back) so that ``loc.line`` indexes them either way."""
    if source_lines is not None:
        return tuple(line.rstrip("\r\n") for line in source_lines)
    pad = " " * col_offset
    rebuilt = [pad + line if line.strip() else line for line in split_lines(text)]
    return ("",) * (first_line - 1) + tuple(rebuilt)


# --------------------------------------------------------------------------- syntax errors

# Common mistakes, each with programs that fail the same way; the parser state at the error
# finds the closest one (lark's `match_examples`).
_EXAMPLES: dict[str, list[str]] = {
    "missing ':' at the end of the `for` line": [
        "def f():\n    for m in grid(1)\n        pass\n",
        "def f():\n    for m, n in grid(1, 2)\n        pass\n",
        "def f():\n    for k in range(0, 8, 4)\n        pass\n",
    ],
    "missing ':' at the end of the `def` line": [
        "def f()\n    pass\n",
        "def f(A: f16[M, K])\n    pass\n",
    ],
    "tensor dimensions are shape symbols (M) or integers (128), separated by ','": [
        "def f(A: f16[M * 2, K]):\n    pass\n",
        "def f(A: f16[M + 1]):\n    pass\n",
        "def f(A: f16[M K]):\n    pass\n",
    ],
    "expected an indented block": [
        "def f():\npass\n",
        "def f():\n    for m in grid(1):\n    pass\n",
    ],
    "unexpected indentation": [
        "def f():\n    pass\n        pass\n",
        "    def f():\n        pass\n",
    ],
    "an operator needs an expression on its right": [
        "def f():\n    x = 1 +\n",
        "def f():\n    x = 1 *\n",
        "def f():\n    x = 1 @\n",
    ],
    "expected an expression after '='": [
        "def f():\n    x =\n",
    ],
    "expected loop variable names after `for`": [
        "def f():\n    for in grid(1):\n        pass\n",
        "def f():\n    for m.x in grid(1):\n        pass\n",
    ],
    "parameters are separated by ','": [
        "def f(A: f16[M, K] B: f16[K, N]):\n    pass\n",
        "def f(BM=128 BN=128):\n    pass\n",
    ],
}

# How terminals read in messages; keywords and punctuation read as themselves.
_TERMINAL_WORDS = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string",
    "LONG_STRING": "a string", "_NEWLINE": "a new line", "_INDENT": "an indented block",
    "_DEDENT": "the end of the block", "$END": "the end of the input",
}
# Terminals (by their text) that can start an expression or a statement, or continue an
# expression: when many of them are expected at once they read as one word.
_EXPRESSION_STARTS = {"NAME", "INT", "FLOAT", "STRING", "LONG_STRING", "(", "[", "{", "+", "-",
                      "~", "None", "True", "False", "lambda", "not", "..."}
_STATEMENT_STARTS = {"for", "pass", "if", "while", "with", "try", "def", "class", "return",
                     "break", "continue", "del", "global", "nonlocal", "assert", "raise",
                     "import", "from", "@"}
_OPERATORS = {"+", "-", "*", "/", "//", "%", "@", "**", "<", ">", "==", ">=", "<=", "!=", "|",
              "^", "&", "<<", ">>", "if", "or", "and", "is", "in", "not", "(", "[", ".",
              "+=", "-=", "*=", "/=", "//=", "%=", "@=", "**=", "&=", "|=", "^=", "<<=", ">>="}


def _syntax_error(err: UnexpectedInput, text: str, place: _Place) -> TileSyntaxError:
    line, column = _error_position(err, text)
    token = getattr(err, "token", None)
    if isinstance(err, UnexpectedCharacters):
        found = f"character {err.char!r}"
        expected = set(err.allowed or ())
    else:
        found = _describe_token(token)
        # `accepts` asks the parser which tokens would really go on; `expected` comes from
        # merged LALR lookaheads and names tokens that could not.
        expected = set(getattr(err, "accepts", None) or err.expected or ())
    unclosed = _unclosed_bracket(text, line)
    if unclosed is not None and (isinstance(err, UnexpectedEOF)
                                 or getattr(token, "type", None) in ("$END", "_DEDENT")):
        return place.error(f"'{unclosed.value}' is never closed",
                           place.loc(unclosed.line, unclosed.column))
    # Inside brackets newlines do not end a statement, so a forgotten ')' shows up as an
    # error on a later line; say where the bracket was opened.
    hint = ""
    if unclosed is not None:
        hint = f"the '{unclosed.value}' on line {place.loc(unclosed.line, 1).line} is still open"
    label = None
    if err.state is not None:
        try:
            label = err.match_examples(grammar_parser().parse, _EXAMPLES, use_accepts=True)
        except Exception:  # the examples only improve the wording; never hide the error
            label = None
    loc = place.loc(line, column)
    if label is not None:
        message = label if label.startswith("unexpected") else f"unexpected {found}: {label}"
        return place.error(message, loc, hint)
    words = _describe_expected(expected)
    return place.error(f"unexpected {found}" + (f"; expected {words}" if words else ""), loc,
                       hint)


def _unclosed_bracket(text: str, before_line: int) -> Optional[Token]:
    """The innermost bracket still open where line ``before_line`` starts, if it was opened
    on an earlier line."""
    closing = {"RPAR": "LPAR", "RSQB": "LSQB", "RBRACE": "LBRACE"}
    stack: list[Token] = []
    try:
        for token in grammar_parser().lex(text):
            if token.line >= before_line:
                break
            if token.type in closing.values():
                stack.append(token)
            elif token.type in closing and stack and stack[-1].type == closing[token.type]:
                stack.pop()
    except Exception:  # a text that does not even lex has no bracket to blame
        return None
    return stack[-1] if stack else None


def _error_position(err: UnexpectedInput, text: str) -> tuple[int, int]:
    token = getattr(err, "token", None)
    if isinstance(token, Token) and token.type in ("_INDENT", "_DEDENT"):
        # Indentation tokens borrow the position of the newline before them; the caret
        # belongs on the line whose indentation is wrong.
        return token.end_line or 1, token.end_column or 1
    line, column = getattr(err, "line", -1), getattr(err, "column", -1)
    if isinstance(line, int) and line >= 1:
        return line, max(1, column)
    lines = text.rstrip("\n").split("\n")
    return len(lines), len(lines[-1]) + 1


def _describe_token(token: Optional[Token]) -> str:
    if token is None or token.type == "$END":
        return "end of input"
    if token.type == "_NEWLINE":
        return "end of line"
    if token.type == "_INDENT":
        return "indentation"
    if token.type == "_DEDENT":
        return "end of the indented block"
    if token.type == "NAME":
        return f"name '{token.value}'"
    if token.type in ("INT", "FLOAT"):
        return f"number {token.value}"
    if token.type in ("STRING", "LONG_STRING"):
        return "string"
    if token.value.isidentifier():
        return f"keyword '{token.value}'"
    return f"'{token.value}'"


def _describe_expected(expected: set[str]) -> str:
    """The expected terminals in words, folding the usual crowds into one word each."""
    texts = {_terminal_text(name) for name in expected}
    words: list[str] = []
    if {"for", "pass", "NAME"} <= texts:
        words.append("a statement")
        texts -= _STATEMENT_STARTS | _EXPRESSION_STARTS
    elif {"NAME", "INT", "("} <= texts:
        words.append("an expression")
        texts -= _EXPRESSION_STARTS
    if {"+", "*", "@"} <= texts:
        words.append("an operator")
        texts -= _OPERATORS
    for text in sorted(texts):
        words.append(_TERMINAL_WORDS.get(text, f"'{text}'"))
    if len(words) > 10:
        words = words[:10] + ["..."]
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]


def _terminal_text(name: str) -> str:
    """A literal terminal's text ("for", ":"), or the name of a pattern terminal."""
    try:
        pattern = grammar_parser().get_terminal(name).pattern
    except KeyError:  # $END and the indentation tokens have no pattern
        return name
    return pattern.value if pattern.type == "str" else name


# ---------------------------------------------------------------------------- parse tree to AST

def _unsupported(message: str, hint: str = "") -> tuple[str, str]:
    return message, hint


# Rule name -> (message, hint) for the Python that tile programs refuse.
_UNSUPPORTED: dict[str, tuple[str, str]] = {
    "unsupported_while": _unsupported(
        "`while` loops are not supported in tile programs", "use `for k in range(...)`"),
    "unsupported_for_else": _unsupported("`for ... else` is not supported in tile programs"),
    "unsupported_with": _unsupported("`with` statements are not supported in tile programs"),
    "unsupported_try": _unsupported("`try` statements are not supported in tile programs"),
    "unsupported_class": _unsupported("classes are not supported in tile programs"),
    "unsupported_return": _unsupported(
        "`return` is not supported in tile programs",
        "a tile function writes its results with stores: C[...] = tile"),
    "unsupported_break": _unsupported("`break` is not supported in tile programs"),
    "unsupported_continue": _unsupported("`continue` is not supported in tile programs"),
    "unsupported_del": _unsupported("`del` is not supported in tile programs"),
    "unsupported_global": _unsupported(
        "`global` and `nonlocal` are not supported in tile programs"),
    "unsupported_assert": _unsupported("`assert` is not supported in tile programs"),
    "unsupported_raise": _unsupported("`raise` is not supported in tile programs"),
    "unsupported_ann_assign": _unsupported(
        "annotated assignments are not supported in tile programs", "write `x = value`"),
    "unsupported_if_expr": _unsupported(
        "conditional expressions (`a if c else b`) are not supported in tile programs",
        "select elementwise with where(c, a, b)"),
    "unsupported_lambda": _unsupported("lambdas are not supported in tile programs"),
    "unsupported_bitwise": _unsupported(
        "bitwise operators are not supported in tile programs",
        "combine the comparisons of where(...) with and / or / not"),
    "unsupported_string": _unsupported("strings are not supported in tile programs"),
    "unsupported_bool": _unsupported("`True` / `False` are not supported in tile programs"),
    "unsupported_ellipsis": _unsupported("`...` is not supported in tile programs"),
    "unsupported_set": _unsupported("dicts and sets are not supported in tile programs"),
    "unsupported_star_arg": _unsupported(
        "`*args` / `**kwargs` are not supported in tile programs"),
    "unsupported_star_param": _unsupported(
        "`*args` / `**kwargs` parameters are not supported in tile functions"),
}
# Refused operators put the caret on the operator (their first kept token), the rest at the
# construct's first keyword.
_AT_OPERATOR = {"unsupported_if_expr", "unsupported_bitwise"}
_STRING_MESSAGE = _UNSUPPORTED["unsupported_string"][0]
_AUGMENTED_OPS = ("+", "-", "*", "/", "//", "%", "@")
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


@v_args(meta=True)
class _ToAst(Transformer):
    """Builds AST nodes bottom-up; method names are the grammar's rule names."""

    def __init__(self, place: _Place):
        super().__init__()
        self.place = place

    # ---- locations
    def _loc(self, meta: Any) -> Loc:
        if getattr(meta, "empty", True):
            return self.place.loc(1, 1)
        return self.place.loc(meta.line, meta.column)

    def _token_loc(self, token: Token) -> Loc:
        return self.place.loc(token.line, token.column)

    def _first_loc(self, meta: Any, children: list[Any]) -> Loc:
        """The first token's place (an operator or keyword), else the rule's start."""
        for child in children:
            if isinstance(child, Token):
                return self._token_loc(child)
        return self._loc(meta)

    def __default__(self, data: str, children: list[Any], meta: Any) -> Any:
        if data in _UNSUPPORTED:
            message, hint = _UNSUPPORTED[data]
            loc = self._first_loc(meta, children) if data in _AT_OPERATOR else self._loc(meta)
            return ast.Unsupported(message, hint, loc=loc)
        return Tree(data, children, meta)  # import details: dropped with their statement

    # ---- module and functions
    def module(self, meta: Any, children: list[Any]) -> ast.Module:
        body = []
        for child in children:
            if isinstance(child, (ast.FunctionDef, ast.Unsupported)):
                body.append(child)
            else:
                body.append(ast.Unsupported(
                    "only imports and @tile functions may appear outside a tile function",
                    "put the statement inside the function's grid loop", loc=child.loc))
        return ast.Module(tuple(body), loc=self._loc(meta))

    def function_def(self, meta: Any, children: list[Any]) -> ast.FunctionDef:
        decorators, name, params, returns, body = children
        if body and isinstance(body[0], ast.ExprStmt) and _is_string(body[0].value):
            body = body[1:]  # a docstring documents; it is no statement
        if returns is not None:
            returns = ast.Unsupported("tile functions return nothing; drop the `->` annotation",
                                      loc=returns)
        return ast.FunctionDef(str(name), tuple(params or ()), tuple(body), tuple(decorators),
                               returns, self.place.source_lines, loc=self._token_loc(name))

    def return_annotation(self, meta: Any, children: list[Any]) -> Loc:
        return self._loc(meta)

    def decorators(self, meta: Any, children: list[Any]) -> tuple[ast.Decorator, ...]:
        return tuple(children)

    def decorator(self, meta: Any, children: list[Any]) -> ast.Decorator:
        return ast.Decorator(children[0], False, loc=self._loc(meta))

    def decorator_call(self, meta: Any, children: list[Any]) -> ast.Decorator:
        return ast.Decorator(children[0], True, loc=self._loc(meta))

    def dotted_name(self, meta: Any, children: list[Token]) -> str:
        return ".".join(str(token) for token in children)

    def params(self, meta: Any, children: list[Any]) -> tuple[ast.Param, ...]:
        return tuple(children)

    def tensor_param(self, meta: Any, children: list[Any]) -> ast.TensorParam:
        name, dtype, dims = children
        return ast.TensorParam(str(name), dtype, dims, loc=self._token_loc(name))

    def scalar_param(self, meta: Any, children: list[Any]) -> ast.ScalarParam:
        name, dtype = children
        return ast.ScalarParam(str(name), dtype, loc=self._token_loc(name))

    def const_param(self, meta: Any, children: list[Any]) -> ast.ConstParam:
        name, default = children
        return ast.ConstParam(str(name), default, loc=self._token_loc(name))

    def untyped_param(self, meta: Any, children: list[Any]) -> ast.Unsupported:
        name = children[0]
        return ast.Unsupported(
            f"parameter '{name}' needs a type or a default",
            f"a tensor: `{name}: f16[M, K]`; a scalar: `{name}: f32`; "
            f"a constant: `{name}=128`", loc=self._token_loc(name))

    def dims(self, meta: Any, children: list[Any]) -> tuple[ast.Expr, ...]:
        return tuple(children)

    # ---- statements
    def suite(self, meta: Any, children: list[Any]) -> tuple[ast.Stmt, ...]:
        return tuple(children)

    def import_stmt(self, meta: Any, children: list[Any]) -> Any:
        return Discard

    def pass_stmt(self, meta: Any, children: list[Any]) -> ast.PassStmt:
        return ast.PassStmt(loc=self._loc(meta))

    def expr_stmt(self, meta: Any, children: list[Any]) -> ast.ExprStmt:
        return ast.ExprStmt(children[0], loc=self._loc(meta))

    def assign(self, meta: Any, children: list[Any]) -> ast.Node:
        loc = self._loc(meta)
        if len(children) > 2:
            return ast.Unsupported("chained assignment (a = b = ...) is not supported in tile "
                                   "programs", "assign one name at a time", loc=loc)
        target, value = children
        if isinstance(target, ast.TupleExpr):
            return ast.Unsupported("tuple assignment is not supported in tile programs",
                                   "assign one name at a time", loc=loc)
        return ast.Assign(target, value, loc=loc)

    def aug_assign(self, meta: Any, children: list[Any]) -> ast.Node:
        target, op_token, value = children
        op = str(op_token)[:-1]
        if op not in _AUGMENTED_OPS:
            return ast.Unsupported(f"`{op_token}` is not supported in tile programs",
                                   loc=self._token_loc(op_token))
        if isinstance(target, ast.TupleExpr):
            return ast.Unsupported("tuple assignment is not supported in tile programs",
                                   loc=self._loc(meta))
        return ast.AugAssign(target, op, value, self._token_loc(op_token), loc=self._loc(meta))

    def for_stmt(self, meta: Any, children: list[Any]) -> ast.ForStmt:
        targets, iterable, body = children
        return ast.ForStmt(targets, iterable, body, loc=self._loc(meta))

    def for_targets(self, meta: Any, children: list[Token]) -> tuple[ast.Name, ...]:
        return tuple(ast.Name(str(t), loc=self._token_loc(t)) for t in children)

    # ---- expressions
    def name(self, meta: Any, children: list[Token]) -> ast.Name:
        return ast.Name(str(children[0]), loc=self._token_loc(children[0]))

    def constant(self, meta: Any, children: list[Token]) -> ast.Node:
        loc = self._loc(meta)
        if not children:
            return ast.Constant(None, loc=loc)
        token = children[0]
        text = str(token).replace("_", "")
        try:
            value: int | float = int(text, 0) if token.type == "INT" else float(text)
        except ValueError:
            return ast.Unsupported(f"'{token}' is not a valid number", loc=loc)
        # 2**31 itself is allowed so that -2147483648 can be written; lowering refuses it
        # anywhere else, as it refuses folded constants outside i32.
        if isinstance(value, int) and value > _LARGEST_LITERAL:
            return ast.Unsupported(f"the integer {token} does not fit in i32 "
                                   f"(-2147483648..2147483647)", "integers in tile programs "
                                   "are i32", loc=loc)
        return ast.Constant(value, loc=loc)

    def tuple_expr(self, meta: Any, children: list[Any]) -> ast.TupleExpr:
        return ast.TupleExpr(tuple(children), loc=self._loc(meta))

    def list_expr(self, meta: Any, children: list[Any]) -> ast.ListExpr:
        return ast.ListExpr(tuple(children), loc=self._loc(meta))

    def bin_op(self, meta: Any, children: list[Any]) -> ast.BinOp:
        left, op, right = children
        return ast.BinOp(left, str(op), right, loc=self._token_loc(op))

    def compare(self, meta: Any, children: list[Any]) -> ast.Node:
        left, *tokens, right = children
        op = " ".join(str(t) for t in tokens)
        loc = self._token_loc(tokens[0])
        if op not in COMPARISONS:
            return ast.Unsupported(f"`{op}` is not supported in tile programs", loc=loc)
        if isinstance(left, ast.Compare):
            return ast.Unsupported("chained comparisons are not supported in tile programs",
                                   "write (a < b) and (b < c)", loc=loc)
        return ast.Compare(left, op, right, loc=loc)

    def bool_op(self, meta: Any, children: list[Any]) -> ast.BoolOp:
        left, op, right = children
        return ast.BoolOp(left, str(op), right, loc=self._token_loc(op))

    def if_stmt(self, meta: Any, children: list[Any]) -> ast.IfStmt:
        test, body, *clauses = children
        orelse: tuple = ()
        for clause in reversed(clauses):  # elif clauses nest from the last one
            if clause[0] == "else":
                orelse = clause[1]
            else:
                _, elif_test, elif_body, loc = clause
                orelse = (ast.IfStmt(elif_test, elif_body, orelse, loc=loc),)
        return ast.IfStmt(test, body, orelse, loc=self._loc(meta))

    def elif_clause(self, meta: Any, children: list[Any]) -> tuple:
        keyword, test, body = children
        return ("elif", test, body, self._token_loc(keyword))

    def else_clause(self, meta: Any, children: list[Any]) -> tuple:
        (body,) = children
        return ("else", body)

    def unary_op(self, meta: Any, children: list[Any]) -> ast.Node:
        op, operand = children
        if op == "~":
            message, hint = _UNSUPPORTED["unsupported_bitwise"]
            return ast.Unsupported(message, hint, loc=self._token_loc(op))
        return ast.UnaryOp(str(op), operand, loc=self._token_loc(op))

    def call(self, meta: Any, children: list[Any]) -> ast.Node:
        func, arguments = children
        args: list[ast.Expr] = []
        keywords: list[ast.Keyword] = []
        for argument in arguments or ():
            if isinstance(argument, ast.Keyword):
                keywords.append(argument)
            elif keywords:
                return ast.Unsupported("a positional argument follows a keyword argument",
                                       loc=argument.loc)
            else:
                args.append(argument)
        return ast.Call(func, tuple(args), tuple(keywords), loc=self._loc(meta))

    def arguments(self, meta: Any, children: list[Any]) -> tuple[ast.Node, ...]:
        return tuple(children)

    def keyword(self, meta: Any, children: list[Any]) -> ast.Node:
        name, value = children
        if not isinstance(name, ast.Name):
            return ast.Unsupported("a keyword argument needs a name before '='",
                                   loc=self._loc(meta))
        return ast.Keyword(name.id, value, loc=name.loc)

    def attribute(self, meta: Any, children: list[Any]) -> ast.Attribute:
        value, attr = children
        return ast.Attribute(value, str(attr), loc=self._token_loc(attr))

    def subscript(self, meta: Any, children: list[Any]) -> ast.Subscript:
        value, indices = children
        return ast.Subscript(value, indices, loc=self._loc(meta))

    def subscripts(self, meta: Any, children: list[Any]) -> tuple[ast.Node, ...]:
        return tuple(children)

    def slice(self, meta: Any, children: list[Any]) -> ast.Slice:
        start, stop = children
        return _make_slice(start, stop, None, self._loc(meta))

    def slice_with_step(self, meta: Any, children: list[Any]) -> ast.Slice:
        start, stop, step = children
        return _make_slice(start, stop, step, self._loc(meta))


def _make_slice(start: Optional[ast.Expr], stop: Optional[ast.Expr],
                step: Optional[ast.Expr], loc: Loc) -> ast.Slice:
    size = _size_of(stop) if stop is not None else None
    if size is not None:
        return ast.Slice(start, None, size, step, loc=loc)
    return ast.Slice(start, stop, None, step, loc=loc)


def _size_of(stop: ast.Expr) -> Optional[ast.Expr]:
    """The size in ``start : +size``: the stop expression with its leading unary ``+``
    removed, wherever precedence put it (``+BK*2`` parses as ``(+BK)*2``)."""
    if isinstance(stop, ast.UnaryOp) and stop.op == "+":
        return stop.operand
    if isinstance(stop, ast.BinOp):
        left = _size_of(stop.left)
        if left is not None:
            return ast.BinOp(left, stop.op, stop.right, loc=stop.loc)
    return None


def _is_string(node: ast.Node) -> bool:
    return isinstance(node, ast.Unsupported) and node.message == _STRING_MESSAGE


# --------------------------------------------------------------------------------- checks

def _refuse_unsupported(module: ast.Module, place: _Place) -> None:
    """Report the first refused construct in the source, and decorators that are not
    ``@tile``, before anything else looks at the tree."""
    found = [node for node in ast.iter_nodes(module) if isinstance(node, ast.Unsupported)]
    if found:
        first = min(found, key=lambda node: (node.loc.line, node.loc.col))
        raise place.error(first.message, first.loc, first.hint)
    for function in module.functions:
        for decorator in function.decorators:
            if decorator.name not in TILE_DECORATORS:
                raise place.error(f"unknown decorator '@{decorator.name}'", decorator.loc,
                                  "tile functions are decorated with @tile only")
            if decorator.called:
                raise place.error("@tile takes no arguments", decorator.loc,
                                  "give constants as parameter defaults (BM=128) or as "
                                  "overrides when compiling")
        for node in ast.iter_nodes(function):
            if isinstance(node, ast.FunctionDef) and node is not function:
                raise place.error("functions defined inside a tile function are not "
                                  "supported in tile programs", node.loc)
