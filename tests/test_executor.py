"""The reference executor: the IR after every pass computes what the frontend's IR computes,
on ragged shapes, and the GPU's rules it models (cp.async groups, barriers, ldmatrix's
distribution, the accumulator's register order, edge masks) are the ones that hold."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pytest

from tilec.tools.bisect import make_inputs
from tilec.cpu.executor import register_map
from tilec.cpu.interpreter import run_kernel
from tilec.families.catalogue import op_catalogue
from tilec.families.mma_sync import ldmatrix_index
from tilec.cpu.interpreter import InterpreterError
from tilec.ir.core import Kernel, Op, clone_kernel
from tilec.kernel import TileFunction, load_file, written_params
from tilec.families.mma_sync import MMA_M, MMA_N, MmaLayout, mma_a_coord, mma_b_coord, mma_c_coord
from tilec.target.layout import WARP_SIZE, SmemLayout, Swizzle
from tilec.options import Options, Spec, TensorSpec
from tilec.pipeline import Pass, pipeline, run_pipeline

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = {"matmul": ("matmul.py", "matmul"), "gemm": ("gemm_epilogue.py", "gemm"),
           "matmul_bt": ("matmul_bt.py", "matmul_bt")}
SHAPES = {"M": 40, "N": 48, "K": 40}  # no dimension divides the 32x32x16 tiles


def sample(name: str, text_edit: Optional[Callable[[str], str]] = None) -> TileFunction:
    filename, function = SAMPLES[name]
    path = ROOT / "samples" / filename
    text = path.read_text() if text_edit is None else text_edit(path.read_text())
    return load_file(path, text)[function]


def stage_kernels(kernel: Kernel, options: Options) -> list[tuple[str, Kernel]]:
    """The frontend's IR and the IR after each pass."""
    kept = [("tile", kernel)]

    def keep(p: Pass) -> Pass:
        def run(k: Kernel, o: Options) -> Kernel:
            kept.append((p.name, p.run(k, o)))
            return kept[-1][1]
        return Pass(p.name, run, p.requires)

    run_pipeline(kernel, options, [keep(p) for p in pipeline()])
    return kept


def run(kernel: Kernel, arrays: dict[str, np.ndarray], scalars: dict[str, Any]
        ) -> np.ndarray:
    """The kernel's one written tensor after a run on copies of the inputs."""
    values = {**{name: array.copy() for name, array in arrays.items()}, **scalars}
    run_kernel(kernel, values, ops=op_catalogue())
    (written,) = written_params(kernel)
    return values[written]


def inputs(kernel: Kernel, shapes: dict[str, int] = SHAPES, seed: int = 0):
    return make_inputs(kernel, shapes, np.random.default_rng(seed))


def loop_of(kernel: Kernel) -> Op:
    return next(op for op in kernel.body.ops if op.name == "scf.for")


# ----------------------------------------------------------------------------------------
# every stage computes the frontend's result

@pytest.mark.parametrize("bk", [16, 32])
@pytest.mark.parametrize("swizzle", ["auto", "off"])
@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize("warps", [(1, 1), (2, 1)])
@pytest.mark.parametrize("name", list(SAMPLES))
def test_every_stage_reproduces_the_interpreter(name: str, warps, stages: int, swizzle: str,
                                                bk: int) -> None:
    kernel = sample(name).lower(BM=32, BN=32, BK=bk)
    arrays, scalars = inputs(kernel)
    options = Options(stages=stages, warps=warps, swizzle=swizzle)
    results = {stage: run(k, arrays, scalars)
               for stage, k in stage_kernels(kernel, options)}
    expected = results.pop("tile")
    assert not np.isnan(expected).any()
    fragments = results.pop("fragments")
    # After fragments only fp8 wgmma sums (none here) and the store's route change
    # (promote_accumulation, tma_store, row_store): fragments'
    # numbers.
    np.testing.assert_array_equal(results.pop("promote_accumulation"), fragments,
                                  err_msg="after promote_accumulation")
    np.testing.assert_array_equal(results.pop("tma_store"), fragments, err_msg="after tma_store")
    np.testing.assert_array_equal(results.pop("row_store"), fragments, err_msg="after row_store")
    # Before fragments the frontend's tile.dot reads shared memory: the same numbers exactly.
    for stage, got in results.items():
        np.testing.assert_array_equal(got, expected, err_msg=f"after {stage}")
    # mma rounds to f32 once per k16 step, the interpreter once per BK tile; an f16 output
    # may then round one ulp apart.
    rtol = 2.0 ** -10 if expected.dtype == np.float16 else 1e-6
    np.testing.assert_allclose(fragments, expected, rtol=rtol, atol=1e-6,
                               err_msg="after fragments")


@pytest.mark.parametrize("tensors,modes", [
    ((("A", TensorSpec(0, 8)),), {("async", 8)}),  # column-major A: ldmatrix.trans for A
    ((("A", TensorSpec(None, 1)), ("B", TensorSpec(None, 1))), {("sync", 1)}),
    ((("A", TensorSpec(1, 4)), ("B", TensorSpec(1, 2))), {("async", 4), ("async", 2)}),
])
def test_every_copy_mode_and_operand_orientation(tensors, modes) -> None:
    kernel = sample("matmul").lower(BM=32, BN=32, BK=32)
    options = Options(stages=2, warps=(2, 1), spec=Spec(tensors=tensors))
    stages = stage_kernels(kernel, options)
    final = stages[-1][1]
    assert {(op.attrs["mode"], op.attrs["vec"]) for op in final.walk()
            if op.name == "copy.global_to_shared"} == modes
    arrays, scalars = inputs(kernel)
    expected = run(kernel, arrays, scalars)
    for stage, k in stages[1:]:
        np.testing.assert_allclose(run(k, arrays, scalars), expected, rtol=1e-6, atol=1e-6,
                                   err_msg=stage)


def test_the_swizzled_runs_above_do_swizzle() -> None:
    # The "auto" cases exercise swizzled addressing only if the pass picks swizzles there.
    for name in SAMPLES:
        for bk in (16, 32):
            kernel = sample(name).lower(BM=32, BN=32, BK=bk)
            final = run_pipeline(kernel, Options(stages=2, swizzle="auto")).kernel
            layouts = [op.result.type.layout for op in final.walk() if op.name == "smem.alloc"]
            assert len(layouts) == 2 and all(layout.swizzle.bits for layout in layouts)


def test_bf16_inputs_through_every_stage() -> None:
    fn = sample("matmul", lambda text: text.replace("f16[", "bf16[")
                .replace("import f16", "import bf16, f16"))
    kernel = fn.lower(BM=32, BN=32, BK=32)
    arrays, scalars = inputs(kernel)
    assert arrays["A"].dtype == np.uint16
    results = {stage: run(k, arrays, scalars)
               for stage, k in stage_kernels(kernel, Options(stages=3, warps=(2, 1)))}
    expected = results.pop("tile")
    for stage, got in results.items():
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, err_msg=stage)


def test_edge_masks_dropped_for_divisible_sizes_still_compute_the_result() -> None:
    shapes = {"M": 64, "N": 64, "K": 32}
    kernel = sample("gemm").lower(BM=32, BN=32, BK=16)
    options = Options(stages=2, spec=Spec(divisible=(("K", 32), ("M", 64), ("N", 64))))
    stages = stage_kernels(kernel, options)
    final = stages[-1][1]
    assert all(not any(op.attrs["masked"]) for op in final.walk()
               if op.name in ("copy.global_to_shared", "frag.load", "tile.store"))
    arrays, scalars = inputs(kernel, shapes)
    expected = run(kernel, arrays, scalars)
    np.testing.assert_allclose(run(final, arrays, scalars), expected, rtol=2.0 ** -10,
                               atol=1e-6)


def test_reading_past_an_edge_the_compiler_did_not_mask_is_an_error() -> None:
    # Compiled for sizes the tiles divide, run on sizes they do not: the GPU would read past
    # the tensor's edge, so the executor refuses rather than inventing zeros.
    kernel = sample("matmul").lower(BM=32, BN=32, BK=16)
    options = Options(stages=2, spec=Spec(divisible=(("K", 16), ("M", 32), ("N", 32))))
    final = stage_kernels(kernel, options)[-1][1]
    arrays, scalars = inputs(kernel)
    with pytest.raises(InterpreterError, match="does not mask"):
        run(final, arrays, scalars)


# ----------------------------------------------------------------------------------------
# the cp.async and barrier model: a broken schedule gives a wrong result, a safe one not

def double_buffered(stages: int) -> tuple[Kernel, np.ndarray, dict, dict]:
    kernel = sample("matmul").lower(BM=32, BN=32, BK=16)
    ir = dict(stage_kernels(kernel, Options(stages=stages, warps=(2, 1))))["double_buffer"]
    arrays, scalars = inputs(kernel)
    return ir, run(kernel, arrays, scalars), arrays, scalars


def loop_waits(kernel: Kernel) -> list[Op]:
    return [op for op in loop_of(kernel).regions[0].ops if op.name == "copy.wait"]


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_waiting_for_one_group_too_few_reads_stale_shared_memory(stages: int) -> None:
    ir, expected, arrays, scalars = double_buffered(stages)
    broken = clone_kernel(ir)
    (wait,) = loop_waits(broken)
    wait.attrs["pending"] += 1
    got = run(broken, arrays, scalars)
    assert np.isnan(got).any() or not np.allclose(got, expected)
    np.testing.assert_array_equal(run(ir, arrays, scalars), expected)


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_a_wait_without_the_barrier_after_it_reads_stale_shared_memory(stages: int) -> None:
    # cp.async.wait_group covers this thread's copies only; bar.sync publishes the others'.
    ir, expected, arrays, scalars = double_buffered(stages)
    broken = clone_kernel(ir)
    body = loop_of(broken).regions[0]
    wait = loop_waits(broken)[0]
    barrier = next(op for op in body.ops[body.ops.index(wait):] if op.name == "gpu.barrier")
    body.ops.remove(barrier)
    got = run(broken, arrays, scalars)
    assert np.isnan(got).any() or not np.allclose(got, expected)


@pytest.mark.parametrize("stages", [2, 3])
def test_waiting_for_every_group_is_slower_but_still_right(stages: int) -> None:
    ir, expected, arrays, scalars = double_buffered(stages)
    safe = clone_kernel(ir)
    for op in safe.walk():
        if op.name == "copy.wait":
            op.attrs["pending"] = 0
    np.testing.assert_array_equal(run(safe, arrays, scalars), expected)


# ----------------------------------------------------------------------------------------
# the layout rules the executor applies agree with the backend and the mma fragments

@pytest.mark.parametrize("warps,warp_tile", [((1, 1), (32, 32)), ((2, 1), (16, 32)),
                                             ((2, 2), (64, 32)), ((1, 4), (16, 16))])
def test_register_map_is_the_backends_register_order(warps, warp_tile) -> None:
    layout = MmaLayout("C", warps, warp_tile)
    rows, cols = register_map(layout)
    offsets = np.array(layout.register_offsets())  # [regs, 2], from the thread's base
    # The PTX ISA's accumulator fragment (mma_c_coord), tile by tile, m fastest.
    tiles_m = warp_tile[0] // MMA_M
    for reg, (row, col) in enumerate(offsets):
        tile, r = divmod(reg, 4)
        tn, tm = divmod(tile, tiles_m)
        m, n = mma_c_coord(0, r)
        assert (row, col) == (tm * MMA_M + m, tn * MMA_N + n)
    for w in range(warps[0] * warps[1]):
        wm, wn = divmod(w, warps[1])
        for lane in range(WARP_SIZE):
            base = (wm * warp_tile[0] + lane // 4, wn * warp_tile[1] + 2 * (lane % 4))
            np.testing.assert_array_equal(rows[w, lane] - base[0], offsets[:, 0])
            np.testing.assert_array_equal(cols[w, lane] - base[1], offsets[:, 1])
    # One register per element of the block tile.
    flat = rows * warps[1] * warp_tile[1] + cols
    assert sorted(flat.ravel()) == list(range(warps[0] * warp_tile[0] * warps[1] * warp_tile[1]))


@pytest.mark.parametrize("k0", [0, 16])
@pytest.mark.parametrize("swizzle", [Swizzle(0), Swizzle(1, 3, 3), Swizzle(2, 3, 3),
                                     Swizzle(3, 3, 3), Swizzle(2, 3, 4)])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("role", ["A", "B"])
def test_ldmatrix_delivers_the_mma_fragments(role: str, transposed: bool, swizzle: Swizzle,
                                             k0: int) -> None:
    """Lanes' row addresses plus ldmatrix's distribution rule give each lane exactly the
    operand elements mma.m16n8k16 expects in its registers, whatever the storage."""
    warps, warp_tile, bk = (2, 2), (32, 32), 32
    shape = (warps[0] * warp_tile[0], bk) if role == "A" else (bk, warps[1] * warp_tile[1])
    rows, cols = (shape[1], shape[0]) if transposed else shape
    layout = SmemLayout(rows, cols, swizzle, transposed)
    tile = np.arange(shape[0] * shape[1], dtype=np.float64).reshape(shape)
    storage = np.full(layout.size, np.nan)
    for i in range(shape[0]):
        for j in range(shape[1]):
            storage[layout.logical_offset(i, j)] = tile[i, j]
    index, aligned = ldmatrix_index(layout, role, warps, warp_tile, k0)
    assert aligned
    lanes = storage[index]
    for w in range(warps[0] * warps[1]):
        wm, wn = divmod(w, warps[1])
        for lane in range(WARP_SIZE):
            for h in range(2):
                if role == "A":
                    for tm in range(warp_tile[0] // MMA_M):
                        for r in range(4):
                            m, k = mma_a_coord(lane, r, h)
                            row = wm * warp_tile[0] + tm * MMA_M + m
                            assert lanes[w, lane, 4 * tm + r, h] == tile[row, k0 + k]
                else:
                    for tn in range(warp_tile[1] // MMA_N):
                        for r in range(2):
                            k, n = mma_b_coord(lane, r, h)
                            col = wn * warp_tile[1] + tn * MMA_N + n
                            assert lanes[w, lane, 2 * tn + r, h] == tile[k0 + k, col]


def test_ldmatrix_refuses_rows_a_swizzle_splits() -> None:
    # Swizzling 4-element chunks moves half of a 16-byte ldmatrix row: not a legal address.
    layout = SmemLayout(32, 32, Swizzle(1, 2, 3))
    _, aligned = ldmatrix_index(layout, "A", (1, 1), (32, 32), 0)
    assert not aligned
