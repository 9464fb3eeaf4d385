"""The command line's cold start and consistency across verbs: a verb's module is imported
only when that verb runs; --const takes one NAME=VALUE or several in every verb; --version;
the flags bisect and viz share with the others; errors without a place get the ``tilec:``
prefix; install hints that agree with the README and pyproject; the CPU fallback's reason and
packing line; and the error measure's handling of a NaN reference (``--scalar alpha=nan``)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest

from tilec.cli import VERBS, build_parser, main
from tilec.runtime.driver import gpu_unavailable_reason, has_gpu
from tilec.tools import arguments, viz
from tilec.tools.checking import errors, within_tolerance
from tilec.version import COMPILER_VERSION

ROOT = Path(__file__).resolve().parents[1]
MATMUL = str(ROOT / "samples" / "matmul.py")
GEMM = str(ROOT / "samples" / "gemm_epilogue.py")
README = (ROOT / "README.md").read_text(encoding="utf-8")


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter has imported after running ``code``."""
    script = f"import sys\n{code}\nprint(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "TILEC_DISK_CACHE": "0"}, check=True)
    return set(done.stdout.split())


# ----------------------------------------------------------------------------- cold start

OTHER_VERBS = ("tilec.tools.bench", "tilec.tools.bisect", "tilec.tools.viz",
               "tilec.tools.run_command", "tilec.tools.explain_command", "tilec.benchmarking")


def test_compile_imports_no_other_verb():
    loaded = modules_after("from tilec.cli import main\n"
                           f"main(['compile', {MATMUL!r}, '-o', {os.devnull!r}])")
    assert "tilec.tools.compile_command" in loaded
    assert not loaded & set(OTHER_VERBS)


# What compiling never needs, so a cold `tilec compile` never waits for it: numpy and the
# CPU model (the interpreter and the executor), which only running a kernel needs, and what
# only a launch needs (operand packing, the split-K workspace, TMA tensor maps).
NOT_FOR_COMPILING = {"numpy", "tilec.cpu.interpreter", "tilec.cpu.executor",
                     "tilec.launch.packing", "tilec.launch.split_workspace",
                     "tilec.launch.tensor_maps"}


# The Hopper kernels too: wgmma's conflict scores and descriptors read no numpy arrays.
COMPILES = {"sm_80": [MATMUL], "wgmma": [MATMUL, "--arch", "sm_90a", "--const", "BK=64"],
            "wgmma8": [str(ROOT / "samples" / "fp8_gemm.py"), "--arch", "sm_90a",
                       "--const", "BK=128"],
            "wgmma_rs": [str(ROOT / "samples" / "w8a16_swapped.py"), "--arch", "sm_90a"]}


@pytest.mark.parametrize("disk_cache, kernel", [("off", "sm_80"), ("miss", "sm_80"),
                                                ("hit", "sm_80"), ("off", "wgmma"),
                                                ("off", "wgmma8"), ("off", "wgmma_rs")])
def test_compile_imports_nothing_only_running_needs(disk_cache, kernel, tmp_path):
    code = ("from tilec.cli import main\n"
            f"main(['compile', *{COMPILES[kernel]!r}, '-o', {os.devnull!r}])")
    if disk_cache != "off":
        code = ("import os\n"
                f"os.environ.update(TILEC_DISK_CACHE='1', TILEC_CACHE_DIR={str(tmp_path)!r})\n"
                + code)
    if disk_cache == "hit":
        modules_after(code)  # fills the cache
    loaded = modules_after(code)
    assert "tilec.compiler" in loaded
    assert not loaded & NOT_FOR_COMPILING
    if disk_cache != "off":
        assert list(tmp_path.glob("*.ptx"))  # the cache was used


@pytest.mark.skipif(importlib.util.find_spec("regex") is None, reason="regex not installed")
def test_the_command_line_loads_lark_without_regex_which_stays_importable():
    # main() without argv is the process's own command line (python -m tilec, the script).
    script = ("import sys\n"
              f"sys.argv = ['tilec', 'compile', {MATMUL!r}, '-o', {os.devnull!r}]\n"
              "from tilec.cli import main\n"
              "main()\n"
              "loaded = 'regex' in sys.modules\n"
              "import lark.utils, regex\n"
              "print(loaded, lark.utils._has_regex)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_top_level_help_imports_neither_the_compiler_nor_numpy():
    loaded = modules_after("from tilec.cli import main\n"
                           "try:\n    main(['--help'])\nexcept SystemExit:\n    pass")
    heavy = {"numpy", "cuda.bindings", "tilec.kernel", "tilec.compiler", "lark",
             "tilec.tools.compile_command", *OTHER_VERBS}
    assert not loaded & heavy


@pytest.mark.parametrize("verb", ["compile", "run", "explain", "bisect", "viz", "bench"])
def test_each_verb_help_is_its_modules(verb, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([verb, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: tilec {verb} ")
    module = {name: path for name, path, _ in VERBS}[verb]
    description = " ".join(sys.modules[module].DESCRIPTION.split())
    assert description[:40] in " ".join(out.split())


# ----------------------------------------------------------------------- --const, --version

@pytest.mark.parametrize("consts", [
    ["--const", "BM=64", "--const", "BN=64", "--const", "BK=16"],
    ["--const", "BM=64,BN=64,BK=16"],
    ["--const", "BM=64", "BN=64", "BK=16"],
    ["--const=BM=64", "BN=64,BK=16"],
])
@pytest.mark.parametrize("file_first", [True, False])
def test_const_takes_one_or_several_in_every_form(consts, file_first, tmp_path, capsys):
    out = str(tmp_path / "m.ptx")
    argv = ["compile", MATMUL, *consts] if file_first else ["compile", *consts, MATMUL]
    code, _, stderr = run_cli(capsys, *argv, "-o", out)
    assert code == 0, stderr
    assert "tile 64x64x16" in stderr


@pytest.mark.parametrize("verb", ["compile", "run", "explain", "bisect", "viz", "bench"])
def test_every_verb_merges_several_constants(verb):
    file = [] if verb == "bench" else [MATMUL]
    args = build_parser().parse_args([verb, *file, "--const", "BM=64", "BN=32,BK=16",
                                      "--const", "BM=128"])
    assert arguments.merged(args.const) == {"BM": 128, "BN": 32, "BK": 16}


def test_split_assignments_leaves_other_words_alone():
    split = arguments.split_assignments
    assert split(["--const", "A=1", "B=2", "f.py", "-o", "x=y.ptx"]) == [
        "--const", "A=1", "--const", "B=2", "f.py", "-o", "x=y.ptx"]
    assert split(["--shape", "M=1", "N=2", "--", "K=3"]) == [
        "--shape", "M=1", "--shape", "N=2", "--", "K=3"]
    assert split(["--kernel", "A=1", "B=2"]) == ["--kernel", "A=1", "B=2"]
    assert split(["--const", "BM", "B=2"]) == ["--const", "BM", "--const", "B=2"]


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"tilec {COMPILER_VERSION}"


# --------------------------------------------------------------- the shared flags, errors

def test_bisect_takes_arch_f32_math_and_split_k(capsys):
    args = build_parser().parse_args(["bisect", MATMUL, "--arch", "sm_90", "--f32-math", "tf32",
                                      "--split-k", "2"])
    assert arguments.compile_options(args) == {"arch": "sm_90", "f32_math": "tf32",
                                               "split_k": 2}
    code, out, err = run_cli(capsys, "bisect", MATMUL, "--shape", "M=40,N=48,K=64", "--const",
                             "BM=32", "BN=32", "BK=16", "--split-k", "2", "--arch", "sm_86")
    assert code == 0, out + err
    assert "all stages agree" in out


@pytest.mark.parametrize("verb", ["compile", "run", "explain", "bisect", "bench"])
def test_the_hopper_schedule_flags_reach_every_compiling_verb(verb):
    file = [] if verb == "bench" else [MATMUL]
    for flags, options in ((["--persistent"], {"persistent": True}),
                           (["--cluster", "2"], {"cluster": 2}),
                           (["--blocks-per-sm", "2"], {"blocks_per_sm": 2})):
        args = build_parser().parse_args([verb, *file, "--arch", "sm_90a", *flags])
        assert arguments.compile_options(args) == {"arch": "sm_90a", **options}


@pytest.mark.parametrize("verb", ["compile", "run", "explain", "bench"])
def test_the_verbs_that_make_kernels_can_switch_a_pass_off(verb):
    file = [] if verb == "bench" else [MATMUL]
    args = build_parser().parse_args([verb, *file, "--disable", "cse", "--disable", "swizzle"])
    assert arguments.compile_options(args)["disable"] == ("cse", "swizzle")
    with pytest.raises(SystemExit):
        build_parser().parse_args([verb, *file, "--disable", "no_such_pass"])


@pytest.mark.parametrize("schedule", [["--cluster", "2"],
                                      ["--cluster", "4", "--persistent", "--raster-group", "3"]])
def test_bisect_follows_a_cluster_kernel_through_every_stage(capsys, schedule):
    code, out, err = run_cli(capsys, "bisect", MATMUL, "--arch", "sm_90a", "--const", "BM=128",
                             "BN=128", "BK=64", *schedule, "--shape", "M=300,N=130,K=150")
    assert code == 0, out + err
    assert "all stages agree" in out


def test_viz_takes_swizzle_and_arch():
    args = build_parser().parse_args(["viz", MATMUL, "--swizzle", "off", "--arch", "sm_90"])
    assert arguments.compile_options(args) == {"arch": "sm_90", "swizzle": "off"}


@pytest.mark.parametrize("verb", ["compile", "run", "explain", "bisect", "viz"])
def test_a_missing_file_is_a_tilec_error(verb, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(viz, "require_matplotlib", lambda: None)
    code, _, stderr = run_cli(capsys, verb, str(tmp_path / "missing.py"), "--cpu"
                              ) if verb == "run" else run_cli(capsys, verb,
                                                              str(tmp_path / "missing.py"))
    assert code == 1
    assert stderr.startswith("tilec: error: cannot read"), stderr


# ------------------------------------------------------------------ hints and the fallback

def test_viz_install_hint_is_the_readmes(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert viz.main([MATMUL, "--out", str(tmp_path)]) == 2
    hint = "pip install -e '.[viz]'"
    assert hint in capsys.readouterr().err and hint in README


def test_bench_extra_is_declared_and_documented():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    bench = " ".join(project["optional-dependencies"]["bench"])
    assert "torch" in bench and "triton" in bench
    assert "pip install -e '.[bench]'" in README


def test_every_package_is_installed():
    """pyproject lists its packages by name (tilec, and passes/, backend/, grammar/ mapped
    into tilec's namespace): a package directory left out would be missing from a wheel
    while the editable install, which reads the tree, still finds it."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for name, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *relative)))
    assert found <= listed, sorted(found - listed)
    # And every listed one is a package directory (its mapping's longest prefix).
    assert listed <= found, sorted(listed - found)


@pytest.mark.skipif(has_gpu(), reason="checks the machine without a GPU")
def test_bench_launch_without_a_gpu_exits_2_with_the_reason():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_launch.py")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"no GPU ({gpu_unavailable_reason()})" in done.stderr


@pytest.mark.skipif(has_gpu(), reason="the fallback runs only without a GPU")
def test_the_cpu_fallback_warning_gives_the_reason():
    from tilec.kernel import load_file
    matmul = load_file(MATMUL)["matmul"]
    a = np.ones((16, 16), np.float16)
    c = np.empty((16, 16), np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        matmul(a, a, c, BM=16, BN=16, BK=16)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert messages == [f"no GPU ({gpu_unavailable_reason()}): running in tilec's CPU "
                        "interpreter"]
    assert np.allclose(c, 16.0)


def test_run_on_the_cpu_says_what_a_launch_packs(capsys):
    # K=71: f16 rows of A are 142 bytes, not 16-byte aligned; --pack always packs them.
    code, out, _ = run_cli(capsys, "run", MATMUL, "--cpu", "--pack", "always", "--const",
                           "BM=32", "BN=32", "BK=16", "--shape", "M=40,N=24,K=71")
    assert code == 0
    packed = [line for line in out.splitlines() if line.startswith("  packed ")]
    assert len(packed) == 1 and "A packed to stride" in packed[0]
    code, out, _ = run_cli(capsys, "run", MATMUL, "--cpu", "--shape", "M=40,N=24,K=48")
    assert "for row-major arrays of these sizes: none" in out


# ------------------------------------------------------------------ a NaN in the reference

def test_nan_where_the_reference_is_nan_is_no_error():
    ref = np.array([[np.nan, 4.0], [np.inf, -np.inf]])
    out = np.array([[np.nan, 4.0], [np.inf, -np.inf]])
    assert errors(out, ref) == (0.0, 0.0)
    assert errors(np.array([[np.nan, 4.4], [np.inf, -np.inf]]), ref) == pytest.approx((0.4, 0.1))
    assert errors(np.full((3,), np.nan), np.full((3,), np.nan)) == (0.0, 0.0)


@pytest.mark.parametrize("out", [
    [[1.0, 4.0], [np.inf, -np.inf]],     # a number where the reference is NaN
    [[np.nan, np.nan], [np.inf, -np.inf]],  # NaN where it is finite (an unwritten element)
    [[np.nan, 4.0], [-np.inf, -np.inf]],  # the wrong infinity
    [[np.nan, 4.0], [np.nan, -np.inf]],   # NaN where it is infinite
])
def test_any_other_mismatch_fails(out):
    ref = np.array([[np.nan, 4.0], [np.inf, -np.inf]])
    max_abs, rel = errors(np.array(out), ref)
    assert np.isnan(max_abs) and np.isnan(rel) and not within_tolerance(rel, 1.0)


def test_run_with_a_nan_scalar_passes(capsys):
    code, out, _ = run_cli(capsys, "run", GEMM, "--cpu", "--scalar", "alpha=nan", "--const",
                           "BM=32,BN=32,BK=16", "--shape", "M=40,N=24,K=48")
    assert code == 0, out
    assert out.rstrip().endswith("PASS") and "NaN elements" not in out
