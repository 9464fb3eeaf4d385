"""The tile DSL's syntax tree: one frozen dataclass per construct, each carrying its ``loc``.

Class names are the grammar's rule names in CamelCase (``bin_op`` builds :class:`BinOp`), so
``grammar/tile.lark`` and this module read side by side. Locations point into the original
file (1-based line and column), even for a function cut out of a larger Python file.

``loc`` is left out of equality and ``repr``: two trees compare equal when they mean the same
program, and ``repr(node)`` is a canonical text of an expression (the lowering uses it to
recognise repeated sub-expressions in ``start : stop`` slices).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import Iterator, Optional, Union

from tilec.ir.core import Loc

# Every node class is a frozen dataclass whose equality, hash and repr are Node's, the ones
# dataclass would write (the fields' tuple where compare is set; ``Name(id='x')`` of those
# where repr is): generating them for each of the classes below took 4 ms of a cold
# `tilec compile`.
frozen_node = dataclass(frozen=True, eq=False, repr=False)


@frozen_node
class Node:
    loc: Loc = field(kw_only=True, compare=False, repr=False)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _compared(self) == _compared(other)

    def __hash__(self) -> int:
        return hash(_compared(self))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}"
                          for name in _field_names(type(self), "repr"))
        return f"{type(self).__qualname__}({shown})"


@functools.lru_cache(maxsize=None)
def _field_names(cls: type, flag: str) -> tuple[str, ...]:
    """The names of ``cls``'s fields whose ``flag`` (compare, repr) is set, in order."""
    return tuple(f.name for f in fields(cls) if getattr(f, flag))


def _compared(node: Node) -> tuple:
    return tuple(getattr(node, name) for name in _field_names(type(node), "compare"))


# ---------------------------------------------------------------------------- expressions

@frozen_node
class Name(Node):
    id: str


@frozen_node
class Constant(Node):
    """A number literal, or ``None`` (only meaningful in ``t[:, None]``)."""

    value: Union[int, float, None]


@frozen_node
class BinOp(Node):
    """``left op right``; ``loc`` is the operator's, where carets for type errors belong."""

    left: "Expr"
    op: str
    right: "Expr"


@frozen_node
class UnaryOp(Node):
    op: str
    operand: "Expr"


@frozen_node
class Compare(Node):
    """``left op right`` for ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``: decided at compile
    time (constants only); ``loc`` is the operator's."""

    left: "Expr"
    op: str
    right: "Expr"


@frozen_node
class BoolOp(Node):
    """``left and right`` / ``left or right``, on constants (Python's semantics)."""

    left: "Expr"
    op: str
    right: "Expr"


@frozen_node
class Keyword(Node):
    name: str
    value: "Expr"


@frozen_node
class Call(Node):
    func: "Expr"
    args: tuple["Expr", ...] = ()
    keywords: tuple[Keyword, ...] = ()


@frozen_node
class Attribute(Node):
    """``value.attr``; ``loc`` is the attribute name's."""

    value: "Expr"
    attr: str


@frozen_node
class Slice(Node):
    """``start : stop`` or ``start : +size`` (then ``stop`` is None), with an optional step.

    The ``+`` that marks a size is a unary plus in Python's grammar; the parser takes it off
    the stop expression (``k : +BK*2`` has size ``BK*2``).
    """

    start: Optional["Expr"] = None
    stop: Optional["Expr"] = None
    size: Optional["Expr"] = None
    step: Optional["Expr"] = None


@frozen_node
class Subscript(Node):
    value: "Expr"
    indices: tuple[Union["Expr", Slice], ...]


@frozen_node
class ListExpr(Node):
    elts: tuple["Expr", ...] = ()


@frozen_node
class TupleExpr(Node):
    elts: tuple["Expr", ...] = ()


@frozen_node
class Unsupported(Node):
    """Python the parser understood but tile programs refuse; the parser reports the first
    one in the source with ``message`` before anything else looks at the tree."""

    message: str
    hint: str = ""


Expr = Union[Name, Constant, BinOp, UnaryOp, Compare, BoolOp, Call, Attribute, Subscript,
             ListExpr, TupleExpr, Unsupported]


# ----------------------------------------------------------------------------- statements

@frozen_node
class Assign(Node):
    target: Expr
    value: Expr


@frozen_node
class AugAssign(Node):
    """``target op= value``; ``op`` is the binary operator (``"+"`` for ``+=``) and
    ``op_loc`` its place, used for the ``BinOp`` the statement stands for."""

    target: Expr
    op: str
    value: Expr
    op_loc: Loc = field(compare=False, repr=False)


@frozen_node
class ExprStmt(Node):
    value: Expr


@frozen_node
class PassStmt(Node):
    pass


@frozen_node
class ForStmt(Node):
    """``for targets in iter: body``: the grid loop (``grid(...)``) or a ``range`` loop."""

    targets: tuple[Name, ...]
    iter: Expr
    body: tuple["Stmt", ...]


@frozen_node
class IfStmt(Node):
    """``if test: body else: orelse`` (``elif`` nests another IfStmt in ``orelse``): a
    compile-time branch; only the taken side is lowered."""

    test: "Expr"
    body: tuple["Stmt", ...]
    orelse: tuple["Stmt", ...] = ()


Stmt = Union[Assign, AugAssign, ExprStmt, PassStmt, ForStmt, IfStmt, Unsupported]


# ------------------------------------------------------------------------------ functions

@frozen_node
class TensorParam(Node):
    """``A: f16[M, K]``: dims are shape symbols (Name) or fixed sizes (Constant)."""

    name: str
    dtype: Name
    dims: tuple[Union[Name, Constant], ...]


@frozen_node
class ScalarParam(Node):
    """``alpha: f32``: a run-time scalar."""

    name: str
    dtype: Name


@frozen_node
class ConstParam(Node):
    """``BM=128``: a compile-time constant with its default."""

    name: str
    default: Expr


Param = Union[TensorParam, ScalarParam, ConstParam, Unsupported]


@frozen_node
class Decorator(Node):
    name: str  # dotted: "tile" or "tilec.tile"
    called: bool = False  # written with arguments: @tile(...)


@frozen_node
class FunctionDef(Node):
    """One ``@tile`` function; ``loc`` is its name's.

    ``source_lines`` are the lines of the file it came from (so ``loc.line`` indexes them),
    kept for error messages and ``Kernel.source_lines``.
    """

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    decorators: tuple[Decorator, ...] = ()
    returns: Optional[Unsupported] = None
    source_lines: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def file(self) -> str:
        return self.loc.file


@frozen_node
class Module(Node):
    """A parsed file: its functions (imports are dropped) and, as Unsupported, anything else
    found at the top level."""

    body: tuple[Union[FunctionDef, Unsupported], ...] = ()

    @property
    def functions(self) -> tuple[FunctionDef, ...]:
        return tuple(node for node in self.body if isinstance(node, FunctionDef))


def iter_nodes(node: Node) -> Iterator[Node]:
    """``node`` and every node below it, parents first, children in field order."""
    yield node
    for f in fields(node):
        value = getattr(node, f.name)
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, Node):
                yield from iter_nodes(item)
