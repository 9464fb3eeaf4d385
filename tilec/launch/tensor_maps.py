"""The TMA tensor map of each tensor a kernel loads or stores with TMA
(``tilec/families/tma.py``, ``passes/tma_store.py``).

A kernel compiled with the TMA movement family takes, after its ordinary parameters, one
128-byte tensor map per TMA-loaded tensor, by value (``role = "tensor_map"``). The map
describes the argument as it is stored: the inner dim is its contiguous (unit-stride) one, the
box and swizzle are what the kernel's loads were compiled for (:func:`tensor_map_box`).

TMA has rules the driver enforces with a bare CUDA_ERROR_INVALID_VALUE; they are checked here
first (:func:`tensor_map_layout`), so a refusal names the operand, the rule, the value and what
to do. The compile step already avoids TMA for operands the launch spec says are misaligned
(the kernel then uses cp.async), so these checks catch the rest: prepared and explicit
launches, and arrays the spec could not describe.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional

from tilec.backend.abi import TENSOR_MAP
from tilec.families.tma_boxes import LOAD, is_tma_store, tensor_map_box
from tilec.ir.core import Kernel
from tilec.ir.types import DType
from tilec.ir.views import view_source

# cuTensorMapEncodeTiled's limits (cuda.bindings' docstring; research/hopper.md 1.5).
ADDRESS_ALIGN = 16  # bytes, without interleave
STRIDE_ALIGN = 16  # bytes, each stride after the innermost
MAX_STRIDE = 2**40  # bytes, exclusive
MAX_DIM = 2**32  # elements, exclusive
MAX_BOX = 256  # elements per box dim
BOX_INNER_ALIGN = 16  # bytes: the box's inner extent is a whole number of 16-byte units
TMA_DTYPES = ("f16", "bf16", "f32", "i8", "f8e4m3", "f8e5m2", "i32")  # the types the encoder maps

# What a user can do about an argument TMA refuses.
ARGUMENT_REMEDY = (
    "The kernel was compiled to load it with TMA (sm_90a): pass pack=\"always\" (tilec then "
    "copies it into aligned, contiguous scratch first), pass an aligned, contiguous array "
    "(e.g. numpy.ascontiguousarray, tensor.contiguous()), or compile with arch=\"sm_90\", "
    "which loads with cp.async and needs no tensor map.")
# A box or swizzle TMA refuses comes from the compiler, not the arguments.
COMPILER_REMEDY = (
    "The box comes from the kernel's compiled TMA loads, not from the arguments: please "
    "report it; compiling with arch=\"sm_90\" (cp.async loads) avoids TMA meanwhile.")


@dataclass(frozen=True)
class TensorMapLayout:
    """A tensor as cuTensorMapEncodeTiled takes it, in storage order (inner dim first):
    ``dims`` in elements, ``byte_stride`` of the outer dim, ``box`` in elements, the swizzle
    span in bytes."""

    name: str
    dtype: str
    address: int
    dims: tuple[int, int]
    byte_stride: int
    box: tuple[int, int]
    swizzle: int
    # A 3-D argument (a batch of matrices): its batch count and batch stride in bytes, the
    # map's third dim. A batch stride of 0 (one matrix every batch reads) is mapped as one
    # batch; the kernel then reads batch 0 whatever its program id (tilec/families/tma.py).
    batch: Optional[tuple[int, int]] = None

    def encoding(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """dims, byte strides and box in storage order, as cuTensorMapEncodeTiled takes
        them."""
        if self.batch is None:
            return self.dims, (self.byte_stride,), self.box
        return ((*self.dims, self.batch[0]), (self.byte_stride, self.batch[1]),
                (*self.box, 1))


def _refuse(name: str, rule: str, got: str, remedy: str = ARGUMENT_REMEDY) -> ValueError:
    return ValueError(f"TMA operand '{name}': {rule}, got {got}. {remedy}")


def inner_dim(name: str, shape: tuple[int, ...], strides: tuple[int, ...],
              compiled_inner: Optional[int] = None) -> int:
    """The dim of a 2-D argument that the map makes its inner one: the contiguous dim the
    kernel was compiled for (``compiled_inner``, when known), which must have unit stride; or
    else the argument's last unit-stride dim, the one :func:`~tilec.launch.binding.tensor_spec`
    reports, so the map agrees with the layout the kernel was specialised on."""
    unit = [dim for dim in range(len(shape)) if strides[dim] == 1]
    if compiled_inner is not None:
        # A dim of one element is contiguous whatever its stride says.
        if strides[compiled_inner] == 1 or shape[compiled_inner] == 1:
            return compiled_inner
        if unit:
            raise _refuse(name, f"the kernel was compiled for an array whose dim "
                          f"{compiled_inner} has unit stride", f"strides {strides} (elements)",
                          "Compile for this array's layout: call the kernel on it (plain calls "
                          "compile for their arguments' layout), or prepare() it again.")
    if not unit:
        raise _refuse(name, "one dim must have unit stride (its elements contiguous)",
                      f"strides {strides} (elements)")
    return unit[-1]


def tensor_map_layout(name: str, arg: Any, box: tuple[int, int], swizzle: int,
                      compiled_inner: Optional[int] = None) -> TensorMapLayout:
    """The map of ``arg`` (anything with ``ptr``, ``dtype``, ``shape`` and ``strides`` in
    elements, as :class:`~tilec.runtime.arrays.ArrayArg`) for loads of ``box`` (inner, outer
    elements) under a ``swizzle``-byte span, after checking every TMA rule; ValueError naming
    the operand, the rule and the value for the first one broken."""
    shape, strides = tuple(arg.shape), tuple(arg.strides)
    batch = None
    if len(shape) == 3:  # a batch of matrices: the matrix's map, and the batch dim after it
        batch = _batch_dim(name, arg)
        shape, strides = shape[1:], strides[1:]
    if len(shape) != 2:
        raise _refuse(name, "a tensor map here is 2-D (3-D for a batch of matrices)",
                      f"a {len(shape)}-D array of shape {shape}")
    if arg.dtype not in TMA_DTYPES:
        raise _refuse(name, f"the dtype must be one of {', '.join(TMA_DTYPES)}", arg.dtype)
    itemsize = DType.parse(arg.dtype).bytes
    inner = inner_dim(name, shape, strides, compiled_inner)
    outer = 1 - inner
    dims = (shape[inner], shape[outer])
    for dim, size in ((inner, dims[0]), (outer, dims[1])):
        if not 1 <= size < MAX_DIM:
            raise _refuse(name, "each dim must hold from 1 to 2**32 - 1 elements",
                          f"dim {dim} of {size}")
    if arg.ptr % ADDRESS_ALIGN:
        raise _refuse(name, f"the base address must be {ADDRESS_ALIGN}-byte aligned",
                      f"0x{arg.ptr:x} ({arg.ptr % ADDRESS_ALIGN} bytes past a boundary)")
    # A dim of one element is never stepped along, so its stride is free: give TMA a legal one
    # rather than refuse a stride that no address is computed with.
    byte_stride = strides[outer] * itemsize if dims[1] > 1 else \
        -(-dims[0] * itemsize // STRIDE_ALIGN) * STRIDE_ALIGN
    if byte_stride % STRIDE_ALIGN:
        raise _refuse(name, f"the stride of dim {outer} must be a multiple of {STRIDE_ALIGN} "
                      f"bytes", f"{byte_stride} bytes ({strides[outer]} elements of "
                      f"{itemsize} bytes)")
    if not byte_stride < MAX_STRIDE:
        raise _refuse(name, f"the stride of dim {outer} must be under 2**40 bytes",
                      f"{byte_stride} bytes")
    if not all(1 <= b <= MAX_BOX for b in box):
        raise _refuse(name, f"box dims must be from 1 to {MAX_BOX} elements",
                      f"box {tuple(box)} (inner, outer)", COMPILER_REMEDY)
    box_bytes = box[0] * itemsize
    if box_bytes % BOX_INNER_ALIGN:
        raise _refuse(name, f"the box's inner extent must be a multiple of {BOX_INNER_ALIGN} "
                      f"bytes", f"{box[0]} elements of {itemsize} bytes = {box_bytes} bytes",
                      COMPILER_REMEDY)
    if swizzle and box_bytes > swizzle:
        raise _refuse(name, f"the box's inner extent must fit the {swizzle}-byte swizzle span",
                      f"{box[0]} elements of {itemsize} bytes = {box_bytes} bytes",
                      COMPILER_REMEDY)
    if batch is not None and batch[0] == 1:  # one matrix: its stride is never stepped along
        batch = (1, -(-dims[1] * byte_stride // STRIDE_ALIGN) * STRIDE_ALIGN)
    return TensorMapLayout(name, arg.dtype, arg.ptr, dims, byte_stride, (box[0], box[1]),
                           swizzle, batch)


def _batch_dim(name: str, arg: Any) -> tuple[int, int]:
    """(batches, byte stride) of a 3-D argument's map: a batch stride of 0 is one batch."""
    itemsize = DType.parse(arg.dtype).bytes
    count, stride = arg.shape[0], arg.strides[0]
    if stride == 0 or count == 1:
        return 1, 0
    byte_stride = stride * itemsize
    if not 1 <= count < MAX_DIM:
        raise _refuse(name, "the batch dim must hold from 1 to 2**32 - 1 matrices",
                      f"{count}")
    if byte_stride % STRIDE_ALIGN or not 0 < byte_stride < MAX_STRIDE:
        raise _refuse(name, f"the batch stride must be a positive multiple of {STRIDE_ALIGN} "
                      "bytes under 2**40", f"{byte_stride} bytes ({stride} elements of "
                      f"{itemsize} bytes)")
    return count, byte_stride


@functools.lru_cache(maxsize=256)  # per compiled kernel: plain calls build maps every launch
def compiled_map(kernel: Kernel, tensor: str) -> tuple[tuple[int, int], int, Optional[int]]:
    """The box (inner, outer), swizzle span and compiled inner dim of ``tensor``'s loads."""
    box_inner, box_outer, swizzle = tensor_map_box(kernel, tensor)
    return (box_inner, box_outer), swizzle, _compiled_inner(kernel, tensor)


def _compiled_inner(kernel: Kernel, tensor: str) -> Optional[int]:
    """Which dim of the parameter ``tensor`` the kernel's TMA loads take as contiguous: a
    load's ``coords[0]`` numbers the inner coordinate among the dims of the value it reads,
    a view of the parameter (a transpose swaps the two dims; a batch view keeps the matrix's,
    among which the map's inner dim is). None when the IR does not say (then the argument's
    own layout decides)."""
    for op in kernel.walk():
        if (op.name == LOAD or is_tma_store(op)) and op.attrs["tensor"] == tensor:
            dim = op.attrs["coords"][0]
            source = view_source(kernel, op.operands[0])
            if source is None:
                return None
            return 1 - dim if source.transposed else dim
    return None


def tensor_map_argument(kernel: Kernel, tensor_name: str, device_arg: Any) -> Any:
    """The launch argument (a 128-byte BlobArg) of the tensor map of ``tensor_name`` in the
    compiled ``kernel``, for ``device_arg``, a device array as the launch binds it
    (:class:`~tilec.runtime.arrays.ArrayArg`: ``ptr``, ``dtype``, ``shape``, ``strides`` in
    elements). Checks TMA's rules before the driver is called (:func:`tensor_map_layout`)."""
    from tilec.runtime.driver import encode_tensor_map, kernel_argument

    if any(size == 0 for size in device_arg.shape):
        # No element to load: the grid is empty or the K loop has no step, so the kernel issues
        # no TMA load of this tensor, and the driver refuses a zero dim; the map is a blank.
        return kernel_argument(TENSOR_MAP, bytes(TENSOR_MAP.size))
    box, swizzle, compiled_inner = compiled_map(kernel, tensor_name)
    layout = tensor_map_layout(tensor_name, device_arg, box, swizzle, compiled_inner)
    dims, byte_strides, box = layout.encoding()
    data = encode_tensor_map(layout.dtype, layout.address, dims, byte_strides, box,
                             layout.swizzle, what=f"operand '{tensor_name}'")
    return kernel_argument(TENSOR_MAP, data)
