"""``tilec bench`` on the CPU: the command line and the sweep's cases, the no-GPU exit, the
mma.sync loop through ptxas, the check-then-time flow over a numpy stand-in for torch (poisoned
outputs, float64 references, FAIL never timed, rotation over every input set), the event
timer, the table, the JSON and the plot. The GPU test at the end runs a small real sweep."""
from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tilec.tools import bench
from tilec.tools.bench import Case, CaseResult, Measurement, References, Report
from tilec.benchmarking import ceilings, contenders, tuning
from tilec.cli import build_parser
from tilec.tools.arguments import CommandError
from tilec.cli import main as cli_main
from tilec.families.tf32 import round_tf32
from tilec.runtime import driver

from .test_ptxas import load_sample

ROOT = Path(__file__).resolve().parents[1]
PTXAS = shutil.which("ptxas")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"


# -- a numpy stand-in for torch, with a clock the event timer reads -----------------------

class FakeEvent:
    def __init__(self, arrays: "NumpyArrays") -> None:
        self.arrays, self.time = arrays, None

    def record(self) -> None:
        self.time = self.arrays.now


class NumpyArrays:
    name = "numpy"
    version = np.__version__
    tf32 = False
    dtypes = {"f16": np.float16, "bf16": np.float32, "f32": np.float32,  # bf16: a stand-in
              "tf32": np.float32}

    def __init__(self, l2_bytes: int = 64 * 1024) -> None:
        self.l2_bytes = l2_bytes
        self.rng = np.random.default_rng(0)
        self.now = 0.0  # milliseconds; steps under test advance it
        self.tf32_calls: list[bool] = []
        self.flushes = 0

    def unsupported(self, dtype: str) -> Any:
        return None

    def random(self, shape, dtype):
        return self.rng.standard_normal(shape).astype(self.dtypes[dtype])

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=self.dtypes[dtype])

    def poison(self, array) -> None:
        array.fill(np.nan)

    def reference(self, a, b):
        return a.astype(np.float64) @ b.astype(np.float64)

    def rel_error(self, out, ref) -> float:
        return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))

    def all_finite(self, array) -> bool:
        return bool(np.isfinite(array).all())

    def matmul(self, a, b, out, tf32=False, fast_accumulation=True) -> None:
        self.tf32_calls.append(tf32)
        if tf32:  # what cuBLAS computes with TF32 allowed: tf32 inputs
            a, b = round_tf32(a.astype(np.float32)), round_tf32(b.astype(np.float32))
        out[...] = a.astype(np.float32) @ b.astype(np.float32)

    def copy(self, dst, src) -> None:
        dst[...] = src

    def reader(self, nbytes):
        self.flush_bytes = nbytes

        def flush() -> None:
            self.flushes += 1
            self.now += 1000.0  # slow, and never inside a timed pair
        return flush

    def synchronize(self) -> None:
        pass

    def event(self) -> FakeEvent:
        return FakeEvent(self)

    def elapsed_ms(self, start: FakeEvent, end: FakeEvent) -> float:
        return end.time - start.time

    def release(self) -> None:
        pass


class Product(bench.Contender):
    """A contender computing the product in f32 (``scale`` != 1 makes it wrong; ``written``
    limits the input sets it writes; ``raises`` makes prepare fail)."""

    def __init__(self, name: str, scale: float = 1.0, written=None, raises=None) -> None:
        self.name, self.scale, self.written, self.raises = name, scale, written, raises
        self.ran: list[int] = []

    def prepare(self, case, inputs, outputs):
        if self.raises is not None:
            raise self.raises

        def run(i: int) -> None:
            self.ran.append(i)
            if self.written is None or i in self.written(len(inputs)):
                a, b = inputs[i]
                outputs[i][...] = (a.astype(np.float32) @ b.astype(np.float32)) * self.scale
        return run, f"{self.name} config"


class Unavailable(bench.Contender):
    name = "absent"

    def unsupported(self, case):
        return "not here"


def counting_timer(calls: list[int], ms: float = 2.0, steps: int = 7):
    def timer(step) -> float:
        for _ in range(steps):
            step()
        calls.append(steps)
        return ms
    return timer


# -- cases and the command line ------------------------------------------------------------

def test_the_default_sweep_is_every_size_in_every_dtype():
    cases = bench.sweep(None, None)
    assert len(cases) == 8 * 3 + 2
    assert [c.dtype for c in cases[:3]] == ["f16", "bf16", "f32"]
    shapes = list(dict.fromkeys(c.shape for c in cases))
    assert shapes == ["1024", "2048", "4096", "8192", "4095x4097x4093", "1000x1003x77",
                      "16x8192x8192", "8192x8192x256", "32x1024x1024x1024", "8x4095x4097x128"]
    kinds = {c.shape: c.kind for c in cases}
    assert [kinds[s] for s in shapes[:8]] == ["square"] * 4 + ["ragged"] * 2 + ["skinny"] * 2
    # The batched rows close the sweep, in f16 only (and not when f16 is not asked for).
    batched = cases[-2:]
    assert [(c.batch, c.M, c.N, c.K, c.dtype) for c in batched] == [
        (32, 1024, 1024, 1024, "f16"), (8, 4095, 4097, 128, "f16")]
    assert not any(c.batched for c in bench.sweep(None, ["bf16", "f32"]))


def test_a_batched_case_counts_every_batch():
    case = bench.sweep([bench.parse_sizes("3x32x24x16")], ["f16"])[0]
    assert (case.batch, case.M, case.N, case.K) == (3, 32, 24, 16)
    assert case.shape == "3x32x24x16"
    assert (case.a_shape, case.b_shape, case.c_shape) == ((3, 32, 16), (3, 16, 24), (3, 32, 24))
    flat = Case(32, 24, 16, "f16")
    assert case.flops == 3 * flat.flops and case.nbytes("f32") == 3 * flat.nbytes("f32")
    assert flat.a_shape == (32, 16) and not flat.batched


@pytest.mark.parametrize("text, sizes", [
    ("4096", [(4096, 4096, 4096)]),
    ("16x8192x256", [(16, 8192, 256)]),
    ("1024, 2X3X4", [(1024, 1024, 1024), (2, 3, 4)]),
    ("32x1024x1024x1024", [(32, 1024, 1024, 1024)]),
])
def test_sizes_are_n_or_m_by_n_by_k(text, sizes):
    assert bench.parse_sizes(text) == sizes


@pytest.mark.parametrize("text", ["", "12x3", "0", "4x4x-1", "big", "4x4x4x4x4", "0x4x4x4"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(Exception, match="expected a size N, MxNxK or BtxMxNxK"):
        bench.parse_sizes(text)


def test_the_subcommand_parses_every_flag():
    args = build_parser().parse_args([
        "bench", "--sizes", "1024", "16x8192x8192,2048", "--dtypes", "bf16", "f32",
        "--const", "BM=64", "BN=128,BK=32", "--stages", "4", "--warps", "2x4",
        "--swizzle", "off", "--autotune", "--quick", "--json", "o.json", "--plot", "p.png"])
    cases = bench.sweep(args.sizes, args.dtypes)
    assert [(c.M, c.N, c.K, c.dtype) for c in cases] == [
        (1024, 1024, 1024, "bf16"), (1024, 1024, 1024, "f32"), (16, 8192, 8192, "bf16"),
        (16, 8192, 8192, "f32"), (2048, 2048, 2048, "bf16"), (2048, 2048, 2048, "f32")]
    consts, options = bench._tilec_settings(args)
    assert consts == {"BM": 64, "BN": 128, "BK": 32}
    assert options == {"stages": 4, "warps": (2, 4), "swizzle": "off"}
    assert (args.autotune, args.quick, args.json, args.plot) == (True, True, Path("o.json"),
                                                                 Path("p.png"))
    assert args.handler is bench.run


@pytest.mark.parametrize("dtypes", [["i8"], ["f16", "f8e4m3"]])
def test_batched_sizes_of_8_bit_rows_are_refused_before_the_gpu_is_sought(dtypes, capsys):
    """torch._int_mm and torch._scaled_mm take matrices: a batched i8 or fp8 row has no
    reference (it failed inside the input arrays' making). Said with the arguments, on a
    machine with or without a GPU; batched 16-bit rows and 2-D 8-bit ones pass the check."""
    argv = ["bench", "--dtypes", *dtypes, "--sizes", "4096", "32x1024x1024x1024"]
    assert cli_main(argv) == 1
    assert ("the " + dtypes[-1] + " rows are 2-D products MxNxK (their cuBLAS references, "
            "torch._int_mm and torch._scaled_mm, take matrices), not 32x1024x1024x1024"
            ) in capsys.readouterr().err
    for accepted in (["--dtypes", "f16", "--sizes", "32x1024x1024x1024"],
                     ["--dtypes", *dtypes, "--sizes", "4096"]):
        bench._check_sweep_args(build_parser().parse_args(["bench", *accepted]))


def test_an_unknown_constant_names_the_samples_constants():
    args = build_parser().parse_args(["bench", "--const", "BQ=3"])
    with pytest.raises(CommandError, match=r"no constant BQ \(its constants: BM, BN, BK\)"):
        bench._tilec_settings(args)


@pytest.mark.parametrize("argv", [["--dtypes", "f64"], ["--warps", "2"], ["--stages", "0"],
                                  ["--sizes"], ["--swizzle", "on"]])
def test_bad_command_lines_exit_2(argv, capsys):
    assert bench.main(argv) == 2
    assert "error: argument" in capsys.readouterr().err


def load_bench_matmul():
    spec = importlib.util.spec_from_file_location(
        "bench_matmul_under_test", ROOT / "benchmarks" / "bench_matmul.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_matmul_keeps_its_flags_and_its_4096_f16_default(monkeypatch):
    module = load_bench_matmul()
    assert module.triton_matmul is bench.triton_matmul  # bench_launch.py imports it there
    seen = []
    monkeypatch.setattr(bench, "run", lambda args: seen.append(args) or 0)
    assert module.main([]) == 0
    assert bench.sweep(seen[0].sizes, seen[0].dtypes) == [Case(4096, 4096, 4096, "f16")]
    assert module.main(["--sizes", "4096", "2048", "--dtypes", "f16", "bf16", "--const",
                        "BM=128", "BN=64", "--stages", "3", "--warps", "2x4", "--swizzle",
                        "auto", "--json", "out.json"]) == 0
    args = seen[1]
    assert [c.shape for c in bench.sweep(args.sizes, args.dtypes)] == ["4096"] * 2 + ["2048"] * 2
    assert bench._tilec_settings(args) == ({"BM": 128, "BN": 64},
                                           {"stages": 3, "warps": (2, 4), "swizzle": "auto"})
    assert args.json == Path("out.json")


def test_without_a_gpu_it_says_why_and_exits_non_zero(monkeypatch, capsys):
    monkeypatch.setattr(driver, "has_gpu", lambda: False)
    monkeypatch.setattr(driver, "gpu_unavailable_reason", lambda: "no driver in this test")
    assert cli_main(["bench", "--sizes", "1024"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "tilec bench: no GPU (no driver in this test)\n"
    assert captured.out == ""
    assert load_bench_matmul().main(["--quick"]) == 2
    assert "tilec bench: no GPU (no driver in this test)" in capsys.readouterr().err


# -- the mma.sync loop -------------------------------------------------------------------------

def loop_body(ptx: str) -> list[str]:
    body = ptx[ptx.index("$L_trip:"):ptx.index("@%p bra $L_trip;")]
    return [line.strip() for line in body.splitlines() if line.strip().startswith("mma.")]


def test_the_mma_loop_keeps_independent_chains():
    ptx = bench.mma_loop_ptx("sm_80", "f16")
    mmas = loop_body(ptx)
    assert len(mmas) == bench.MMA_CHAINS * bench.MMA_UNROLL
    assert all(line.startswith(MMA + " ") for line in mmas)
    # Each chain reads and writes its own four accumulators; no two chains share one.
    chains = [re.findall(r"%acc\d+", line) for line in mmas[:bench.MMA_CHAINS]]
    for accumulators in chains:
        assert accumulators[:4] == accumulators[4:]
    assert len({acc for accumulators in chains for acc in accumulators}) == 4 * bench.MMA_CHAINS
    assert mmas[bench.MMA_CHAINS:] == mmas[:bench.MMA_CHAINS]
    # Chains start from different values, so none is a copy of another.
    starts = re.findall(r"mov\.f32 %acc(\d+), (0f[0-9A-F]{8});", ptx)
    assert len({value for index, value in starts if int(index) % 4 == 0}) == bench.MMA_CHAINS
    assert "st.global.f32" in ptx
    assert ".target sm_80" in ptx and ".version 8.0" in ptx


def test_the_mma_loop_counts_2_16_8_16_flop_per_mma():
    assert bench.MMA_FLOP == 4096
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in bench.mma_loop_ptx(
        "sm_90", "bf16")
    with pytest.raises(ValueError, match="f16 or bf16"):
        bench.mma_loop_ptx("sm_90", "f32")


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90"])
def test_ptxas_assembles_the_mma_loop_without_spills(tmp_path, arch, dtype):
    source = tmp_path / "mma.ptx"
    source.write_text(bench.mma_loop_ptx(arch, dtype))
    done = subprocess.run([PTXAS, f"-arch={arch}", "-v", str(source), "-o",
                           str(tmp_path / "mma.cubin")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "0 bytes spill stores" in done.stderr
    registers = int(re.search(r"Used (\d+) registers", done.stderr).group(1))
    # 4 blocks of 256 threads an SM must fit the 64K registers.
    assert registers * bench.MMA_WARPS * 32 * bench.MMA_BLOCKS_PER_SM <= 65536


def test_the_mma_loop_survives_ptxas_as_hmma_instructions():
    from tilec.tools.sass import sass, sass_unavailable_reason
    reason = sass_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    for arch in ("sm_80", "sm_90"):
        count = sass(bench.mma_loop_ptx(arch, "f16"), arch).count("HMMA.16816.F32")
        per_trip = bench.MMA_CHAINS * bench.MMA_UNROLL
        assert count >= per_trip and count % per_trip == 0, (arch, count)


# -- the sweep on the numpy stand-in -------------------------------------------------------

def test_rotation_covers_three_l2_caches_within_limits():
    case = Case(32, 24, 16, "f16")
    per_set = (32 * 16 + 16 * 24) * 2 + 32 * 24 * 4
    assert case.nbytes("f32") == per_set
    assert bench.rotation_sets(case, 64 * 1024) == math.ceil(3 * 64 * 1024 / per_set)
    # Never one set: even a product bigger than L2 leaves its last tiles there for the next.
    assert bench.rotation_sets(Case(8192, 8192, 8192, "f32"), 60 * 2**20) == 2
    assert bench.rotation_sets(Case(16, 16, 16, "f16"), 60 * 2**20) == bench.MAX_SETS


def test_every_contender_is_checked_and_only_passing_ones_are_timed():
    arrays = NumpyArrays()
    case = Case(32, 24, 16, "f16")
    good, wrong = Product("good"), Product("wrong", scale=1.01)
    partial = Product("partial", written=lambda n: {0, n - 1})  # the checked sets only
    broken = Product("broken", raises=RuntimeError("no kernel today\nsecond line"))
    timed: list[int] = []
    refs = References(copy_gbps=100.0, copy_bytes=2**20, mma_tflops={"f16": 50.0},
                      mma_launch="fake")
    result = bench.run_case(case, arrays, [good, wrong, partial, broken, Unavailable()],
                            counting_timer(timed), refs)
    m = result.measurements
    assert [m[n].status for n in ("good", "wrong", "partial", "broken", "absent")] == \
        ["ok", "FAIL", "FAIL", "error", "n/a"]
    assert timed == [7]  # the good one alone was timed
    sets = bench.rotation_sets(case, arrays.l2_bytes)
    assert result.sets == sets
    # Checked: one run per set; timed: rotating on from set 0.
    assert good.ran == list(range(sets)) + [i % sets for i in range(7)]
    assert wrong.ran == partial.ran == list(range(sets))
    # C is f16 (the contenders write 16-bit products' C in their dtype): its rounding only.
    assert m["good"].ms == 2.0 and m["good"].error < 2**-11
    assert 5e-3 < m["wrong"].error < 2e-2 and m["wrong"].ms is None
    assert m["wrong"].tolerance == 2e-3
    unchecked = list(range(1, sets - 1))
    assert m["partial"].note == f"NaN or inf in the outputs of input sets {unchecked}"
    assert m["broken"].note == "RuntimeError: no kernel today"
    assert m["absent"].note == "not here"
    assert result.tflops("good") == pytest.approx(case.flops / 2.0 / 1e9)
    assert result.tflops("wrong") is None and result.ratio("good", "wrong") is None
    assert result.memory_bound_ms == pytest.approx(case.nbytes("f32") / 100e6)
    assert result.compute_bound_ms == pytest.approx(case.flops / 50e9)


def test_an_unwritten_output_fails_even_on_a_checked_set():
    arrays = NumpyArrays()
    lazy = Product("lazy", written=lambda n: set(range(1, n)))
    result = bench.run_case(Case(16, 16, 16, "f16"), arrays, [lazy], counting_timer([]), None)
    assert result.measurements["lazy"].status == "FAIL"
    assert math.isnan(result.measurements["lazy"].error)


def test_cublas_writes_the_inputs_dtype_and_passes_its_tolerance():
    arrays = NumpyArrays()
    for dtype in ("f16", "f32"):
        result = bench.run_case(Case(40, 24, 72, dtype), arrays,
                                [bench.CublasContender(arrays)], counting_timer([]), None)
        measured = result.measurements["cuBLAS"]
        assert measured.status == "ok", measured
        assert measured.error <= bench.BENCH_TOLERANCE[dtype]
        assert measured.config.startswith("numpy.matmul, C " + dtype)
    assert bench.TritonContender(arrays).unsupported(Case(8, 8, 8, "f16")) == \
        "the Triton kernel runs on torch tensors"
    assert bench.TritonContender(arrays).unsupported(Case(8, 8, 8, "f16", batch=2)) == \
        "the Triton kernel is a 2-D matmul (no batched rows)"
    # Batched: 3-D inputs and outputs, one product per batch (numpy's matmul broadcasts).
    result = bench.run_case(Case(40, 24, 72, "f16", batch=3), arrays,
                            [bench.CublasContender(arrays)], counting_timer([]), None)
    measured = result.measurements["cuBLAS"]
    assert measured.status == "ok" and measured.error <= bench.BENCH_TOLERANCE["f16"], measured
    assert bench.TilecContender({}, {}).unsupported(Case(8, 8, 8, "f32")) is None


def test_the_event_timer_excludes_warm_up_and_takes_the_median():
    arrays = NumpyArrays()
    durations = iter([500.0] + [1.0] * 15 + [1.0, 9.0, 1.0, 2.0, 3.0] * 2000)
    calls = []

    def step() -> None:
        calls.append(arrays.now)
        arrays.now += next(durations)
    ms = bench.event_timer(arrays, warmup_ms=10, rep_ms=50)(step)
    assert ms == 2.0  # median of the timed calls; the 500 ms first call is not among them
    # 1 first call, 5 to estimate, 10 ms of warm-up at 1 ms, then 50 ms worth (50 calls).
    assert len(calls) == 1 + bench.EVENT_ESTIMATE_CALLS + 10 + 50


def test_the_benchmark_timer_flushes_l2_before_each_call_outside_the_events():
    arrays = NumpyArrays(l2_bytes=1000)
    timer, name = bench.make_timer(arrays, quick=True)
    assert arrays.flush_bytes == bench.FLUSH_L2_FACTOR * 1000 and "flush" in name
    flushes_seen = []

    def step() -> None:
        flushes_seen.append(arrays.flushes)
        arrays.now += 2.0
    assert timer(step) == 2.0  # the 1000 ms flushes are outside every timed pair
    warm_and_timed = len(flushes_seen) - 1 - bench.EVENT_ESTIMATE_CALLS
    assert arrays.flushes == warm_and_timed > 0
    # every warm-up and timed call had its own flush just before it
    assert flushes_seen[-warm_and_timed:] == list(range(1, warm_and_timed + 1))


def test_the_event_timer_repeats_at_least_its_minimum():
    arrays = NumpyArrays()

    def slow() -> None:
        arrays.now += 100.0
    calls_before = arrays.now
    assert bench.event_timer(arrays, warmup_ms=1, rep_ms=1)(slow) == 100.0
    calls = (arrays.now - calls_before) / 100.0
    assert calls == 1 + bench.EVENT_ESTIMATE_CALLS + 1 + bench.EVENT_MIN_REPS


def test_copy_bandwidth_counts_bytes_read_and_written():
    arrays = NumpyArrays()
    gbps = bench.copy_bandwidth(arrays, lambda step: (step(), 0.5)[1], nbytes=4 * 1024)
    assert gbps == pytest.approx(2 * 4096 / 0.5e-3 / 1e9)


def test_a_reference_figure_that_fails_is_named_and_the_run_fails(monkeypatch):
    def no_mma(timer, dtype):
        raise RuntimeError(f"no {dtype} loop here\ndetails")
    # Patched where measure_references looks them up (tilec.tools.bench only re-exports them).
    monkeypatch.setattr(ceilings, "mma_ceiling", no_mma)
    monkeypatch.setattr(ceilings, "COPY_MIN_BYTES", 4096)
    arrays = NumpyArrays(l2_bytes=256)
    refs = bench.measure_references(arrays, lambda step: (step(), 0.01)[1], ["f16", "bf16"])
    assert refs.copy_gbps == pytest.approx(2 * 4096 / 0.01e-3 / 1e9)
    assert refs.mma_tflops == {}
    assert refs.problems == ["mma.sync ceiling f16: RuntimeError: no f16 loop here",
                             "mma.sync ceiling bf16: RuntimeError: no bf16 loop here"]
    report = Report(device={"name": "G", "arch": "sm_90", "sms": 1, "l2_bytes": 256},
                    software={}, references=refs, contenders=[])
    assert "  not measured: mma.sync ceiling f16: RuntimeError: no f16 loop here" in \
        bench.format_references(report)
    assert not report.ok


def test_a_case_that_crashes_is_reported_and_the_sweep_goes_on():
    class Fragile(NumpyArrays):
        def random(self, shape, dtype):
            if shape[0] == 48:
                raise MemoryError("out of memory for the inputs")
            return super().random(shape, dtype)
    rows = bench.run_sweep([Case(48, 16, 16, "f16"), Case(16, 16, 16, "f16")], Fragile(),
                           [Product("good")], counting_timer([]), None)
    assert rows[0].measurements["good"].status == "error"
    assert rows[0].measurements["good"].note == \
        "the case failed: MemoryError: out of memory for the inputs"
    assert rows[1].measurements["good"].status == "ok"


def test_the_autotune_space_fits_the_shape_and_leaves_out_fixed_knobs():
    general = bench.autotune_space(Case(4096, 4096, 4096, "f16"), {})
    assert len(general) == 17  # the tuned configuration, then 2 BM x 2 BN x 2 BK x 2 stages
    assert general[0] == tuning.tuned_config(Case(4096, 4096, 4096, "f16"))
    assert {(c["BM"], c["BN"]) for c in general} == {(64, 128), (64, 256), (128, 128),
                                                     (128, 256)}
    assert all("split_k" not in c for c in general)  # enough output tiles without it
    skinny = bench.autotune_space(Case(16, 8192, 8192, "f16"), {})
    assert {c["BM"] for c in skinny} == {16}
    assert {c.get("split_k", 1) for c in skinny} == {1, 2, 4, 8}
    fixed = bench.autotune_space(Case(40, 512, 512, "f16"), {"stages": 4, "BK": 64,
                                                             "split_k": 2})
    assert {c["BM"] for c in fixed} == {16, 32, 64}
    assert all("stages" not in c and "BK" not in c and "split_k" not in c for c in fixed)
    # The tuned 16x64 tile with its warps, then 3 BM x 3 BN, repeats dropped.
    assert len(fixed) == 10 and fixed[0] == dict(BM=16, BN=64, warps=(1, 4))
    from tilec.tools.autotune import prune
    kept, _ = prune([{"BK": 64, "stages": 4, "split_k": 2, **c} for c in fixed], "f16",
                    "sm_90")
    assert len(kept) == 10


def test_the_sample_is_retyped_and_its_tiling_described():
    from tilec.tools.autotune import program_dtype
    kernel = bench.sample_kernel("bf16")
    assert program_dtype(kernel, {}) == "bf16"
    compiled = kernel.compile(arch="sm_80", BM=64, BN=128, BK=32, stages=4, warps=(2, 2),
                              swizzle="off")
    assert bench.describe_compiled(compiled) == "64x128x32 mma.sync warps 2x2 stages 4 swizzle off"
    # The schedule of a warp-specialized kernel: persistent, clusters.
    hopper = bench.sample_kernel("f16", "f16").compile(arch="sm_90a", BM=128, BN=256, BK=64,
                                                       stages=3, persistent=True, cluster=2)
    assert bench.describe_compiled(hopper) == ("128x256x64 wgmma+TMA warps 8x1 stages 3 "
                                               "persistent cluster 2 TMA-store epilogue")


def test_the_config_column_counts_a_warp_specialized_launchs_waves():
    """The launch's tile axes (PreparedLaunch.tile_axes) give the waves of a kernel whose
    residency is as compiled: 4096x4104 in 128x256 tiles leaves a fifth wave 12% full, in
    persistent 128x128 tiles 8 whole rounds, 2048^2 one wave of 128 tiles; mma.sync kernels
    say nothing of waves."""
    h100 = (132, "an H100's")
    wide = bench.sample_kernel("f16", "f16").compile(arch="sm_90a", BM=128, BN=256, BK=64,
                                                     stages=3)
    assert bench.describe_compiled(wide, None, (32, 17), h100).endswith(
        "TMA-store epilogue, 5 waves (the last 12% full)")
    narrow = bench.sample_kernel("f16", "f16").compile(arch="sm_90a", **tuning.rounds.NARROW_TILE)
    assert bench.describe_compiled(narrow, None, (32, 33), h100).endswith(
        "persistent TMA-store epilogue, 8 full rounds of tiles")
    # One wave or round: said in the singular (2048^2 in 128x256 tiles: 128 of 132 SMs).
    assert bench.describe_compiled(wide, None, (16, 8), h100).endswith(
        "TMA-store epilogue, 1 wave, 97% full")
    assert bench.describe_compiled(narrow, None, (11, 12), h100).endswith(
        "persistent TMA-store epilogue, 1 full round of tiles")
    # Fewer tiles than SMs: the persistent grid is as small as the tiles, and its one round
    # leaves the other SMs idle (88 of 132; it said "1 full round").
    assert bench.describe_compiled(narrow, None, (8, 11), h100).endswith(
        "persistent TMA-store epilogue, 1 round of tiles, 67% full")
    ampere = bench.sample_kernel("f16").compile(arch="sm_80")
    assert bench.describe_compiled(ampere, None, (32, 33), h100) == \
        bench.describe_compiled(ampere)


# -- output ------------------------------------------------------------------------------------

def fake_report() -> Report:
    refs = References(copy_gbps=4000.0, copy_bytes=2**30, mma_tflops={"f16": 600.0},
                      mma_launch="528 blocks x 8 warps, 8 chains, 32768 mmas per chain")
    square = Case(4096, 4096, 4096, "f16")
    skinny = Case(16, 8192, 8192, "f16")
    f32 = Case(4096, 4096, 4096, "f32")
    ms_square = square.flops / 400e9  # 400 TFLOP/s
    rows = [
        CaseResult(square, 4, {
            "tilec": Measurement("ok", ms=ms_square, error=3.1e-4, tolerance=2e-3,
                                 config="128x128x32 warps 2x4 stages 3"),
            "cuBLAS": Measurement("ok", ms=ms_square / 1.25, error=2.0e-4, tolerance=2e-3),
            "Triton": Measurement("FAIL", error=0.5, tolerance=2e-3)},
            memory_bound_ms=square.nbytes("f32") / 4e9, compute_bound_ms=square.flops / 600e9),
        CaseResult(skinny, 2, {
            "tilec": Measurement("ok", ms=0.05, error=2.2e-4, tolerance=2e-3, config="c"),
            "cuBLAS": Measurement("ok", ms=0.04, error=2.0e-4, tolerance=2e-3),
            "Triton": Measurement("error", note="CompilationError: out of resources")},
            memory_bound_ms=skinny.nbytes("f16") / 4e9, compute_bound_ms=skinny.flops / 600e9,
            bound_bytes=skinny.nbytes("f16")),
        CaseResult(f32, 2, {
            "tilec": Measurement("n/a", note="tilec has no f32 path yet"),
            "cuBLAS": Measurement("ok", ms=2.5, error=1e-6, tolerance=1e-4),
            "Triton": Measurement("ok", ms=5.0, error=float("nan"), tolerance=1e-4)},
            memory_bound_ms=f32.nbytes("f32") / 4e9),
    ]
    return Report(device={"name": "Fake H200", "arch": "sm_90", "sms": 132,
                          "l2_bytes": 60 * 2**20},
                  software={"torch": "9.9", "triton": "8.8", "timer": "fake"},
                  references=refs, contenders=["tilec", "cuBLAS", "Triton"], rows=rows,
                  settings={"quick": True})


def test_the_table_shows_ratios_bounds_failures_and_skinny_bounds():
    report = fake_report()
    table = bench.format_table(report).splitlines()
    square = next(line for line in table if line.startswith("4096 ") and " f16 " in line)
    assert square.split() == ["4096", "f16", "400.0", "500.0", "FAIL", "0.80", "-", "0.67",
                              "mma", "3.10e-04", "128x128x32", "warps", "2x4", "stages", "3"]
    skinny = next(line for line in table if line.startswith("16x8192x8192"))
    bound = report.rows[1].memory_bound_ms
    assert f"{bound / 0.05:.2f} mem" in skinny and " error " in f" {skinny} "
    f32 = next(line for line in table if " f32 " in line)
    assert f32.split()[:7] == ["4096", "f32", "n/a", f"{f32_tflops(report, 'cuBLAS'):.1f}",
                               f"{f32_tflops(report, 'Triton'):.1f}", "-", "-"]
    text = "\n".join(table)
    assert (f"  16x8192x8192 f16: {report.rows[1].case.nbytes('f16') / 1e6:.1f} MB at 4000 GB/s "
            f"= {bound * 1e3:.1f} us; tilec 50.0 us, {bound / 0.05:.2f} of the bound") in text
    assert ("FAIL 4096 f16 Triton: error 5.00e-01 against a tolerance of 0.002 (not timed)"
            in text)
    assert "error 16x8192x8192 f16 Triton: CompilationError: out of resources" in text
    assert "n/a tilec (f32): tilec has no f32 path yet" in text
    assert not report.ok


def f32_tflops(report: Report, name: str) -> float:
    return report.rows[2].tflops(name)


def test_the_reference_lines_come_with_the_device():
    text = bench.format_references(fake_report())
    assert text.splitlines()[0].startswith("tilec bench on Fake H200 (sm_90, 132 SMs, 60 MiB L2)")
    assert "4000 GB/s" in text and "1 GiB copied" in text
    assert "mma.sync ceiling f16      600.0 TFLOP/s" in text


def test_json_holds_every_number_and_no_nan():
    data = bench.report_json(fake_report())
    text = json.dumps(data, allow_nan=False)
    back = json.loads(text)
    assert back["device"]["name"] == "Fake H200"
    assert back["references"]["mma_sync_tflops"] == {"f16": 600.0}
    first = back["rows"][0]
    summary = (first["M"], first["dtype"], first["kind"], first["bound"])
    assert summary == (4096, "f16", "square", "mma")
    assert first["contenders"]["tilec"]["tflops"] == pytest.approx(400.0)
    assert first["tilec_vs_cublas"] == pytest.approx(0.8)
    assert first["tilec_vs_triton"] is None  # Triton failed its check: no ratio
    assert first["contenders"]["Triton"] == {"status": "FAIL", "ms": None, "tflops": None,
                                             "error": 0.5, "tolerance": 2e-3, "config": "",
                                             "note": ""}
    assert back["rows"][2]["contenders"]["Triton"]["error"] is None  # NaN became null
    assert back["rows"][2]["compute_bound_ms"] is None and back["rows"][2]["bound"] is None


def test_the_plot_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    bench.write_plot(fake_report(), path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_without_matplotlib_the_plot_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match="python -m pip install matplotlib"):
        bench.write_plot(fake_report(), tmp_path / "bench.png")
    assert not (tmp_path / "bench.png").exists()


# -- the whole command, every GPU piece replaced ---------------------------------------------

class NumpyTilec(bench.TilecContender):
    def prepare(self, case, inputs, outputs):
        def run(i: int) -> None:
            a, b = inputs[i]
            outputs[i][...] = a.astype(np.float32) @ b.astype(np.float32)
        return run, "numpy stand-in"


def fake_gpu(monkeypatch, arrays: NumpyArrays) -> None:
    import tilec.runtime
    monkeypatch.setattr(driver, "has_gpu", lambda: True)
    monkeypatch.setattr(tilec.runtime, "current_device", lambda: SimpleNamespace(
        name="Fake GPU", arch="sm_90", multiprocessor_count=4))
    monkeypatch.setattr(bench, "open_arrays", lambda ordinal: arrays)
    monkeypatch.setattr(bench, "make_timer", lambda arrays, quick: (
        counting_timer([], ms=0.25), "fake timer"))
    monkeypatch.setattr(bench, "measure_references", lambda arrays, timer, dtypes: References(
        copy_gbps=1000.0, copy_bytes=2**30, mma_tflops={"f16": 100.0}, mma_launch="fake"))
    monkeypatch.setattr(bench, "TilecContender", NumpyTilec)


@pytest.mark.parametrize("with_matplotlib", [False, True])
def test_the_command_prints_references_then_the_table_and_writes_json(
        monkeypatch, tmp_path, capsys, with_matplotlib):
    if with_matplotlib:
        pytest.importorskip("matplotlib")
    else:
        monkeypatch.setitem(sys.modules, "matplotlib", None)
    fake_gpu(monkeypatch, NumpyArrays())
    out_json, out_png = tmp_path / "out.json", tmp_path / "out.png"
    code = cli_main(["bench", "--sizes", "32x24x16", "16x512x256", "--dtypes", "f16", "f32",
                     "--json", str(out_json), "--plot", str(out_png)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.out.splitlines()
    assert lines[0].startswith("tilec bench on Fake GPU (sm_90, 4 SMs, 0.0625 MiB L2)")
    assert lines[1].strip().startswith("device copy bandwidth")
    header = next(i for i, line in enumerate(lines) if line.startswith("shape"))
    assert header > 2
    assert [line.split()[:2] for line in lines[header + 1:header + 5]] == [
        ["32x24x16", "f16"], ["32x24x16", "f32"], ["16x512x256", "f16"], ["16x512x256", "f32"]]
    assert "memory bounds of the skinny shapes" in captured.out
    assert re.search(r"\[4/4\] 16x512x256 f32: tilec \d.*, cuBLAS \d", captured.err)
    data = json.loads(out_json.read_text())
    assert data["device"]["name"] == "Fake GPU"
    assert data["contenders"] == ["tilec", "cuBLAS"]  # Triton is not installed here
    assert [r["contenders"]["tilec"]["status"] for r in data["rows"]] == ["ok"] * 4
    if with_matplotlib:
        assert out_png.read_bytes()[:8] == PNG_SIGNATURE
    else:
        assert not out_png.exists()
        assert "python -m pip install matplotlib" in captured.err


class NumpyTriton(bench.TritonContender):
    def unsupported(self, case):
        return None

    def prepare(self, case, inputs, outputs):
        def run(i: int) -> None:
            a, b = inputs[i]
            outputs[i][...] = a.astype(np.float32) @ b.astype(np.float32)
        return run, "numpy stand-in"


@pytest.mark.parametrize("installed", [False, True])
def test_the_missing_triton_notice_comes_only_without_triton(monkeypatch, capsys, installed):
    """The notice that Triton is not installed is printed exactly when no Triton contender
    runs (it once sat in a for loop's else and came with a filled Triton column too)."""
    fake_gpu(monkeypatch, NumpyArrays())
    monkeypatch.setattr(bench, "_triton_version", lambda: "3.6.0" if installed else None)
    monkeypatch.setattr(bench, "TritonContender", NumpyTriton)
    code = cli_main(["bench", "--sizes", "32x24x16", "--dtypes", "f16"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    notice = "Triton is not installed; timing tilec and cuBLAS only"
    assert (notice in captured.err) is not installed
    header = next(line for line in captured.out.splitlines() if line.startswith("shape"))
    assert ("Triton" in header) is installed


def test_a_failed_check_makes_the_command_exit_1(monkeypatch, tmp_path, capsys):
    class Wrong(NumpyTilec):
        def prepare(self, case, inputs, outputs):
            run, _ = super().prepare(case, inputs, outputs)
            return (lambda i: (run(i), outputs[i].__imul__(2))), "wrong"
    fake_gpu(monkeypatch, NumpyArrays())
    monkeypatch.setattr(bench, "TilecContender", Wrong)
    assert cli_main(["bench", "--sizes", "32x24x16", "--dtypes", "f16"]) == 1
    assert "FAIL 32x24x16 f16 tilec" in capsys.readouterr().out


# -- variants: more tilec columns in the same run ----------------------------------------------

class NumpyVariant(bench.VariantTilecContender):
    seen: list = []

    def prepare(self, case, inputs, outputs):
        NumpyVariant.seen.append((self.name, self.consts, self.options))
        return NumpyTilec.prepare(self, case, inputs, outputs)


def test_variants_are_columns_timed_in_the_same_run_with_their_own_flags(
        monkeypatch, tmp_path, capsys):
    fake_gpu(monkeypatch, NumpyArrays())
    monkeypatch.setattr(bench, "VariantTilecContender", NumpyVariant)
    NumpyVariant.seen = []
    out_json = tmp_path / "out.json"
    code = cli_main(["bench", "--sizes", "32x24x16", "--dtypes", "f16", "--stages", "3",
                     "--variant", "st4=--stages 4 --persistent",
                     "--variant", "noswz=--disable swizzle --const BM=64",
                     "--variant", "mma=--arch sm_90", "--json", str(out_json)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    # Each variant: the command line's settings, then its own flags over them.
    assert NumpyVariant.seen == [
        ("tilec[st4]", {}, {"stages": 4, "persistent": True}),
        ("tilec[noswz]", {"BM": 64}, {"stages": 3, "disable": ("swizzle",)}),
        ("tilec[mma]", {}, {"stages": 3, "arch": "sm_90"})]  # the mma.sync path beside wgmma
    header = next(line for line in captured.out.splitlines() if line.startswith("shape"))
    assert header.split()[2:10] == ["tilec", "tilec[st4]", "tilec[noswz]", "tilec[mma]",
                                    "cuBLAS", "tilec[st4]/tilec", "tilec[noswz]/tilec",
                                    "tilec[mma]/tilec"]
    row = next(line for line in captured.out.splitlines() if line.startswith("32x24x16"))
    assert row.split()[7:10] == ["1.00"] * 3  # one fake timer for all: speed-ups of 1
    assert "  tilec[noswz]: --disable swizzle --const BM=64" in captured.out
    data = json.loads(out_json.read_text())
    assert data["contenders"] == ["tilec", "tilec[st4]", "tilec[noswz]", "tilec[mma]",
                                  "cuBLAS"]
    assert data["settings"]["variants"] == {"st4": "--stages 4 --persistent",
                                            "noswz": "--disable swizzle --const BM=64",
                                            "mma": "--arch sm_90"}
    assert data["rows"][0]["contenders"]["tilec[st4]"]["status"] == "ok"


@pytest.mark.parametrize("argv, names", [
    ([], ["tilec", "cuBLAS", "Triton"]),
    (["--no-triton"], ["tilec", "cuBLAS"]),
    (["--no-triton", "--variant", "st4=--stages 4", "--backend", "llvm"],
     ["tilec", "tilec[st4]", "tilec-llvm", "cuBLAS"]),
    (["--epilogue", "bias_gelu"], ["tilec", "torch", "Triton"]),
    (["--epilogue", "bias_gelu", "--no-triton"], ["tilec", "torch"]),
])
def test_no_triton_leaves_the_triton_columns_out(monkeypatch, argv, names):
    """--no-triton: where Triton is installed, the run times tilec and cuBLAS (or the
    epilogue's unfused torch) only; the variant and llvm columns stay in their places."""
    monkeypatch.setattr(bench, "_triton_version", lambda: "3.6.0")
    args = build_parser().parse_args(["bench", *argv])
    options = {"backend": "llvm"} if "llvm" in argv else {}
    contenders = bench.bench_contenders(args, NumpyArrays(), {}, options)
    assert [contender.name for contender in contenders] == names
    assert "backend" not in options  # the tilec column stays the PTX backend's


@pytest.mark.parametrize("argv, words", [
    (["--variant", "a=--stages 0"], "--variant a: argument --stages"),
    (["--variant", "a=--frobnicate"], "--variant a: unrecognized arguments: --frobnicate"),
    (["--variant", "a=--const BQ=1"], "no constant BQ"),
    (["--variant", "a=--stages 4", "--variant", "a=--stages 5"], "--variant a is given twice"),
    (["--variant", "a=--stages 4", "--autotune"], "not with --autotune"),
])
def test_a_bad_variant_is_a_usage_error_naming_it(monkeypatch, capsys, argv, words):
    fake_gpu(monkeypatch, NumpyArrays())
    assert cli_main(["bench", "--sizes", "32x24x16", "--dtypes", "f16", *argv]) == 1
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("text", ["=--stages 4", "no equals", "a b=--stages 4", "a=--const 'B"])
def test_a_variant_is_name_equals_flags(text, capsys):
    assert bench.main(["--variant", text]) == 2
    assert "argument --variant" in capsys.readouterr().err


# -- GPU tier ----------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not driver.has_gpu(), reason="needs an NVIDIA GPU")
def test_a_small_sweep_on_the_gpu(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "bench.json"
    code = bench.main(["--sizes", "512", "1000x1003x77", "--dtypes", "f16", "bf16", "f32",
                       "--quick", "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    data = json.loads(out.read_text())
    assert data["references"]["copy_bandwidth_gbps"] > 100
    assert data["references"]["mma_sync_tflops"]["f16"] > 10
    for row in data["rows"]:
        tilec = row["contenders"]["tilec"]
        assert tilec["status"] == "ok", row
        assert row["contenders"]["cuBLAS"]["status"] == "ok", row
        assert tilec["error"] <= bench.BENCH_TOLERANCE[row["dtype"]]
        assert tilec["tflops"] > 0


def test_tuned_defaults_per_dtype_family_and_shape_compile():
    """The configurations the bench runs by default are ones tiling accepts: the tuned
    mma tiles for f16/bf16, the FFMA tiles for f32, short tiles for M <= 64."""
    from tilec.tools.autotune import config_problem
    from tilec.benchmarking.tuning import tuned_config
    # short, ragged, tiled, small, shallow
    shapes = [(16, 8192, 8192), (4095, 8192, 8192), (4096, 8192, 8192), (1024, 1024, 8192),
              (8192, 8192, 256)]
    for dtype in ("f16", "bf16", "f32"):
        for m, n, k in shapes:
            config = tuned_config(Case(m, n, k, dtype))
            assert (config["BM"] <= 32) == (m <= 64)
            full = {"swizzle": "auto", "raster_group": 8, "warps": None, **config}
            assert config_problem(full, dtype, "sm_90") is None, (dtype, m, config)
    for m, n, k in shapes:  # tf32 compiles as f32 with f32_math="tf32"
        config = tuned_config(Case(m, n, k, "tf32"))
        full = {"swizzle": "auto", "raster_group": 8, "warps": None, "f32_math": "tf32",
                **config}
        assert config_problem(full, "f32", "sm_90") is None, (m, config)
    assert tuned_config(Case(4096, 4096, 4096, "tf32")) == dict(BM=128, BN=256, BK=64,
                                                                stages=2, warps=(2, 4))
    assert tuned_config(Case(16, 8192, 8192, "f32"))["split_k"] == 4
    assert tuned_config(Case(4096, 4096, 4096, "f16"))["BN"] == 256
    assert tuned_config(Case(2048, 2048, 2048, "f16"))["BN"] == 256  # 128 tiles: enough
    assert tuned_config(Case(1024, 1024, 1024, "f16"))["BM"] == 64  # 32 tiles: too few
    assert tuned_config(Case(8192, 8192, 256, "f16"))["BK"] == 64  # 2 steps of 128: too few
    assert tuned_config(Case(4095, 4097, 4093, "f16"))["BN"] == 128


@pytest.mark.parametrize("shape, stages", [
    ((8192, 8192, 256), 6),  # 4096 tiles of 128x128: 32 rounds over 132 SMs
    ((16384, 8192, 128), 6),
    ((4096, 4096, 256), 4),  # 1024 tiles: 8 rounds, where six stages measured slower
    ((4096, 8192, 256), 4),  # 2048 tiles: just under 16 rounds
])
def test_a_shallow_k_over_many_rounds_gets_a_deeper_ring(shape, stages):
    from tilec.benchmarking.tuning import tuned_config
    from tilec.benchmarking.tuning.tables import SHALLOW_DEEP_RING_ROUNDS
    from tilec.families.wgmma import FAMILY as WGMMA
    from tilec.options import Options
    config = tuned_config(Case(*shape, "f16"), "sm_90a")
    assert config == dict(BM=128, BN=128, BK=64, stages=stages, persistent=True)
    assert WGMMA.block_problem((128, 128, 64), Options(arch="sm_90a", stages=stages)) is None
    assert (shape[0] // 128 * shape[1] // 128 >= SHALLOW_DEEP_RING_ROUNDS * 132) == \
        (stages == 6)
    # Batched rows and the 8-bit rows keep their own rings (unmeasured with six).
    assert tuned_config(Case(*shape, "f16", batch=2), "sm_90a")["stages"] == 4
    assert tuned_config(Case(*shape, "i8"), "sm_90a")["stages"] == 4


def shape_id(value) -> str:
    """A parametrized case's id: a shape as MxNxK, anything else as itself."""
    return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)


# -- the tf32 dtype: f32 operands, TF32 math for every contender -----------------------------

def test_tf32_is_a_bench_dtype_outside_the_default_sweep():
    assert "tf32" in bench.DTYPES and "tf32" in bench.TILEC_DTYPES
    assert {c.dtype for c in bench.sweep(None, None)} == {"f16", "bf16", "f32"}
    args = build_parser().parse_args(["bench", "--dtypes", "tf32", "--f32-math", "tf32"])
    assert args.dtypes == ["tf32"] and args.f32_math == "tf32"
    tolerance = bench.BENCH_TOLERANCE
    assert tolerance["tf32"] == tolerance["f16"] > tolerance["f32"]


def test_cublas_uses_tf32_for_the_tf32_rows_only():
    arrays = NumpyArrays()
    for dtype in ("tf32", "f32"):
        result = bench.run_case(Case(40, 24, 72, dtype), arrays,
                                [bench.CublasContender(arrays)], counting_timer([]), None)
        measured = result.measurements["cuBLAS"]
        assert measured.status == "ok", measured
        assert measured.config == ("numpy.matmul, C f32, TF32 on" if dtype == "tf32"
                                   else "numpy.matmul, C f32, TF32 off")
        assert set(arrays.tf32_calls) == {dtype == "tf32"}
        # TF32 products are far from f32 exactness and well inside the tf32 tolerance.
        assert (1e-4 < measured.error < bench.BENCH_TOLERANCE["tf32"]) == (dtype == "tf32")
        arrays.tf32_calls.clear()


def test_torch_allows_tf32_for_one_product_and_restores_the_flag():
    seen = []
    flags = SimpleNamespace(allow_tf32=False)

    def matmul(a, b, out):
        seen.append(flags.allow_tf32)
        if a == "raise":
            raise RuntimeError("cuBLAS failed")

    arrays = object.__new__(bench.TorchArrays)
    arrays.torch = SimpleNamespace(backends=SimpleNamespace(cuda=SimpleNamespace(matmul=flags)),
                                   matmul=matmul)
    arrays.matmul("a", "b", "out", tf32=True)
    arrays.matmul("a", "b", "out")
    with pytest.raises(RuntimeError):
        arrays.matmul("raise", "b", "out", tf32=True)
    assert seen == [True, False, True] and flags.allow_tf32 is False


def test_tilec_compiles_the_tf32_rows_as_f32_with_tf32_math(monkeypatch):
    prepared = []

    class Kernel:
        def prepare(self, a, b, c, **kwargs):
            prepared.append(kwargs)
            return SimpleNamespace(compiled=None, packing=None, tile_axes=None)

    contender = bench.TilecContender({}, {"stages": 4, "arch": "sm_90"})
    asked = []
    monkeypatch.setattr(contender, "kernel",
                        lambda dtype, out, batched=False: asked.append((dtype, out)) or Kernel())
    monkeypatch.setattr(contenders, "describe_compiled", lambda compiled, packing, axes: "")
    contender.prepare(Case(4096, 4096, 4096, "tf32"), [(None, None)], [None])
    assert asked == [("f32", "f32")]
    assert prepared == [dict(BM=128, BN=256, BK=64, stages=4, warps=(2, 4), f32_math="tf32",
                             arch="sm_90")]
    assert contender.math(Case(8, 8, 8, "tf32")) == "tf32"


def test_f32_rows_of_tilec_with_tf32_math_are_checked_with_the_tf32_tolerance():
    class Tf32Tilec(NumpyTilec):
        def prepare(self, case, inputs, outputs):
            def run(i: int) -> None:
                a, b = (round_tf32(x.astype(np.float32)) for x in inputs[i])
                outputs[i][...] = a @ b
            return run, "numpy tf32 stand-in"

    case = Case(40, 24, 72, "f32")
    for options, status in (({"f32_math": "tf32"}, "ok"), ({}, "FAIL")):
        result = bench.run_case(case, NumpyArrays(), [Tf32Tilec({}, options)],
                                counting_timer([]), None)
        assert result.measurements["tilec"].status == status, options


def test_sm_90a_runs_the_f16_and_bf16_rows_on_wgmma_except_short_m():
    """The tuned tiles on an H100: 128x256x64 in 3 stages for wgmma, persistent; 16-row M
    keeps the mma tile (its warp grid makes wgmma decline); f32 does not depend on the
    target."""
    square, short = Case(4096, 4096, 4096, "f16"), Case(16, 8192, 8192, "bf16")
    assert tuning.tuned_config(square, "sm_90a") == dict(BM=128, BN=256, BK=64, stages=3,
                                                             raster_group=16, persistent=True)
    # The same class, but one tile a block at most (64 tiles of 128x256): not persistent.
    one_wave = Case(2048, 2048, 2048, "bf16")
    assert tuning.problem_class(one_wave) == tuning.problem_class(square) == "tiled"
    assert tuning.tuned_config(one_wave, "sm_90a") == dict(BM=128, BN=256, BK=64,
                                                               stages=3, raster_group=16)
    assert tuning.tuned_config(square, "sm_90") == tuning.tuned_config(square)
    assert tuning.tuned_config(short, "sm_90a") == tuning.tuned_config(short, "sm_80")
    assert tuning.tuned_config(Case(4096, 4096, 4096, "f32"), "sm_90a") == \
        tuning.tuned_config(Case(4096, 4096, 4096, "f32"))


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90", "sm_90a"])
def test_every_tuned_configuration_compiles_on_its_target(arch):
    """The tuned configurations were measured on an H100 or H200; on an A100 (163 KiB of
    shared memory a block) and an sm_86 GPU (99 KiB) mma.sync's 128x256x128 two-stage ring
    (192 KiB) did not compile, nor f32's short 16x256x64 three-stage one: each now fits its
    target (tuning.choose._within_shared_memory), and compiles for every dtype the target takes,
    over the problem classes."""
    from tilec.benchmarking.contenders import EXACT_OUTPUT
    from tilec.ir.types import DType
    from tilec.options import Options
    from tilec.passes.tiling import ring_bytes
    shapes = [(4096, 4096, 4096), (8192, 8192, 256), (1024, 1024, 1024), (4095, 4097, 4093),
              (16, 8192, 8192), (64, 12288, 4096), (128, 12288, 4096), (1000, 1000, 4096),
              (512, 10240, 8192)]
    # 8-bit operands in their samples' layout (B as [N, K], which mma.sync's 8-bit fragments
    # read; the bench packs its [K, N] B so at launch).
    eight_bit = {"i8": "int8_gemm", "f8e4m3": "fp8_gemm"}
    dtypes = ["f16", "bf16", "f32", "tf32", "i8"] + (["f8e4m3"] if arch >= "sm_90" else [])
    for dtype in dtypes:
        source, forced = tuning.TILEC_AS.get(dtype, (dtype, {}))
        kernel = load_sample(eight_bit[dtype], dtype) if dtype in eight_bit else \
            bench.sample_kernel(source, EXACT_OUTPUT.get(dtype, "f32"))
        for m, n, k in shapes:
            config = tuning.tuned_config(Case(m, n, k, dtype), arch)
            kernel.compile(arch=arch, **config, **forced)  # raises if it does not fit
            if "warps" in config and "BK" in config:  # an mma.sync or FFMA ring
                size = DType.parse(source).bytes
                ring = ring_bytes((config["BM"], config["BN"], config["BK"]), size, size,
                                  config["stages"])
                assert ring <= Options(arch=arch).smem_limit


@pytest.mark.parametrize("shape, expected", [
    # One M tile as deep as M where its blocks are enough (tuning.skinny.SHORT_TILES).
    ((64, 12288, 4096), dict(BM=64, BN=128, BK=64, stages=6)),  # wgmma: 96 blocks
    ((48, 8192, 4096), dict(BM=64, BN=128, BK=64, stages=6)),
    # 32 tiles in four short slices each (level with two: tuning.split.SHORT_SLICE_STEPS).
    ((64, 4096, 11008), dict(BM=64, BN=128, BK=64, stages=6, split_k=4)),
    ((32, 12288, 4096), dict(BM=32, BN=64, BK=128, stages=4, warps=(1, 4))),  # 192 blocks
    ((64, 2048, 4096), dict(BM=64, BN=128, BK=64, stages=6, split_k=4)),  # 16 tiles x 4
    # Too few blocks for the deeper tile, or 16 rows: TUNED's 16-row tile.
    ((32, 4096, 11008), None),  # 64 blocks of 32x64, under a wave
    ((16, 8192, 8192), None),
], ids=lambda value: "x".join(map(str, value)) if isinstance(value, tuple) else "")
def test_sm_90a_gives_short_m_one_tile_as_deep_as_m(shape, expected):
    for dtype in ("f16", "bf16"):
        config = tuning.tuned_config(Case(*shape, dtype), "sm_90a")
        assert config == (expected or tuning.TUNED["wgmma", "short"]), dtype
    # The mma.sync targets, the llvm backend and batched rows keep TUNED's short tile.
    for config in (tuning.tuned_config(Case(*shape, "f16"), "sm_90"),
                   tuning.tuned_config(Case(*shape, "f16"), "sm_90a", "llvm"),
                   tuning.tuned_config(Case(*shape, "f16", batch=2), "sm_90a")):
        assert (config["BM"], config["BN"]) == (16, 64)


@pytest.mark.parametrize("shape, arch", [
    ((4096, 4096, 4096), "sm_90a"), ((128, 1000, 8192), "sm_90a"), ((64, 3000, 4096), "sm_90a"),
    ((1000, 1000, 4096), "sm_90a"), ((1000, 1003, 77), "sm_90a"), ((16, 8192, 8192), "sm_90a"),
    ((4096, 4096, 4096), "sm_80"), ((1000, 1003, 77), "sm_86"),
], ids=lambda value: "x".join(map(str, value)) if isinstance(value, tuple) else value)
def test_the_autotune_space_starts_with_the_tuned_configuration(shape, arch):
    """Autotuning never ends on a configuration slower than the default: the tuned one is
    timed first (the search's grid holds neither 4096^3's persistent raster nor the splits
    and clusters of the few-tile rules); knobs given beside the space leave it."""
    case = Case(*shape, "f16")
    tuned = tuning.tuned_config(case, arch)
    assert bench.autotune_space(case, {}, arch)[0] == tuned
    fixed = bench.autotune_space(case, {"stages": 3}, arch)
    assert fixed[0] == {k: v for k, v in tuned.items() if k != "stages"}


def test_the_sm_90a_autotune_space_splits_few_tiles_along_k():
    """Where the tiles alone leave SMs idle, SPLIT_TILES in SEARCHED_SPLITS slices: one wave
    at most, slices of SHORT_SLICE_STEPS steps at least."""
    space = bench.autotune_space(Case(128, 1000, 8192, "f16"), {}, "sm_90a")
    splits = {(c["BM"], c["BN"], c["split_k"]) for c in space
              if c.get("split_k", 1) > 1 and "swap_product" not in c}
    # 8 tiles of 128x128 (16 slices: 128 blocks of 8 steps, too short), 16 of 64x128, 8 of
    # 192x128 and of 256x128, 6 of 192x192: 128 steps, 8 slices at most.
    assert splits == {(bm, bn, s) for bm, bn in ((128, 128), (64, 128), (192, 128), (256, 128),
                                                  (192, 192)) for s in (2, 3, 4, 6, 8)}
    assert all(c.get("warpgroup_rows") == 128 for c in space
               if c.get("split_k", 1) > 1 and c["BM"] == 256)
    # ... and in clusters of 2 where the M tiles pair up: the two of 64 rows.
    paired = {(c["BM"], c["BN"], c["split_k"]) for c in space
              if c.get("split_k", 1) > 1 and c.get("cluster") == 2 and "swap_product" not in c}
    assert paired == {(64, 128, s) for s in (2, 3, 4, 6, 8)}
    # A wave of tiles already, or batched rows: no splits.
    for case in (Case(4096, 4096, 4096, "f16"), Case(128, 1000, 8192, "f16", batch=4)):
        assert not any(c.get("split_k", 1) > 1 for c in bench.autotune_space(case, {}, "sm_90a"))


def test_the_sm_90a_autotune_space_tries_the_swapped_product_for_a_few_hundred_rows():
    """Past SHORT_M up to SWAP_SEARCHED_MAX_M rows: the swapped tiles of SWAP_TILES, M in
    the fewest tiles of at most 256 rows or one more, split in one wave."""
    space = bench.autotune_space(Case(300, 3000, 8192, "f16"), {}, "sm_90a")
    swapped = [(c["BM"], c["BN"], c.get("split_k", 1), c.get("cluster", 1))
               for c in space if "swap_product" in c]
    # 2 x 24 tiles of 152x128 (split 2: 96 blocks), 2 x 47 of 152x64, 3 x 24 of 104x128;
    # the two M tiles of 152 rows unsplit in clusters of 2 too (the three of 104 are odd).
    assert sorted(swapped) == [(104, 128, 1, 1), (152, 64, 1, 1), (152, 64, 1, 2),
                               (152, 128, 1, 1), (152, 128, 1, 2), (152, 128, 2, 1)]
    assert space[0] == tuning.tuned_config(Case(300, 3000, 8192, "f16"), "sm_90a")
    for case in (Case(2048, 3000, 8192, "f16"), Case(300, 3000, 8192, "f16", batch=2),
                 Case(300, 3000, 8192, "f32")):
        assert not any("swap_product" in c for c in bench.autotune_space(case, {}, "sm_90a"))


def test_the_sm_90a_autotune_space_holds_only_tiles_wgmma_takes():
    from tilec.families.wgmma import FAMILY as WGMMA
    from tilec.options import Options
    space = bench.autotune_space(Case(4096, 4096, 4096, "bf16"), {}, "sm_90a")
    blocks = {(c["BM"], c["BN"], c["BK"]) for c in space}
    assert (128, 256, 64) in blocks and (256, 128, 64) in blocks and (64, 128, 64) in blocks
    # And the tiles for whole rounds and the skinny products' one wave, in their own stages
    # (and warpgroups).
    whole_round = {(256, 64, 4, None), (128, 128, 6, None)}
    assert {(c["BM"], c["BN"], c["stages"], c.get("warpgroup_rows")) for c in space
            if c["BN"] in (192, 144, 160, 176, 208, 224, 240) or
            (c["BM"], c["BN"], c["stages"], c.get("consumers")) in whole_round} == \
        {(tile["BM"], tile["BN"], tile["stages"], tile.get("warpgroup_rows"))
         for tile in tuning.rounds.WHOLE_ROUND_TILES} | {(64, 192, 6, None)}
    assert all(any(tile.items() <= c.items() for c in space) for tile in tuning.skinny.SKINNY_TILES)
    assert all(WGMMA.block_problem((c["BM"], c["BN"], c["BK"]), Options(
        arch="sm_90a", warpgroup_rows=c.get("warpgroup_rows", 64))) is None for c in space)
    assert {c["stages"] for c in space} == {3, 4, 6}
    assert {c["raster_group"] for c in space} == {8, 16}
    # Each tile under the four schedules: one tile a block or persistent, alone or in pairs.
    schedules = {(c.get("persistent", False), c.get("cluster", 1)) for c in space
                 if "consumers" not in c and "warpgroup_rows" not in c}
    assert schedules == {(False, 1), (True, 1), (False, 2), (True, 2)}
    # And pingpong consumers on the 64-row tiles (a warpgroup's tile each).
    pingpong = [c for c in space if c.get("consumers") == "pingpong"
                and "warpgroup_rows" not in c]
    assert pingpong and {c["BM"] for c in pingpong} == {64}
    assert all(c["persistent"] for c in pingpong)
    # Consumer warpgroups of 128 rows: 256x128 and the strip tiles (256x144 to 256x176)
    # under the four schedules, 128x128 pingpong.
    deep = [c for c in space if c.get("warpgroup_rows") == 128]
    assert {(c["BM"], c["BN"], c.get("consumers")) for c in deep} == \
        {(256, 128, None), (256, 144, None), (256, 160, None), (256, 176, None),
         (256, 64, None), (128, 128, "pingpong")}
    for bn in (128, 144, 160, 176, 64):
        assert {(c.get("persistent", False), c.get("cluster", 1)) for c in deep
                if (c["BM"], c["BN"]) == (256, bn)} == \
            {(False, 1), (True, 1), (False, 2), (True, 2)}
    assert all(WGMMA.block_problem((c["BM"], c["BN"], c["BK"]),
                                   Options(arch="sm_90a", warpgroup_rows=128)) is None
               for c in deep)
    for config in space:
        Options(arch="sm_90a", **{k: v for k, v in config.items()
                                  if k in ("stages", "raster_group", "persistent", "cluster",
                                           "consumers", "warpgroup_rows")})
    batched = bench.autotune_space(Case(1024, 1024, 1024, "f16", batch=32), {}, "sm_90a")
    assert not any(c.get("consumers") == "pingpong" for c in batched)
    assert any(c.get("warpgroup_rows") == 128 for c in batched)
    # Short M keeps its space, with the wgmma tiles split along K beside it; so does every
    # dtype on other targets, without them.
    short = Case(16, 8192, 8192, "f16")
    extra = [c for c in bench.autotune_space(short, {}, "sm_90a")
             if c not in bench.autotune_space(short, {})]
    split_tiles = {(tile["BM"], tile["BN"]) for tile in tuning.autotune.SPLIT_TILES}
    assert extra and all(c["split_k"] > 1 and (c["BM"], c["BN"]) in split_tiles
                         for c in extra)
    assert bench.autotune_space(Case(4096, 4096, 4096, "f16"), {}, "sm_90") == \
        bench.autotune_space(Case(4096, 4096, 4096, "f16"), {})


def test_sm_90a_leaves_small_ragged_problems_to_mma_sync():
    """1000x1003x77 (32 tiles of 128x256): mma.sync's 64x128 tiles, forced by their warp
    grid, reading the operands unpacked (as aligned words shifted into place), all of K in
    one step of 80, C stored by rows through shared memory; a longer K, still under
    ONE_WAVE_MIN_K, keeps the 3-stage 64x64x32 kernel where rows are off 16 bytes (a deeper
    one, or aligned rows, take the skinny tiles); the large ragged shape keeps wgmma's
    128x256."""
    small = tuning.tuned_config(Case(1000, 1003, 77, "f16"), "sm_90a")
    assert small == dict(BM=64, BN=128, BK=80, stages=1, warps=(2, 4), pack="off",
                         misaligned_copy="words", misaligned_store="rows")
    longer = tuning.tuned_config(Case(1000, 1003, 500, "f16"), "sm_90a")
    assert longer == dict(BM=64, BN=64, BK=32, stages=3, warps=(2, 2), pack="off")
    assert tuning.tuned_config(Case(4095, 4097, 4093, "f16"), "sm_90a") == \
        dict(BM=128, BN=256, BK=64, stages=3)


def check_sm_90a_options(config: dict) -> None:
    """A tuned configuration's options (its block tile aside) are ones Options takes on
    sm_90a: ValueError otherwise."""
    from tilec.options import Options
    Options(arch="sm_90a", **{key: value for key, value in config.items()
                              if key not in ("BM", "BN", "BK")})


SKINNY_64x192 = dict(BM=64, BN=192, BK=64, stages=6)
SKINNY_64x128 = dict(BM=64, BN=128, BK=64, stages=6)
SKINNY_128x128 = dict(BM=128, BN=128, BK=64, stages=6)


def swapped_pairs(rows: int, stages: int) -> dict:
    """tuning.swap's _swapped_pairs: C.T tiles 64 columns wide, ``rows`` rows of C along
    wgmma's n, in clusters of 2 along M."""
    return dict(BM=rows, BN=64, BK=64, swap_product="always", cluster=2, stages=stages)


@pytest.mark.parametrize("shape, expected", [
    # M from 65 to 256 rows: the skinny tile whose one wave spends the most on the product.
    ((128, 12288, 4096), SKINNY_64x192),  # 128 tiles, against 192 of 64x128 (2 waves)
    ((192, 8192, 4096), SKINNY_64x192),  # 3 x 43 = 129, against 128 half-empty 128x128
    ((96, 12288, 4096), SKINNY_64x192),  # ragged M
    ((128, 16384, 4096), SKINNY_128x128),  # 128, level with 64x256's 128 (the first wins)
    ((192, 10240, 4096), dict(BM=64, BN=256, BK=64, stages=4)),  # 3 x 40 = 120
    ((192, 12288, 4096), dict(BM=128, BN=192, BK=64, stages=4)),  # 128, 75% useful rows
    ((128, 28672, 4096), dict(BM=128, BN=256, BK=64, stages=3)),  # the only one-wave tile
    ((128, 6144, 4096), SKINNY_64x128),  # 96 tiles, against 64 of 64x192
    # Split along K where the tile's blocks fill too little, the 64-row tile kept.
    ((192, 4096, 11008), SKINNY_64x128),  # 96 blocks: split 2 would make 192
    ((256, 2048, 8192), dict(SKINNY_64x128, split_k=2)),  # 64 tiles x 2
    # B's rows off 128-byte lines: no 64x192, and clusters of 2 sharing B where the M
    # tiles pair up within one wave.
    ((200, 4000, 4096), dict(SKINNY_64x128, cluster=2)),  # 4 x 32 = 128
    ((128, 4104, 4096), dict(SKINNY_64x128, cluster=2)),
    ((192, 6000, 4096), dict(SKINNY_128x128, cluster=2)),  # 2 x 47 = 94
    # 5 M tiles of 64: pairs would make 144 blocks (K from 4096, B large: TALL_TILE split).
    ((300, 3000, 2048), SKINNY_64x128),
    # The ragged small class (under SMALL_TILES tiles of 128x256) whatever M, from
    # ONE_WAVE_MIN_K.
    ((1000, 1003, 4096), SKINNY_64x128),  # rows off 16 bytes: B packed, no cluster
    ((1000, 1000, 4096), dict(SKINNY_64x128, cluster=2)),  # 16 x 8 = 128
    ((1500, 1200, 4096), dict(SKINNY_128x128, cluster=2)),  # 12 x 10 = 120
    # 5 M tiles of 128 make no pairs; 4 of 160 swapped do, 128 blocks (_swapped_pairs).
    ((640, 2000, 4096), swapped_pairs(160, 7)),
    # K under ONE_WAVE_MIN_K: the tiles before.
    ((128, 12288, 512), dict(BM=64, BN=128, BK=64, stages=6)),
    ((1000, 1003, 500), dict(BM=64, BN=64, BK=32, stages=3, warps=(2, 2), pack="off")),
], ids=lambda value: "x".join(map(str, value)) if isinstance(value, tuple) else "")
def test_sm_90a_gives_skinny_products_the_tile_that_fills_one_wave(shape, expected):
    for dtype in ("f16", "bf16"):
        assert tuning.tuned_config(Case(*shape, dtype), "sm_90a") == expected, dtype
    if "warps" not in expected and "swap_product" not in expected and \
            shape[2] >= tuning.rounds.ONE_WAVE_MIN_K:
        assert {key: expected[key] for key in ("BM", "BN", "BK", "stages")} in \
            tuning.skinny.SKINNY_TILES
        blocks = tuning.measure.tile_count(Case(*shape, "f16"), expected) * \
            expected.get("split_k", 1)
        assert blocks <= tuning.ONE_WAVE
        check_sm_90a_options(expected)
    # Batched rows, the mma.sync targets and the llvm backend keep their own tiles.
    for config in (tuning.tuned_config(Case(*shape, "f16", batch=2), "sm_90a"),
                   tuning.tuned_config(Case(*shape, "f16"), "sm_90"),
                   tuning.tuned_config(Case(*shape, "f16"), "sm_90a", "llvm")):
        assert config.get("cluster", 1) == 1 and (config["BM"], config["BN"]) != (64, 192)


@pytest.mark.parametrize("shape, expected", [
    # Few tiles over a deep K: slices of at least MIN_SLICE_STEPS steps fill one wave, or of
    # SHORT_SLICE_STEPS where the split tiles fill under SHORT_SLICE_TILES of it.
    ((512, 512, 65536), dict(BM=128, BN=128, BK=64, stages=4, split_k=8)),  # 16 tiles
    ((768, 768, 32768), dict(BM=128, BN=128, BK=64, stages=4, split_k=3)),  # 36: 108 blocks
    ((2048, 1000, 8192), dict(BM=128, BN=256, BK=64, stages=3, split_k=2)),  # the tiled tile
    # ... but where 128x128 tiles fill the wave unsplit (B's rows on lines): ONE_WAVE_TILES.
    ((2048, 1024, 8192), dict(BM=128, BN=128, BK=64, stages=6)),
    ((512, 4096, 11008), dict(BM=128, BN=128, BK=64, stages=6)),
    # M up to M_KEEPS_TILE splits the small class's own 64x128 tile (B bounds it).
    ((128, 4096, 11008), dict(BM=64, BN=128, BK=64, stages=6, split_k=2)),
    ((128, 1000, 8192), dict(BM=64, BN=128, BK=64, stages=6, split_k=8)),  # 16 tiles
    ((300, 1000, 4096), dict(BM=128, BN=128, BK=64, stages=4, split_k=4)),  # 24 tiles
    ((500, 1024, 8192), dict(BM=128, BN=128, BK=64, stages=4, split_k=4)),  # 32 tiles
    # ... but where the swapped product's 64-column tiles in pairs fill the wave 1.1 times
    # better (_swapped_pairs): 128 blocks of 80x64, 128 of 48x64.
    ((300, 2000, 4096), swapped_pairs(80, 9)),
    ((384, 1000, 2048), swapped_pairs(48, 9)),
    ((1000, 1000, 4096), dict(BM=64, BN=128, BK=64, stages=6, cluster=2)),
    # ... but where K takes two slices of SPLIT_CLUSTER_MIN_STEPS: a larger tile split in
    # clusters, filling the wave as well (_split_in_clusters).
    ((1000, 1000, 16384), dict(BM=128, BN=256, BK=64, stages=4, cluster=2, split_k=4)),
    ((1000, 1000, 8192), dict(BM=128, BN=128, BK=64, stages=6, cluster=2, split_k=2)),
    ((479, 2000, 11008), dict(BM=128, BN=128, BK=64, stages=6, cluster=2, split_k=2)),
    # Short M: B bounds the product, and half a wave of blocks streams it.
    ((64, 8192, 4096), dict(BM=64, BN=128, BK=64, stages=6)),
    # The tiles fill the SMs already, or the slices would be too short: no split.
    ((1024, 1024, 16384), dict(BM=64, BN=128, BK=64, stages=6)),  # 128 blocks
    ((2048, 2048, 2048), dict(BM=128, BN=256, BK=64, stages=3, raster_group=16)),
    ((512, 512, 2048), dict(BM=64, BN=128, BK=64, stages=6)),
    ((1000, 1003, 500), dict(BM=64, BN=64, BK=32, stages=3, warps=(2, 2), pack="off")),
], ids=lambda value: "x".join(map(str, value)) if isinstance(value, tuple) else "")
def test_sm_90a_splits_k_where_few_tiles_leave_the_sms_idle(shape, expected):
    from tilec.options import Options
    config = tuning.tuned_config(Case(*shape, "f16"), "sm_90a")
    assert config == expected
    if config.get("split_k", 1) > 1:
        tiles = -(-shape[0] // config["BM"]) * -(-shape[1] // config["BN"])
        assert tiles * config["split_k"] <= tuning.ONE_WAVE
        assert shape[2] // config["BK"] // config["split_k"] >= tuning.split.SHORT_SLICE_STEPS
        Options(arch="sm_90a", stages=config["stages"], split_k=config["split_k"],
                cluster=config.get("cluster", 1))
    if config.get("cluster", 1) > 1 and config.get("split_k", 1) > 1:  # whole pairs
        assert -(-shape[0] // config["BM"]) % 2 == 0
        assert shape[2] // config["BK"] // config["split_k"] >= \
            tuning.skinny.SPLIT_CLUSTER_MIN_STEPS
    # Batched rows and the llvm backend (no wgmma) are not split.
    assert "split_k" not in tuning.tuned_config(Case(*shape, "f16", batch=2), "sm_90a")
    assert "split_k" not in tuning.tuned_config(Case(*shape, "f16"), "sm_90a", "llvm")


@pytest.mark.parametrize("case, arch, entry, rules", [
    (Case(4096, 4096, 4096, "f16"), "sm_90a", ("wgmma", "tiled"), []),
    (Case(384, 3000, 8192, "f16"), "sm_90a", ("wgmma", "ragged"), ["_tall"]),
    (Case(300, 3000, 8192, "f16"), "sm_90a", ("wgmma", "ragged"), ["_swapped"]),
    (Case(4104, 4104, 4096, "bf16"), "sm_90a", ("wgmma", "ragged"),
     ["_multicast_for_rows_off_lines", "_tile_for_whole_waves"]),
    (Case(2048, 2048, 2048, "f16"), "sm_90a", ("wgmma", "tiled"), ["one_tile_a_block"]),
    (Case(1000, 1003, 77, "f16"), "sm_90a", ("wgmma", "ragged"), ["one_step_k"]),
    (Case(64, 12288, 4096, "f16"), "sm_90a", ("wgmma", "short"), ["_short_tile"]),
    (Case(128, 1000, 8192, "f16"), "sm_90a", ("wgmma", "ragged"), ["_skinny"]),
    (Case(4096, 4096, 4096, "f16"), "sm_86", ("mma", "tiled"), ["_within_shared_memory"]),
    (Case(1024, 1024, 1024, "f16", batch=32), "sm_90a", ("wgmma", "tiled"), ["batched_tiled"]),
    (Case(4096, 4096, 4096, "f8e4m3"), "sm_90a", ("wgmma8", "tiled"), []),
], ids=lambda value: value.shape + "-" + value.dtype if isinstance(value, Case) else None)
def test_tuned_rules_name_the_entry_and_the_rules_that_moved_the_case(case, arch, entry, rules):
    """tuned_rules: tuned_config's choice, the TUNED key it started from and the RULES
    that moved it, each a documented rule; describe_tuned says them a line each."""
    config, start, moved = tuning.tuned_rules(case, arch)
    assert config == tuning.tuned_config(case, arch)
    assert (start, moved) == (entry, rules)
    lines = tuning.describe_tuned(case, arch)
    assert lines[0].startswith(f"{case.shape} {case.dtype} on {arch}: ")
    assert [line.split(":")[0] for line in lines[1:-1]] == \
        ([f"then {rule}" for rule in rules] or ["no rule moved it"])
    assert lines[-1].startswith("chosen: ")
    # Outside tuned_rules nothing is recorded.
    assert tuning.trace.TRACE.get() is None


TALL = dict(BM=192, BN=128, BK=64, stages=4)


@pytest.mark.parametrize("shape, expected", [
    # 192-row tiles covering M (TALL_M_FILL) over K from TALL_FIT_MIN_K, split to fill most
    # of the wave: 4 x 8 tiles of 768x1000 in 4 slices, 2 x 16 of 384x2000.
    ((768, 1000, 8192), dict(TALL, split_k=4)),
    ((384, 2000, 8192), dict(TALL, split_k=4)),
    ((768, 2000, 16384), dict(TALL, split_k=2)),
    # Two rows of them over a large B (TALL_B_ELEMENTS), K from TALL_TWO_ROWS_MIN_K, where
    # M is a multiple of 192 (else the swapped product takes the case: _swapped).
    ((384, 3000, 8192), dict(TALL, split_k=2)),  # 48 tiles: 96 blocks
    ((384, 2000, 16384), dict(TALL, split_k=4)),
    ((384, 4104, 4096), dict(TALL, split_k=2)),
    # Not taken: 8 slices (TALL_MAX_SPLIT) would be needed to fill the wave ...
    ((384, 1000, 8192), dict(BM=128, BN=128, BK=64, stages=4, split_k=5)),
    ((300, 1000, 16384), dict(BM=128, BN=128, BK=64, stages=4, split_k=5)),
    # ... the skinny tile is 64x192 (B's rows on lines), or four rows of 192 use 78% of
    # theirs: the swapped product's 64-column pairs fill the wave better (_swapped_pairs).
    ((300, 4096, 4096), swapped_pairs(152, 7)),
    ((600, 2000, 8192), swapped_pairs(152, 7)),
    ((384, 1024, 4096), dict(BM=128, BN=128, BK=64, stages=4, split_k=4)),
    ((300, 3000, 2048), dict(BM=64, BN=128, BK=64, stages=6)),
    ((1536, 1000, 8192), dict(BM=128, BN=128, BK=64, stages=6, cluster=2)),
], ids=shape_id)
def test_sm_90a_takes_tall_tiles_split_along_k_where_they_cover_m(shape, expected):
    from tilec.options import Options
    config = tuning.tuned_config(Case(*shape, "f16"), "sm_90a")
    assert config == expected
    if (config["BM"], config["BN"]) == (192, 128):
        rows = -(-shape[0] // 192)
        assert config["split_k"] <= tuning.swap.TALL_MAX_SPLIT
        assert tuning.swap.TALL_WAVE_FILL * tuning.ONE_WAVE <= \
            rows * -(-shape[1] // 128) * config["split_k"] <= tuning.ONE_WAVE
        assert rows <= 2 or shape[0] >= tuning.swap.TALL_M_FILL * rows * 192
        Options(arch="sm_90a", stages=config["stages"], split_k=config["split_k"])
    # Batched rows and the llvm backend (no wgmma) keep their own tiles.
    for other in (tuning.tuned_config(Case(*shape, "f16", batch=2), "sm_90a"),
                  tuning.tuned_config(Case(*shape, "f16"), "sm_90a", "llvm")):
        assert other.get("BM") != 192


SWAPPED = dict(BK=64, swap_product="always")


@pytest.mark.parametrize("shape, expected", [
    # Two M tiles of 136-160 rows: 64 columns on one warpgroup, unsplit in clusters of 2
    # (sharing B's tile), 2 x 47 = 94 or 2 x 65 = 130 blocks of 152 rows (M = 300 with 4
    # padded), over K 4096 as over 8192, where 128 columns split in two fill the wave as
    # well but share nothing.
    ((300, 3000, 4096), dict(SWAPPED, BM=152, BN=64, stages=6, cluster=2)),
    ((300, 4104, 4096), dict(SWAPPED, BM=152, BN=64, stages=6, cluster=2)),
    ((300, 3000, 8192), dict(SWAPPED, BM=152, BN=64, stages=6, cluster=2)),
    ((260, 4104, 8192), dict(SWAPPED, BM=136, BN=64, stages=6, cluster=2)),
    # 2 x 16 tiles of 160x64 would fill a quarter of the wave: 128 columns split in four.
    ((320, 2048, 11008), dict(SWAPPED, BM=160, BN=128, stages=4, split_k=4)),
    # Not taken: M a multiple of 192 (the tall tiles pad nothing), or no tall tile.
    ((384, 3000, 8192), dict(TALL, split_k=2)),
    ((300, 1000, 4096), dict(BM=128, BN=128, BK=64, stages=4, split_k=4)),
    # Past SWAP_UNSPLIT_MIN_M: 128 columns unsplit, 4 rows of 152 or 232 in clusters of 2,
    # 5 of 200 alone (3 pairs would be 6 x 24 = 144 blocks, past the wave).
    ((600, 3000, 4096), dict(SWAPPED, BM=152, BN=128, stages=4, cluster=2)),
    ((900, 4104, 8192), dict(SWAPPED, BM=232, BN=128, stages=4, cluster=2)),
    ((1000, 3000, 8192), dict(SWAPPED, BM=200, BN=128, stages=4)),
    # Not taken: as many rows as 128-row tiles (4 x 256 = 1024), M a multiple of 128, K
    # under SWAP_UNSPLIT_MIN_K, M not past SWAP_UNSPLIT_MIN_M (no tall tile either).
    ((1000, 4096, 8192), dict(BM=128, BN=256, BK=64, stages=3)),
    ((1024, 3000, 4096), dict(BM=128, BN=192, BK=64, stages=4, cluster=2)),
    ((600, 3000, 2048), dict(BM=128, BN=128, BK=64, stages=6)),
    # 450 rows: two pairs of 64-column tiles of 232 rows (_swapped_pairs), 47 N tiles.
    ((450, 3000, 4096), swapped_pairs(232, 5)),
], ids=shape_id)
def test_sm_90a_swaps_the_product_where_m_would_be_padded(shape, expected):
    """Where the tall tile would be taken, or unsplit past SWAP_UNSPLIT_MIN_M rows, the
    swapped product's rows of any multiple of 8 (wgmma's n) cover M with less padding; its
    blocks fill TALL_WAVE_FILL of one wave."""
    config = tuning.tuned_config(Case(*shape, "f16"), "sm_90a")
    assert config == expected
    assert tuning.tuned_config(Case(*shape, "bf16"), "sm_90a") == expected
    if config.get("swap_product"):
        tiles = -(-shape[0] // config["BM"]) * -(-shape[1] // config["BN"])
        blocks = tiles * config.get("split_k", 1)
        assert tuning.swap.TALL_WAVE_FILL * tuning.ONE_WAVE <= blocks <= tuning.ONE_WAVE
        assert config["BM"] % 8 == 0 and config["BM"] - 8 < -(-shape[0] // -(-shape[0] //
                                                                             config["BM"]))
        if config.get("cluster"):  # whole pairs of M tiles, unsplit
            assert -(-shape[0] // config["BM"]) % 2 == 0 and "split_k" not in config
        if shape[0] > tuning.swap.SWAP_UNSPLIT_MIN_M:
            assert "split_k" not in config
            assert -(-shape[0] // config["BM"]) * config["BM"] < -(-shape[0] // 128) * 128
    # Batched rows and the llvm backend (no wgmma) are not swapped.
    for other in (tuning.tuned_config(Case(*shape, "f16", batch=2), "sm_90a"),
                  tuning.tuned_config(Case(*shape, "f16"), "sm_90a", "llvm")):
        assert "swap_product" not in other


@pytest.mark.parametrize("shape, narrow", [
    # 128x256 tiles' last wave nearly empty, 128x128 ones filling theirs: half-width tiles.
    ((4096, 4160, 4096), True),  # 544 wide tiles (16 in the fifth wave), 1056 narrow (8)
    # ... unless strips make one wave (tuning.rounds.STRIP_TILES one tile a block): 9 x 14 = 126
    # of 256x176, 5 x 26 = 130 of 256x160.
    ((2304, 2304, 2048), False),
    ((1280, 4096, 2048), False),
    # The last wave fuller, or whole: the wide tiles.
    ((3072, 3136, 3072), False),  # 312 (48 in the third: 36%)
    ((4104, 4096, 4096), False),  # 528: 4 whole waves
    ((4096, 4096, 4096), False),  # 512 (116 in the fourth)
    # A nearly empty last wave whose narrow tiles gain too little: 544 wide, 1088 narrow
    # (9 waves against 5 of twice the work, at NARROW_TILE_RATE).
    ((4096, 4352, 4096), False),
    # Rows off 16 bytes (not measured so: packing and row stores), and one wave.
    ((4095, 4097, 4093), False),
    ((4096, 4100, 4096), False),
    ((2048, 2048, 2048), False),
], ids=shape_id)
def test_sm_90a_takes_half_width_tiles_where_the_last_wave_would_run_nearly_empty(shape,
                                                                                  narrow):
    for dtype in ("f16", "bf16"):
        config = tuning.tuned_config(Case(*shape, dtype), "sm_90a")
        assert (config == tuning.rounds.NARROW_TILE) == narrow, (dtype, config)
    if narrow:
        tiles = -(-shape[0] // 128) * -(-shape[1] // 256)
        assert 0 < tiles % tuning.ONE_WAVE <= tuning.rounds.LAST_WAVE_SHARE * \
            tuning.ONE_WAVE
        check_sm_90a_options(config)
    # Batched rows, other targets and the llvm backend keep their own tiles.
    assert tuning.tuned_config(Case(*shape, "f16", batch=2), "sm_90a") != \
        tuning.rounds.NARROW_TILE
    assert tuning.tuned_config(Case(*shape, "f16"), "sm_90") != tuning.rounds.NARROW_TILE
    assert tuning.tuned_config(Case(*shape, "f16"), "sm_90a", "llvm") != \
        tuning.rounds.NARROW_TILE


ONE_STEP_OF_16 = dict(BM=64, BN=128, BK=16, stages=1, warps=(2, 4), pack="off",
                      misaligned_copy="words", misaligned_store="rows")


@pytest.mark.parametrize("shape, arch, backend, expected", [
    # Misaligned rows of too few elements to pack (K x N or M x K under PACK_MIN_ELEMENTS),
    # over many tiles: all of a shallow K in one step, on wgmma's target and mma's alike ...
    ((1950, 934, 4), "sm_90a", "ptx", ONE_STEP_OF_16),  # was 128x192 on mma.sync: spilled
    ((2481, 1608, 3), "sm_80", "ptx", ONE_STEP_OF_16),  # was 128x128: 228 bytes spilled
    ((632, 2674, 5, 2), "sm_90a", "ptx", ONE_STEP_OF_16),  # A: 632 x 5 x 2 elements
    # ... else the in-place tiles, as the llvm backend (which stores no rows) takes too.
    ((8891, 14, 722), "sm_90a", "ptx", tuning.choose.IN_PLACE_TILE),  # B: 722 x 14
    ((70, 8930, 213), "sm_80", "ptx", tuning.choose.IN_PLACE_TILE),  # A: 70 x 213
    ((1950, 934, 4), "sm_90a", "llvm", tuning.choose.IN_PLACE_TILE),
    # Packed operands (enough elements) and aligned rows keep their own rules.
    ((1950, 934, 100), "sm_90a", "ptx", None),
    ((632, 2674, 5, 8), "sm_90a", "ptx", None),  # 632 x 5 x 8 = 25280: packed
    ((8891, 16, 722), "sm_90a", "ptx", None),
    # Short M: the short class's mma.sync tile, not the wgmma tile _short_tile would take
    # (64x128 ran on mma.sync's 1x2 warps: 264 bytes spilled at 63x5294x155).
    ((63, 5294, 155), "sm_90a", "ptx", tuning.tables.TUNED["mma", "short"]),
    ((40, 934, 4), "sm_90a", "ptx", tuning.tables.TUNED["mma", "short"]),
    ((63, 5294, 160), "sm_90a", "ptx", None),  # rows aligned: _short_tile's tile
], ids=shape_id)
def test_rows_the_launch_leaves_misaligned_take_mma_sync_tiles_that_read_them(
        shape, arch, backend, expected):
    for dtype in ("f16", "bf16"):
        case = Case(*shape[:3], dtype, batch=shape[3]) if len(shape) > 3 else \
            Case(*shape, dtype)
        config, _, rules = tuning.tuned_rules(case, arch, backend)
        assert tuning.measure.rows_aligned_at_launch(case) == (expected is None)
        if expected is None:
            assert "unpacked_rows" not in rules, (dtype, config)
        else:
            assert (config, rules) == (expected, ["unpacked_rows"]), dtype


@pytest.mark.parametrize("shape, expected", [
    # Rows 16-byte aligned, K from SKINNY_ALIGNED_MIN_K: the skinny tile of one wave.
    ((2368, 512, 512), SKINNY_64x192),  # 37 x 3 = 111, against 148 of 64x128 (2 waves)
    ((1685, 320, 512), SKINNY_64x128),  # 27 x 3 = 81, against 54 of 64x192
    ((803, 320, 768), swapped_pairs(32, 9)),  # 13 pairs x 5 (_swapped_pairs)
    ((1000, 1000, 256), {**SKINNY_64x128, "cluster": 2}),  # B's rows off 128-byte lines
    ((2368, 512, 192), SKINNY_64x192),
    ((1685, 320, 144), SKINNY_64x128),  # the first K past one step with A's rows aligned
    # Rows off 16 bytes (packing would cost a launch): mma.sync's tiles reading the operands
    # in place, whatever the K past one step.
    ((1000, 1003, 512), dict(BM=64, BN=64, BK=32, stages=3, warps=(2, 2), pack="off")),
    ((1000, 1003, 256), dict(BM=64, BN=64, BK=32, stages=3, warps=(2, 2), pack="off")),
], ids=shape_id)
def test_sm_90a_gives_few_aligned_ragged_tiles_over_a_shallow_k_the_skinny_tile(shape,
                                                                                expected):
    for dtype in ("f16", "bf16"):
        config, _, rules = tuning.tuned_rules(Case(*shape, dtype), "sm_90a")
        assert config == expected, (dtype, config)
        assert rules == (["_skinny", "_swapped_pairs"] if "swap_product" in expected else
                         ["_skinny"] if "warps" not in expected else ["few_ragged_tiles"])


@pytest.mark.parametrize("shape, expected", [
    # As measured (H200, session 38): 900x1200x4096 1.36x the tuning before, 2000x392x4096
    # 1.14x, 3936x392x768 1.08x, the ring as deep as 200 KiB holds (cuBLAS's depths).
    ((900, 1200, 4096), swapped_pairs(152, 7)),  # 3 pairs of M tiles x 19 N tiles
    ((2000, 392, 4096), swapped_pairs(112, 9)),  # 9 x 7 = 126 blocks in pairs
    ((3936, 392, 768), swapped_pairs(224, 5)),
    # Not taken: the tuning's share as large (1000x1000x4096: 128 rows of 64x128 in pairs,
    # 144x64 ran 0.89 of it), split-K in its place (1578x128x8048 ran 0.81 of 7 slices),
    # M past 1024 rows with N past 640 (1225x1200x5224 0.78), K under 768, rows off 16 bytes.
    ((1000, 1000, 4096), dict(SKINNY_64x128, cluster=2)),
    ((1578, 128, 8048), dict(BM=128, BN=128, BK=64, stages=4, split_k=7)),
    ((1225, 1200, 5224), dict(SKINNY_128x128, cluster=2)),
    ((3936, 392, 512), dict(SKINNY_128x128)),
    ((900, 1203, 4096), dict(SKINNY_128x128)),
], ids=shape_id)
def test_sm_90a_swaps_few_ragged_tiles_onto_64_column_pairs(shape, expected):
    """_swapped_pairs: few ragged tiles over a deep K swapped onto C.T tiles 64 columns
    wide in clusters of 2 along M, where their one wave spends SWAP_PAIR_GAIN times the
    share on the product, BM the multiple of 8 whose pairs fill it best."""
    for dtype in ("f16", "bf16"):
        config, _, rules = tuning.tuned_rules(Case(*shape, dtype), "sm_90a")
        assert config == expected, (dtype, config)
        assert ("_swapped_pairs" in rules) == ("swap_product" in expected)
    if "swap_product" in expected:
        case = Case(*shape, "f16")
        blocks = tuning.measure.tile_count(case, expected)
        assert blocks <= tuning.ONE_WAVE and -(-shape[0] // expected["BM"]) % 2 == 0
        stage_bytes = (expected["BM"] + 64) * 64 * 2
        assert stage_bytes * expected["stages"] <= 200 * 1024 < \
            stage_bytes * (expected["stages"] + 1) or expected["stages"] == 9
        check_sm_90a_options(expected)


@pytest.mark.parametrize("shape, expected", [
    # More than a wave of 128x256 tiles over K from 512 to under 2048, rows aligned:
    # persistent 128x128 tiles in place of one tile a block ...
    ((1752, 3200, 512), tuning.rounds.SHALLOW_ROUND_TILE),  # 182 wide (2 rounds, the second 38%)
    # ... in clusters of 2 where B's rows are off 128-byte lines, M from MULTICAST_MIN_M ...
    ((5000, 2000, 768), tuning.rounds.SHALLOW_ROUND_CLUSTER),
    ((5712, 792, 768), tuning.rounds.SHALLOW_ROUND_CLUSTER),  # 45 M tiles: 23 clusters
    ((1000, 8200, 768), tuning.rounds.SHALLOW_ROUND_TILE),
    ((3797, 2560, 1024), tuning.rounds.SHALLOW_ROUND_TILE),
    # ... as full rounds but over a K under SHALLOW_OVERLAP_MAX_K (the overlap pays) ...
    ((8000, 1024, 512), tuning.rounds.SHALLOW_ROUND_TILE),  # 252 wide (2 rounds, 95%), 504 narrow
    # ... or of persistent 128x256 tiles whose rounds they fill WHOLE_ROUND_GAIN better:
    ((1536, 4096, 1024), tuning.rounds.SHALLOW_ROUND_TILE),  # 384 (97% of 3) against 192 (73% of 2)
    # ... and 192x192 where those fill them better still: 256 (97% of 2) against 576 (87%
    # of 5).
    ((3000, 3000, 1024), tuning.rounds.SHALLOW_SQUARE),
    ((4800, 2752, 512), tuning.rounds.SHALLOW_SQUARE),  # 375 (95% of 3) against 836 (91% of 7)
    # Wide tiles filling their rounds as well are kept: persistent, or one a block over a K
    # from SHALLOW_OVERLAP_MAX_K.
    ((1792, 4336, 1024), dict(BM=128, BN=256, BK=64, stages=3)),  # 238 against 476 (90%)
    ((4096, 4096, 1024), dict(BM=128, BN=256, BK=64, stages=3, raster_group=16,
                              persistent=True)),
    # One wave of wide tiles; K from SHALLOW_ROUNDS_MAX_K or under SHALLOW_ROUNDS_MIN_K; rows
    # off 16 bytes: other rules.
    ((2048, 2048, 512), dict(BM=128, BN=256, BK=64, stages=3, raster_group=16)),
    ((3797, 2560, 2048), None),
    # From WHOLE_ROUND_MIN_K to under SHALLOW_ROUNDS_MAX_K, the tiles the whole-round rules
    # leave one a block.
    ((3797, 2560, 1536), tuning.rounds.SHALLOW_ROUND_TILE),
    ((8192, 8192, 256), None),
    ((3797, 2561, 1024), None),
], ids=shape_id)
def test_sm_90a_runs_persistent_tiles_over_several_waves_of_a_shallow_k(shape, expected):
    for dtype in ("f16", "bf16"):
        config, _, rules = tuning.tuned_rules(Case(*shape, dtype), "sm_90a")
        taken = "_persistent_for_shallow_rounds" in rules
        if expected is None:
            assert not taken, (dtype, config)
            continue
        assert config == expected, (dtype, config)
        assert taken == (expected in (tuning.rounds.SHALLOW_ROUND_TILE,
                                      tuning.rounds.SHALLOW_ROUND_CLUSTER,
                                      tuning.rounds.SHALLOW_SQUARE))
        check_sm_90a_options(config)
    # Batched rows keep their own tiles.
    assert "_persistent_for_shallow_rounds" not in \
        tuning.tuned_rules(Case(*shape, "f16", batch=2), "sm_90a")[2]


@pytest.mark.parametrize("shape, tile", [
    # B's rows 16-byte aligned, off 128-byte lines, over more than a wave of wide tiles: a
    # cluster of 2 shares B's boxes, in the tile whose rounds the tiles fill best.
    ((4096, 4104, 4096), (256, 128)),  # 528 tiles: 4 whole rounds
    ((2200, 2200, 2048), (256, 176)),  # 117: 89% of a round (128x192: 216, 82% of 2)
    ((3072, 3080, 3072), (256, 144)),  # 264: 2 whole rounds (128x128: 600, 91% of 5)
    ((3072, 3000, 3072), (192, 192)),  # 256 squares, 97% of 2 rounds (256x144: 252, 95%)
    ((1536, 4104, 4096), (128, 192)),  # 264: 2 whole rounds (M from MULTICAST_MIN_M)
    ((1024, 4104, 4096), (256, 128)),  # 132: one whole round
    ((6144, 6152, 4096), (192, 192)),  # 1056 squares: 8 whole rounds (WIDE_SQUARE_TILE)
    ((8192, 8200, 8192), (128, 256)),  # 2112: 16 whole rounds
    # K from MULTICAST_MIN_K, under 2048 (session 36), in the tile the rounds fill best.
    ((7035, 1688, 1536), (128, 256)),
    ((5666, 1904, 1840), (128, 256)),
    ((4261, 848, 1792), (256, 128)),  # 256x128 in place of 128x128 (TALL_MULTICAST_TILE)
    ((6193, 8120, 1912), (128, 256)),  # but not of the wider tiles
    ((1138, 5512, 4832), (128, 256)),
    ((3844, 4216, 6184), (256, 128)),
    ((7035, 1688, 1528), None),  # under it: one 128x256 tile a block (and the shallow
    # rounds' rule keeps it: 128x128 fills them no better)
    # B's rows on whole lines, or off 16 bytes (packed anyway), or one wave of wide tiles
    # (in clusters, but not persistent, from ONE_WAVE_CLUSTER_MIN_K: the whole-round test).
    ((4104, 4096, 4096), None),
    ((4096, 4160, 4096), None),
    ((4096, 4100, 4096), None),
    ((4095, 4097, 4093), None),
    ((1536, 1544, 1000), None),
], ids=shape_id)
def test_sm_90a_multicasts_a_b_whose_rows_are_off_128_byte_lines(shape, tile):
    for dtype in ("f16", "bf16"):
        config = tuning.tuned_config(Case(*shape, dtype), "sm_90a")
        assert (config.get("cluster", 1) == 2) == (tile is not None), (dtype, config)
        if tile is not None:
            assert (config["BM"], config["BN"]) == tile
            assert {key: config[key] for key in tuning.rounds.MULTICAST} == tuning.rounds.MULTICAST
            check_sm_90a_options(config)
    # Batched rows, other targets and the llvm backend launch no clusters.
    for config in (tuning.tuned_config(Case(*shape, "f16", batch=2), "sm_90a"),
                   tuning.tuned_config(Case(*shape, "f16"), "sm_90"),
                   tuning.tuned_config(Case(*shape, "f16"), "sm_90a", "llvm")):
        assert config.get("cluster", 1) == 1


SQUARE, ROW = (192, 192), (128, 192)  # tuning.rounds.WIDE_SQUARE_TILE, tuning.rounds.WIDE_ROW_TILE
PADDED, PADDED_160 = (128, 144), (128, 160)  # of tuning.rounds.PADDED_TILES: B's last slab padded
STRIP, STRIP_160 = (256, 144), (256, 160)  # of tuning.rounds.STRIP_TILES: 128-row warpgroups
PADDED_WIDE, TALL = (192, 176), (256, 64)  # tuning.rounds.CLUSTER_TILES, in persistent clusters


@pytest.mark.parametrize("shape, tile", [
    # 192x192 or 128x192 tiles in one wave where the chosen tile takes two rounds or more,
    # or leaves most of the wave idle.
    ((2048, 2056, 2048), SQUARE),  # 121 tiles, against 272 of 128x128 in clusters (3 rounds)
    ((2112, 2112, 2048), SQUARE),  # 121, against 289 of 128x128 (3 rounds)
    ((768, 6144, 4096), SQUARE),  # 128 (97% of a wave), against 4 x 48 of 128x128
    ((2048, 2304, 16384), SQUARE),  # 132: one whole wave
    ((1536, 2112, 4096), ROW),  # 12 x 11 = 132, against 108 of 128x256 (and 121 squares)
    ((1536, 2056, 4096), ROW),  # the same 132 in clusters of 2: B's rows off 128-byte lines
    ((1024, 3072, 4096), ROW),  # 128, against 96 of 128x256
    # Over several rounds (K from WHOLE_ROUND_MIN_K, rows 16-byte aligned): persistent, in
    # clusters of 2 where B's rows are off 128-byte lines.
    ((4608, 4096, 8192), SQUARE),  # 528 squares, 4 whole rounds, against 576 wide (5)
    ((4104, 4104, 4096), PADDED_WIDE),  # 528: 4 whole rounds, against 484 squares (the
    # last 67% full) and 561 wide (5)
    ((4104, 3136, 2048), PADDED_WIDE),  # B's rows on lines alike: 374, against 352 squares
    ((4096, 4224, 4096), None),  # 128x128's 8 whole rounds: 192x176 measured 0.98 of them
    ((6144, 2112, 2048), ROW),  # 528: 4 whole rounds, against 352 squares (the last 67%)
    ((3072, 2056, 4096), ROW),  # 264 in clusters: 2 whole rounds, against 216 wide (2)
    ((4608, 4096, 1024), None),  # K too shallow for the rule
    # K from WHOLE_ROUND_MIN_K, under 2048 (session 36); but not CLUSTER_TILES (256x64), from
    # CLUSTER_TILE_MIN_K only: 4453x360 takes one wave of 128x192 in clusters under it.
    ((3893, 1176, 2040), STRIP_160),
    ((5136, 3248, 1728), SQUARE),
    ((4487, 3256, 1664), ROW),
    ((4172, 1472, 1584), ROW),  # B's rows on lines: persistent, not in clusters
    ((4453, 360, 2008), ROW),
    ((4453, 360, 2048), TALL),
    ((4095, 4097, 4093), None),  # rows off 16 bytes
    # The wide tiles fill their one wave better, or the others take two.
    ((2048, 2048, 2048), None),  # 128 of 128x256 cover it exactly; 121 squares pad it
    ((2200, 2200, 2048), (256, 176)),  # 117 in clusters, 89% of a wave, against 216 (2)
    ((4096, 4104, 4096), None),
    ((4096, 4096, 4096), None),
    # Padded tiles where their N tiles are whole, B's rows on lines and K from
    # PADDED_TILE_MIN_K, in persistent clusters.
    ((1024, 2304, 8192), PADDED),  # 8 x 16 = 128 (97% of a wave), against 96 of 128x192
    ((2048, 1152, 4096), PADDED),  # 16 x 8 = 128
    ((1024, 4608, 4096), STRIP),  # 4 x 32 = 128 strips in one wave, against 256 of
    # 128x144 (2 rounds, 97% full) and 288 of 128x128 (3)
    ((1024, 2560, 8192), PADDED_160),  # 8 x 16 = 128, against 112 of 128x192
    ((4096, 1280, 4096), STRIP_160),  # 16 x 8 = 128 strips, against 256 of 128x160 (2
    # rounds) and 320 of 128x128 (3)
    ((512, 10240, 8192), STRIP_160),  # 2 x 64 = 128, against 320 of 128x128 (3 rounds)
    ((1024, 3840, 4096), None),  # 128x240's 128 tiles, against 120 of 128x256: too little
    ((1024, 2304, 2048), ROW),  # K too shallow for them
    ((1536, 1536, 4096), ROW),  # N 10.7 tiles of 144: measured slower
    ((2048, 2304, 4096), SQUARE),  # 132 squares: one whole wave
    # 256-row strip tiles where B's rows are off lines (shared in clusters) and they fill
    # whole rounds: 6 x 22 = 132 of 256x144 against 204 of 128x192 (2 rounds, the last 55%).
    ((1536, 3080, 4096), STRIP),
    ((1536, 3168, 8192), STRIP),
    ((3072, 3080, 4096), STRIP),  # 264: 2 whole rounds, against 600 of 128x128 (5)
    ((2560, 2056, 4096), STRIP_160),  # 10 x 13 = 130, against 220 of 128x192 (2)
    ((1536, 3072, 4096), SQUARE),  # B's rows on lines: 128 squares, 97% of a wave at
    # their rate, over 132 strips of 256x144 one a block at theirs
    ((1024, 2056, 4096), TALL),  # 4 x 33 = 132, against 88 of 128x192 (and 60 strips)
    ((2048, 1000, 4096), TALL),  # 8 x 16 = 128, against 96 of 128x192
    ((2048, 1024, 4096), (128, 128)),  # B's rows on lines: ONE_WAVE_TILES' 128 tiles
    ((2048, 1024, 512), ROW),  # K under ONE_WAVE_MIN_K: 128x128 not measured there
    # One wave of 128x192 in clusters of 2 where B's rows are off lines, K from
    # ONE_WAVE_CLUSTER_MIN_K: 32 x 4 = 128 tiles; 12 x 9 = 108; but alone under it.
    ((4000, 600, 1024), ROW),
    ((1536, 1544, 1536), ROW),
    ((4000, 600, 1000), ROW),
    ((2048, 2112, 4096), SQUARE),  # 121 squares, 92% of a wave: 256x64 measured 0.87
], ids=shape_id)
def test_sm_90a_takes_whole_round_tiles_where_they_fill_their_rounds_and_others_do_not(
        shape, tile):
    for dtype in ("f16", "bf16"):
        config = tuning.tuned_config(Case(*shape, dtype), "sm_90a")
        chosen = next((candidate for candidate in tuning.rounds.WHOLE_ROUND_TILES
                       if candidate.items() <= config.items()), None)
        assert (chosen and (chosen["BM"], chosen["BN"])) == tile, (dtype, config)
    if tile:
        case = Case(*shape, "f16")
        if tile in (STRIP, STRIP_160) and tuning.rounds.b_shared_in_clusters(case):
            assert config == {**chosen, **tuning.rounds.MULTICAST}
        elif tile in (PADDED_WIDE, TALL):  # in clusters whether B's rows are on lines or not
            assert config == {**chosen, **tuning.rounds.MULTICAST}
        elif tile in (PADDED, PADDED_160):
            assert config == {**chosen, **tuning.rounds.MULTICAST}
            layout = next(o.layout for o in load_sample("matmul", "f16").compile(
                arch="sm_90a", **config).kernel.schedule.tiling.operands if o.role == "B")
            assert (layout.slab, layout.stored_cols) == (64, 192)
        elif not config.get("persistent"):
            # One wave, in clusters where B's rows are off lines, but not for 192x192.
            clustered = tile == ROW and tuning.rounds.b_shared_in_clusters(
                case, tuning.rounds.ONE_WAVE_CLUSTER_MIN_K)
            assert config == ({**chosen, "cluster": 2} if clustered else chosen)
            assert tuning.measure.tile_count(case, config) <= tuning.ONE_WAVE
        else:
            rounds = tuning.rounds.MULTICAST if tuning.rounds.b_shared_in_clusters(case) else \
                tuning.rounds.WHOLE_ROUNDS
            assert config == {**chosen, **rounds}
        check_sm_90a_options(config)
    # Batched rows, other targets and the llvm backend keep their own tiles.
    for config in (tuning.tuned_config(Case(*shape, "f16", batch=2), "sm_90a"),
                   tuning.tuned_config(Case(*shape, "f16"), "sm_90"),
                   tuning.tuned_config(Case(*shape, "f16"), "sm_90a", "llvm")):
        assert (config["BM"], config["BN"]) not in (SQUARE, ROW, PADDED, PADDED_160, STRIP,
                                                    STRIP_160)


def test_useful_share_counts_padding_and_empty_sms():
    # 2048x2056 in 192x192 tiles: 121 tiles padding 2112 x 2112, one round of 132 SMs.
    share = tuning.measure.useful_share(Case(2048, 2056, 2048, "f16"),
                                        tuning.rounds.WIDE_SQUARE_TILE)
    assert share == pytest.approx(2048 * 2056 / (132 * 192 * 192))
    # A cluster of 2 counts 17 M tiles of 128 as 18: 18 x 17 = 306 tiles, 3 rounds.
    share = tuning.measure.useful_share(Case(2100, 2100, 2048, "f16"),
                                     dict(BM=128, BN=128, cluster=2))
    assert share == pytest.approx(2100 * 2100 / (3 * 132 * 128 * 128))


@pytest.mark.parametrize("c_dtype, dtype, out", [("inputs", "f16", "f16"),
                                                 ("inputs", "bf16", "bf16"),
                                                 ("inputs", "f32", "f32"),
                                                 ("inputs", "tf32", "f32"),
                                                 ("f32", "f16", "f32")])
def test_tilec_and_triton_write_c_as_the_c_dtype_setting_says(c_dtype, dtype, out):
    arrays = NumpyArrays()
    for contender in (bench.TilecContender({}, {}), bench.TritonContender(arrays)):
        contender.c_dtype = c_dtype
        assert contender.out_dtype(Case(8, 8, 8, dtype)) == out
    # torch.matmul writes 16-bit products' C in their dtype whatever the setting.
    cublas = bench.CublasContender(arrays)
    cublas.c_dtype = c_dtype
    assert cublas.out_dtype(Case(8, 8, 8, dtype)) == (dtype if dtype in ("f16", "bf16")
                                                      else "f32")


def test_the_f16_output_sample_converts_the_accumulator():
    kernel = bench.sample_kernel("bf16", "bf16")
    (store,) = [op for op in kernel.lower().walk() if op.name == "tile.store"]
    assert str(store.operands[-1].type.dtype) == "bf16"
    assert [p.type.dtype.short for p in kernel.lower().params][:3] == ["bf16"] * 3



# -- batched rows (Bt x M x N x K against torch.bmm) -------------------------------------------

def test_batched_rows_run_persistent_blocks_and_compile_for_sm_90a():
    """The batched rows' tuned tiles on sm_90a: persistent blocks over batches x tiles where
    there are more tiles than a wave (both default rows); they compile to wgmma with TMA
    for bmm.py, the autotuner trying one tile a block and persistent blocks, alone or in
    clusters of two (pairs of M tiles within each batch), and so does a cluster of the
    tuned tile."""
    from tilec.benchmarking.contenders import sample_kernel
    for size in bench.DEFAULT_BATCHED_SIZES:
        case = Case(*size[1:], "f16", batch=size[0])
        config = tuning.tuned_config(case, "sm_90a")
        assert config.get("persistent") is True, config
        space = bench.autotune_space(case, {}, "sm_90a")
        schedules = {(c.get("persistent", False), c.get("cluster", 1)) for c in space}
        assert schedules == {(False, 1), (True, 1), (False, 2), (True, 2)}
        kernel = sample_kernel("f16", "f16", batched=True)
        for cluster in (1, 2):
            compiled = kernel.compile(arch="sm_90a", Bt=size[0], M=size[1], N=size[2],
                                      K=size[3], **config, cluster=cluster)
            assert compiled.kernel.schedule.tiling.kind == "wgmma", (size, config)
            assert compiled.kernel.schedule.roles.batches
            assert compiled.kernel.schedule.roles.cluster == cluster
            assert "cp.async.bulk.tensor.3d" in compiled.ptx


def test_batched_rows_of_a_wave_or_less_take_one_tile_a_block():
    """Up to one tile a block anyway: nothing to run ahead into."""
    for case in (Case(1000, 1003, 77, "f16", batch=2), Case(1024, 1024, 1024, "f16", batch=4)):
        assert "persistent" not in tuning.tuned_config(case, "sm_90a"), case
    # Other targets have no persistent blocks.
    assert "persistent" not in tuning.tuned_config(Case(4095, 4097, 128, "f16", batch=8),
                                                       "sm_80")


def test_batched_rows_of_whole_tiles_take_128x128_tiles_in_six_stages():
    """32x1024x1024x1024 on sm_90a: the batched tile measured best (BATCHED_TILED, raster
    group 4); the ragged batched row and the 2-D rows keep their own."""
    assert tuning.tuned_config(Case(1024, 1024, 1024, "f16", batch=32), "sm_90a") == \
        dict(BM=128, BN=128, BK=64, stages=6, raster_group=4, persistent=True)
    assert tuning.tuned_config(Case(4096, 4096, 4096, "f16"), "sm_90a")["raster_group"] == 16
    assert tuning.tuned_config(Case(4095, 4097, 128, "f16", batch=8), "sm_90a")["BN"] == 256
    assert tuning.tuned_config(Case(4096, 4096, 4096, "f16"), "sm_90a")["BN"] == 256
    assert tuning.tuned_config(Case(1024, 1024, 1024, "f16", batch=32), "sm_90") == \
        tuning.TUNED["mma", "tiled"]  # mma.sync's own tile
    # ... its ring cut to an A100's shared memory: BK 64 in three stages (144 KiB).
    assert tuning.tuned_config(Case(1024, 1024, 1024, "f16", batch=32), "sm_80") == \
        {**tuning.TUNED["mma", "tiled"], "BK": 64, "stages": 3}


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_batched_tile_assembles_cleanly_for_sm_90a(dtype, tmp_path):
    from tests.test_ptxas import assert_assembles_for_sm_90a
    config = tuning.tuned_config(Case(1024, 1024, 1024, dtype, batch=32), "sm_90a")
    compiled = contenders.sample_kernel(dtype, dtype, batched=True).compile(
        arch="sm_90a", Bt=32, M=1024, N=1024, K=1024, **config)
    assert compiled.kernel.schedule.roles.persistent
    assert_assembles_for_sm_90a(compiled.ptx, tmp_path, f"bmm_{dtype}")


def test_the_batched_sample_kernel_matches_float64_on_the_cpu():
    from tilec.benchmarking.contenders import sample_kernel
    from tilec.cpu.interpreter import run_kernel
    kernel = sample_kernel("f16", "f16", batched=True).lower(BM=64, BN=64, BK=32)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 70, 40)).astype(np.float16)
    b = rng.standard_normal((3, 40, 66)).astype(np.float16)
    c = np.full((3, 70, 66), np.nan, dtype=np.float16)
    run_kernel(kernel, {"A": a, "B": b, "C": c})
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(c - exact) / np.linalg.norm(exact) < 2e-3


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_batched_rows_take_their_entry_unsplit(arch):
    # f32's short entry splits K in four; a batched grid's third axis is the batch, and
    # bmm refused the split ("a 3-D grid has none left") before the tuning dropped it.
    single = tuning.tuned_config(Case(61, 5314, 1860, "f32"), arch)
    config, _, rules = tuning.tuned_rules(Case(61, 5314, 1860, "f32", batch=5), arch)
    assert single["split_k"] == 4 and "split_k" not in config
    assert "batched_unsplit" in rules
    assert config == {key: value for key, value in single.items() if key != "split_k"}
    load_sample("bmm", "f32").compile(arch=arch, **config)


@pytest.mark.parametrize("shape, dtype, arch", [
    ((199, 1680, 3, 2), "i8", "sm_90a"),  # 128x256x128 spilled 1,260 bytes
    ((466, 250, 38), "f8e4m3", "sm_90a"),  # B k contiguous, 38 x 250 elements: unpacked
    ((1825, 141, 115, 5), "i8", "sm_80"),  # a batch of k-contiguous B: never packed
], ids=shape_id)
def test_eight_bit_rows_the_launch_leaves_misaligned_take_the_in_place_tiles(shape, dtype,
                                                                             arch):
    case = Case(*shape[:3], dtype, batch=shape[3]) if len(shape) > 3 else Case(*shape, dtype)
    config, _, rules = tuning.tuned_rules(case, arch)
    assert (config, rules) == (tuning.choose.IN_PLACE_TILE, ["unpacked_rows"])
    # K a multiple of 16 (rows aligned as they are): the class's own tile.
    aligned = Case(case.M, case.N, 128, dtype, batch=case.batch)
    assert "unpacked_rows" not in tuning.tuned_rules(aligned, arch)[2]
