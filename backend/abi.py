"""The kernel's parameter list, shared by the PTX emitter and the launcher.

Per tensor parameter: its base address (a pointer) and one stride per dim in elements (i32);
per scalar parameter: its value; then each shape symbol (i32), in ``Kernel.symbols`` order;
then what the data-movement families add (``tilec/families/movements.py``: a TMA tensor map,
later) and, for a split-K kernel, its workspace pointers (``backend/split.py``);
``backend/signature.py`` (:func:`kernel_abi`) assembles the whole list.

Each parameter has a type that knows both of its ends: the PTX declaration the kernel is
written with, and the bytes the host hands the driver for it (``encode``;
``tilec/runtime/driver.py`` lays them out for ``cuLaunchKernel``). An opaque blob, such as
the 128-byte ``CUtensorMap``, is passed by value with its own size and alignment.
"""
from __future__ import annotations

import ctypes
import re
import struct
from dataclasses import dataclass, replace
from typing import AbstractSet, Any, ClassVar, Iterable, Union

from tilec.ir.core import Kernel, Op
from tilec.ir.types import TensorType

# The split-K workspace's hidden parameters (``backend/split.py`` adds them, typed).
WORKSPACE_PARAMS = ("split_partials", "split_counters")
# The keys launches pass the workspace under, beside the program's tensors: "$" is in no Python
# name, so a tensor parameter called split_partials cannot stand in for the workspace.
WORKSPACE_SOURCES = tuple("$" + name for name in WORKSPACE_PARAMS)


@dataclass(frozen=True)
class _ScalarForm:
    ptx: str  # the .param and ld.param type
    struct_code: str  # little-endian, standard size
    ctype: type
    register: str  # the PtxWriter register class it loads into


# The ABI declares i32 parameters .u32 (every value it passes, sizes and strides, is
# non-negative, and the loads do not care); i64 is for hand-written kernels.
_SCALAR_FORMS = {
    "i32": _ScalarForm(".u32", "i", ctypes.c_int32, "b32"),
    "i64": _ScalarForm(".s64", "q", ctypes.c_int64, "b64"),
    "f32": _ScalarForm(".f32", "f", ctypes.c_float, "f32"),
}


@dataclass(frozen=True)
class ScalarParam:
    """A number passed by value: ``.param .u32 x`` (i32), ``.param .s64 x``, ``.param .f32 x``."""

    dtype: str  # a key of _SCALAR_FORMS

    def __post_init__(self) -> None:
        if self.dtype not in _SCALAR_FORMS:
            raise ValueError(f"no kernel parameter type for scalar dtype {self.dtype!r} "
                             f"(known: {', '.join(_SCALAR_FORMS)})")

    @property
    def _form(self) -> _ScalarForm:
        return _SCALAR_FORMS[self.dtype]

    @property
    def ptx_type(self) -> str:
        return self._form.ptx

    @property
    def register_class(self) -> str:
        return self._form.register

    @property
    def struct_format(self) -> str:
        return self._form.struct_code

    @property
    def ctype(self) -> type:
        return self._form.ctype

    @property
    def size(self) -> int:
        return struct.calcsize("<" + self.struct_format)

    @property
    def align(self) -> int:
        return self.size

    @property
    def spelling(self) -> str:
        return self.dtype

    def declaration(self, name: str) -> str:
        return f".param {self.ptx_type} {name}"

    def encode(self, value: Any) -> bytes:
        return struct.pack("<" + self.struct_format, value)


@dataclass(frozen=True)
class PointerParam:
    """A global-memory address: ``.param .u64 x``, loaded and converted with cvta."""

    ptx_type: ClassVar[str] = ".u64"
    register_class: ClassVar[str] = "b64"
    struct_format: ClassVar[str] = "Q"
    ctype: ClassVar[type] = ctypes.c_uint64
    size: ClassVar[int] = 8
    align: ClassVar[int] = 8
    spelling: ClassVar[str] = "ptr"

    def declaration(self, name: str) -> str:
        return f".param {self.ptx_type} {name}"

    def encode(self, value: Any) -> bytes:
        return struct.pack("<Q", value)


@dataclass(frozen=True)
class BlobParam:
    """Opaque bytes passed by value, e.g. a TMA tensor map:
    ``.param .align 64 .b8 x[128]``. The kernel takes its address (``cvta.param``) rather
    than loading it, so it has no register class."""

    size: int
    align: int

    def __post_init__(self) -> None:
        if self.size <= 0 or self.align <= 0 or self.align & (self.align - 1):
            raise ValueError(f"a blob parameter needs a positive size and a power-of-two "
                             f"alignment, got size {self.size}, align {self.align}")

    @property
    def struct_format(self) -> str:
        return f"{self.size}s"

    @property
    def ctype(self) -> type:
        return ctypes.c_uint8 * self.size

    @property
    def spelling(self) -> str:
        return f"b8[{self.size}] align {self.align}"

    def declaration(self, name: str) -> str:
        return f".param .align {self.align} .b8 {name}[{self.size}]"

    def encode(self, value: Any) -> bytes:
        data = bytes(value)
        if len(data) != self.size:
            raise ValueError(f"a {self.size}-byte blob parameter was given {len(data)} bytes")
        return data


ParamType = Union[ScalarParam, PointerParam, BlobParam]

POINTER = PointerParam()
I32_PARAM = ScalarParam("i32")
I64_PARAM = ScalarParam("i64")
F32_PARAM = ScalarParam("f32")
# cuTensorMapEncodeTiled's CUtensorMap, as CUDA 12 headers (alignas(64)) and LLVM declare it.
TENSOR_MAP = BlobParam(128, 64)

_BLOB_SPELLING = re.compile(r"b8\[(\d+)\] align (\d+)")


def param_type(spelling: str) -> ParamType:
    """The type a :attr:`spelling` names ("ptr", "i32", "f32", "b8[128] align 64")."""
    if spelling == POINTER.spelling:
        return POINTER
    if spelling in _SCALAR_FORMS:
        return ScalarParam(spelling)
    blob = _BLOB_SPELLING.fullmatch(spelling)
    if blob:
        return BlobParam(int(blob.group(1)), int(blob.group(2)))
    raise ValueError(f"unknown kernel parameter type {spelling!r}")


@dataclass(frozen=True)
class AbiParam:
    name: str  # the PTX parameter name
    type: ParamType
    source: str  # the kernel parameter, symbol or hidden argument it comes from
    role: str  # "ptr", "stride", "scalar", "symbol", "workspace", or a family's own
    dim: int = -1

    # The cache stores parameters as these fields; "kind" is the type's spelling.
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("name", "kind", "source", "role", "dim")

    def declaration(self) -> str:
        return self.type.declaration(self.name)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.type.spelling, "source": self.source,
                "role": self.role, "dim": self.dim}

    @classmethod
    def from_json(cls, item: Any) -> "AbiParam":
        """The parameter :meth:`to_json` wrote; ValueError for anything else."""
        if not isinstance(item, dict) or set(item) != set(cls.JSON_FIELDS):
            raise ValueError(f"ABI parameter {item!r} does not have the fields "
                             f"{sorted(cls.JSON_FIELDS)}")
        if not all(isinstance(item[k], str) for k in ("name", "kind", "source", "role")) \
                or not isinstance(item["dim"], int) or isinstance(item["dim"], bool):
            raise ValueError(f"ABI parameter {item!r} has a field of the wrong type")
        return cls(item["name"], param_type(item["kind"]), item["source"], item["role"],
                   item["dim"])


# -- names: PTX ISA 4.4 (identifiers) -----------------------------------------------------
_PTX_IDENTIFIER = re.compile(r"[a-zA-Z][a-zA-Z0-9_$]*|[_$%][a-zA-Z0-9_$]+")
# Predefined identifiers a Python name can spell (the others start with %): ptxas refuses them
# as names.
PTX_PREDEFINED = frozenset({"WARP_SZ"})


def ptx_identifier(name: str, taken: AbstractSet[str] = frozenset()) -> str:
    """``name`` itself where PTX accepts it and it is not in ``taken``; otherwise a mangled
    spelling. A mangled name always holds a ``$``, which no Python identifier (so no user
    name, and no name the ABI makes from one) can: non-ASCII characters become ``$u<hex>``
    and ``$<n>`` (the first n free) ends it. Names PTX accepts and nothing else holds, every
    name of a working program, stay as they are, so their PTX does not change."""
    if _PTX_IDENTIFIER.fullmatch(name) and name not in PTX_PREDEFINED and name not in taken:
        return name
    base = "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"$u{ord(c):x}"
                   for c in name)
    n = 0
    while f"{base}${n}" in taken:
        n += 1
    return f"{base}${n}"


def with_ptx_names(params: Iterable["AbiParam"]) -> list["AbiParam"]:
    """The parameters with names PTX accepts and no two alike, in order: where a user's
    scalar is called like a generated name (``A_ptr``, ``dim_M``, ``split_partials``), the
    later of the two is renamed. The launcher passes arguments by position, never by name."""
    taken: set[str] = set()
    named = []
    for param in params:
        name = ptx_identifier(param.name, taken)
        taken.add(name)
        named.append(param if name == param.name else replace(param, name=name))
    return named


def printable(text: str, *, comment: bool = False) -> str:
    """``text`` for a PTX string (``.file``) or, with ``comment``, a ``//`` comment: ptxas
    reads printable ASCII only and knows no escapes, so other characters, and ``"`` in a
    string, are spelled as Python escapes (``\\xe9``, ``\\x22``); a comment keeps
    tabs."""
    def keep(c: str) -> bool:
        return " " <= c <= "~" and not (c == '"' and not comment) or comment and c == "\t"
    return "".join(c if keep(c) else f"\\x{ord(c):02x}" if ord(c) < 256 else ascii(c)[1:-1]
                   for c in text)


# The roles of the DSL function's own parameters; any other role is a hidden parameter
# (the split-K workspace, what a family adds), which the backend keeps by source name.
PROGRAM_ROLES = ("ptr", "stride", "scalar", "symbol")


def program_params(kernel: Kernel) -> list[AbiParam]:
    """The DSL function's own parameters, then its shape symbols."""
    params: list[AbiParam] = []
    for param in kernel.params:
        if isinstance(param.type, TensorType):
            params.append(AbiParam(f"{param.name}_ptr", POINTER, param.name, "ptr"))
            for dim in range(param.type.rank):
                params.append(AbiParam(f"{param.name}_stride{dim}", I32_PARAM, param.name,
                                       "stride", dim))
        else:
            params.append(AbiParam(param.name, ScalarParam(param.type.dtype.short), param.name,
                                   "scalar"))
    for symbol in kernel.symbols:
        params.append(AbiParam(f"dim_{symbol}", I32_PARAM, symbol, "symbol"))
    return params


def bind_program_params(ctx, by_source: dict[str, dict], tensor) -> None:
    """Bind the kernel's arguments and shape symbols to what a backend loaded per
    parameter: ``by_source`` maps a source name to {(role, dim): value}, ``tensor`` builds
    a tensor's value (pointer, strides, dims, element bytes). Both backends read the same
    ABI this way; only how a parameter's value is loaded differs."""
    kernel = ctx.kernel
    symbols = {s: by_source[s][("symbol", -1)] for s in kernel.symbols}
    for param, value in zip(kernel.params, kernel.body.args):
        values = by_source[param.name]
        if isinstance(param.type, TensorType):
            dims = [symbols[d] if isinstance(d, str) else d for d in param.type.shape]
            strides = [values[("stride", d)] for d in range(param.type.rank)]
            ctx.bind(value, tensor(values[("ptr", -1)], strides, dims, param.type.dtype.bytes))
        else:
            ctx.bind(value, values[("scalar", -1)])
    for symbol in kernel.symbols:
        ctx.bind(kernel.symbol_value(symbol), symbols[symbol])


# -- the grid: which CUDA axes number what ---------------------------------------------
def tile_axes(grid_op: Op) -> int:
    """The grid's output-tile axes: all but a split-K slice axis (always the last)."""
    return len(grid_op.operands) - (1 if grid_op.attrs.get("split_k") else 0)


def folds_tile_axes(grid_op: Op) -> bool:
    """Grouped rasterization: two tile axes launched as one CUDA x axis, which the kernel
    unfolds; a slice axis then takes CUDA's y. A batched program's grid (``batch_axis``: the
    axis of its batch index, which the tiling pass marks) folds its other two axes, and the
    batch takes CUDA's y: consecutive blocks then share one batch's matrices in L2."""
    axes = tile_axes(grid_op)
    return bool(grid_op.attrs.get("raster_group")) and (
        axes == 2 or axes == 3 and grid_op.attrs.get("batch_axis") is not None)


def folded_axes(grid_op: Op) -> tuple[int, int]:
    """The two grid axes grouped rasterization folds into CUDA's x (the block's row of
    tiles, then its column): the first two, or a batched grid's two besides the batch."""
    batch = grid_op.attrs.get("batch_axis")
    first, second = (axis for axis in range(3) if axis != batch) if batch is not None else (0, 1)
    return first, second


def cuda_tile_axes(grid_op: Op) -> int:
    """How many CUDA grid axes (x, then y) number the output tiles."""
    if folds_tile_axes(grid_op):
        return tile_axes(grid_op) - 1
    return tile_axes(grid_op)
