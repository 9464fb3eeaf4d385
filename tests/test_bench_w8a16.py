"""``tilec bench --w8a16`` on the CPU: the weight-only quantization rows' cases, their
float64 reference, the check-then-time flow over the numpy stand-in (a contender that skips
the scale fails its check and is not timed; torch's sits out without torch), the sample's
configurations (each compiles, skinny rows in their own tile) and the command line."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from tilec.benchmarking import w8a16
from tilec.tools import bench
from tilec.tools.arguments import CommandError

from .test_bench import NumpyArrays, counting_timer


class Int8Arrays(NumpyArrays):
    """The numpy stand-in with int8 weights (every value)."""

    def random(self, shape, dtype):
        if dtype == "i8":
            return self.rng.integers(-128, 128, shape).astype(np.int8)
        return super().random(shape, dtype)


class Dequantized(bench.Contender):
    """(A @ W.T) * scale in f32, written as f16; ``scaled=False`` forgets the scale."""

    def __init__(self, name: str, scaled: bool = True) -> None:
        self.name, self.scaled = name, scaled

    def prepare(self, case, inputs, outputs):
        def run(i: int) -> None:
            a, w, scale = inputs[i]
            c = a.astype(np.float32) @ w.T.astype(np.float32)
            outputs[i][...] = c * scale if self.scaled else c
        return run, f"{self.name} config"


def test_the_default_rows_are_a_decode_step_512_rows_and_4096():
    cases = w8a16.w8a16_cases(None)
    assert [(c.M, c.N, c.K, c.dtype) for c in cases] == [(16, 8192, 8192, "f16"),
                                                           (512, 8192, 8192, "f16"),
                                                           (4096, 4096, 4096, "f16")]
    assert cases[0].shape == "16x8192x8192 w8a16"
    # A f16, W int8 (half of f16's bytes), the scales f32, C f16.
    assert cases[0].weight_bytes() == 2 * 16 * 8192 + 8192 * 8192 + 4 * 8192 + 2 * 16 * 8192
    assert [c.shape for c in w8a16.w8a16_cases([[(100, 200, 300)]])] == ["100x200x300 w8a16"]


def test_the_reference_is_the_scaled_product_in_float64():
    arrays = Int8Arrays()
    a, w, scale = arrays.random((8, 16), "f16"), arrays.random((4, 16), "i8"), \
        arrays.random((4,), "f32")
    got = w8a16.w8a16_reference(arrays, a, w, scale)
    want = (a.astype(np.float64) @ w.astype(np.float64).T) * scale.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    assert got.dtype == np.float64


def test_each_contender_is_checked_and_only_passing_ones_timed():
    arrays = Int8Arrays()
    case = w8a16.W8A16Case(48, 40, 32, "f16")
    timed: list[int] = []
    racers = [Dequantized("good"), Dequantized("unscaled", scaled=False),
              w8a16.TorchDequantize(arrays)]
    result = w8a16.run_w8a16_case(case, arrays, racers, counting_timer(timed), None)
    m = result.measurements
    assert [m[n].status for n in ("good", "unscaled", "torch")] == ["ok", "FAIL", "n/a"]
    assert len(timed) == 1
    assert m["good"].error < 2 ** -10 and m["unscaled"].error > 0.5
    assert m["torch"].note == "the torch rows run on torch tensors"
    assert result.bound_bytes == case.weight_bytes()


class NoInt8Arrays(Int8Arrays):
    """An array library without int8 arrays (cupy's answer for i8)."""

    def unsupported(self, dtype):
        return "no int8 here" if dtype == "i8" else super().unsupported(dtype)

    def random(self, shape, dtype):
        raise AssertionError("a row its library cannot hold draws no inputs")


def test_a_library_without_int8_arrays_makes_the_row_n_a_for_every_contender():
    racers = [Dequantized("good"), w8a16.TorchDequantize(NoInt8Arrays())]
    result = w8a16.run_w8a16_case(w8a16.W8A16Case(48, 40, 32, "f16"), NoInt8Arrays(), racers,
                                  counting_timer([]), None)
    assert {name: (m.status, m.note) for name, m in result.measurements.items()} == {
        "good": ("n/a", "no int8 here"), "torch": ("n/a", "no int8 here")}
    assert result.sets == 0


@pytest.mark.parametrize("size, block_rows, split_k, product", [
    ((16, 8192, 8192), 16, 2, "mma"), ((32, 8192, 8192), 32, 1, "mma"),
    # below 1024 rows, swapped onto wgmma's register form (swap_product)
    ((48, 8192, 8192), 64, 1, "wgmma_rs"), ((128, 8192, 8192), 128, 1, "wgmma_rs"),
    ((512, 8192, 8192), 256, 1, "wgmma_rs"), ((1000, 1003, 77), 256, 1, "wgmma_rs"),
    ((4096, 4096, 4096), 128, 1, "wgmma")])
def test_tilec_runs_the_sample_in_a_configuration_that_compiles(size, block_rows, split_k,
                                                                product):
    """As the launch compiles it: W converted to f16 first where many rows re-read it."""
    from tilec.kernel import written_params
    from tilec.launch.packing import row_major_launch
    contender = w8a16.TilecW8A16({}, {"arch": "sm_90a"})
    case = w8a16.W8A16Case(*size, "f16")
    config = w8a16.tilec_config(case, "sm_90a")
    assert config.get("BM", 128) == block_rows and config.get("split_k", 1) == split_k
    M, N, K = size
    function = contender.w8a16_kernel()
    kernel = function.lower()
    _, spec = row_major_launch(kernel, dict(M=M, N=N, K=K), "auto", written_params(kernel),
                               "sm_90a")
    compiled = function.compile(arch="sm_90a", spec=spec, **config)
    assert compiled.kernel.schedule.tiling.kind == product
    assert compiled.options.split_k == split_k
    assert contender.unsupported(w8a16.W8A16Case(8, 8, 8, "bf16")) == "no bf16 w8a16 sample"


@pytest.mark.parametrize("argv, message", [
    (["--dtypes", "bf16"], "--w8a16 rows have f16 activations only, not bf16"),
    (["--autotune"], "--autotune is for the matmul rows"),
    (["--epilogue", "bias_gelu"], "--w8a16 and --epilogue are different rows"),
])
def test_the_command_line_refuses_what_the_w8a16_rows_do_not_run(argv, message):
    parser = bench.add_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--w8a16", *argv])
    with pytest.raises(CommandError, match=message):
        bench._check_w8a16_args(args)
    args = parser.parse_args(["--w8a16", "--sizes", "16x4096x4096"])
    bench._check_w8a16_args(args)  # accepted
    assert args.w8a16 and [c.shape for c in w8a16.w8a16_cases(args.sizes)] == \
        ["16x4096x4096 w8a16"]
