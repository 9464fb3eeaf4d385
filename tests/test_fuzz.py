"""The fuzzer's CI slice (issue 12): a fixed seed, the known open bug classes left out by
feature, and no new internal crash, hang, unlocated error, ptxas rejection or CPU mismatch.
Plus checks that the fuzzer's own parts can tell right from wrong."""
import dataclasses
import random
import shutil

import numpy as np
import pytest

from tilec.errors import TileError
from tilec.ir.core import Loc
from tilec.tools import fuzz, fuzz_programs

# About 60-75 s on 2 cores.
CI_PROGRAMS = 1600
CI_SEED = 0


def test_ci_slice_finds_no_new_failure(capsys):
    summary = fuzz.fuzz(CI_PROGRAMS, CI_SEED, jobs=2, skip_known=True, ptxas_every=12,
                        cpu_every=4)
    with capsys.disabled():
        print("\n" + fuzz.report(summary))
    details = [f"{program.filename} ({how}):\n{program.text}\n{result.detail}\n"
               f"{result.ptxas}\n{result.cpu}" for program, result, how in summary.failures]
    assert not details, "\n\n".join(details[:5])
    assert summary.outcomes["hang"] == 0 and summary.outcomes["unlocated error"] == 0
    assert summary.outcomes["compiled"] > CI_PROGRAMS // 5  # the slice exercises the backend
    assert summary.cpu_checked > 20
    if shutil.which("ptxas"):
        assert summary.ptxas_checked > 10 and summary.ptxas_rejected == 0
    # The exclusions are named and counted, and they skip programs while a class is open.
    assert set(summary.skipped) <= {bug.issue_class for bug in fuzz.KNOWN_BUGS}
    assert (sum(summary.skipped.values()) > 0) == bool(fuzz.KNOWN_BUGS)


def test_generation_is_deterministic():
    samples = ["@tile\ndef f():\n    pass\n"]
    first = [fuzz_programs.generate(random.Random(7), i, samples).text for i in range(30)]
    again = [fuzz_programs.generate(random.Random(7), i, samples).text for i in range(30)]
    assert first == again


def _program(epilogue, dtypes=None, transposed=False):
    dtypes = dtypes or {"A": "f32", "B": "f32", "C": "f32", "bias": "f32"}
    return fuzz_programs.Program(0, "matmul", "", dtypes=dtypes,
                        layouts={"A": transposed, "B": False}, tiles=(16, 16, 8),
                        epilogue=epilogue)


def test_evaluate_follows_the_epilogue_tree():
    a, b = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
    c, bias = np.full((2, 2), 10.0), np.array([1.0, -100.0])
    tree = ("relu", ("bin", "+", ("bin", "*", ("scalar", "alpha"), ("acc",)),
                     ("bin", "+", ("c",), ("bias",))))
    got = fuzz_programs.evaluate(_program(tree), {"A": a, "B": b, "C": c, "bias": bias},
                        {"alpha": 2.0})
    assert np.array_equal(got, np.maximum(2 * (a @ b) + c + bias, 0))
    transposed = fuzz_programs.evaluate(_program(("acc",), transposed=True),
                               {"A": a.T, "B": b, "C": c}, {})
    assert np.array_equal(transposed, a @ b)


def test_evaluate_rounds_casts_and_literals_to_the_tile_dtype():
    dtypes = {"A": "f16", "B": "f16", "C": "f16", "bias": "f32"}
    one_third = np.full((1, 1), 1 / 3)
    got = fuzz_programs.evaluate(_program(("to", "f16", ("acc",)), dtypes),
                        {"A": one_third, "B": np.ones((1, 1)), "C": one_third}, {})
    assert got[0, 0] == float(np.float16(1 / 3)) != 1 / 3
    bf16 = fuzz_programs._round(np.array([1 / 3]), "bf16")[0]
    assert bf16 == 0.333984375  # 1/3 to 8 significant bits, rounded to nearest


def test_located_refuses_places_outside_the_file():
    program = fuzz_programs.Program(3, "mutation", "x = 1\ny = (\n")
    inside = TileError("bad", Loc(program.filename, 2, 5), "y = (")
    past_end = TileError("bad", Loc(program.filename, 4, 1), "")
    other_file = TileError("bad", Loc("elsewhere.py", 2, 5), "y = (")
    assert fuzz._located(inside, program)
    assert not fuzz._located(past_end, program) and not fuzz._located(other_file, program)


def test_a_hang_is_classified_and_the_worker_replaced(monkeypatch):
    monkeypatch.setattr(fuzz, "run_program", _slow_or_fast)
    programs = [fuzz_programs.Program(i, "mutation", "slow" if i == 0 else "") for i in range(3)]
    outcomes = [r.outcome for r in fuzz.run_all(programs, jobs=1, timeout=1.0)]
    assert outcomes == ["hang", "compiled", "compiled"]


def _slow_or_fast(program):
    import time
    if program.text == "slow":
        time.sleep(60)
    return fuzz.Result(program.index, "compiled")


@pytest.mark.skipif(not shutil.which("ptxas"), reason="needs ptxas")
def test_assemble_reports_ptxas_rejections():
    assert "error" in fuzz.assemble(".version 8.0\n.target sm_80\nnonsense;\n", "sm_80")


def test_evaluate_sums_int8_exactly_and_wraps_to_32_bits():
    dtypes = {"A": "i8", "B": "i8", "C": "i32", "acc": "i32", "bias": "f32"}
    program = fuzz_programs.Program(0, "matmul", "", dtypes=dtypes, layouts={"A": False, "B": True},
                           tiles=(16, 16, 32), epilogue=("acc",))
    a = np.full((1, 3), 127.0)
    b = np.full((1, 3), -128.0)  # stored [N, K], read as B.T
    got = fuzz_programs.evaluate(program, {"A": a, "B": b, "C": np.zeros((1, 1))}, {})
    assert got[0, 0] == -48768
    # 2^31 + 1 wraps as the integer mma does.
    wide = fuzz_programs.evaluate(program, {"A": np.full((1, 1), 2.0 ** 31 + 1),
                                            "B": np.ones((1, 1)), "C": np.zeros((1, 1))}, {})
    assert wide[0, 0] == -2.0 ** 31 + 1


def test_evaluate_batches_selects_and_applies_math():
    a = np.arange(12.0).reshape(2, 2, 3) - 5
    b = np.ones((2, 3, 2))
    c = np.full((2, 2, 2), 7.0)
    tree = ("where", ("or", ("cmp", ">", ("acc",), ("lit", 0)), ("not", ("cmp", "!=", ("acc",),
                                                                          ("lit", -12)))),
            ("math", "abs", ("acc",)), ("c",))
    program = _program(tree)
    program.batched = True
    got = fuzz_programs.evaluate(program, {"A": a, "B": b, "C": c}, {})
    acc = a @ b
    assert np.array_equal(got, np.where((acc > 0) | (acc == -12), np.abs(acc), c))
    gelu = fuzz_programs.evaluate(_program(("math", "gelu", ("acc",))),
                         {"A": np.array([[1.0]]), "B": np.array([[1.0]]), "C": c[0]}, {})
    assert abs(gelu[0, 0] - 0.8413447460685429) < 1e-7  # 1 * Phi(1)


def test_generated_kernels_cover_the_new_parts():
    rng = random.Random(7)
    programs = [fuzz_programs.generate_matmul(rng, i) for i in range(800)]
    features = set().union(*(p.features for p in programs))
    assert {"int8", "fp8", "w8", "batched", "where", "math", "unit_view", "llvm",
            "compile_time_if", "pingpong", "warpgroup_rows_128", "strip_tile", "cluster",
            "cluster_batched", "cluster_2d", "wgmma_split_k", "tma_swizzle_64",
            "tma_swizzle_32"} <= features
    # Split-K's slices take one tile a block: never persistent.
    for program in programs:
        if "wgmma_split_k" in program.features:
            schedule = {k: v for k, v in program.hopper_options.items() if k != "tma_swizzle"}
            assert schedule in fuzz_programs.SPLIT_SCHEDULES or \
                schedule.get("warpgroup_rows") == 128
    assert any("misaligned_copy_words" in p.features for p in programs)
    assert any("misaligned_store_rows" in p.features for p in programs)
    fp8 = [p for p in programs if "fp8_operand" in p.features]
    assert fp8 and all(p.archs == ("sm_90", "sm_90a") for p in fp8)
    # The swapped product's blocks (BM any multiple of 8) only sm_90a's swap takes.
    swapped = [p for p in programs if "swap_product" in p.features]
    assert swapped and all(p.archs == ("sm_90a",) and
                           p.hopper_options.get("swap_product") == "always" for p in swapped)
    assert any(p.tiles[0] % 64 for p in swapped)
    # Now and then in a cluster of two.
    paired = [p for p in swapped if "swap_product_cluster" in p.features]
    assert paired and all(p.hopper_options["cluster"] == 2 for p in paired)


def test_batched_clusters_generated_compile_and_assemble():
    """The generator's batched programs in clusters of two and four along M, and 2x2, 1x2
    and 4x2 along M and N (one tile a block and persistent, the schedules it draws:
    HOPPER_SCHEDULES) compile for every target,
    sm_90a with the cluster, and ptxas assembles them: the first generated batched
    program given a schedule (so on the wgmma path) that compiles without it, under every
    cluster schedule."""
    clusters = [s for s in fuzz_programs.HOPPER_SCHEDULES if s.get("cluster") or
                s.get("cluster_n")]
    assert {(s.get("cluster", 1), s.get("cluster_n", 1), s.get("persistent", False))
            for s in clusters} == {(2, 1, False), (2, 1, True), (4, 1, False), (4, 1, True),
                                   (2, 2, False), (2, 2, True), (1, 2, False), (4, 2, False)}
    rng = random.Random(5)
    wgmma = (p for p in (fuzz_programs.generate_matmul(rng, i) for i in range(1000))
             if p.batched and p.hopper_options and "int8" not in p.features
             and "tma_swizzle" not in p.hopper_options)
    program = next(p for p in wgmma
                   if fuzz.run_program(dataclasses.replace(p, hopper_options={})).outcome
                   == "compiled")
    for schedule in clusters:
        clustered = dataclasses.replace(program, hopper_options=dict(schedule),
                                        check_ptxas=shutil.which("ptxas") is not None)
        result = fuzz.run_program(clustered)
        assert result.outcome == "compiled", result.detail
        assert not result.ptxas, result.ptxas


def test_a_schedule_error_is_a_failure_not_a_clean_error(monkeypatch):
    """The compiler's own schedule check refusing its passes' schedule is located, with a
    caret, but it is a bug: the fuzzer counts it as a failure."""
    import tilec.kernel
    from tilec.analysis.hazards import HazardError
    program = fuzz_programs.Program(5, "matmul", "x = 1\n")

    def refuse(filename, text):
        raise HazardError("deadlock", Loc(program.filename, 1, 1), "x = 1")
    monkeypatch.setattr(tilec.kernel, "load_file", refuse)
    result = fuzz.run_program(program)
    assert result.outcome == "schedule error" and result.outcome in fuzz.FAILING


def test_one_stage_wgmma_programs_are_generated_and_no_longer_a_known_class():
    """Class 7 (one-stage warp-specialized kernels deadlocked in the schedule check) is
    fixed: the generator still makes such programs, and no known class claims them."""
    rng = random.Random(4)
    programs = [fuzz_programs.generate_matmul(rng, i) for i in range(600)]
    one_stage = [p for p in programs if "wgmma_one_stage" in p.features]
    assert one_stage and all(p.options["stages"] == 1 and p.hopper_options is not None
                             for p in one_stage)
    assert all(fuzz._known_by_feature(p) is None for p in one_stage)
