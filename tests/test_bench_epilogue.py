"""``tilec bench --epilogue bias_gelu`` on the CPU: the "f16 GEMM + bias + GELU" rows' cases,
their float64 reference, the check-then-time flow over the numpy stand-in (a contender that
skips the epilogue fails its check and is not timed), the contenders that need torch sitting
out, and the command line."""
from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from tilec.benchmarking import epilogue, tuning
from tilec.benchmarking.cases import Case
from tilec.tools import bench
from tilec.tools.arguments import CommandError

from .test_bench import NumpyArrays, counting_timer


def gelu64(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


class Fused(bench.Contender):
    """gelu(A @ B + bias) in f32, written as f16; ``gelu=False`` forgets the GELU."""

    def __init__(self, name: str, gelu: bool = True) -> None:
        self.name, self.gelu = name, gelu

    def prepare(self, case, inputs, outputs):
        def run(i: int) -> None:
            a, b, bias = inputs[i]
            x = a.astype(np.float32) @ b.astype(np.float32) + bias.astype(np.float32)
            outputs[i][...] = gelu64(x.astype(np.float64)) if self.gelu else x
        return run, f"{self.name} config"


def test_the_default_row_is_f16_gemm_bias_gelu_at_4096():
    (case,) = epilogue.epilogue_cases(None, "bias_gelu")
    assert (case.M, case.N, case.K, case.dtype) == (4096, 4096, 4096, "f16")
    assert case.shape == "4096+bias+gelu"
    assert case.product() == Case(4096, 4096, 4096, "f16")
    # One 2-D product: the epilogue name must not land in Case's batch count.
    assert (case.batch, case.epilogue, case.a_shape) == (1, "bias_gelu", (4096, 4096))
    cases = epilogue.epilogue_cases([[(100, 200, 300)]], "bias_gelu")
    assert [c.shape for c in cases] == ["100x200x300+bias+gelu"]


def test_the_reference_is_gelu_of_the_biased_product_in_float64():
    arrays = NumpyArrays()
    a = arrays.random((8, 16), "f16")
    b = arrays.random((16, 4), "f16")
    bias = arrays.random((4,), "f16")
    got = epilogue.bias_gelu_reference(arrays, a, b, bias)
    x = a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64)
    # The definition 1 + erf cancels for x << 0 (about 1e-16 |x| absolute); the reference
    # does not.
    np.testing.assert_allclose(got, gelu64(x), rtol=1e-13, atol=1e-14)
    assert got.dtype == np.float64


def test_each_contender_is_checked_against_the_epilogue_and_only_passing_ones_timed():
    arrays = NumpyArrays()
    case = epilogue.EpilogueCase(48, 40, 32, "f16")
    timed: list[int] = []
    racers = [Fused("good"), Fused("no_gelu", gelu=False),
                  epilogue.TorchUnfused(arrays), epilogue.TritonFused(arrays)]
    result = epilogue.run_epilogue_case(case, arrays, racers, counting_timer(timed), None)
    m = result.measurements
    assert [m[n].status for n in ("good", "no_gelu", "torch", "Triton")] == \
        ["ok", "FAIL", "n/a", "n/a"]
    assert timed == [7]
    assert m["good"].error < 2 ** -10 and m["no_gelu"].error > 0.05
    assert m["torch"].note == "the torch epilogue runs on torch tensors"
    assert result.bound_bytes == case.nbytes("f16") + 40 * 2


def test_tilec_runs_the_gelu_sample_in_the_products_tuned_configuration():
    contender = epilogue.TilecEpilogue({}, {"arch": "sm_90a"})
    kernel = contender.epilogue_kernel()
    assert kernel.name == "gemm_gelu"
    assert contender.unsupported(epilogue.EpilogueCase(8, 8, 8, "bf16")) == \
        "no bf16 epilogue sample"
    tuned = tuning.tuned_config(epilogue.EpilogueCase(4096, 4096, 4096, "f16").product(),
                                    "sm_90a")
    assert {knob: tuned[knob] for knob in ("BM", "BN", "BK", "stages")} == \
        dict(BM=128, BN=256, BK=64, stages=3)


@pytest.mark.parametrize("argv, message", [
    (["--dtypes", "bf16"], "--epilogue rows are f16 only, not bf16"),
    (["--autotune"], "--autotune is for the matmul rows"),
    (["--sizes", "8x256x256x256"], "--epilogue rows are 2-D products MxNxK, not 8x256x256x256"),
])
def test_the_command_line_refuses_what_the_epilogue_rows_do_not_run(argv, message):
    parser = bench.add_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--epilogue", "bias_gelu", *argv])
    with pytest.raises(CommandError, match=message):
        bench._check_epilogue_args(args)
    args = parser.parse_args(["--epilogue", "bias_gelu", "--sizes", "1024"])
    bench._check_epilogue_args(args)  # accepted
    assert args.epilogue == "bias_gelu"
