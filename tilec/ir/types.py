"""IR types: scalars, global tensors, tiles (with memory space and layout).

Types are frozen dataclasses so they can be compared, hashed and used in cache keys.
Their ``str()`` is the text form used by the IR printer.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Union


class DType(Enum):
    """Element types. The value is (name, bits, is_float)."""

    F16 = ("f16", 16, True)
    BF16 = ("bf16", 16, True)
    F32 = ("f32", 32, True)
    I32 = ("i32", 32, False)
    I8 = ("i8", 8, False)
    # 8-bit floats (NVIDIA's e4m3, the OCP "fn" variant, and e5m2): tilec.target.fp8.
    F8E4M3 = ("f8e4m3", 8, True)
    F8E5M2 = ("f8e5m2", 8, True)
    I64 = ("i64", 64, False)
    PRED = ("pred", 1, False)

    @property
    def short(self) -> str:
        return self.value[0]

    @property
    def bits(self) -> int:
        return self.value[1]

    @property
    def bytes(self) -> int:
        return max(1, self.value[1] // 8)

    @property
    def is_float(self) -> bool:
        return self.value[2]

    def __str__(self) -> str:
        return self.short

    def __repr__(self) -> str:
        return self.short

    @staticmethod
    def parse(name: str) -> "DType":
        try:
            return _DTYPES_BY_NAME[name]
        except KeyError:
            known = ", ".join(_DTYPES_BY_NAME)
            raise ValueError(f"unknown dtype '{name}' (known: {known})") from None


_DTYPES_BY_NAME = {d.short: d for d in DType}

F16, BF16, F32, I32, I64, PRED = (DType.F16, DType.BF16, DType.F32, DType.I32, DType.I64,
                                  DType.PRED)
I8, F8E4M3, F8E5M2 = DType.I8, DType.F8E4M3, DType.F8E5M2

# Element types a user may give to tensor parameters.
TENSOR_DTYPES = (F16, BF16, F32, I8, I32, F8E4M3, F8E5M2)
# 8-bit floats: loaded to be multiplied or converted, and stored; never computed on.
FP8_DTYPES = (F8E4M3, F8E5M2)
# Element types of the tiles zeros() and full() make, and .to() beside the 8-bit floats.
TILE_DTYPES = (F16, BF16, F32, I8, I32)
# Element types tile arithmetic computes on (in f32, rounding to the tile's dtype).
ARITHMETIC_DTYPES = (F16, BF16, F32)
# Input element types the mma.sync / wgmma paths multiply.
MMA_INPUT_DTYPES = (F16, BF16)
# The dtype a product of operand tiles of each dtype accumulates in (``acc += a @ b``): the
# one table the frontend, the IR's type check and tiling read, so a new operand dtype is one
# entry here (and a product family taking it).
ACCUMULATOR_DTYPES = {F16: F32, BF16: F32, F32: F32, I8: I32, F8E4M3: F32, F8E5M2: F32}

# A dimension of a global tensor: a symbol bound at launch (``"M"``) or a fixed size.
Dim = Union[str, int]


@dataclass(frozen=True)
class ScalarType:
    dtype: DType

    def __str__(self) -> str:
        return str(self.dtype)


@dataclass(frozen=True)
class TensorType:
    """A global-memory tensor parameter; strides are run-time values."""

    dtype: DType
    shape: tuple[Dim, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def dims_of(self, symbol: str) -> list[int]:
        """The dims whose size is the shape symbol ``symbol``."""
        return [d for d, size in enumerate(self.shape) if size == symbol]

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        return f"tensor<{self.dtype},[{dims}]>"


@dataclass(frozen=True)
class TileType:
    """A tile value: a fixed-shape block of elements.

    ``space`` is where the tile lives: ``reg`` (distributed over the threads of a block),
    ``smem`` (a shared-memory buffer). ``layout`` is a layout object from
    :mod:`tilec.target.layout` (or None while the passes have not chosen one yet); it is printed
    with its own ``str()``.
    """

    dtype: DType
    shape: tuple[int, ...]
    space: str = "reg"
    layout: Any = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def with_(self, **changes: Any) -> "TileType":
        fields = {"dtype": self.dtype, "shape": self.shape, "space": self.space,
                  "layout": self.layout}
        fields.update(changes)
        return TileType(**fields)

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        text = f"tile<{self.dtype},[{dims}]"
        if self.space != "reg" or self.layout is not None:
            text += f",{self.space}"
        if self.layout is not None:
            text += f",{self.layout}"
        return text + ">"


Type = Union[ScalarType, TensorType, TileType]

i32 = ScalarType(I32)
f32 = ScalarType(F32)
