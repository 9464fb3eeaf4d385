"""Operand packing, without a GPU: which tensors a launch packs and how (the plan), the spec
the kernel is then compiled for, the launch arguments that reach both kernels, the scratch
pool, the pack kernel's PTX (assembled by ptxas for every target), and the CLI and benchmark
descriptions. tests/gpu/test_packing_gpu.py runs it all."""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tilec.backend.pack import (DESTINATIONS, PACK_PARAMS, SOURCES, convert_entry, convert_ptx,
                                pack_entry, pack_ptx, vector_elems)
from tilec.backend.ptx import ptx_header
from tilec.kernel import load_file, written_params
from tilec.launch.binding import bind_arguments, kernel_arguments, spec_for, tensor_spec
from tilec.options import ARCHS, Options, Spec, TensorSpec
from tilec.launch.packing import (
    MAX_GRID_Y,
    PACK_MIN_ELEMENTS,
    PACK_THREADS,
    PackPlan,
    Packer,
    ScratchPool,
    _pack_tensor,
    operand_tensors,
    pack_geometry,
    plan_packing,
    pooled_scratch,
    row_major_launch,
)
from tilec.runtime.arrays import ArrayArg, c_strides

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
PTXAS = shutil.which("ptxas")
BASE = 1 << 20  # a 16-byte aligned device address (never dereferenced here)


def sample(name: str):
    (function,) = load_file(SAMPLES / f"{name}.py").values()
    return function


def arg(name: str, shape, strides=None, dtype="f16", ptr=BASE) -> ArrayArg:
    strides = c_strides(shape) if strides is None else strides
    return ArrayArg(name=name, ptr=ptr, dtype=dtype, shape=tuple(shape),
                    strides=tuple(strides), device=0)


def matmul_args(m: int, n: int, k: int, dtype="f16") -> dict[str, ArrayArg]:
    return {"A": arg("A", (m, k), dtype=dtype), "B": arg("B", (k, n), dtype=dtype),
            "C": arg("C", (m, n), dtype="f32")}


def plan(name: str, tensors, policy="auto", pad=True, consts=None) -> PackPlan:
    """The sample's packing for these arguments (``pad=False``: without K padding)."""
    kernel = sample(name).lower(**(consts or {}))
    packing = plan_packing(kernel, tensors, policy, written_params(kernel))
    if pad:
        return packing
    return PackPlan(tuple(p.padded(0, p.source_shape[0]).padded(1, p.source_shape[1])
                          for p in packing.tensors))


# ---------------------------------------------------------------------------------- plan

@pytest.mark.parametrize("name", ["matmul", "matmul_bt", "gemm_epilogue"])
def test_operands_are_the_tensors_the_tiling_pass_copies(name):
    function = sample(name)
    tiling = function.compile().kernel.schedule.tiling
    assert operand_tensors(function.lower()) == tuple(o.tensor for o in tiling.operands)
    assert operand_tensors(function.lower()) == ("A", "B")


def test_ragged_f16_operands_are_packed_to_16_byte_rows():
    packing = plan("matmul", matmul_args(4095, 4097, 4093), pad=False)
    assert packing.names == ("A", "B") and packing.padded == ()
    a, b = packing.tensors
    assert (a.shape, a.strides, a.inner, a.row_stride) == ((4095, 4093), (4093, 1), 1, 4096)
    assert (b.shape, b.strides, b.inner, b.row_stride) == ((4093, 4097), (4097, 1), 1, 4160)
    assert a.packed_strides == (4096, 1) and b.packed_strides == (4160, 1)
    assert a.nbytes == 4095 * 4096 * 2
    assert packing.describe() == ["A packed to stride 4096 (rows were 2-byte aligned)",
                                  "B packed to stride 4160 (rows were 2-byte aligned)"]


def test_a_ragged_k_is_padded_with_zeros_to_whole_k_steps():
    packing = plan("matmul", matmul_args(4095, 4097, 4093))  # BK = 32
    assert packing.padded == (("K", 4096),)
    a, b = packing.tensors
    # A's K is its row: columns 4093..4095 are zeros within the stride it had anyway.
    assert (a.shape, a.source_shape, a.cols, a.rows, a.row_stride) == (
        (4095, 4096), (4095, 4093), 4093, 4095, 4096)
    # B's K is its rows: three zero rows more.
    assert (b.shape, b.source_shape, b.rows, b.source_rows) == (
        (4096, 4097), (4093, 4097), 4096, 4093)
    assert b.nbytes == 4096 * 4160 * 2
    assert packing.describe()[-1] == "K padded to 4096 with zeros"
    # BK = 128 past A's 128-byte stride: the stride grows with the padded row.
    wide = plan("matmul", matmul_args(4095, 4097, 4001), consts={"BK": 128})
    assert wide.tensors[0].row_stride == 4096 > -(-4001 // 64) * 64
    assert wide.padded == (("K", 4096),)
    # The launch binds the padded K, and the spec says what it divides.
    from tilec.launch.binding import Bound
    bound = Bound(matmul_args(4095, 4097, 4093), {}, {"M": 4095, "N": 4097, "K": 4093})
    assert packing.bound(bound).symbols == {"M": 4095, "N": 4097, "K": 4096}
    assert PackPlan(packing.tensors).bound(bound) is bound
    spec = packing.spec(spec_for(bound))
    assert spec.divides("K", 32) and spec.divides("K", 256) and not spec.divides("N", 2)


def test_the_padded_kernel_has_no_k_edge_mask():
    function = sample("matmul")
    kernel = function.lower()
    tensors = matmul_args(4095, 4097, 4093)
    spec = spec_for_tensors(tensors, {"M": 4095, "N": 4097, "K": 4093})
    padded = plan_packing(kernel, tensors, "auto")
    unpadded = PackPlan(plan_packing(kernel, tensors, "auto").tensors)  # same scratch, no pad
    masks = {}
    for name, packing in (("padded", padded), ("unpadded", unpadded)):
        compiled = function.compile(spec=packing.spec(spec))
        masks[name] = sorted({tuple(op.attrs["masked"]) for op in compiled.kernel.walk()
                              if op.name == "copy.global_to_shared"})
    # Rows of A (M) and columns of B (N) stay ragged; the K edge of both is gone.
    assert masks["unpadded"] == [(True, True)]
    assert masks["padded"] == [(False, True), (True, False)]


@pytest.mark.parametrize("why, source, tensors", [
    ("B is aligned, so not packed: its K rows past 4093 are someone else's memory",
     None, lambda: {**matmul_args(4095, 4096, 4093),
                    "B": arg("B", (4093, 4096), ptr=BASE)}),
    ("K divides BK already", None, lambda: matmul_args(4095, 4097, 4096)),
    ("the loop's bound is computed from K: a padded K would change its trips",
     '''
@tile
def short(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K - BK, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
''', lambda: matmul_args(4095, 4097, 4093)),
    ("a second tensor with K, D, is written, so never packed",
     '''
@tile
def two(A: f16[M, K], B: f16[K, N], C: f32[M, N], D: f32[M, K], BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
        D[m * BM : +BM, 0 : +BK] = zeros([BM, BK], f32)
''', lambda: {**matmul_args(4095, 4097, 4093), "D": arg("D", (4095, 4093), dtype="f32")}),
    ("A's tile is not the loop's step wide",
     '''
@tile
def half(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, 2 * BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
''', lambda: matmul_args(4095, 4097, 4093)),
])
def test_k_is_not_padded_when_zeros_could_change_the_result(why, source, tensors):
    if source is None:
        function = sample("matmul")
    else:
        header = "from tilec import f16, f32, tile\n"
        (function,) = load_file("padding.py", text=header + source).values()
    kernel = function.lower()
    packing = plan_packing(kernel, tensors(), "auto", written_params(kernel))
    assert packing.padded == (), why
    assert all(p.shape == p.source_shape for p in packing.tensors), why


def test_the_packed_spec_has_full_vectors_and_keeps_the_rest():
    tensors = matmul_args(4095, 4097, 4093)
    packing = plan("matmul", tensors)
    spec = spec_for_tensors(tensors, {"M": 4095, "N": 4097, "K": 4093})
    assert spec.tensor("A", 2, 2).vec_elems == 1
    packed = packing.spec(spec)
    assert packed.tensor("A", 2, 2) == packed.tensor("B", 2, 2) == TensorSpec(1, 8)
    assert packed.tensor("C", 2, 4) == spec.tensor("C", 2, 4)  # C is never packed
    # M and N keep what they divide; K is launched padded to 4096.
    assert dict(packed.divisible) == {**dict(spec.divisible), "K": 256}
    # The spec the plan claims is the one the launcher computes for the scratch itself.
    for p in packing.tensors:
        scratch = arg(p.name, p.shape, p.packed_strides, ptr=BASE + (1 << 24))
        assert tensor_spec(scratch) == p.spec
    options = Options(spec=spec)
    assert packing.options(options).spec == packed
    assert PackPlan().options(options) is options


def spec_for_tensors(tensors, symbols) -> Spec:
    from tilec.launch.binding import Bound
    return spec_for(Bound(tensors, {}, symbols))


def test_aligned_and_off_and_empty_pack_nothing():
    assert not plan("matmul", matmul_args(4096, 4096, 4096))
    assert not plan("matmul", matmul_args(4095, 4097, 4093), policy="off")
    assert not plan("matmul", matmul_args(4095, 4097, 0))  # K = 0: both operands empty
    assert plan("matmul", matmul_args(0, 4097, 4093)).names == ("B",)  # A is empty


def test_auto_skips_small_tensors_and_always_does_not():
    tensors = matmul_args(100, 4097, 101)  # A: 100 x 101, below the auto threshold
    assert tensors["A"].size < PACK_MIN_ELEMENTS <= tensors["B"].size
    assert plan("matmul", tensors).names == ("B",)
    assert plan("matmul", tensors, policy="always").names == ("A", "B")


def test_bf16_and_the_transposed_weight_of_matmul_bt():
    tensors = {"A": arg("A", (1000, 77), dtype="bf16"), "B": arg("B", (1003, 77), dtype="bf16"),
               "C": arg("C", (1000, 1003), dtype="f32")}
    packing = plan("matmul_bt", tensors)
    assert packing.names == ("A", "B")
    b = packing.tensors[1]
    # B is read transposed: its K is its row, padded to 96 within the 128-element stride.
    assert (b.shape, b.inner, b.row_stride, b.packed_strides) == ((1003, 96), 1, 128, (128, 1))
    assert packing.padded == (("K", 96),)


def test_column_major_strided_and_offset_operands():
    tensors = matmul_args(512, 512, 501)
    tensors["A"] = arg("A", (512, 501), (1, 515))          # column-major, 2-byte columns
    tensors["B"] = arg("B", (501, 512), (1024, 2))         # every other column: no unit dim
    a, b = plan("matmul", tensors).tensors
    assert (a.inner, a.row_stride, a.packed_strides) == (0, 512, (1, 512))
    assert a.reason == "columns were 2-byte aligned"
    assert (b.inner, b.row_stride, b.reason) == (1, 512, "no dim had unit stride")
    offset = matmul_args(512, 512, 512)
    offset["A"] = arg("A", (512, 512), ptr=BASE + 2)
    (a,) = plan("matmul", offset).tensors
    assert a.describe() == "A packed to stride 512 (its address was 2-byte aligned)"


def test_written_tensors_are_never_packed():
    kernel = sample("matmul").lower()
    tensors = matmul_args(4095, 4097, 4093)
    assert plan_packing(kernel, tensors, "always", written=("A",)).names == ("B",)
    gemm = sample("gemm_epilogue").lower()  # reads C in the epilogue, writes it: not an operand
    tensors = {**matmul_args(4095, 4097, 4093), "C": arg("C", (4095, 4097))}
    assert plan_packing(gemm, tensors, "always", written_params(gemm)).names == ("A", "B")


def test_compiled_for_the_packed_spec_the_copies_are_16_byte_cp_async():
    function = sample("matmul")
    kernel = function.lower()
    tensors = matmul_args(4095, 4097, 4093)
    spec = spec_for_tensors(tensors, {"M": 4095, "N": 4097, "K": 4093})
    packed = plan_packing(kernel, tensors, "auto").spec(spec)
    operands = function.compile(spec=packed).kernel.schedule.tiling.operands
    assert [o.vec for o in operands] == [8, 8]
    unpacked = function.compile(spec=spec)
    assert [o.vec for o in unpacked.kernel.schedule.tiling.operands] == [1, 1]
    assert "cp.async.cg" in function.compile(spec=packed).ptx
    assert "cp.async.cg" not in unpacked.ptx and "ld.global.nc.b16" in unpacked.ptx


def int8_args(m: int, n: int, k: int, dtype="i8") -> dict[str, ArrayArg]:
    """samples/int8_gemm.py's arguments (B stored [N, K]), row-major."""
    return {"A": arg("A", (m, k), dtype=dtype), "B": arg("B", (n, k), dtype=dtype),
            "Cq": arg("Cq", (m, n), dtype="i32"), "C": arg("C", (m, n), dtype="f32")}


def test_odd_k_8_bit_operands_are_packed_with_the_byte_pack_kernel():
    """K = 77 i8: 77-byte rows, 1-byte aligned; packed to whole 128-byte lines and K padded
    to whole BK steps, as f16 operands are (the pack kernel moves 1-byte elements)."""
    kernel = load_file(SAMPLES / "int8_gemm.py")["int8_gemm"].lower()
    packing = plan_packing(kernel, int8_args(1000, 1003, 77), "auto", ("Cq", "C"))
    assert packing.names == ("A", "B")
    a, b = packing.tensors
    assert (a.itemsize, a.source_shape, a.shape, a.row_stride) == (1, (1000, 77), (1000, 128),
                                                                    128)
    assert (b.source_shape, b.shape, b.row_stride) == ((1003, 77), (1003, 128), 128)
    assert packing.describe() == ["A packed to stride 128 (rows were 1-byte aligned)",
                                  "B packed to stride 128 (rows were 1-byte aligned)",
                                  "K padded to 128 with zeros"]
    assert a.spec == TensorSpec(1, 16)  # 16 one-byte elements a vector
    # fp8 bits alike; aligned rows (K = 4096) are not packed.
    fp8 = plan_packing(kernel, int8_args(1000, 1003, 77, "f8e4m3"), "auto", ("Cq", "C"))
    assert fp8.names == ("A", "B") and fp8.tensors[0].itemsize == 1
    assert not plan_packing(kernel, int8_args(1000, 1003, 4096), "auto", ("Cq", "C"))


def test_compiled_for_the_packed_spec_8_bit_copies_are_16_byte_cp_async():
    function = load_file(SAMPLES / "int8_gemm.py")["int8_gemm"]
    sizes = {"M": 1000, "N": 1003, "K": 77}
    tensors = int8_args(1000, 1003, 77)
    spec = spec_for_tensors(tensors, sizes)
    packed = plan_packing(function.lower(), tensors, "auto", ("Cq", "C")).spec(spec)
    assert [o.vec for o in function.compile(spec=packed).kernel.schedule.tiling.operands] == [
        16, 16]
    assert [o.vec for o in function.compile(spec=spec).kernel.schedule.tiling.operands] == [
        1, 1]
    # On sm_90a the packed operands are TMA-readable: wgmma8 takes the block.
    hopper = function.compile(spec=packed, arch="sm_90a", BK=128)
    assert hopper.kernel.schedule.tiling.kind == "wgmma8"


def test_row_major_launch_is_what_a_staged_host_launch_gets():
    kernel = sample("matmul").lower()
    sizes = {"M": 4095, "N": 4097, "K": 4093}
    packing, spec = row_major_launch(kernel, sizes, "auto", ("C",))
    assert packing == plan_packing(kernel, matmul_args(**dict(zip("mnk", sizes.values()))),
                                   "auto", ("C",))
    assert spec == packing.spec(spec_for_tensors(matmul_args(4095, 4097, 4093), sizes))


def test_options_check_the_policy():
    assert Options().pack == "auto"
    with pytest.raises(ValueError, match="pack must be one of auto, always, off"):
        Options(pack="sometimes")


# ------------------------------------------------------------------- launch arguments

class GpuArray:
    """Something exposing __cuda_array_interface__, as cupy or numba arrays do."""

    def __init__(self, shape, typestr="<f2", ptr=BASE):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "version": 3, "strides": None}


class FakeFunction:
    """A pack kernel; the patched driver launch records its launches here."""

    def __init__(self):
        self.launches = []


def fake_launch(function, grid, block, smem, stream, args, cluster=None):
    function.launches.append((grid, block, smem, tuple(args), stream))


@pytest.fixture(autouse=True)
def _fake_driver_launch(monkeypatch):
    monkeypatch.setattr("tilec.runtime.launch", fake_launch)


class FakeBuffer:
    def __init__(self, nbytes, ptr=BASE << 8):
        self.nbytes, self.ptr, self.freed = nbytes, ptr, False

    def free(self):
        self.freed = True


def test_packer_hands_both_kernels_the_scratch(monkeypatch):
    fake = FakeFunction()
    monkeypatch.setattr("tilec.launch.packing.pack_function", lambda itemsize, arch: fake)
    function = sample("matmul")
    arrays = {"A": GpuArray((300, 135)), "B": GpuArray((135, 263), ptr=BASE * 2),
              "C": GpuArray((300, 263), "<f4", ptr=BASE * 3)}
    bound = bind_arguments(function.signature.params, function.signature.symbols, [], arrays)
    a, b, c = (bound.tensors[name] for name in "ABC")
    packing = plan("matmul", bound.tensors)
    assert packing.names == ("A", "B")
    scratch = {"A": FakeBuffer(300 * 192 * 2, ptr=0xA0000), "B": FakeBuffer(160 * 320 * 2,
                                                                             ptr=0xB0000)}
    packer = Packer(packing, bound.tensors, "sm_90", scratch)
    packer.launch(stream=7)
    (grid_a, block_a, smem, args_a, stream), (_, _, _, args_b, _) = fake.launches
    assert (smem, stream) == (0, 7)
    # src, dst, rows, rows copied, cols, src row stride, src element stride, dst row stride
    assert args_a == (a.ptr, 0xA0000, 300, 300, 135, 135, 1, 192)  # whole 128-byte lines
    assert args_b == (b.ptr, 0xB0000, 160, 135, 263, 263, 1, 320)  # K padded to 160: 25 zero rows
    assert len(args_a) == len(PACK_PARAMS)
    assert (grid_a, block_a) == pack_geometry(packing.tensors[0])
    # The matmul reads the scratch with its padded stride; C stays the user's.
    compiled = function.compile(spec=packing.spec(spec_for(bound)))
    values = dict(zip([p.name for p in kernel_abi_params(compiled)],
                      kernel_arguments(compiled.kernel, packing.bound(bound), packer.args)))
    assert values["dim_K"] == 160
    assert (values["A_ptr"], values["A_stride0"], values["A_stride1"]) == (0xA0000, 192, 1)
    assert (values["B_ptr"], values["B_stride0"]) == (0xB0000, 320)
    assert (values["C_ptr"], values["C_stride0"]) == (c.ptr, 263)


def kernel_abi_params(compiled):
    from tilec.backend.signature import kernel_abi
    return kernel_abi(compiled.kernel)


def test_packer_refuses_short_scratch(monkeypatch):
    monkeypatch.setattr("tilec.launch.packing.pack_function", lambda itemsize, arch: FakeFunction())
    tensors = matmul_args(300, 263, 135)
    packing = plan("matmul", tensors)
    with pytest.raises(ValueError, match="scratch for A has 8 bytes"):
        Packer(packing, tensors, "sm_80", {"A": FakeBuffer(8), "B": FakeBuffer(1 << 20)})


@pytest.mark.parametrize("rows, cols, grid, block", [
    (4095, 4093, (2, 4095, 1), (256, 1, 1)),   # 512 vectors a row: two blocks of 256
    (1000, 77, (1, 63, 1), (16, 16, 1)),       # 16 vectors a row: 16 rows a block
    (3, 5, (1, 1, 1), (8, 32, 1)),             # one 128-byte line a row: 8 vectors
    (2**24, 3, (1, MAX_GRID_Y, 1), (8, 32, 1)),  # past 65535 x 32 rows the kernel loops
])
def test_pack_geometry(rows, cols, grid, block):
    packing = plan("matmul", {"A": arg("A", (rows, cols)), "B": arg("B", (cols, 64)),
                              "C": arg("C", (rows, 64), dtype="f32")}, policy="always")
    assert pack_geometry(packing.tensors[0]) == (grid, block)
    assert block[0] * block[1] == PACK_THREADS


def w8a16_weight(n: int, k: int, dtype: str = "i8"):
    """samples/w8a16.py's W ([N, K], k contiguous), packed under "always" (K ragged)."""
    packed = _pack_tensor(arg("W", (n, k), dtype=dtype), "always")
    assert packed is not None and packed.inner == 1
    return packed


def test_a_converted_tensor_counts_its_scratch_in_destination_elements():
    plain = w8a16_weight(1003, 60)
    assert (plain.row_stride, plain.nbytes, plain.spec) == (128, 1003 * 128, TensorSpec(1, 16))
    assert plain.scratch_dtype == "i8" and plain.converted is None
    for dest in ("f16", "bf16"):
        wide = plain.converting(dest)
        # 60 f16s fill 120 bytes: one 128-byte line, 64 elements (the i8 stride was 128).
        assert (wide.row_stride, wide.scratch_itemsize, wide.scratch_dtype) == (64, 2, dest)
        assert wide.nbytes == 1003 * 64 * 2
        assert wide.spec == TensorSpec(1, 8, dest)  # 8 two-byte elements a vector, in dest
        # The argument's side stays the argument's: what the kernel reads from.
        assert (wide.dtype, wide.itemsize, wide.strides, wide.cols) == ("i8", 1, (60, 1), 60)
        assert wide.describe() == f"W converted to {dest}, stride 64 (rows were 4-byte aligned)"
        assert wide.converting(dest, reason="").describe() == f"W converted to {dest}, stride 64"
    # A padded K counts destination elements too: 77 -> 128 f16s, two lines.
    padded = w8a16_weight(1003, 77).converting("f16").padded(1, 128)
    assert (padded.shape, padded.row_stride, padded.nbytes) == ((1003, 128), 128, 1003 * 256)
    assert padded.cols == 77
    # Padded first, converted after: the same scratch.
    assert w8a16_weight(1003, 77).padded(1, 128).converting("f16") == padded


@pytest.mark.parametrize("rows, cols, grid, block", [
    (1003, 60, (1, 32, 1), (8, 32, 1)),      # one line of f16s a row: 8 vectors
    (4096, 4093, (2, 4096, 1), (256, 1, 1)),  # 4096 f16s a row: 512 vectors
])
def test_the_converting_pack_geometry_counts_destination_vectors(rows, cols, grid, block):
    assert pack_geometry(w8a16_weight(rows, cols).converting("bf16")) == (grid, block)


@pytest.mark.parametrize("dtype, dest", [("f16", "f16"), ("i8", "f32"), ("i32", "f16")])
def test_converting_refuses_what_the_kernel_does_not_convert(dtype, dest):
    packed = dataclasses.replace(w8a16_weight(300, 135), dtype=dtype)
    with pytest.raises(ValueError, match=f"W: the pack converts i8, f8e4m3, f8e5m2 to f16 "
                                         f"or bf16, not {dtype} to {dest}"):
        packed.converting(dest)


@pytest.mark.parametrize("backend", ["ptx", "llvm"])
def test_packer_converts_with_the_converting_kernel_and_hands_over_f16(monkeypatch, backend):
    fake, asked = FakeFunction(), []

    def refuse(*args):
        raise AssertionError("a converting pack launched a plain pack kernel")

    monkeypatch.setattr("tilec.launch.packing.pack_function", refuse)
    monkeypatch.setattr("tilec.launch.packing.llvm_pack_function", refuse)
    monkeypatch.setattr("tilec.launch.packing.convert_function",
                        lambda source, dest, arch: asked.append((source, dest, arch)) or fake)
    source = arg("W", (1003, 77), strides=(80, 1), dtype="f8e4m3", ptr=BASE + 3)
    packed = _pack_tensor(source, "always").converting("f16").padded(1, 128)
    plan = PackPlan((packed,), (("K", 128),))
    with pytest.raises(ValueError, match=f"scratch for W has {1003 * 128} bytes, "
                                         f"{1003 * 256} needed"):
        Packer(plan, {"W": source}, "sm_86", {"W": FakeBuffer(1003 * 128)}, backend)
    packer = Packer(plan, {"W": source}, "sm_86", {"W": FakeBuffer(1003 * 256, ptr=0xC0000)},
                    backend)
    packer.launch()
    (grid, block, _, args, _), = fake.launches
    assert asked == [("f8e4m3", "f16", "sm_86")]
    # Source strides and cols in source elements, the scratch's stride in f16s.
    assert args == (BASE + 3, 0xC0000, 1003, 1003, 77, 80, 1, 128)
    assert (grid, block) == pack_geometry(packed) == ((1, 63, 1), (16, 16, 1))
    scratch = packer.args["W"]
    assert (scratch.ptr, scratch.dtype, scratch.itemsize) == (0xC0000, "f16", 2)
    assert (scratch.shape, scratch.strides) == ((1003, 128), (128, 1))


def test_the_converting_kernel_is_loaded_once_per_pair_and_target(loaded_modules):
    from tilec.launch import packing
    loaded = loaded_modules
    for _ in range(2):
        assert packing.convert_function("f8e5m2", "bf16", "sm_90") == "tilec_pack_f8e5m2_to_bf16"
    assert packing.convert_function("i8", "f16", "sm_90") == "tilec_pack_i8_to_f16"
    assert packing.pack_function(1, "sm_90") == "tilec_pack_b8"  # a key of its own
    assert loaded == [(convert_ptx("f8e5m2", "bf16", "sm_90"), "tilec_pack_f8e5m2_to_bf16"),
                      (convert_ptx("i8", "f16", "sm_90"), "tilec_pack_i8_to_f16"),
                      (pack_ptx(1, "sm_90"), "tilec_pack_b8")]


def test_pool_lends_each_buffer_once_and_keeps_a_few():
    pool = ScratchPool(limit=2)
    first, second, third = FakeBuffer(64), FakeBuffer(128), FakeBuffer(64)
    for buffer in (first, second, third):
        pool.give(buffer)
    assert first.freed and not second.freed and pool.sizes() == [128, 64]
    assert pool.take(64) is third and pool.sizes() == [128]
    packing = plan("matmul", matmul_args(300, 263, 135))
    pool.give(FakeBuffer(packing.tensors[0].nbytes))
    pool.give(FakeBuffer(packing.tensors[1].nbytes))
    with pooled_scratch(packing, pool) as scratch:
        assert len(pool) == 0  # both lent: a second launch gets its own
        assert [scratch[p.name].nbytes for p in packing.tensors] == \
            [p.nbytes for p in packing.tensors]
    assert sorted(pool.sizes()) == sorted(p.nbytes for p in packing.tensors)
    pool.clear()
    assert len(pool) == 0


# ------------------------------------------------------------------------ the pack PTX

@pytest.mark.parametrize("itemsize", [1, 2, 4])
def test_pack_ptx_shape(itemsize):
    ptx = pack_ptx(itemsize, "sm_90")
    assert pack_ptx(itemsize, "sm_90") is ptx  # memoised
    header = "\n".join(ptx_header(Options(arch="sm_90")))
    assert header in ptx and f".entry {pack_entry(itemsize)}(" in ptx
    per_vector = vector_elems(itemsize)
    kind = {1: "u8", 2: "b16", 4: "b32"}[itemsize]  # a byte zero-extended into a b32
    # Strided rows, and the last row of contiguous ones (its aligned chunks could reach past
    # the tensor's last byte): every element of the vector under its own in-row predicate.
    assert len(re.findall(rf"@%p\d+ ld\.global\.nc\.{kind} ", ptx)) == 2 * per_vector
    assert len(re.findall(r"@%p\d+ bra \$L_last_row", ptx)) == 1
    # Contiguous rows: two aligned 16-byte chunks, each only when the vector reaches it,
    # funnel-shifted into four words.
    assert len(re.findall(r"@%p\d+ ld\.global\.nc\.v4\.b32 ", ptx)) == 2
    assert ptx.count("shf.r.clamp.b32") == 4
    # Per path, one store of the loaded row and one of a zero row (a padded reduction dim);
    # one more for the contiguous path's last row.
    assert ptx.count("st.global.v4.b32") == 5
    assert len(re.findall(r"setp\.ge\.u32 %p\d+, %r\d+, %r\d+;\n\t@%p\d+ bra \$L_zero_row",
                          ptx)) == 2
    assert len(re.findall(r"mul\.wide\.u32", ptx)) >= 4  # 64-bit addresses
    params = re.findall(r"\.param \.(\w+) (\w+)", ptx)
    assert params == [(kind_, name) for name, kind_ in PACK_PARAMS]


def test_pack_ptx_refuses_other_sizes_and_targets():
    with pytest.raises(ValueError, match="1-, 2- or 4-byte"):
        pack_ptx(8, "sm_80")
    with pytest.raises(ValueError, match="unknown arch"):
        pack_ptx(2, "sm_70")


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("itemsize", [1, 2, 4])
def test_pack_ptx_assembles(tmp_path, arch, itemsize):
    assert_assembles_without_spills(tmp_path, pack_ptx(itemsize, arch), arch)


def assert_assembles_without_spills(tmp_path, ptx: str, arch: str) -> None:
    path = tmp_path / "pack.ptx"
    path.write_text(ptx)
    command = [PTXAS, "-v", f"-arch={arch}", str(path), "-o", str(tmp_path / "pack.cubin")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"Repro command: {' '.join(command)}\n{log}"
    assert re.search(r"Used \d+ registers", log), log
    assert "spill" not in log or "0 bytes spill stores" in log


CONVERSIONS = [(source, dest) for source in SOURCES for dest in DESTINATIONS]


@pytest.mark.parametrize("source, dest", CONVERSIONS)
def test_convert_ptx_shape(source, dest):
    ptx = convert_ptx(source, dest, "sm_80")
    assert convert_ptx(source, dest, "sm_80") is ptx  # memoised
    header = "\n".join(ptx_header(Options(arch="sm_80")))
    assert header in ptx and f".entry {convert_entry(source, dest)}(" in ptx
    assert convert_entry(source, dest) == f"tilec_pack_{source}_to_{dest}"
    assert re.findall(r"\.param \.(\w+) (\w+)", ptx) == [(k, n) for n, k in PACK_PARAMS]
    # A thread's 8 source bytes: two aligned 8-byte chunks (contiguous rows), or 8 bytes one
    # by one (strided rows, and the contiguous path's last row).
    assert len(re.findall(r"@%p\d+ ld\.global\.nc\.v2\.b32 ", ptx)) == 2
    assert "ld.global.nc.v4" not in ptx
    assert len(re.findall(r"@%p\d+ ld\.global\.nc\.u8 ", ptx)) == 2 * 8
    # Per loader, four pairs of f32s rounded once to the destination; no fp8 cvt (sm_89+).
    assert ptx.count(f"cvt.rn.{DESTINATIONS[dest]}.f32") == 3 * 4
    assert not re.search(r"e4m3x2|e5m2x2|\.ftz", ptx)
    scaled = {"i8": 0, "f8e4m3": 3 * 8, "f8e5m2": 3 * 8}[source]
    assert ptx.count("mul.rn.f32") == scaled
    assert ptx.count("st.global.v4.b32") == 5  # as the plain kernel's


def test_convert_ptx_refuses_other_pairs_and_targets():
    for source, dest in [("f16", "f16"), ("i8", "f32"), ("i32", "bf16")]:
        with pytest.raises(ValueError, match=f"the pack kernel converts i8, f8e4m3, f8e5m2 to "
                                             f"f16 or bf16, not {source} to {dest}"):
            convert_ptx(source, dest, "sm_80")
    with pytest.raises(ValueError, match="unknown arch"):
        convert_ptx("i8", "f16", "sm_70")


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("source, dest", CONVERSIONS)
def test_convert_ptx_assembles(tmp_path, arch, source, dest):
    assert_assembles_without_spills(tmp_path, convert_ptx(source, dest, arch), arch)


# ------------------------------------------------------------------------ descriptions

def test_describe_compiled_mentions_the_packing():
    from tilec.benchmarking.contenders import describe_compiled
    compiled = sample("matmul").compile(arch="sm_80")
    packing = plan("matmul", matmul_args(4095, 4097, 4093))
    assert describe_compiled(compiled) == "128x128x32 mma.sync warps 2x2 stages 3"
    assert describe_compiled(compiled, packing) == (
        "128x128x32 mma.sync warps 2x2 stages 3, "
        "A packed to stride 4096 (rows were 2-byte aligned), "
        "B packed to stride 4160 (rows were 2-byte aligned), K padded to 4096 with zeros")


def test_cli_explain_shows_the_packing_and_pack_off(capsys):
    from tilec.cli import main
    ragged = ["explain", str(SAMPLES / "matmul.py"), "--shape", "M=4095,N=4097,K=4093",
              "--no-ptxas"]
    assert main(ragged) == 0
    out = capsys.readouterr().out
    assert ("packed at launch, for row-major arrays of these sizes: A packed to stride 4096 "
            "(rows were 2-byte aligned); B packed to stride 4160") in out
    assert "8 x f16 = 16 B" in out
    assert main(ragged + ["--pack", "off"]) == 0
    out = capsys.readouterr().out
    assert "row-major arrays of these sizes: none" in out
    assert "1 x f16 = 2 B" in out and "8 x f16" not in out
    assert main(["explain", str(SAMPLES / "matmul.py"), "--no-ptxas"]) == 0
    assert "packed at launch" not in capsys.readouterr().out  # sizes unknown: not said


def test_cli_explain_says_why_a_b_off_128_byte_lines_is_read_in_place(capsys):
    from tilec.cli import main
    args = ["explain", str(SAMPLES / "matmul.py"), "--arch", "sm_90a", "--const",
            "BM=128", "BN=128", "BK=64", "--stages", "4", "--persistent", "--shape",
            "M=4096,N=4104,K=4096", "--no-ptxas"]
    assert main(args) == 0
    assert ("sizes: B packed to stride 4160 (rows 8208 bytes apart, not whole 128-byte "
            "lines)\n") in capsys.readouterr().out
    assert main(args + ["--cluster", "2"]) == 0
    assert ("sizes: none; B read in place (rows 8208 bytes apart, not whole 128-byte lines, "
            "re-read by 4096 rows: repacked from 8192, a cluster of 2 sharing each box)\n"
            ) in capsys.readouterr().out


def test_cli_explain_says_odd_k_int8_operands_are_packed(capsys):
    from tilec.cli import main
    ragged = ["explain", str(SAMPLES / "int8_gemm.py"), "--shape", "M=1000,N=1003,K=77",
              "--no-ptxas"]
    assert main(ragged) == 0
    out = capsys.readouterr().out
    assert ("packed at launch, for row-major arrays of these sizes: A packed to stride 128 "
            "(rows were 1-byte aligned); B packed to stride 128 (rows were 1-byte aligned); "
            "K padded to 128 with zeros") in out
    assert "16 x i8 = 16 B" in out
    assert main(ragged + ["--pack", "off"]) == 0
    out = capsys.readouterr().out
    assert "1 x i8 = 1 B" in out and "16 x i8" not in out


def test_cli_and_bench_take_pack():
    from tilec.tools import bench
    from tilec.cli import build_parser
    from tilec.tools.arguments import compile_options
    args = build_parser().parse_args(["run", "samples/matmul.py", "--pack", "off"])
    assert compile_options(args)["pack"] == "off"
    args = build_parser().parse_args(["compile", "samples/matmul.py"])
    assert "pack" not in compile_options(args)
    parser = bench.add_arguments(__import__("argparse").ArgumentParser())
    args = parser.parse_args(["--pack", "always"])
    assert bench._tilec_settings(args)[1] == {"pack": "always"}


# ------------------------------------------------------ sm_90a: rows off 128-byte lines

@pytest.mark.parametrize("m, n, k, packed", [
    (4096, 4104, 4096, ["B packed to stride 4160 (rows 8208 bytes apart, not whole "
                          "128-byte lines)"]),
    (8192, 1000, 512, ["B packed to stride 1024 (rows 2000 bytes apart, not whole 128-byte "
                       "lines)"]),
    (2048, 2056, 2048, []),  # fewer than PITCH_MIN_ROWS rows of A re-read B: the copy loses
    (4096, 4096, 4104, []),  # A is k-major: in place (repacking it lost 7% on the H100)
    (4096, 4096, 4096, []),  # whole 128-byte lines already
])
def test_sm_90a_repacks_an_n_major_b_whose_rows_are_off_128_byte_lines(m, n, k, packed):
    kernel = sample("matmul").lower()
    tensors = matmul_args(m, n, k)
    plan = plan_packing(kernel, tensors, "auto", written_params(kernel), arch="sm_90a")
    assert plan.describe() == packed
    # Rows off lines but too few re-reading them: read in place, and said so; a k-major
    # operand's boxes lose nothing to the pitch, so nothing is said.
    assert plan.in_place == ((f"B read in place (rows {2 * n} bytes apart, not whole 128-byte "
                              f"lines, re-read by {m} rows: repacked from 4096)",)
                             if (m, n, k) == (2048, 2056, 2048) else ())
    # Other targets, the llvm backend (no TMA) and "off" read B in place; "always" repacks
    # whatever the rows re-reading it.
    for arch, backend in (("sm_90", "ptx"), ("sm_80", "ptx"), ("sm_90a", "llvm")):
        assert not plan_packing(kernel, tensors, "auto", written_params(kernel), arch=arch,
                                backend=backend).tensors
    assert not plan_packing(kernel, tensors, "off", written_params(kernel), arch="sm_90a")
    always = plan_packing(kernel, tensors, "always", written_params(kernel), arch="sm_90a")
    assert {p.name for p in always.tensors} == \
        {name for name, size in (("A", k), ("B", n)) if size * 2 % 128}
    for entry in plan.tensors:
        assert entry.row_stride * 2 % 128 == 0 and entry.row_stride >= n


@pytest.mark.parametrize("m, cluster, packed", [
    (4096, 1, True),
    (4096, 2, False),   # the pair shares each B box: in place below twice PITCH_MIN_ROWS
    (8192, 2, True),
])
def test_a_cluster_that_multicasts_b_repacks_it_only_over_twice_the_rows(m, cluster, packed):
    kernel = sample("matmul").lower()
    plan = plan_packing(kernel, matmul_args(m, 4104, 4096), "auto", written_params(kernel),
                        arch="sm_90a", cluster=cluster)
    assert plan.names == (("B",) if packed else ())
    # What explain says of a B left in place.
    assert plan.in_place == (() if packed else (
        "B read in place (rows 8208 bytes apart, not whole 128-byte lines, re-read by 4096 "
        "rows: repacked from 8192, a cluster of 2 sharing each box)",))


def test_a_cluster_shares_no_a_box_so_an_m_major_a_keeps_the_threshold():
    kernel = sample("matmul").lower()
    tensors = matmul_args(4104, 4096, 4096)
    tensors["A"] = arg("A", (4104, 4096), (1, 4104))  # M-major, rows 8208 bytes apart
    for cluster in (1, 2):
        plan = plan_packing(kernel, tensors, "auto", written_params(kernel), arch="sm_90a",
                            cluster=cluster)
        assert plan.names == ("A",)


@pytest.mark.parametrize("n, cluster_n, packed", [
    (4096, 1, True),
    (4096, 2, False),   # a cluster's M row shares each A box: in place below twice the rows
    (8192, 2, True),
])
def test_a_cluster_along_n_that_multicasts_a_repacks_it_only_over_more_rows(n, cluster_n,
                                                                            packed):
    """An M-major A (rows 8208 bytes apart) shared by cluster_n blocks of an M row: its
    straddled lines cost each of them 1/cluster_n as much, as B's do a pair along M."""
    from tilec.options import Options
    kernel = sample("matmul").lower()
    tensors = matmul_args(4104, n, 4096)
    tensors["A"] = arg("A", (4104, 4096), (1, 4104))
    plan = plan_packing(kernel, tensors, "auto", written_params(kernel), arch="sm_90a",
                        options=Options(arch="sm_90a", cluster_n=cluster_n))
    assert plan.names == (("A",) if packed else ())
    assert plan.in_place == (() if packed else (
        f"A read in place (rows 8208 bytes apart, not whole 128-byte lines, re-read by {n} "
        "rows: repacked from 8192, a cluster of 2 sharing each box)",))


def test_a_repacked_b_gives_the_kernel_its_aligned_pitch():
    kernel = sample("matmul").lower()
    plan = plan_packing(kernel, matmul_args(4096, 1000, 512), "auto",
                        written_params(kernel), arch="sm_90a")
    (entry,) = plan.tensors
    assert entry.packed_strides == (1024, 1) and entry.shape == (512, 1000)
