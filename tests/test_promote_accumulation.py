"""passes/promote_accumulation.py: fp8 products on wgmma summed a K step at a time into a
second, f32 accumulator (``fp8_accumulation="promoted"``): which kernels it touches, the IR
and PTX it leaves (scale-d false on each strip's first instruction, the step's group
waited for, f32 adds), ptxas without serialization or spills, the product in the executor,
the register refusal and explain's line. GPU: tests/gpu/test_fp8_conversions_gpu.py."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileError
from tilec.families.catalogue import op_catalogue
from tilec.kernel import load_file
from tilec.options import Options
from tilec.passes import promote_accumulation
from tilec.pipeline import run_pipeline
from tilec.target import fp8

from .test_ptxas import assert_assembles_for_sm_90a

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
TILE = dict(BM=128, BN=128, BK=128)
PROMOTED = dict(arch="sm_90a", stages=4, fp8_accumulation="promoted")


def sample(name: str = "fp8_gemm", operands: str = "f8e4m3"):
    text = (SAMPLES / f"{name}.py").read_text().replace("f8e4m3", operands)
    return load_file(Path(f"{name}.py"), text=text)[name]


def lowered(function, tiles=TILE, **options):
    return run_pipeline(function.lower(**tiles), Options(**{**PROMOTED, **options})).kernel


def products(kernel):
    return [op for op in kernel.walk() if op.name == "wgmma.mma"]


@pytest.mark.parametrize("function, options", [
    (lambda: sample(), dict(fp8_accumulation="fast")),
    (lambda: sample(), dict(arch="sm_90")),  # mma.sync's fp8 products
    (lambda: sample("int8_gemm", "i8"), {}),  # exact i32 sums
])
def test_other_kernels_are_left_alone(function, options) -> None:
    kernel = lowered(function(), **options)
    assert not any(op.attrs.get("fresh") for op in products(kernel))
    assert not any(op.origin == promote_accumulation.NAME for op in kernel.walk())


@pytest.mark.parametrize("persistent", [False, True])
def test_the_loop_carries_the_partial_and_adds_it_each_step(persistent) -> None:
    kernel = lowered(sample(), persistent=persistent)
    (product,) = products(kernel)
    assert product.attrs["fresh"] is True and product.attrs["in_flight"] == 0
    loop = next(op for op in kernel.walk() if op.name == "scf.for" and product in op.regions[0].ops)
    body = loop.regions[0]
    add = body.ops[body.ops.index(product) + 1]
    assert add.name == "tile.add" and add.operands[1] is product.result
    main, partial = add.operands[0], product.operands[2]
    assert main in body.args and partial in body.args and main is not partial
    yielded = body.ops[-1].operands
    assert yielded[body.args.index(main) - 1] is add.result
    assert yielded[body.args.index(partial) - 1] is product.result
    assert len(loop.results) == len(body.args) - 1


def scale_d_predicates(ptx: str) -> tuple[str, str]:
    """The setp of the false and the true predicate wgmma's scale-d reads."""
    false = re.search(r"setp\.eq\.u32 (%p\d+), 1, 0;", ptx).group(1)
    true = re.search(r"setp\.ne\.u32 (%p\d+), 1, 0;", ptx).group(1)
    return false, true


@pytest.mark.parametrize("tiles, options, strips", [
    (TILE, dict(persistent=True), 1),
    (dict(BM=128, BN=192, BK=128), dict(persistent=True), 1),
    (dict(BM=256, BN=64, BK=128), dict(warpgroup_rows=128), 2),
    (dict(BM=64, BN=128, BK=128), dict(persistent=True, consumers="pingpong"), 1),
], ids=["128x128", "128x192", "256x64-128-row-warpgroups", "pingpong"])
def test_the_ptx_starts_each_strip_afresh_and_assembles_clean(tmp_path, tiles, options,
                                                              strips) -> None:
    ptx = sample().ptx(**tiles, **PROMOTED, **options)
    false, true = scale_d_predicates(ptx)
    wgmmas = [line for line in ptx.splitlines() if "wgmma.mma_async" in line]
    fresh = [line for line in wgmmas if f", {false}, 1, 1;" in line]
    assert len(fresh) == strips and len(wgmmas) == strips * 4  # BK 128: four k32 steps
    assert all(f", {true}, 1, 1;" in line for line in wgmmas if line not in fresh)
    accumulators = tiles["BM"] * tiles["BN"] // 256 if "consumers" not in options \
        else tiles["BM"] * tiles["BN"] // 128
    loop = ptx[ptx.index(wgmmas[0]):]
    loop = loop[:loop.index("bra")]
    assert "wgmma.wait_group.sync.aligned 0;" in loop
    assert loop.count("add.f32") == accumulators
    assert_assembles_for_sm_90a(ptx, tmp_path, "promoted")


@pytest.mark.parametrize("schedule", [dict(persistent=True),
                                      dict(persistent=True, stream_k=True),
                                      dict(persistent=True, cluster=2)],
                         ids=["persistent", "stream-k", "cluster"])
def test_the_promoted_kernel_computes_the_product_in_the_executor(schedule) -> None:
    kernel = lowered(sample(), **schedule)
    assert any(op.attrs.get("fresh") for op in products(kernel))
    rng = np.random.default_rng(5)
    m, n, k = 150, 140, 300
    a = fp8.encode(rng.standard_normal((m, k)), "f8e4m3")
    b = fp8.encode(rng.standard_normal((n, k)), "f8e4m3")
    values = {"A": a, "B": b, "C": np.full((m, n), np.nan, np.float16), "scale_a": 0.5,
              "scale_b": 1.0}
    run_kernel(kernel, values, ops=op_catalogue())
    reference = 0.5 * (fp8.decode(a, "f8e4m3").astype(np.float64)
                       @ fp8.decode(b, "f8e4m3").astype(np.float64).T)
    error = np.linalg.norm(values["C"] - reference) / np.linalg.norm(reference)
    assert error < 1e-3, error  # f16 C's rounding


def test_a_tile_whose_two_accumulator_sets_do_not_fit_is_refused_at_the_product() -> None:
    with pytest.raises(TileError) as info:
        lowered(sample(), tiles=dict(BM=128, BN=256, BK=128))
    shown = str(info.value)
    assert "promoted fp8 accumulation keeps a second accumulator set: at 128x256 a consumer " \
        "thread would need 2 x 128 f32 accumulators" in shown, shown
    source_line, caret = shown.splitlines()[1:3]
    assert source_line[caret.index("^"):].startswith("@ B.T")
    assert "BN=128" in shown and "fp8_accumulation='fast'" in shown


def test_explain_says_how_the_products_are_summed() -> None:
    from tilec.tools.explain import explain, render_explanation

    def text(compiled) -> str:
        return render_explanation(explain(compiled, ptxas=False))
    promoted = text(sample().compile(**TILE, **PROMOTED))
    assert "accumulation      promoted: each K step's wgmma group starts afresh" in promoted
    assert "estimate  168: 128 accumulators" in promoted  # both sets counted
    fast = text(sample().compile(**TILE, arch="sm_90a", stages=4))
    assert "accumulation      fast: the fp8 products sum in the tensor cores' own" in fast
    assert "accumulation  " not in text(sample("matmul", "f16").compile(arch="sm_90a"))


def test_the_option_is_checked_and_reaches_the_command_line() -> None:
    with pytest.raises(ValueError, match="fp8_accumulation must be one of fast, promoted"):
        Options(fp8_accumulation="exact")
    from tilec.tools.arguments import COMPILE_FLAGS
    assert "fp8_accumulation" in COMPILE_FLAGS


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (2048, 2048, 2048), (1024, 1024, 1024),
                                   (8192, 8192, 256), (4095, 4097, 4096)],
                         ids=["tiled", "tiled-one-wave", "small", "shallow", "ragged"])
def test_the_bench_tunes_promoted_rows_to_tiles_that_fit_and_times_cublas_alike(shape) -> None:
    """`tilec bench --dtypes f8e4m3 --fp8-accumulation promoted`: tilec's tuned tile of each
    problem class leaves room for the second accumulator set, and cuBLAS runs without fast
    accumulation (the same sums)."""
    from tilec.benchmarking.cases import Case
    from tilec.benchmarking.contenders import CublasContender
    from tilec.benchmarking.tuning import tuned_config
    case = Case(*shape, "f8e4m3")
    config = tuned_config(case, "sm_90a", "ptx", "promoted")
    tiles = {k: config.pop(k) for k in ("BM", "BN", "BK")}
    kernel = lowered(sample(), tiles=tiles, **config)
    assert any(op.attrs.get("fresh") for op in products(kernel))
    torch_like = SimpleNamespace(name="torch")
    _, text = CublasContender(torch_like, "promoted").prepare(case, [], [])
    assert "torch._scaled_mm" in text and "use_fast_accum=False" in text
    _, text = CublasContender(torch_like).prepare(case, [], [])
    assert "use_fast_accum=True" in text
