"""Ops the passes introduce as they lower tile ops toward the GPU.

``smem.*``: shared-memory buffers and their stage views (from tiling / double buffering).
``copy.*`` and ``gpu.*``: data movement and synchronisation.
``split.reduce``: the meeting of the K slices of one output tile (split-K).
``frag.*``: values distributed over the threads in a fragment layout (fragments pass).

:data:`GPU_OPS` is a plain list: :mod:`tilec.families` joins it to the core ops, with the CPU
semantics of each, into the op catalogue.
"""
from __future__ import annotations

from tilec.ir import arith
from tilec.ir.core import Op
from tilec.ir.ops import OpDef, _require
from tilec.ir.types import I32, PRED, ScalarType, TensorType, TileType


def _smem_alloc(op: Op) -> None:
    rtype = op.result.type
    _require(isinstance(rtype, TileType) and rtype.space == "smem" and rtype.rank == 3,
             "smem.alloc yields a [stages, rows, cols] shared tile")
    _require(rtype.shape[0] == op.attrs["stages"] >= 1, "stage count differs from the type")


def _smem_stage(op: Op) -> None:
    buf, stage = op.operands
    rtype = op.result.type
    _require(isinstance(buf.type, TileType) and buf.type.space == "smem", "stage of a buffer")
    _require(stage.type == ScalarType(I32), "the stage index is i32")
    _require(isinstance(rtype, TileType) and rtype.space == "smem"
             and rtype.shape == buf.type.shape[1:] and rtype.dtype == buf.type.dtype,
             "a stage view is one [rows, cols] slice of the buffer")
    _require(rtype.layout == buf.type.layout, "a stage view keeps the buffer's layout")


def _copy_g2s(op: Op) -> None:
    tensor, *rest = op.operands
    _require(isinstance(tensor.type, TensorType), "copy.global_to_shared reads a tensor")
    offsets = rest[:tensor.type.rank]
    dst = rest[tensor.type.rank]
    _require(all(v.type == ScalarType(I32) for v in offsets), "offsets are i32")
    _require(isinstance(dst.type, TileType) and dst.type.space == "smem",
             "copy.global_to_shared writes a shared tile")
    _require(dst.type.dtype == tensor.type.dtype, "copies keep the element type")
    _require(list(op.attrs["shape"]) == list(dst.type.shape), "copy shape differs from dst")
    _require(op.attrs["mode"] in ("sync", "async"), "mode is sync or async")


def _frag_value(op: Op) -> None:
    rtype = op.result.type
    _require(isinstance(rtype, TileType) and rtype.space == "reg" and rtype.layout is not None,
             f"{op.name} yields a distributed tile with a layout")


def _frag_ldmatrix(op: Op) -> None:
    view = op.operands[0]
    _require(isinstance(view.type, TileType) and view.type.space == "smem",
             "ldmatrix reads a shared tile")
    _require(op.attrs["operand"] in ("A", "B"), "operand is A or B")
    _frag_value(op)


def _frag_lds(op: Op) -> None:
    _frag_ldmatrix(op)  # the same contract: a shared tile in, a distributed operand out
    _require(op.result.type.layout.operand == op.attrs["operand"],
             "the result layout is the operand's")


def _frag_fma(op: Op) -> None:
    _frag_mma(op)
    a, b, acc = (v.type for v in op.operands)
    _require(a.dtype == b.dtype == acc.dtype, "FFMA products are f32 throughout")
    _require([a.layout.operand, b.layout.operand, acc.layout.operand] == ["A", "B", "C"],
             "operands are A, B and C fragments")


def _frag_mma(op: Op) -> None:
    a, b, acc = (v.type for v in op.operands)
    _require(a.dtype == b.dtype, "mma operands share a dtype")
    _require(acc == op.result.type, "mma returns the accumulator type")
    _require(a.shape[1] == b.shape[0] and acc.shape == (a.shape[0], b.shape[1]),
             "mma fragment shapes do not chain")


def _compare(op: Op) -> None:
    a, b = op.operands
    _require(a.type == b.type == ScalarType(I32), "comparisons take i32 operands")
    _require(op.result.type == ScalarType(PRED), "comparisons yield pred")


def _frag_load(op: Op) -> None:
    tensor, *offsets = op.operands
    _require(isinstance(tensor.type, TensorType), "frag.load reads a tensor")
    _require(len(offsets) == tensor.type.rank, "one offset per tensor dim")
    dims = op.attrs["dims"]
    rtype = op.result.type
    _require(len(dims) == rtype.rank, "one entry of dims per tile dim")
    _require(sorted(d for d in dims if d >= 0) == list(range(tensor.type.rank)),
             "dims names each tensor dim once (-1 broadcasts)")
    _require(rtype.dtype == tensor.type.dtype, "loads keep the element type")
    _frag_value(op)


def _split_reduce(op: Op) -> None:
    partial, slice_id = op.operands
    _require(isinstance(partial.type, TileType) and partial.type.space == "reg"
             and partial.type.dtype.short == "f32", "split.reduce sums an f32 register tile")
    _require(slice_id.type == ScalarType(I32), "the slice index is i32")
    _require(op.result.type == partial.type, "the sum has the partial's type")
    _require(isinstance(op.attrs["splits"], int) and op.attrs["splits"] >= 2,
             "split.reduce needs at least 2 splits")


def _wrap_inc(op: Op) -> None:
    _require(op.operands[0].type == op.result.type == ScalarType(I32), "wrap_inc is on i32")
    _require(isinstance(op.attrs["modulus"], int) and op.attrs["modulus"] >= 1,
             "wrap_inc needs a positive modulus")


GPU_OPS: list[OpDef] = [
    OpDef("arith.lt", "a < b", 2, 1, check=_compare, pure=True, fold=arith.fold_less),
    OpDef("arith.wrap_inc", "(a + 1) % modulus for 0 <= a < modulus: circular buffer indices",
          1, 1, attrs=("modulus",), check=_wrap_inc, pure=True, fold=arith.fold_wrap_inc),
    OpDef("frag.load", "each thread loads the elements it owns in the result layout; dims[i] "
          "is the tensor dim tile dim i walks (-1: broadcast); out of bounds reads 0",
          None, 1, attrs=("dims",), check=_frag_load, pure=True),
    # Not pure: its size is the tiling plan's shared-memory budget, read or not.
    OpDef("smem.alloc", "a shared-memory buffer of one or more stages", 0, 1,
          attrs=("stages", "role"), check=_smem_alloc),
    OpDef("smem.stage", "the view of one stage of a shared buffer", 2, 1, check=_smem_stage,
          pure=True),
    OpDef("copy.global_to_shared", "a tile from global memory into a shared view; "
          "out-of-bounds elements become 0; operands: tensor, offsets, dst, [predicate]",
          None, 0, attrs=("shape", "vec", "mode"), check=_copy_g2s),
    OpDef("copy.commit", "close the group of async copies issued so far", 0, 0),
    OpDef("copy.wait", "wait until at most `pending` async copy groups are in flight", 0, 0,
          attrs=("pending",)),
    OpDef("split.reduce", "operands: a K slice's partial tile and the slice index; the last "
          "block of the output tile to get here gets the sum of all `splits` partials in "
          "slice order and goes on, the others end", 2, 1, attrs=("splits",),
          check=_split_reduce, elementwise=True),  # not pure: it ends programs
    OpDef("gpu.barrier", "all threads of the block reach this point (bar.sync 0)", 0, 0),
    OpDef("frag.ldmatrix", "a warp-tile slice of an mma operand from shared memory", 1, 1,
          attrs=("operand", "k0"), check=_frag_ldmatrix, pure=True),
    OpDef("frag.mma", "acc + a @ b over each warp's fragments with mma.sync", 3, 1,
          check=_frag_mma, pure=True),
    OpDef("frag.lds", "each lane's rows (A) or columns (B) of a k step of an FFMA operand, "
          "from shared memory in 16-byte vectors", 1, 1, attrs=("operand", "k0"),
          check=_frag_lds, pure=True),
    OpDef("frag.fma", "acc + a @ b over each lane's elements with fma.rn.f32, k in order",
          3, 1, check=_frag_fma, pure=True),
    OpDef("frag.ldtf32", "a warp-tile slice of an f32 mma operand from shared memory as "
          "m16n8k8 .tf32 fragments, each register rounded to tf32 (cvt.rna)", 1, 1,
          attrs=("operand", "k0"), check=_frag_lds, pure=True),
]
