"""The IR's structure: values, ops, blocks, kernels, and a builder with a cursor.

An op is one generic record (name, operands, results, attributes, regions, location);
what each op name means and how it is checked lives in :mod:`tilec.ir.ops`, so clone,
walk and print are written once here.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from tilec.ir.schedule import Schedule
from tilec.ir.types import Type


class IRError(Exception):
    """An IR invariant does not hold."""


@dataclass(frozen=True)
class Loc:
    """A place in the user's source (1-based line and column)."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Value:
    """An SSA value: the result of an op or the argument of a block."""

    __slots__ = ("type", "hint", "owner")

    def __init__(self, type: Type, hint: str = "", owner: Any = None):
        self.type = type
        self.hint = hint
        self.owner = owner  # the defining Op, or the Block for block arguments

    def __repr__(self) -> str:
        return f"Value({self.hint or '?'}: {self.type})"


@dataclass(eq=False)
class Block:
    args: list[Value] = field(default_factory=list)
    ops: list["Op"] = field(default_factory=list)

    def add_arg(self, type: Type, hint: str = "") -> Value:
        value = Value(type, hint, self)
        self.args.append(value)
        return value


@dataclass(eq=False)
class Op:
    name: str
    operands: list[Value]
    results: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    regions: list[Block] = field(default_factory=list)
    loc: Optional[Loc] = None
    # The stage that created the op ("frontend" or a pass name), kept through clones, so the
    # annotated PTX can say which pass an instruction comes from.
    origin: Optional[str] = None

    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]

    def walk(self) -> Iterator["Op"]:
        """This op, then every op nested in its regions, in program order."""
        yield self
        for region in self.regions:
            for op in region.ops:
                yield from op.walk()


@dataclass(frozen=True)
class Param:
    """A kernel parameter as the user declared it."""

    name: str
    type: Type  # TensorType for arrays, ScalarType for scalars
    loc: Optional[Loc] = None
    # Named only in a compile-time branch not taken (`if HAS_BIAS:` with HAS_BIAS = 0): the
    # kernel still takes it, and leaving it untouched is no mistake.
    branch_only: bool = False


@dataclass(eq=False)
class Kernel:
    """One ``@tile`` program.

    ``body.args`` are, in order, one value per entry of ``params`` and then one i32 value per
    shape symbol in ``symbols`` (bound from the arrays' shapes at launch). ``consts`` are the
    compile-time constants (tile sizes and so on) already folded into the body.
    """

    name: str
    params: list[Param]
    symbols: list[str]
    consts: dict[str, Any]
    body: Block
    source_file: str = "<tile>"
    source_lines: tuple[str, ...] = ()
    # The decisions passes made (tiles, warps, stages, swizzles, split): typed, printed and
    # verified with the ops (tilec.ir.schedule).
    schedule: Schedule = field(default_factory=Schedule)

    def walk(self) -> Iterator[Op]:
        for op in self.body.ops:
            yield from op.walk()

    def param_value(self, name: str) -> Value:
        for param, value in zip(self.params, self.body.args):
            if param.name == name:
                return value
        raise KeyError(name)

    def symbol_value(self, name: str) -> Value:
        index = len(self.params) + self.symbols.index(name)
        return self.body.args[index]


def clone_kernel(kernel: Kernel) -> Kernel:
    """A deep copy of the kernel's body (types and attributes are shared: they are
    immutable by convention)."""
    mapping: dict[Value, Value] = {}
    body = _clone_block(kernel.body, mapping)
    return Kernel(kernel.name, list(kernel.params), list(kernel.symbols), dict(kernel.consts),
                  body, kernel.source_file, kernel.source_lines, kernel.schedule)


def _clone_block(block: Block, mapping: dict[Value, Value]) -> Block:
    new = Block()
    for arg in block.args:
        mapping[arg] = new.add_arg(arg.type, arg.hint)
    for op in block.ops:
        new.ops.append(clone_op(op, mapping))
    return new


def clone_op(op: Op, mapping: dict[Value, Value]) -> Op:
    operands = [mapping.get(v, v) for v in op.operands]
    regions = [_clone_block(r, mapping) for r in op.regions]
    new = Op(op.name, operands, [], dict(op.attrs), regions, op.loc, op.origin)
    for result in op.results:
        value = Value(result.type, result.hint, new)
        mapping[result] = value
        new.results.append(value)
    return new


def replace_uses(block: Block, old: Value, new: Value) -> None:
    for op in block.ops:
        for inner in op.walk():
            inner.operands = [new if v is old else v for v in inner.operands]


class Builder:
    """Appends ops at a cursor; ``with b.at(block):`` moves the cursor into a block."""

    def __init__(self, block: Block, loc: Optional[Loc] = None):
        self.block = block
        self.loc = loc

    @contextlib.contextmanager
    def at(self, block: Block) -> Iterator["Builder"]:
        saved = self.block
        self.block = block
        try:
            yield self
        finally:
            self.block = saved

    @contextlib.contextmanager
    def located(self, loc: Optional[Loc]) -> Iterator["Builder"]:
        saved = self.loc
        self.loc = loc if loc is not None else saved
        try:
            yield self
        finally:
            self.loc = saved

    def op(self, name: str, operands: Sequence[Value] = (), result_types: Sequence[Type] = (),
           attrs: Optional[dict[str, Any]] = None, regions: Sequence[Block] = (),
           hints: Sequence[str] = ()) -> Op:
        op = Op(name, list(operands), [], dict(attrs or {}), list(regions), self.loc)
        for i, rtype in enumerate(result_types):
            hint = hints[i] if i < len(hints) else ""
            op.results.append(Value(rtype, hint, op))
        self.block.ops.append(op)
        return op

    def value(self, name: str, operands: Sequence[Value], result_type: Type,
              hint: str = "", **attrs: Any) -> Value:
        """Append a single-result op and return its result."""
        return self.op(name, operands, [result_type], attrs, hints=[hint]).result


def find_grid(kernel: Kernel) -> Optional[Op]:
    """The kernel's launch grid (its top-level ``tile.grid``), or None: a kernel without one
    runs as a single program."""
    return next((op for op in kernel.body.ops if op.name == "tile.grid"), None)


def require_grid(kernel: Kernel) -> Op:
    """The kernel's top-level ``tile.grid``, for code that only runs on gridded kernels
    (tiled, persistent, split-K or clustered ones): raises IRError where there is none."""
    grid = find_grid(kernel)
    if grid is None:
        raise IRError(f"kernel '{kernel.name}' has no top-level tile.grid")
    return grid


def defining_op(value: Value) -> Optional[Op]:
    return value.owner if isinstance(value.owner, Op) else None


def uses(kernel: Kernel, value: Value) -> list[tuple[Op, int]]:
    """Every (op, operand position) in ``kernel`` that reads ``value``, in program order."""
    return [(op, i) for op in kernel.walk() for i, v in enumerate(op.operands) if v is value]


def computed_from(value: Value, sources: Iterable[Value]) -> bool:
    """Whether ``value`` is one of ``sources`` or computed from one (through the ops that
    define it and their operands; block arguments end the walk)."""
    wanted = {id(source) for source in sources}
    seen: set[int] = set()
    pending = [value]
    while pending:
        current = pending.pop()
        if id(current) in wanted:
            return True
        op = defining_op(current)
        if op is not None and id(op) not in seen:
            seen.add(id(op))
            pending.extend(op.operands)
    return False


def constant_value(value: Value) -> Optional[Any]:
    """The value of an ``arith.constant`` result; None for anything else."""
    op = defining_op(value)
    return op.attrs["value"] if op is not None and op.name == "arith.constant" else None


def map_ops(block: Block, fn: Callable[[Op], Optional[list[Op]]]) -> None:
    """Rewrite a block in place: ``fn`` returns None to keep an op, or its replacement."""
    new_ops: list[Op] = []
    for op in block.ops:
        replacement = fn(op)
        new_ops.extend([op] if replacement is None else replacement)
    block.ops = new_ops
