"""The llvm backend's program ids, run on this machine: the LLVM IR its ``tile.grid`` emitter
writes, with ``%ctaid`` as arguments, JIT-compiled for the host by llvmlite and called for
every block of the launch grid (:func:`tilec.launch.binding.launch_grid`). Every output tile
(and split-K slice, and batch) must be computed by exactly one block, and the same block as
in the PTX backend (backend/grid.py's grouped order, evaluated here in Python).

The bug this guards against: LLVM's copy of the grid emitter folded a batched grid's first
two axes (Bt, cdiv(M, BM)) into CUDA's x where the launch grid folds the M and N tile counts
and puts the batch on y; it only computed the right tiles where Bt, cdiv(M, BM) and
cdiv(N, BN) were equal (the square-512 bmm of the GPU tests, with 4 batches of 4 x 4 tiles).
"""
from __future__ import annotations

import ctypes
import itertools

import pytest

from tilec.backend.grid import program_ids
from tilec.launch.binding import grid_size, launch_grid

from tests.test_ptxas import load_sample

llvm = pytest.importorskip("llvmlite.binding")
from tilec.backend.llvm.builder import Val  # noqa: E402
from tilec.backend.llvm.context import LlvmContext  # noqa: E402
from tilec.backend.llvm.emit import GENERIC_EMITTERS  # noqa: E402

CUDA_AXES = "xyz"


def _grid_op(kernel):
    return next(op for op in kernel.body.ops if op.name == "tile.grid")


def llvm_program_ids(kernel, options):
    """A host function ids(ctaid.x, .y, .z, the grid's sizes..., out) of the llvm backend's
    grid emitter: it writes the grid's program ids to ``out``."""
    grid = _grid_op(kernel)
    ctx = LlvmContext(kernel, options)
    for i, operand in enumerate(grid.operands):
        ctx.bind(operand, Val(f"%size{i}", "i32"))
    ctx.sreg = lambda name: Val("%" + name.replace(".", "_"), "i32")
    b = ctx.b
    b.position(ctx.entry)
    GENERIC_EMITTERS["tile.grid"](ctx, grid)
    for i, result in enumerate(grid.results):
        slot = b.assign("ptr", f"getelementptr i32, ptr %out, i64 {i}")
        b.store(ctx.get(result), slot, 4)
    b.ret()
    args = [f"i32 %ctaid_{axis}" for axis in CUDA_AXES] + [
        f"i32 %size{i}" for i in range(len(grid.operands))] + ["ptr %out"]
    text = "\n".join([*b.declarations.values(), f"define void @ids({', '.join(args)}) {{",
                      *b.text(), "}", ""])
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(text)
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    signature = ctypes.CFUNCTYPE(None, *[ctypes.c_int32] * (3 + len(grid.operands)),
                                 ctypes.POINTER(ctypes.c_int32))
    function = signature(engine.get_function_address("ids"))
    out = (ctypes.c_int32 * len(grid.results))()

    def ids(block: tuple[int, int, int], sizes: list[int]) -> tuple[int, ...]:
        function(*block, *sizes, out)
        return tuple(out)
    ids.keep = (engine, module)  # the JIT-compiled code lives as long as its engine
    return ids


class _Numbers:
    """A context whose integer helpers compute on Python ints, as the PTX mnemonics do on
    the non-negative values of a grid (backend/grid.py reads nothing else)."""

    OPS = {"mul.lo.s32": lambda a, b: a * b, "div.u32": lambda a, b: a // b,
           "rem.u32": lambda a, b: a % b, "sub.s32": lambda a, b: a - b,
           "add.s32": lambda a, b: a + b, "min.s32": min}

    def __init__(self, sizes: dict):
        self.sizes = sizes

    def get(self, value):
        return self.sizes[value]

    def int_op(self, op: str, a: int, b: int) -> int:
        return self.OPS[op](a, b)


def ptx_program_ids(grid, block: tuple[int, int, int], sizes: list[int]) -> tuple[int, ...]:
    """The ids the PTX backend's grid computes for ``block``: backend/grid.py on numbers."""
    ctx = _Numbers(dict(zip(grid.operands, sizes)))
    return tuple(program_ids(ctx, grid, lambda axis: block[CUDA_AXES.index(axis)]))


# (sample, compile options, shape symbols): batched grids whose batch count differs from
# the tile counts (the GPU test's ragged bmm shapes), and the square one that hid the bug;
# 2-D grids with grouped rows left over; split-K's slice axis.
GRIDS = [
    ("bmm", {}, dict(Bt=3, M=1000, N=1003, K=77)),
    ("bmm", dict(stages=3), dict(Bt=2, M=257, N=263, K=135)),
    ("bmm", {}, dict(Bt=4, M=512, N=512, K=512)),
    ("bmm", dict(BM=64, BN=64, warps=(2, 2)), dict(Bt=5, M=100, N=1000, K=64)),
    ("matmul", {}, dict(M=1000, N=1003, K=77)),
    ("matmul", {}, dict(M=3000, N=200, K=77)),
    ("matmul", dict(split_k=3), dict(M=1000, N=300, K=1000)),
]


@pytest.mark.parametrize("sample, options, symbols", GRIDS,
                         ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items())
                         if isinstance(v, dict) else v)
def test_every_tile_is_computed_by_one_block_as_in_the_ptx_backend(sample, options, symbols):
    fn = load_sample(sample, "f16")
    compiled = fn.compile(arch="sm_90", backend="llvm", **options)
    kernel = compiled.kernel
    grid = _grid_op(kernel)
    tiles = grid_size(fn.lower(), symbols)  # the program's grid, as a launch evaluates it
    # The grid's operands once lowered: split-K adds the slice count.
    sizes = tiles + ([grid.attrs["split_k"]] if grid.attrs.get("split_k") else [])
    ids = llvm_program_ids(kernel, compiled.options)
    blocks = list(itertools.product(*(range(n) for n in launch_grid(tiles, kernel))))
    computed = [ids(block, sizes) for block in blocks]
    assert sorted(computed) == list(itertools.product(*(range(n) for n in sizes)))
    assert computed == [ptx_program_ids(grid, block, sizes) for block in blocks]
