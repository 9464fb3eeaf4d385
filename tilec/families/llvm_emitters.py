"""The llvm backend's emitters of each family's ops (``tilec/backend/llvm``), by family
name: each family's LLVM emitters live in a sibling module of the family
(``<family>_llvm.py``), which reads the family's layout and address functions; this table
joins them, so the family modules themselves never import LLVM code.

A family missing here is not supported by the llvm backend: it refuses the kernel, naming
the family, before LLVM is called (wgmma and tma: warp-specialized sm_90a kernels).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from . import cp_async_llvm, ffma_llvm, fp8_llvm, int8_llvm, mma_sync_llvm, tf32_llvm

Emitter = Callable[[Any, Any], None]

# Product family name (ProductFamily.name) -> its ops' LLVM emitters.
PRODUCT_EMITTERS: Mapping[str, Mapping[str, Emitter]] = {
    "mma": mma_sync_llvm.EMITTERS,
    "simt": ffma_llvm.EMITTERS,
    "tf32": tf32_llvm.EMITTERS,
    "int8": int8_llvm.EMITTERS,
    "fp8": fp8_llvm.EMITTERS,
}
# Data-movement family name (MovementFamily.name) -> its ops' LLVM emitters.
MOVEMENT_EMITTERS: Mapping[str, Mapping[str, Emitter]] = {
    "cp.async": cp_async_llvm.EMITTERS,
}
