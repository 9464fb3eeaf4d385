"""The kernel's parameter list, shared by the PTX emitter and the launcher.

Per tensor parameter: its base address (u64) and one stride per dim in elements (s32);
per scalar parameter: its value; then each shape symbol (s32), in ``Kernel.symbols`` order;
then, for a split-K kernel, its workspace pointers (``backend/split.py``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from tilec.ir.core import Kernel, Op
from tilec.ir.types import TensorType

# The split-K workspace's hidden parameters (backend/split.py), after the shape symbols.
WORKSPACE_PARAMS = ("split_partials", "split_counters")
PARAM_PTX_TYPES = {"ptr": ".u64", "i32": ".u32", "f32": ".f32"}


@dataclass(frozen=True)
class AbiParam:
    name: str  # the PTX parameter name
    kind: str  # "ptr", "i32" or "f32"
    source: str  # the kernel parameter or symbol it comes from
    role: str  # "ptr", "stride", "scalar", "symbol" or "workspace"
    dim: int = -1


@functools.lru_cache(maxsize=256)  # per compiled kernel: every plain call's launch reads it
def kernel_abi(kernel: Kernel) -> tuple[AbiParam, ...]:
    params: list[AbiParam] = []
    for param in kernel.params:
        if isinstance(param.type, TensorType):
            params.append(AbiParam(f"{param.name}_ptr", "ptr", param.name, "ptr"))
            for dim in range(param.type.rank):
                params.append(AbiParam(f"{param.name}_stride{dim}", "i32", param.name,
                                       "stride", dim))
        else:
            params.append(AbiParam(param.name, param.type.dtype.short, param.name, "scalar"))
    for symbol in kernel.symbols:
        params.append(AbiParam(f"dim_{symbol}", "i32", symbol, "symbol"))
    if kernel.schedule.splits > 1:
        params.extend(AbiParam(name, "ptr", name, "workspace") for name in WORKSPACE_PARAMS)
    return tuple(params)


# -- the grid: which CUDA axes number what ---------------------------------------------
def tile_axes(grid_op: Op) -> int:
    """The grid's output-tile axes: all but a split-K slice axis (always the last)."""
    return len(grid_op.operands) - (1 if grid_op.attrs.get("split_k") else 0)


def folds_tile_axes(grid_op: Op) -> bool:
    """Grouped rasterization: two tile axes launched as one CUDA x axis, which the kernel
    unfolds; a slice axis then takes CUDA's y."""
    return bool(grid_op.attrs.get("raster_group")) and tile_axes(grid_op) == 2


def cuda_tile_axes(grid_op: Op) -> int:
    """How many CUDA grid axes (x, then y) number the output tiles."""
    return 1 if folds_tile_axes(grid_op) else tile_axes(grid_op)
