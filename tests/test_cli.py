"""The command line, through ``tilec.cli.main(argv)``: compile, run on the CPU, and the error
paths (worded messages with a caret, never a traceback). Small shapes keep it fast."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from tilec.cli import main
from tilec.tools.checking import errors
from tilec.kernel import load_file
from tilec.pipeline import pipeline
from tilec.cpu.reference import Unsupported, reference

ROOT = Path(__file__).resolve().parents[1]
MATMUL = str(ROOT / "samples" / "matmul.py")
GEMM = str(ROOT / "samples" / "gemm_epilogue.py")
SMALL = ["--shape", "M=40,N=24,K=48"]
CPU_SMALL = ["--cpu", "--const", "BM=32,BN=32,BK=16", *SMALL]

MATMUL_HEADER = """\
from __future__ import annotations
from tilec import f16, f32, tile

"""


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_explain_with_sizes_plans_the_launch_under_every_option_given(capsys):
    """--shape plans the launch's packing with the options as given: pingpong consumers
    (which need --persistent, given beside them) once crashed it, when only some options
    reached the plan."""
    code, stdout, _ = run_cli(capsys, "explain", MATMUL, "--arch", "sm_90a", "--const", "BM=64",
                              "BN=256", "BK=64", "--persistent", "--consumers", "pingpong",
                              "--shape", "M=512,N=512,K=512", "--no-ptxas")
    assert code == 0 and "pingpong" in stdout


def write(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(MATMUL_HEADER + textwrap.dedent(body))
    return str(path)


# ----------------------------------------------------------------------------- compile

def test_compile_writes_ptx_for_the_asked_target(tmp_path, capsys):
    out = tmp_path / "matmul.ptx"
    code, stdout, stderr = run_cli(capsys, "compile", MATMUL, "--arch", "sm_90", "-o", str(out))
    assert code == 0 and stdout == ""
    ptx = out.read_text()
    assert ".target sm_90" in ptx.splitlines()
    assert ".visible .entry matmul(" in ptx
    assert f"wrote {out}" in stderr and "sm_90" in stderr


def test_compile_to_stdout_defaults_to_sm_80(capsys):
    code, stdout, _ = run_cli(capsys, "compile", MATMUL)
    assert code == 0
    assert ".target sm_80" in stdout.splitlines()


def test_compile_options_reach_the_compiler(tmp_path, capsys):
    out = tmp_path / "m.ptx"
    code, _, stderr = run_cli(capsys, "compile", MATMUL, "-o", str(out), "--warps", "2x4",
                              "--stages", "2", "--const", "BK=16", "--shape", "M=256,N=256")
    assert code == 0
    assert "warps 2x4" in stderr and "256 threads" in stderr and "2 stages" in stderr
    assert "tile 128x128x16" in stderr
    assert ".maxntid 256, 1, 1" in out.read_text()


def test_compile_says_when_a_launch_of_those_sizes_would_pack_first(tmp_path, capsys):
    """With every size given, compile notes what a launch runs instead: W converted to f16
    (w8a16 at 4096 rows on sm_90a), A packed (odd K); aligned sizes get no note."""
    w8a16 = str(Path(MATMUL).with_name("w8a16.py"))
    code, _, stderr = run_cli(capsys, "compile", w8a16, "--arch", "sm_90a", "-o",
                              str(tmp_path / "w.ptx"), "--shape", "M=4096,N=4096,K=4096")
    assert code == 0 and "note: a launch of row-major arrays of these sizes packs first " \
        "(W converted to f16, stride 4096" in stderr
    code, _, stderr = run_cli(capsys, "compile", MATMUL, "-o", str(tmp_path / "m.ptx"),
                              "--shape", "M=4096,N=4096,K=4093")
    assert code == 0 and "(A packed to stride 4096 (rows were 2-byte aligned))" in stderr
    for shape in ("M=4096,N=4096,K=4096", "M=4096,N=4096"):  # aligned; K unknown
        code, _, stderr = run_cli(capsys, "compile", MATMUL, "-o", str(tmp_path / "m.ptx"),
                                  "--shape", shape)
        assert code == 0 and "note:" not in stderr


SGEMM = str(Path(MATMUL).with_name("sgemm.py"))


def test_f32_math_tf32_reaches_compile_run_and_explain(tmp_path, capsys):
    out = tmp_path / "s.ptx"
    code, _, stderr = run_cli(capsys, "compile", SGEMM, "-o", str(out), "--f32-math", "tf32")
    assert code == 0 and "warps 2x2, tf32 tensor cores, 128 threads" in stderr
    ptx = out.read_text()
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
    assert "cvt.rna.tf32.f32" in ptx and "fma.rn.f32" not in ptx
    code, stdout, _ = run_cli(capsys, "run", SGEMM, "--f32-math", "tf32", *CPU_SMALL)
    assert code == 0 and "tf32 tensor cores" in stdout and "PASS" in stdout
    code, stdout, _ = run_cli(capsys, "explain", SGEMM, "--f32-math", "tf32", "--no-ptxas")
    assert code == 0 and "f32 math tf32" in stdout and "m16n8k8 .tf32" in stdout
    code, _, stderr = run_cli(capsys, "compile", SGEMM, "--f32-math", "ffma", "-o", str(out))
    assert code == 0 and "tensor cores" not in stderr and "fma.rn.f32" in out.read_text()


def test_an_unknown_f32_math_names_the_choices(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compile", SGEMM, "--f32-math", "tf16"])
    assert exit_info.value.code == 2
    assert "argument --f32-math: invalid choice: 'tf16' (choose from 'ffma', 'tf32')" in \
        capsys.readouterr().err


def test_dump_ir_all_shows_every_stage(tmp_path, capsys):
    code, _, stderr = run_cli(capsys, "compile", MATMUL, "-o", str(tmp_path / "m.ptx"),
                              "--dump-ir", "all")
    assert code == 0
    assert "===== matmul: tile IR from the frontend =====" in stderr
    for p in pipeline():
        assert f"===== matmul: IR after pass '{p.name}' =====" in stderr
    assert "tile.dot" in stderr and "kernel @matmul(" in stderr


def test_dump_ir_one_pass(capsys):
    code, stdout, stderr = run_cli(capsys, "compile", MATMUL, "--dump-ir", "tiling")
    assert code == 0
    assert stderr.count("=====") == 2 and "IR after pass 'tiling'" in stderr
    assert ".entry matmul(" in stdout and "IR after" not in stdout


def test_dump_ir_of_a_disabled_pass_is_an_error(capsys):
    code, _, stderr = run_cli(capsys, "compile", MATMUL, "--disable", "swizzle",
                              "--dump-ir", "swizzle")
    assert code == 1 and "disabled" in stderr


def test_several_kernels_compile_under_headers_and_o_needs_kernel(tmp_path, capsys):
    body = (ROOT / "samples" / "matmul.py").read_text().split("@tile", 1)[1]
    path = tmp_path / "two.py"
    path.write_text(MATMUL_HEADER + "@tile" + body + "\n\n@tile" +
                    body.replace("def matmul", "def matmul2"))
    code, stdout, _ = run_cli(capsys, "compile", str(path))
    assert code == 0
    assert "// ===== kernel matmul:" in stdout and "// ===== kernel matmul2:" in stdout
    assert stdout.count(".version") == 2
    code, _, stderr = run_cli(capsys, "compile", str(path), "-o", str(tmp_path / "x.ptx"))
    assert code == 1 and "--kernel" in stderr and "matmul, matmul2" in stderr
    code, _, _ = run_cli(capsys, "compile", str(path), "--kernel", "matmul2",
                         "-o", str(tmp_path / "x.ptx"))
    assert code == 0 and ".entry matmul2(" in (tmp_path / "x.ptx").read_text()


# --------------------------------------------------------------------------------- run

def test_run_on_the_cpu_passes(capsys):
    code, stdout, _ = run_cli(capsys, "run", MATMUL, *CPU_SMALL)
    assert code == 0, stdout
    assert "A f16[40,48], B f16[48,24], C f32[40,24]" in stdout
    assert "CPU interpreter (--cpu)" in stdout
    assert "C vs float64 reference" in stdout and "tolerance 0.002" in stdout
    assert stdout.rstrip().endswith("PASS")


def test_run_without_flags_uses_the_default_shape(capsys):
    code, stdout, _ = run_cli(capsys, "run", MATMUL, "--cpu")
    assert code == 0
    assert "A f16[200,72], B f16[72,136], C f32[200,136]" in stdout
    assert "PTX" in stdout and "sm_80" in stdout


def test_run_epilogue_with_scalars(capsys):
    code, stdout, _ = run_cli(capsys, "run", GEMM, *CPU_SMALL, "--scalar", "alpha=0.5",
                              "--scalar", "beta=-2")
    assert code == 0, stdout
    assert "alpha=0.5, beta=-2" in stdout and "PASS" in stdout


def test_run_bf16_uses_the_bf16_tolerance(tmp_path, capsys):
    path = write(tmp_path, "mm.py", """\
        @tile
        def mm(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N], BM=32, BN=32, BK=16):
            for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
                acc = zeros([BM, BN], f32)
                for k in range(0, K, BK):
                    acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
                C[m * BM : +BM, n * BN : +BN] = acc.to(bf16)
        """)
    code, stdout, _ = run_cli(capsys, "run", path, "--cpu", *SMALL)
    assert code == 0, stdout
    assert "tolerance 0.01" in stdout and "PASS" in stdout


def test_run_refuses_a_grid_that_leaves_outputs_unwritten(tmp_path, capsys):
    # M // BM programs would miss the ragged last rows (issue 12, class 6). Every grid the
    # float64 reference can read ('index * tile size' offsets) is checked this way, so the
    # unwritten outputs run's NaN poison used to catch no longer compile.
    path = write(tmp_path, "short.py", """\
        @tile
        def short(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=32, BN=32, BK=16):
            for m, n in grid(M // BM, cdiv(N, BN)):
                acc = zeros([BM, BN], f32)
                for k in range(0, K, BK):
                    acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
                C[m * BM : +BM, n * BN : +BN] = acc
        """)
    code, stdout, stderr = run_cli(capsys, "run", path, "--cpu", *SMALL)
    assert code == 1
    assert "grid axis 0 may not cover 'C' dim 0 (M)" in stdout + stderr


def test_run_reports_kernels_the_reference_cannot_evaluate(tmp_path, capsys):
    # Rows shifted by one: not 'index * tile size', so no whole-tensor reading exists.
    path = write(tmp_path, "shifted.py", """\
        @tile
        def shifted(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=32, BN=32, BK=16):
            for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
                acc = zeros([BM, BN], f32)
                for k in range(0, K, BK):
                    acc += A[m * BM + 1 : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
                C[m * BM : +BM, n * BN : +BN] = acc
        """)
    code, stdout, _ = run_cli(capsys, "run", path, "--cpu", *SMALL)
    assert code == 0
    assert "not available (arith.add (line 9): tile offsets must be" in stdout
    assert stdout.rstrip().endswith("UNCHECKED: no reference could be computed for this kernel")


# ------------------------------------------------------------------------------ errors

def test_syntax_error_prints_a_caret_and_no_traceback(tmp_path, capsys):
    path = write(tmp_path, "bad.py", """\
        @tile
        def bad(A: f16[M, K], C: f32[M, K], BM=64):
            for m in grid(cdiv(M, BM)):
                C[m * BM : +BM, 0 : +32] = A[m * BM : +BM, 0 : +32] +* 2
        """)
    code, stdout, stderr = run_cli(capsys, "compile", path)
    assert code == 1 and stdout == ""
    assert f"{path}:7:" in stderr and "syntax error" in stderr
    lines = stderr.splitlines()
    assert lines[-1].strip() == "^" and "+* 2" in lines[-2]
    assert "Traceback" not in stderr


def test_semantic_error_in_run_points_at_the_name(tmp_path, capsys):
    path = write(tmp_path, "undef.py", """\
        @tile
        def undef(A: f16[M, K], C: f32[M, K], BM=64):
            for m in grid(cdiv(M, BM)):
                C[m * BM : +BM, 0 : +32] = A[m * BM : +BM, 0 : +32] + y
        """)
    code, _, stderr = run_cli(capsys, "run", path, "--cpu")
    assert code == 1
    assert "unknown name 'y'" in stderr and stderr.rstrip().endswith("^")


def test_unknown_kernel_lists_the_available_ones(capsys):
    code, _, stderr = run_cli(capsys, "compile", MATMUL, "--kernel", "gemm")
    assert code == 1
    assert "no tile function 'gemm'" in stderr and "it has: matmul" in stderr


def test_unknown_constant_names_the_known_ones(capsys):
    code, _, stderr = run_cli(capsys, "compile", MATMUL, "--const", "BQ=64")
    assert code == 1
    assert "no constant BQ" in stderr and "BM, BN, BK" in stderr


def test_constant_of_the_wrong_type_points_at_its_default(capsys):
    code, _, stderr = run_cli(capsys, "compile", MATMUL, "--const", "BM=64.5")
    assert code == 1
    assert "constant 'BM' is an integer" in stderr and "BM=128" in stderr


@pytest.mark.parametrize("argv", [
    ["compile", MATMUL, "--const", "BM"],
    ["compile", MATMUL, "--const", "BM=sixty"],
    ["compile", MATMUL, "--warps", "3"],
    ["compile", MATMUL, "--arch", "sm_70"],
    ["compile", MATMUL, "--dump-ir", "nosuchpass"],
    ["run", MATMUL, "--shape", "M=-1"],
])
def test_bad_flag_values_get_argparse_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "error: argument" in capsys.readouterr().err


def test_unknown_shape_symbol_and_scalar(capsys):
    code, _, stderr = run_cli(capsys, "run", MATMUL, "--cpu", "--shape", "Q=3")
    assert code == 1 and "no shape symbol Q" in stderr
    code, _, stderr = run_cli(capsys, "run", MATMUL, "--cpu", "--scalar", "alpha=2")
    assert code == 1 and "no scalar parameter alpha" in stderr


def test_unreadable_file(tmp_path, capsys):
    code, _, stderr = run_cli(capsys, "compile", str(tmp_path / "missing.py"))
    assert code == 1 and "cannot read" in stderr and "Traceback" not in stderr


# ------------------------------------------------------------------ the float64 reference

def test_reference_matches_numpy_for_the_epilogue_sample():
    kernel = load_file(GEMM)["gemm"].lower(BM=32, BN=32, BK=16)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((40, 48)), rng.standard_normal((48, 24))
    c, bias = rng.standard_normal((40, 24)), rng.standard_normal(24)
    out = reference(kernel, {"A": a, "B": b, "C": c, "bias": bias},
                    {"alpha": 0.5, "beta": 2.0})
    assert set(out) == {"C"}
    np.testing.assert_allclose(out["C"], np.maximum(0.5 * (a @ b) + 2.0 * c + bias, 0))


def test_reference_follows_the_loop_bounds(tmp_path):
    # A loop that stops one tile early sums only the first K - BK columns, as the GPU does.
    path = write(tmp_path, "early.py", """\
        @tile
        def early(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=32, BN=32, BK=16):
            for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
                acc = zeros([BM, BN], f32)
                for k in range(0, K - BK, BK):
                    acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
                C[m * BM : +BM, n * BN : +BN] = acc
        """)
    kernel = load_file(path)["early"].lower()
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((40, 48)), rng.standard_normal((48, 24))
    out = reference(kernel, {"A": a, "B": b, "C": np.zeros((40, 24))}, {})
    np.testing.assert_allclose(out["C"], a[:, :32] @ b[:32, :])


def test_reference_refuses_what_it_cannot_read(tmp_path):
    path = write(tmp_path, "scaled.py", """\
        @tile
        def scaled(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=32, BN=32, BK=16):
            for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
                acc = zeros([BM, BN], f32)
                for k in range(0, K, BK):
                    acc = acc * 0.5
                    acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
                C[m * BM : +BM, n * BN : +BN] = acc
        """)
    kernel = load_file(path)["scaled"].lower()
    arrays = {"A": np.ones((8, 8)), "B": np.ones((8, 8)), "C": np.zeros((8, 8))}
    with pytest.raises(Unsupported, match="loop-carried"):
        reference(kernel, arrays, {})


def test_errors_measure_max_abs_and_relative_frobenius():
    ref = np.array([[3.0, 4.0]])
    max_abs, rel = errors(np.array([[3.0, 4.5]]), ref)
    assert max_abs == pytest.approx(0.5) and rel == pytest.approx(0.1)
    assert np.isnan(errors(np.array([[np.nan, 4.0]]), ref)[1])
