"""What names and expressions stand for while lowering: the DSL's predefined names, the
compile-time operands (numbers, dtypes) beside IR values, and how each is described in
messages."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from tilec.frontend.diagnostics import a_or_an, shape_text
from tilec.ir.core import Loc, Value
from tilec.ir.ops import MATH_FUNCTIONS
from tilec.ir.types import TENSOR_DTYPES, DType, ScalarType, TensorType, TileType

# The predefined names: dtypes, built-in functions, and methods of tiles.
DTYPES = {dtype.short: dtype for dtype in TENSOR_DTYPES}
BUILTINS = ("grid", "range", "cdiv", "min", "max", "zeros", "full", "relu", "where",
            *MATH_FUNCTIONS)
TILE_METHODS = ("to",)


def dtype_list(dtypes: "tuple[DType, ...]", conjunction: str = "or") -> str:
    """``f16, bf16 or f32``: dtypes in a message, from the table that allows them."""
    names = [str(d) for d in dtypes]
    return ", ".join(names[:-1]) + f" {conjunction} {names[-1]}" if len(names) > 1 else names[0]


def is_predefined(name: str) -> bool:
    """A dtype or built-in function name: user names may not hide these."""
    return name in DTYPES or name in BUILTINS


@dataclass(frozen=True)
class ConstValue:
    """A compile-time number. ``name`` (the constant's, if it is one) becomes the hint of the
    ``arith.constant`` emitted where a run-time value is needed."""

    value: Union[int, float]
    name: str = field(default="", compare=False)


@dataclass(frozen=True)
class DTypeValue:
    dtype: DType


Operand = Union[Value, ConstValue, DTypeValue]


@dataclass
class Binding:
    """What a name stands for: ``kind`` is param, symbol, const, program_id, loop_var or var;
    ``loc`` is where it was last bound."""

    value: Operand
    kind: str
    loc: Loc


def is_tile(value: Operand) -> bool:
    return isinstance(value, Value) and isinstance(value.type, TileType)


def is_tensor(value: Operand) -> bool:
    return isinstance(value, Value) and isinstance(value.type, TensorType)


def is_scalar(value: Operand) -> bool:
    return isinstance(value, Value) and isinstance(value.type, ScalarType)


def describe(value: Operand) -> str:
    if isinstance(value, ConstValue):
        return f"the number {value.value}"
    if isinstance(value, DTypeValue):
        return f"the dtype {value.dtype}"
    vtype = value.type
    if isinstance(vtype, TensorType):
        return f"the tensor '{value.hint}'" if value.hint else "a tensor"
    article = a_or_an(vtype.dtype)
    if isinstance(vtype, TileType):
        return f"{article} {vtype.dtype} tile {shape_text(vtype.shape)}"
    return f"{article} {vtype.dtype} scalar"
