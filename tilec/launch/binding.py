"""Binding call arguments to a kernel's parameters, and launching it on the GPU.

Every check happens before any GPU work: each argument's kind, dtype and rank, the shape
symbols agreeing across arguments, scalars' types. The facts the compiled code may rely on
(which dim is contiguous, vector alignment, which symbols divide the tile sizes) become the
:class:`~tilec.options.Spec` the kernel is compiled for.
"""
from __future__ import annotations

import functools
import math

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from tilec.backend import tile_order
from tilec.backend.abi import AbiParam, folded_axes, folds_tile_axes
from tilec.backend.signature import kernel_abi
from tilec.families.catalogue import op_definitions
from tilec.ir.arith import INT_BITS
from tilec.ir.core import Kernel, require_grid
from tilec.ir.types import ScalarType, TensorType
from tilec.options import Spec, TensorSpec
from tilec.passes.coverage import check_launch

INT32_MAX = 2**31 - 1
# The largest power of two (up to this) dividing a symbol is what the spec records.
MAX_DIVISOR = 256


@dataclass
class Bound:
    """Arguments checked against the parameters."""

    tensors: dict[str, Any]  # name -> ArrayArg
    scalars: dict[str, float | int]
    symbols: dict[str, int]


def _describe_dims(ptype: TensorType) -> str:
    return "[" + ", ".join(str(d) for d in ptype.shape) + "]"


def check_size(symbol: str, value: Any) -> int:
    """A shape symbol's size as given to ``compile``/``ptx`` or on the command line: an
    integer (not a bool, a float or a string that looks like one) from 0 to 2**31 - 1, since
    the kernel computes with sizes in i32."""
    import numbers
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"size {symbol}={value!r}: expected an integer, got "
                        f"{type(value).__name__}")
    if not 0 <= int(value) <= INT32_MAX:
        raise ValueError(f"size {symbol}={value}: sizes are 32-bit in the kernel, so each must "
                         f"be from 0 to {INT32_MAX}")
    return int(value)


def bind_names(kernel_params, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name, as Python binds a call: no more positional
    arguments than parameters, none given both by position and by name, none unknown, none
    missing. The GPU and the CPU path both bind through here."""
    params = list(kernel_params)
    if len(args) > len(params):
        raise TypeError(f"{len(params)} arguments expected "
                        f"({', '.join(p.name for p in params)}), got {len(args)}")
    values: dict[str, Any] = {}
    for param, arg in zip(params, args):
        values[param.name] = arg
    for name, arg in kwargs.items():
        if name in values:
            raise TypeError(f"argument '{name}' given twice")
        if not any(p.name == name for p in params):
            raise TypeError(f"unknown argument '{name}' (parameters: "
                            f"{', '.join(p.name for p in params)})")
        values[name] = arg
    missing = [p.name for p in params if p.name not in values]
    if missing:
        raise TypeError(f"missing argument(s): {', '.join(missing)}")
    return values


def bind_arguments(kernel_params, symbols: Sequence[str], args: Sequence[Any],
                   kwargs: dict[str, Any]) -> Bound:
    from tilec.runtime.arrays import as_array_arg

    params = list(kernel_params)
    values = bind_names(params, args, kwargs)
    tensors, scalars, bound = {}, {}, {}
    origin: dict[str, tuple[str, int]] = {}
    for param in params:
        value = values[param.name]
        if isinstance(param.type, TensorType):
            ptype = param.type
            arg = as_array_arg(value, param.name, ptype.dtype.short, ptype.rank,
                               dim_names=[str(d) for d in ptype.shape])
            for axis, (dim, size) in enumerate(zip(ptype.shape, arg.shape)):
                if isinstance(dim, int):
                    if size != dim:
                        raise ValueError(f"argument '{param.name}': dim {axis} must be {dim} "
                                         f"(shape {_describe_dims(ptype)}), got {size}")
                elif dim in bound and bound[dim] != size:
                    first, first_axis = origin[dim]
                    raise ValueError(
                        f"argument '{param.name}' has {dim}={size} (dim {axis}) but argument "
                        f"'{first}' has {dim}={bound[dim]} (dim {first_axis}); shapes must agree")
                else:
                    bound[dim] = size
                    origin.setdefault(dim, (param.name, axis))
            for size, stride in zip(arg.shape, arg.strides):
                if size > INT32_MAX or abs(stride) > INT32_MAX:
                    raise ValueError(f"argument '{param.name}': sizes and strides must fit "
                                     "in 32 bits")
            tensors[param.name] = arg
        else:
            dtype = param.type.dtype.short
            if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(
                    value, "__float__"):
                raise TypeError(f"argument '{param.name}': expected a {dtype} number, "
                                f"got {type(value).__name__}")
            if dtype == "i32":
                if int(value) != value or not -2**31 <= int(value) <= INT32_MAX:
                    raise ValueError(f"argument '{param.name}': expected an i32, got {value}")
                value = int(value)
            else:
                value = float(value)
            scalars[param.name] = value
    unbound = [s for s in symbols if s not in bound]
    if unbound:
        raise ValueError(f"shape symbol(s) {', '.join(unbound)} appear in no tensor argument")
    return Bound(tensors, scalars, bound)


def check_outputs(bound: Bound, written: Sequence[str]) -> None:
    """A tensor the kernel stores into must not repeat its memory along a dim (stride 0 over
    more than one element, as ``expand`` or ``numpy.broadcast_to`` make: a batch shared by
    every program is fine to read, not to write): every program would write the same
    elements. ValueError naming the argument and the dim."""
    for name in written:
        arg = bound.tensors.get(name)
        if arg is None:
            continue
        for dim, (size, stride) in enumerate(zip(arg.shape, arg.strides)):
            if size > 1 and stride == 0:
                raise ValueError(f"argument '{name}': the kernel stores into it but its dim "
                                 f"{dim} has stride 0 ({size} indices, one memory: an "
                                 "expanded or broadcast array); pass an array of its own "
                                 "(tensor.contiguous(), numpy.ascontiguousarray)")


def _largest_power_of_two_divisor(value: int) -> int:
    if value == 0:
        return MAX_DIVISOR
    divisor = 1
    while value % (divisor * 2) == 0 and divisor < MAX_DIVISOR:
        divisor *= 2
    return divisor


def tensor_spec(arg) -> TensorSpec:
    """The layout facts of one array: its unit-stride dim and the widest aligned vector.
    Where two dims have unit stride, a matrix dim of a single index is the inner one: a
    dense array's next dim has unit stride only past a dim of one index (torch's
    column-major [1, N], strides (1, 1), is k contiguous, as 8-bit B must be). A batch dim
    is never the inner one (a permuted [1, M, K] may give it unit stride)."""
    rank = len(arg.shape)
    unit = [dim for dim in reversed(range(rank))
            if arg.strides[dim] == 1 or arg.shape[dim] == 1 and rank == 1]
    single = [dim for dim in unit if arg.shape[dim] == 1 and dim >= rank - 2]
    contiguous = single[0] if single and len(unit) > 1 else unit[0] if unit else None
    if contiguous is None:
        return TensorSpec(None, 1)
    vec = max(1, 16 // arg.itemsize)
    while vec > 1:
        aligned = arg.ptr % (vec * arg.itemsize) == 0
        strides_ok = all(arg.strides[d] % vec == 0 for d in range(rank) if d != contiguous)
        if aligned and strides_ok:
            break
        vec //= 2
    return TensorSpec(contiguous, vec)


def divisibility(symbols: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """The spec's record of what each shape symbol's value divides."""
    return tuple(sorted((s, _largest_power_of_two_divisor(v)) for s, v in symbols.items()))


def spec_for(bound: Bound) -> Spec:
    tensors = tuple(sorted((name, tensor_spec(arg)) for name, arg in bound.tensors.items()))
    return Spec(tensors, divisibility(bound.symbols))


def grid_size(kernel: Kernel, symbols: dict[str, int]) -> list[int]:
    """Evaluate the grid's sizes on the host, from the shape symbols and constants: the
    integer ops before the grid, each by its definition's fold."""
    catalogue = op_definitions()
    env: dict = {kernel.symbol_value(s): v for s, v in symbols.items()}
    for op in kernel.body.ops:
        if op.name == "tile.grid":
            sizes = [int(env[v]) for v in op.operands]
            check_launch(kernel, sizes, symbols)
            return sizes
        opdef = catalogue.get(op.name)
        rtype = op.results[0].type if len(op.results) == 1 else None
        if (opdef is not None and opdef.fold is not None and isinstance(rtype, ScalarType)
                and rtype.dtype in INT_BITS and all(v in env for v in op.operands)):
            env[op.result] = opdef.fold([env[v] for v in op.operands], op.attrs, rtype.dtype)
    raise ValueError(f"kernel '{kernel.name}' has no grid")


def launch_cluster(compiled_kernel: Kernel) -> Optional[tuple[int, int, int]]:
    """The thread-block cluster shape a kernel is launched with (cuLaunchKernelEx), or None
    for a plain launch."""
    roles = compiled_kernel.schedule.roles
    if roles is None or roles.cluster_blocks == 1:
        return None
    return (roles.cluster_blocks, 1, 1)


def whole_cluster_tiles(sizes: Sequence[int], compiled_kernel: Kernel) -> int:
    """The tiles a persistent kernel's blocks walk over its tile axes ``sizes``: a cluster's
    blocks walk its tiles together (backend.ptx._tile_loop), a batched grid's within each
    batch, so the M axis counts in whole clusters along M and the N axis along N, the last
    cluster's blocks past the grid idle."""
    roles = compiled_kernel.schedule.roles
    rounded = list(sizes)
    if roles is not None:
        for axis, blocks in zip(folded_axes(require_grid(compiled_kernel)),
                                (roles.cluster, roles.cluster_n)):
            rounded[axis] = -(-rounded[axis] // blocks) * blocks
    return math.prod(rounded)


def launch_grid(sizes: list[int], compiled_kernel: Kernel,
                multiprocessors: Optional[int] = None,
                resident_clusters: Optional[int] = None) -> tuple[int, int, int]:
    """The CUDA grid for the compiled kernel (``sizes``: its tile axes, as
    :func:`grid_size` evaluates them): its grid op says whether the passes folded two axes
    into one (grouped rasterization) and whether split-K added a slice axis after them. A
    persistent kernel gets one block per SM (``multiprocessors``: the device's), times its
    blocks per SM, at most one a tile (a cluster's: whole clusters, at most one a cluster's
    M tiles, those of a batched grid within each batch, and no more clusters than the
    device holds at once where ``resident_clusters`` says so; a stream-K kernel's: all of
    them, whatever the tiles)."""
    roles = compiled_kernel.schedule.roles
    if roles is not None and roles.persistent:
        if multiprocessors is None:
            raise ValueError("a persistent kernel's grid needs the device's multiprocessor "
                             "count")
        if roles.stream_k:
            # Stream-K shares K steps, not tiles, so every SM gets a share even where the
            # tiles are fewer than the SMs (a deep K over a few tiles: split-K's case).
            return (multiprocessors * roles.blocks_per_sm, 1, 1)
        # Whole clusters, at most one a cluster's tiles. Clusters past those resident at
        # once would wait for a whole cluster to finish all its tiles.
        cluster = roles.cluster_blocks
        groups = whole_cluster_tiles(sizes, compiled_kernel) // cluster
        clusters = min(groups, multiprocessors * roles.blocks_per_sm // cluster)
        if cluster > 1 and resident_clusters:
            clusters = min(clusters, resident_clusters)
        return (clusters * cluster, 1, 1)
    grid_op = require_grid(compiled_kernel)
    split = grid_op.attrs.get("split_k")
    axes = list(sizes)
    cluster = launch_cluster(compiled_kernel)
    folded = folded_axes(grid_op) if folds_tile_axes(grid_op) else None
    if cluster is not None:  # whole clusters (the backend's _grid groups their tiles)
        roles = compiled_kernel.schedule.roles
        for axis, blocks in zip(folded or (0, 1), (roles.cluster, roles.cluster_n)):
            axes[axis] = -(-axes[axis] // blocks) * blocks
    if folded:
        first, second = folded
        # The folded pair on x; a batched grid's batch axis then takes y.
        axes = [axes[first] * axes[second]] + [size for axis, size in enumerate(axes)
                                               if axis not in (first, second)]
    axes += [split] if split else []
    padded = axes + [1] * (3 - len(axes))
    return (padded[0], padded[1], padded[2])


# Where each role's value comes from: the bound arguments, or the device arguments (the
# program's tensors and the hidden buffers, such as the split-K workspace, by source name);
# a TMA tensor map also needs the compiled kernel, whose loads fix its box and swizzle.
RoleValue = Callable[[AbiParam, Kernel, Bound, dict[str, Any]], Any]
_ROLE_VALUES: dict[str, RoleValue] = {
    "ptr": lambda p, kernel, bound, device: device[p.source].ptr,
    "workspace": lambda p, kernel, bound, device: device[p.source].ptr,
    "stride": lambda p, kernel, bound, device: device[p.source].strides[p.dim],
    "scalar": lambda p, kernel, bound, device: bound.scalars[p.source],
    "symbol": lambda p, kernel, bound, device: bound.symbols[p.source],
    "tensor_map": lambda p, kernel, bound, device: _tensor_map(kernel, p.source,
                                                               device[p.source]),
    tile_order.ROLE: lambda p, kernel, bound, device: _tile_order(
        kernel, tuple(sorted(bound.symbols.items())))[p.source],
}


@functools.lru_cache(maxsize=64)  # one evaluation of the grid a launch, not one a divisor
def _tile_order(kernel: Kernel, symbols: tuple) -> dict[str, int]:
    return tile_order.launch_values(kernel, grid_size(kernel, dict(symbols)))


def _tensor_map(kernel: Kernel, source: str, tensor: Any) -> Any:
    # Imported by the launches that encode one: compiling (which imports this module for
    # the grid's size) never does.
    from tilec.launch.tensor_maps import tensor_map_argument
    return tensor_map_argument(kernel, source, tensor)


def kernel_arguments(kernel: Kernel, bound: Bound, device_args: dict[str, Any]) -> list:
    """The typed launch arguments (``tilec.runtime.driver.launch``), in ABI order, for the
    compiled ``kernel``. TMA tensor maps are encoded here, so a caller launching again and
    again on the same arrays builds this list once (:class:`~tilec.kernel.PreparedLaunch`)."""
    from tilec.runtime.driver import kernel_argument

    return [kernel_argument(p.type, _ROLE_VALUES[p.role](p, kernel, bound, device_args))
            for p in kernel_abi(kernel)]
