"""The kernel's parameter list, shared by the PTX emitter and the launcher.

Per tensor parameter: its base address (u64) and one stride per dim in elements (s32);
per scalar parameter: its value; then each shape symbol (s32), in ``Kernel.symbols`` order;
then, for a split-K kernel, its workspace pointers (``backend/split.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

from tilec.ir.core import Kernel
from tilec.ir.types import TensorType

PARAM_PTX_TYPES = {"ptr": ".u64", "i32": ".u32", "f32": ".f32"}


@dataclass(frozen=True)
class AbiParam:
    name: str  # the PTX parameter name
    kind: str  # "ptr", "i32" or "f32"
    source: str  # the kernel parameter or symbol it comes from
    role: str  # "ptr", "stride", "scalar", "symbol" or "workspace"
    dim: int = -1


def kernel_abi(kernel: Kernel) -> list[AbiParam]:
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
    if kernel.meta.get("split_k", 1) > 1:
        from .split import WORKSPACE_PARAMS
        params.extend(AbiParam(name, "ptr", name, "workspace") for name in WORKSPACE_PARAMS)
    return params
