"""The swap_product pass: a product converting an 8-bit B (w8a16) computed as C.T = W @ A.T so
the weights feed wgmma's register form, and under swap_product="always" a plain 16-bit one
as C.T = B.T @ A.T, its block rows along wgmma's n. Where it applies and why not elsewhere,
that it leaves its input alone, the IR it writes, and the swapped kernels run in the
executor against the frontend's interpreter and float64 (epilogues with vectors, C loads
and elementwise math among them)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.families.catalogue import op_catalogue
from tilec.families.tma_boxes import LOAD, tensor_map_box
from tilec.ir.printer import print_kernel
from tilec.kernel import load_file
from tilec.options import Options
from tilec.passes import swap_product
from tilec.pipeline import run_pipeline

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
HOPPER = Options(arch="sm_90a")


def w8a16():
    return load_file(SAMPLES / "w8a16.py")["w8a16"]


EPILOGUES = '''from __future__ import annotations
from tilec import f16, f32, i8, tile

@tile
def bias_relu(A: f16[M, K], W: i8[N, K], scale: f32[N], bias: f16[N], C: f16[M, N],
              BM=128, BN=128, BK=128):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ W.T[k : +BK, n * BN : +BN].to(f16)
        y = acc * scale[n * BN : +BN][None, :] + bias[n * BN : +BN].to(f32)
        C[m * BM : +BM, n * BN : +BN] = relu(y).to(f16)

@tile
def residual(A: f16[M, K], W: i8[N, K], R: f16[M, N], rowscale: f32[M], C: f32[M, N],
             BM=64, BN=128, BK=128):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ W.T[k : +BK, n * BN : +BN].to(f16)
        r = R[m * BM : +BM, n * BN : +BN].to(f32)
        s = rowscale[m * BM : +BM][:, None]
        C[m * BM : +BM, n * BN : +BN] = where(r > 0.0, acc * s + r, sigmoid(acc))
'''


@pytest.fixture(scope="module")
def epilogues(tmp_path_factory):
    path = tmp_path_factory.mktemp("swap") / "epilogues.py"
    path.write_text(EPILOGUES)
    return load_file(path)


@pytest.mark.parametrize("bk", [128, 64, 32])
def test_it_swaps_w8a16_where_the_register_form_takes_the_block(bk) -> None:
    """BK 128, and the sample's default 64 and 32: W's rows 128, 64 or 32 bytes, in TMA's
    swizzle of that span."""
    kernel = run_pipeline(w8a16().lower(BK=bk), HOPPER).kernel
    assert kernel.schedule.swap.swapped
    assert kernel.schedule.tiling.kind == "wgmma_rs"
    w = next(op for op in kernel.schedule.tiling.operands if op.role == "A")
    assert w.layout.slab == min(bk, 128)  # one byte an element


@pytest.mark.parametrize("consts, options, why", [
    (dict(BK=16), HOPPER, "BK=16 is not a multiple of 32"),
    (dict(BK=128), Options(arch="sm_90"), "wgmma needs arch sm_90a"),
    (dict(BK=128, BM=64, BN=32), HOPPER, "BM=32 is not 64 to 256"),
    (dict(BK=128), Options(arch="sm_90a", warps=(2, 2)), "an explicit warp grid"),
])
def test_where_it_declines_it_says_why_and_keeps_the_product(consts, options, why) -> None:
    kernel = w8a16().lower(**consts)
    swap = swap_product.run(kernel, options).schedule.swap
    assert not swap.swapped and why in swap.why
    if options.cluster == 1:  # the kept product on mma.sync, which takes no clusters
        assert run_pipeline(kernel, options).kernel.schedule.tiling.kind == "mma"


def test_it_can_be_disabled_and_says_nothing_of_other_products() -> None:
    off = Options(arch="sm_90a", disable=("swap_product",))
    kernel = run_pipeline(w8a16().lower(BK=128), off).kernel
    assert kernel.schedule.swap is None and kernel.schedule.tiling.kind == "mma"
    plain = load_file(SAMPLES / "matmul.py")["matmul"].lower(BK=64)
    assert run_pipeline(plain, HOPPER).kernel.schedule.swap is None


def test_it_leaves_its_input_alone_and_writes_the_transpose() -> None:
    kernel = w8a16().lower(BK=128)
    before = print_kernel(kernel)
    swapped = swap_product.run(kernel, HOPPER)
    assert print_kernel(kernel) == before
    text = print_kernel(swapped)
    assert "tile.load %W, " in text and "tensor.transpose %A" in text
    assert "tile.reshape" in text and "tile.store %C_T" in text
    assert "#swap = {swapped = true" in text


def test_an_epilogue_it_cannot_transpose_is_declined(tmp_path) -> None:
    path = tmp_path / "dot_after.py"
    path.write_text(EPILOGUES.split("@tile")[0] + '''
@tile
def batched(A: f16[Bt, M, K], W: i8[N, K], C: f16[Bt, M, N], BM=128, BN=128, BK=128):
    for b, m, n in grid(Bt, cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[b, m * BM : +BM, k : +BK] @ W.T[k : +BK, n * BN : +BN].to(f16)
        C[b, m * BM : +BM, n * BN : +BN] = acc.to(f16)
''')
    kernel = run_pipeline(load_file(path)["batched"].lower(), HOPPER).kernel
    assert not kernel.schedule.swap.swapped
    assert "not a tile loaded from a 2-D tensor parameter" in kernel.schedule.swap.why


def run_both(function, values: dict, **consts) -> tuple[dict, dict]:
    """The frontend's interpreter and the swapped, lowered kernel in the executor, each on
    its own copy of ``values``."""
    reference = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in values.items()}
    run_kernel(function.lower(**consts), reference)
    kernel = run_pipeline(function.lower(**consts), HOPPER).kernel
    assert kernel.schedule.swap.swapped, kernel.schedule.swap
    run_kernel(kernel, values, ops=op_catalogue())
    return reference, values


@pytest.mark.parametrize("bk", [128, 64, 32])
def test_w8a16_swapped_matches_the_interpreter_and_float64_at_ragged_sizes(bk) -> None:
    """W's rows in TMA's 128-, 64- and 32-byte swizzles."""
    rng = np.random.default_rng(21)
    m, n, k = 150, 200, 300
    a = rng.standard_normal((m, k)).astype(np.float16)
    w = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    scale = (rng.random(n) / 64).astype(np.float32)
    values = {"A": a, "W": w, "scale": scale, "C": np.full((m, n), np.nan, np.float16)}
    reference, got = run_both(w8a16(), values, BK=bk)
    exact = (a.astype(np.float64) @ w.astype(np.float64).T) * scale
    for out in (reference["C"], got["C"]):
        assert np.linalg.norm(out - exact) / np.linalg.norm(exact) < 2e-3
    np.testing.assert_allclose(got["C"].astype(np.float32), reference["C"].astype(np.float32),
                               rtol=2e-2, atol=2e-2)


def test_epilogues_with_vectors_c_loads_and_math_transpose(epilogues) -> None:
    rng = np.random.default_rng(22)
    m, n, k = 100, 260, 256
    a = rng.standard_normal((m, k)).astype(np.float16)
    w = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    values = {"A": a, "W": w, "scale": (rng.random(n) / 64).astype(np.float32),
              "bias": rng.standard_normal(n).astype(np.float16),
              "C": np.full((m, n), np.nan, np.float16)}
    reference, got = run_both(epilogues["bias_relu"], values)
    np.testing.assert_allclose(got["C"].astype(np.float32), reference["C"].astype(np.float32),
                               rtol=2e-2, atol=2e-2)
    values = {"A": a, "W": w, "R": rng.standard_normal((m, n)).astype(np.float16),
              "rowscale": rng.random(m).astype(np.float32),
              "C": np.full((m, n), np.nan, np.float32)}
    reference, got = run_both(epilogues["residual"], values)
    np.testing.assert_allclose(got["C"], reference["C"], rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("consts, options", [
    (dict(BK=128), dict(split_k=3)),
    (dict(BM=128, BN=128, BK=128), dict(persistent=True, stream_k=True)),
    (dict(BM=128, BN=64, BK=128), dict(persistent=True, consumers="pingpong")),
    (dict(BM=256, BN=64, BK=128), dict(raster_group=4)),
    (dict(BK=128), dict(cluster=2)),
    (dict(BK=128), dict(cluster=4, persistent=True)),
], ids=["split-k", "stream-k", "pingpong", "256x64", "cluster", "cluster4"])
def test_the_swapped_product_in_the_schedules_of_wgmma(consts, options) -> None:
    """Split-K slices, stream-K parts, pingpong turns and a cluster's blocks (sharing W, the
    swapped A; in pairs, and persistent in fours) over the swapped product, in the executor
    against float64 (one rounding per wgmma, then one to f16)."""
    rng = np.random.default_rng(23)
    m, n, k = 150, 300, 520
    a = rng.standard_normal((m, k)).astype(np.float16)
    w = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    scale = (rng.random(n) / 64).astype(np.float32)
    kernel = run_pipeline(w8a16().lower(**consts), Options(arch="sm_90a", **options)).kernel
    assert kernel.schedule.swap.swapped and kernel.schedule.tiling.kind == "wgmma_rs"
    values = {"A": a, "W": w, "scale": scale, "C": np.full((m, n), np.nan, np.float16)}
    run_kernel(kernel, values, ops=op_catalogue())
    exact = (a.astype(np.float64) @ w.astype(np.float64).T) * scale
    assert np.linalg.norm(values["C"] - exact) / np.linalg.norm(exact) < 2e-3


def test_the_compile_summary_says_the_tile_is_c_transposed() -> None:
    from tilec.tools.compile_command import summary
    compiled = w8a16().compile(arch="sm_90a", BM=128, BN=64, BK=128)
    assert "tile 64x128x128 of C.T (swapped: C.T = W @ A.T)" in summary(compiled)
    plain = w8a16().compile(arch="sm_90a", BM=128, BN=64, BK=16)
    assert "tile 128x64x16, " in summary(plain)


# ---------------------------------------------------------------- plain 16-bit products

SWAP16 = Options(arch="sm_90a", swap_product="always")


def sample(name: str, kernel: str = ""):
    return load_file(SAMPLES / f"{name}.py")[kernel or name]


@pytest.mark.parametrize("name", ["matmul", "matmul_bt", "gemm_gelu"])
def test_always_swaps_a_plain_product_its_rows_along_wgmma_n(name) -> None:
    """152 rows, not a multiple of 64 (wgmma's m) but of 8 (its n): B read as wgmma's A, its
    tile transposed or not as B is stored; A.T as wgmma's B, k contiguous."""
    kernel = run_pipeline(sample(name).lower(BM=152, BN=128, BK=64), SWAP16).kernel
    swap, plan = kernel.schedule.swap, kernel.schedule.tiling
    assert swap.swapped and swap.formula == "C.T = B.T @ A.T", swap
    assert plan.kind == "wgmma" and plan.block == (128, 152, 64)
    roles = {op.role: op for op in plan.operands}
    assert roles["A"].tensor == "B" and roles["B"].tensor == "A" and roles["B"].k_major
    assert roles["A"].k_major == (name == "matmul_bt")


@pytest.mark.parametrize("cluster", [2, 4])
def test_a_cluster_shares_the_swapped_a_the_programs_b(cluster) -> None:
    """The blocks of a cluster along m share B's tile, the swapped product's A: that is the
    operand TMA multicasts, 1/cluster of its box's rows a block."""
    kernel = run_pipeline(sample("matmul").lower(BM=152, BN=128, BK=64),
                          Options(arch="sm_90a", swap_product="always", cluster=cluster)).kernel
    assert kernel.schedule.swap.swapped and kernel.schedule.roles.cluster == cluster
    loads = {op.attrs["tensor"]: op for op in kernel.walk() if op.name == LOAD}
    assert loads["B"].attrs["multicast"] == cluster and "multicast" not in loads["A"].attrs
    assert tensor_map_box(kernel, "B") == (64, 64 // cluster, 128)  # B.T's 64 k rows, shared


def test_auto_leaves_plain_products_alone() -> None:
    kernel = run_pipeline(sample("matmul").lower(BM=128, BN=128, BK=64), HOPPER).kernel
    assert kernel.schedule.swap is None


@pytest.mark.parametrize("consts, options, why", [
    (dict(BM=100), SWAP16, "BN=100 is not a multiple of 8"),
    (dict(BM=152), Options(arch="sm_90", swap_product="always"), "wgmma needs arch sm_90a"),
    (dict(BM=152), Options(arch="sm_90a", swap_product="always", backend="llvm"),
     "emits no wgmma"),
    (dict(BM=128, BK=16), SWAP16, "BK=16 is under 64"),
])
def test_always_declines_with_the_reason_and_keeps_the_product(consts, options, why) -> None:
    kernel = sample("matmul").lower(**{"BN": 128, "BK": 64, **consts})
    swap = swap_product.run(kernel, options).schedule.swap
    assert not swap.swapped and why in swap.why, swap.why


def test_a_converted_16_bit_b_is_not_swapped(tmp_path) -> None:
    path = tmp_path / "cast_b.py"
    path.write_text(EPILOGUES.split("@tile")[0] + '''
@tile
def cast_b(A: f16[M, K], B: bf16[K, N], C: f32[M, N], BM=128, BN=128, BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN].to(f16)
        C[m * BM : +BM, n * BN : +BN] = acc
'''.replace("i8, tile", "bf16, i8, tile"))
    swap = swap_product.run(load_file(path)["cast_b"].lower(), SWAP16).schedule.swap
    assert not swap.swapped and "operand B is converted in the K loop" in swap.why


def run_swapped16(function, values: dict, consts: dict, **options) -> tuple[dict, dict]:
    """The frontend's interpreter and the swapped kernel in the executor, each on its own
    copy of ``values``."""
    reference = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in values.items()}
    run_kernel(function.lower(**consts), reference)
    kernel = run_pipeline(function.lower(**consts),
                          Options(arch="sm_90a", swap_product="always", **options)).kernel
    assert kernel.schedule.swap.swapped, kernel.schedule.swap
    run_kernel(kernel, values, ops=op_catalogue())
    return reference, values


@pytest.mark.parametrize("name, bm, options", [
    ("matmul", 152, {}),
    ("matmul_bt", 104, {}),
    ("matmul", 88, dict(split_k=2)),
    ("matmul", 152, dict(cluster=2)),
    ("matmul_bt", 104, dict(cluster=2, persistent=True)),
], ids=["matmul-152", "matmul_bt-104", "matmul-88-split2", "matmul-152-cluster",
        "matmul_bt-104-cluster-persistent"])
def test_swapped_16_bit_products_match_the_interpreter_and_float64(name, bm, options) -> None:
    """M = 150 in tiles of 152, 104 or 88 rows (the last partial), ragged N and K; in
    clusters of 2, the pair's second block lies past M (one M tile, or two and then a
    persistent block's second pair)."""
    rng = np.random.default_rng(24)
    m, n, k = 150, 136, 200
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k) if name == "matmul_bt" else (k, n)).astype(np.float16)
    values = {"A": a, "B": b, "C": np.full((m, n), np.nan, np.float32)}
    reference, got = run_swapped16(sample(name), values, dict(BM=bm, BN=64, BK=64),
                                   **options)
    b64 = b.astype(np.float64)
    exact = a.astype(np.float64) @ (b64.T if name == "matmul_bt" else b64)
    for out in (reference["C"], got["C"]):
        assert np.linalg.norm(out - exact) / np.linalg.norm(exact) < 1e-5
    np.testing.assert_allclose(got["C"], reference["C"], rtol=1e-5, atol=1e-4)


def test_a_swapped_bias_gelu_epilogue_matches_the_interpreter() -> None:
    rng = np.random.default_rng(25)
    m, n, k = 100, 136, 128
    function = sample("gemm_gelu")
    params = [p.name for p in function.lower().params]
    values = {"A": rng.standard_normal((m, k)).astype(np.float16),
              "B": rng.standard_normal((k, n)).astype(np.float16),
              "C": np.full((m, n), np.nan, np.float16)}
    for name in params:
        if name not in values:
            values[name] = rng.standard_normal(n).astype(np.float16)
    reference, got = run_swapped16(function, values, dict(BM=104, BN=64, BK=64))
    np.testing.assert_allclose(got["C"].astype(np.float32), reference["C"].astype(np.float32),
                               rtol=2e-2, atol=2e-2)


def test_wgmma_takes_n_in_steps_of_8_where_b_is_k_major() -> None:
    """BN counts a K-major B's rows (any multiple of wgmma's n step, 8); an N-major B's rows
    are BN long, whole slabs of TMA's narrowest swizzle span (16 elements)."""
    from tilec.families.wgmma import FAMILY as WGMMA
    from tilec.ir.schedule import OperandPlan
    from tilec.target.layout import SmemLayout
    a = OperandPlan("A", "A", SmemLayout(128, 64), 8)
    k_major = OperandPlan("B", "B", SmemLayout(152, 64, transposed=True), 8)
    n_major = OperandPlan("B", "B", SmemLayout(64, 152), 8)
    assert k_major.k_major and not n_major.k_major
    assert WGMMA.declined((128, 152, 64), HOPPER, (a, k_major)) is None
    assert "BN=152 is not a multiple of 16 with B stored n contiguous" in \
        WGMMA.declined((128, 152, 64), HOPPER, (a, n_major))
    assert WGMMA.declined((128, 160, 64), HOPPER,
                          (a, OperandPlan("B", "B", SmemLayout(64, 160), 8))) is None
    assert "BN=148 is not a multiple of 8" in WGMMA.declined((128, 148, 64), HOPPER,
                                                            (a, k_major))


def test_always_swaps_an_int8_product_exactly(capsys) -> None:
    """i8 x i8 on wgmma8 (both operands k-contiguous once swapped): the swapped kernel in
    the CPU executor is integer-exact against float64 (`tilec run --cpu` checks it)."""
    from tilec.cli import main
    assert main(["run", str(SAMPLES / "int8_gemm.py"), "--cpu", "--arch", "sm_90a",
                 "--shape", "M=150,N=130,K=256", "--const", "BM=152,BN=64,BK=128",
                 "--stages", "3", "--swap-product", "always"]) == 0
    out = capsys.readouterr().out
    assert "tile 64x152x128 of C.T (swapped: C.T = B.T @ A.T)" in out and "wgmma8" in out
    assert "max abs err 0, rel Frobenius err 0 (tolerance 0) ok" in out


ACC_IN_LOOP = '''from __future__ import annotations
from tilec import f16, f32, tile

@tile
def acc_in_loop(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=128, BN=128, BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
            acc = acc * 0.5
        C[m * BM : +BM, n * BN : +BN] = acc
'''


def test_a_k_loop_computing_other_tiles_is_left_as_written(tmp_path) -> None:
    """Found by the fuzzer: an op on the accumulator after the product, inside the K loop,
    was left untransposed and the loop yielded the wrong type (an IR invariant broken).
    Now declined, with the reason, and tiling's own located error follows."""
    from tilec.errors import TileConfigError
    path = tmp_path / "acc_in_loop.py"
    path.write_text(ACC_IN_LOOP)
    function = load_file(path)["acc_in_loop"]
    swap = swap_product.run(function.lower(), SWAP16).schedule.swap
    assert not swap.swapped and "the K loop computes other 2-D tiles (tile." in swap.why
    with pytest.raises(TileConfigError, match="only `acc \\+= a @ b` may compute a tile"):
        function.compile(arch="sm_90a", swap_product="always")
    with pytest.raises(TileConfigError, match="left the product as written: the K loop"):
        function.compile(arch="sm_90a", swap_product="always", BM=152)


RESIDUAL_FIRST = '''from __future__ import annotations
from tilec import f16, f32, tile

@tile
def residual_first(A: f16[M, K], B: f16[K, N], R: f16[M, N], C: f16[M, N],
                   BM=152, BN=128, BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        r = R[m * BM : +BM, n * BN : +BN].to(f32)
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = (acc + r).to(f16)
'''


def test_a_block_only_the_swap_takes_fails_saying_why_the_swap_was_declined(tmp_path):
    from tilec.errors import TileConfigError
    path = tmp_path / "residual_first.py"
    path.write_text(RESIDUAL_FIRST)
    with pytest.raises(TileConfigError) as err:
        load_file(path)["residual_first"].compile(arch="sm_90a", swap_product="always")
    assert "swap_product='always' left the product as written: a 2-D tile is computed " \
        "before the K loop" in str(err.value)
