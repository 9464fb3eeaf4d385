"""How lowering errors read: located :class:`TileError` builders and the wording helpers
("an f16 tile [64,32]", "2 axes", "did you mean 'BM'?") shared by the frontend's messages."""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from tilec.errors import TileError, located
from tilec.frontend import ast
from tilec.ir.core import Loc
from tilec.ir.types import DType


class LocatedErrors:
    """Builds errors that quote the user's source line under their location."""

    def __init__(self, source_lines: Sequence[str]):
        self.source_lines = tuple(source_lines)

    def at(self, cls: type[TileError], message: str, loc: Optional[Loc],
           hint: str = "") -> TileError:
        if loc is not None:
            loc = clamp_loc(loc, self.source_lines)
        return located(cls, message, loc, self.source_lines, hint)


def split_lines(text: str) -> list[str]:
    """The lines of a file as the parser numbers them: split at "\n" only (``splitlines``
    also splits at form feeds and other separators Python's tokenizer reads as spaces, which
    would shift every later line of a message)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # as splitlines: a final newline ends the last line, starts none
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def clamp_loc(loc: Loc, source_lines: Sequence[str], last_line: Optional[int] = None) -> Loc:
    """``loc`` moved onto a real place of the file, so every message can quote a line and
    put a caret under it: a place on a blank line or past the end (an error at the end of
    the input, on the blank lines that end it, or on the blank line a backslash continues a
    line onto) becomes the end of the last non-blank line before it, at or before
    ``last_line`` (default: the file's last), and a column past its line's end becomes the
    end of that line."""
    last = len(source_lines) if last_line is None else min(last_line, len(source_lines))
    if last < 1:
        return loc
    while last > 1 and not source_lines[last - 1].strip():
        last -= 1  # trailing blank lines hold nothing a caret could point at
    line, col = max(loc.line, 1), loc.col
    if line > last or not source_lines[line - 1].strip():
        line = min(line, last)
        while line > 1 and not source_lines[line - 1].strip():
            line -= 1
        col = len(source_lines[line - 1]) + 1
    col = min(max(col, 1), len(source_lines[line - 1]) + 1)
    if (line, col) == (loc.line, loc.col):
        return loc
    return Loc(loc.file, line, col)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    import difflib  # for error messages only: a compile that succeeds never loads it
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f"did you mean '{close[0]}'?" if close else ""


def a_or_an(dtype: DType) -> str:
    """"an f16", "a bf16": the article follows how the dtype is read out."""
    return "an" if str(dtype)[0] in "fi" else "a"


def counted(count: int, noun: str, plural: str = "") -> str:
    """"1 axis", "2 axes": the count with its noun, plural when it is not one."""
    return f"{count} {noun}" if count == 1 else f"{count} {plural or noun + 's'}"


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def spelled(op: str, left: str, right: str) -> str:
    """How the operation reads in a message: ``f16 + bf16`` or ``max(f16, bf16)``."""
    return f"{op}({left}, {right})" if op.isidentifier() else f"{left} {op} {right}"


def start_loc(node: ast.Node) -> Loc:
    """Where an expression starts (a BinOp's own loc is its operator's, an Attribute's its
    name's): the caret for "this expression must be ..." errors."""
    while isinstance(node, (ast.BinOp, ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.BinOp):
            node = node.left
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            node = node.value
    return node.loc
