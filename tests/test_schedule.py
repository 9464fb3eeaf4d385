"""The schedule as typed IR: what the passes decide is printed with the ops, checked by the
verifier, and readable and changeable by a user pass."""
from __future__ import annotations

from typing import Optional

import dataclasses

import pytest

from tilec.ir.core import Kernel, clone_kernel
from tilec.ir.ops import IRError
from tilec.ir.schedule import PipelinePlan, Schedule, SplitPlan, check_schedule
from tilec.families.catalogue import op_catalogue
from tilec.ir.verifier import verify as verify_ir
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import Pass, pipeline

from tests.golden_ptx import SAMPLES


def verify(kernel: Kernel, after: Optional[str] = None) -> None:
    """The verifier with the op catalogue: lowered IR holds the families' ops."""
    verify_ir(kernel, after=after, ops=op_catalogue())


def matmul():
    return load_file(f"{SAMPLES}/matmul.py")["matmul"]


def test_each_stage_prints_the_decisions_made_so_far() -> None:
    asm = matmul().asm(BM=64, BN=128, BK=32, warps=(2, 2), stages=4, split_k=2)
    assert "#" not in asm["tile"]
    assert ("#tiling = {kind = mma, block = [64, 128, 32], warps = [2, 2], warp_tile = [32, 64], "
            "instruction = [16, 8, 16], threads = 128, dtype = f16, raster_group = 8}"
            in asm["tiling"])
    assert "#tiling.A = {tensor = A, layout = linear, vec = 8}" in asm["tiling"]
    assert "#split = {splits = 2}" in asm["split_k"]
    assert "#pipeline = {stages = 4}" in asm["double_buffer"]
    assert "#pipeline" not in asm["split_k"]
    swizzled = asm["swizzle"]
    assert "#tiling.A = {tensor = A, layout = swizzle(" in swizzled
    assert "#conflicts.A = {swizzle = swizzle(" in swizzled and "ldmatrix = 1}" in swizzled


def test_the_compiled_schedule_is_typed() -> None:
    schedule = matmul().compile(stages=2, split_k=3).kernel.schedule
    assert schedule.pipeline == PipelinePlan(2) and schedule.split == SplitPlan(3)
    assert schedule.tiling.operand("B").role == "B" and schedule.stages == 2
    assert schedule.conflict_report()["A"]["chosen"]["copy"] == 1
    assert Schedule().stages == 1 and Schedule().splits == 1


def _compiled(**options) -> Kernel:
    return matmul().compile(**options).kernel


def test_verifier_checks_the_warp_grid_against_the_block() -> None:
    kernel = clone_kernel(_compiled())
    tiling = kernel.schedule.tiling
    kernel.schedule = kernel.schedule.with_(tiling=dataclasses.replace(tiling, warps=(4, 2)))
    with pytest.raises(IRError, match=r"schedule: 4x2 warps of 64x64 do not cover the "
                                      r"128x128 block; 128 threads for 4x2 warps"):
        verify(kernel)


def test_verifier_checks_buffer_layouts_and_stages_against_the_schedule() -> None:
    kernel = clone_kernel(_compiled(stages=3))
    tiling = kernel.schedule.tiling
    plain = tiling.operand("A").layout.with_swizzle(type(tiling.operand("A").layout.swizzle)())
    operands = (dataclasses.replace(tiling.operand("A"), layout=plain), tiling.operand("B"))
    kernel.schedule = kernel.schedule.with_(tiling=dataclasses.replace(tiling, operands=operands),
                                            pipeline=PipelinePlan(2))
    problems = check_schedule(kernel)
    assert any("the shared buffer of A is swizzle(" in p and "plans linear" in p
               for p in problems), problems
    assert "the shared buffer of A has 3 stages, the pipeline 2" in problems


def test_verifier_checks_the_split_against_the_grid() -> None:
    kernel = clone_kernel(_compiled(split_k=2))
    kernel.schedule = kernel.schedule.with_(split=SplitPlan(4))
    assert check_schedule(kernel) == ["the grid splits K 2 ways, the schedule 4"]


def test_a_user_pass_changes_the_schedule_and_the_ptx_follows() -> None:
    """Raising the raster group through the schedule: the pass edits the typed plan and the
    grid attribute it governs; verify=True accepts the result and the PTX changes."""
    def regroup(kernel: Kernel, options: Options) -> Kernel:
        kernel = clone_kernel(kernel)
        tiling = kernel.schedule.tiling
        kernel.schedule = kernel.schedule.with_(
            tiling=dataclasses.replace(tiling, raster_group=2))
        for op in kernel.walk():
            if op.name == "tile.grid":
                op.attrs["raster_group"] = kernel.schedule.tiling.raster_group
        return kernel

    passes = pipeline()
    passes.insert([p.name for p in passes].index("tiling") + 1, Pass("regroup", regroup))
    function = matmul()
    compiled = function.compile(passes=passes, verify=True, keep_ir=True)
    assert "raster_group = 2}" in compiled.asm["regroup"]
    assert compiled.kernel.schedule.tiling.raster_group == 2
    assert compiled.ptx != function.ptx()
