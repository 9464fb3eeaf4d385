"""The whole parameter list of a compiled kernel, in order: the program's own
(:func:`tilec.backend.abi.program_params`: tensors, scalars, shape symbols), then what each
data-movement family adds (:data:`tilec.families.movements.MOVEMENT_FAMILIES`), then the
split-K workspace (``backend/split.py``), then a persistent kernel's tile
divisors (``backend/tile_order.py``). The PTX emitter declares it and the launcher fills
it; it sits above :mod:`tilec.backend.abi`, whose types the families and split-K build on.
"""
from __future__ import annotations

import functools

from tilec.families.movements import MOVEMENT_FAMILIES
from tilec.ir.core import Kernel

from . import split, tile_order
from .abi import AbiParam, program_params, with_ptx_names


@functools.lru_cache(maxsize=256)  # per compiled kernel: every plain call's launch reads it
def kernel_abi(kernel: Kernel) -> tuple[AbiParam, ...]:
    """Every parameter the kernel is declared and launched with, named as the PTX declares
    it (:func:`~tilec.backend.abi.with_ptx_names`)."""
    params = program_params(kernel)
    for family in MOVEMENT_FAMILIES.values():
        params.extend(family.kernel_params(kernel))
    params.extend(split.kernel_params(kernel))
    params.extend(tile_order.kernel_params(kernel))
    return tuple(with_ptx_names(params))
