"""User-facing compile errors: each names the place in the DSL source with a caret."""
from __future__ import annotations

from typing import Optional

from tilec.ir.core import Loc


class TileError(Exception):
    """An error in a tile program, reported as ``file:line:col: error: message`` followed by
    the source line and a caret under the column."""

    kind = "error"

    def __init__(self, message: str, loc: Optional[Loc] = None, source_line: str = "",
                 hint: str = ""):
        self.message = message
        self.loc = loc
        self.source_line = source_line
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        where = f"{self.loc}: " if self.loc else ""
        text = f"{where}{self.kind}: {self.message}"
        if self.loc and self.source_line:
            line = self.source_line.rstrip("\n").expandtabs(4)
            text += f"\n    {line}\n    {' ' * max(0, self.loc.col - 1)}^"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class TileSyntaxError(TileError):
    kind = "syntax error"


class TileNameError(TileError):
    kind = "name error"


class TileTypeError(TileError):
    kind = "type error"


class TileShapeError(TileError):
    kind = "shape error"


class TileConfigError(TileError):
    """Tile sizes or pass options that cannot work on the target (mma shape, shared memory,
    registers, warp division)."""

    kind = "config error"


def located(error_cls: type[TileError], message: str, loc: Optional[Loc],
            source_lines: tuple[str, ...] | list[str], hint: str = "") -> TileError:
    """Build an error whose source line is looked up from the kernel's source text."""
    line = ""
    if loc is not None and 1 <= loc.line <= len(source_lines):
        line = source_lines[loc.line - 1]
    return error_cls(message, loc, line, hint)
