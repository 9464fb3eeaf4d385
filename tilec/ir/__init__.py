"""The tile IR: types, ops, a builder, the text form and the verifier."""
from tilec.ir.core import (Block, Builder, Kernel, Loc, Op, Param, Value, clone_kernel,
                           clone_op, defining_op, find_grid, require_grid)
from tilec.ir.ops import CORE_OPS, IRError, OpDef, register_op
from tilec.ir.printer import print_kernel
from tilec.ir.types import (BF16, F16, F32, I32, I64, PRED, DType, ScalarType, TensorType,
                            TileType)
from tilec.ir.verifier import verify

__all__ = ["Block", "Builder", "Kernel", "Loc", "Op", "Param", "Value", "clone_kernel",
           "clone_op", "defining_op", "find_grid", "require_grid", "CORE_OPS", "IRError",
           "OpDef", "register_op", "print_kernel", "BF16", "F16", "F32", "I32", "I64", "PRED",
           "DType", "ScalarType", "TensorType", "TileType", "verify"]
