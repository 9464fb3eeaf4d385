"""The product-family registry: every family provides every hook, and family_for picks by
dtype and f32_math as the old kind table did."""
from __future__ import annotations

import inspect
from dataclasses import replace

import pytest

from tilec.backend.ptx import EMITTERS
from tilec.families.catalogue import OP_DEFS
from tilec.families.product import ExplainText, ProductFamily
from tilec.families.products import (FAMILIES, LOAD_OPS, PRODUCT_OPS, family_for, family_named,
                                     family_of)
from tilec.ir.ops import IR_OPS
from tilec.ir.schedule import OperandPlan, TilingPlan
from tilec.options import Options
from tilec.target.layout import WARP_SIZE, DistributedLayout, SmemLayout, Swizzle

ABSTRACT_HOOKS = sorted(ProductFamily.__abstractmethods__)
IDENTITY = ("name", "dtypes", "k_step", "granule", "granule_why", "instruction", "layout",
            "load_op", "product_op", "read_name", "swizzle_units", "explain_text", "emitters")


def small_plan(family: ProductFamily, k_major: dict[str, bool]) -> TilingPlan:
    """A 2x2-warp plan of the family's smallest warp tiles, BK two k steps; each operand
    stored k-contiguous or not as ``k_major`` says."""
    gm, gn = family.granule
    bm, bn, bk = 2 * gm, 2 * gn, 2 * family.k_step
    warps, warp_tile = (2, 2), (gm, gn)
    if family.fused_k_steps:  # wgmma: one warpgroup of 64 rows, 128-byte swizzle rows
        bm, bn, bk = 64, 64, 64
        warps, warp_tile = family.choose_warps(bm, bn, Options(arch="sm_90a")), (16, bn)
    a = SmemLayout(bm, bk) if k_major["A"] else SmemLayout(bk, bm, transposed=True)
    b = SmemLayout(bn, bk, transposed=True) if k_major["B"] else SmemLayout(bk, bn)
    elem = "f16" if "f16" in family.dtypes else family.dtypes[0]
    operands = []
    for role, layout in (("A", a), ("B", b)):
        op_plan = OperandPlan(role, role, layout, 4)
        fixed = family.layout_candidates(op_plan, 2 if elem == "f16" else 4)
        operands.append(op_plan if fixed is None else OperandPlan(role, role, fixed[0], 8))
    return TilingPlan(block=(bm, bn, bk), warps=warps, warp_tile=warp_tile,
                      instruction=family.make_instruction((bm, bn, bk)),
                      threads=warps[0] * warps[1] * WARP_SIZE, dtype=elem,
                      operands=tuple(operands), raster_group=1, kind=family.name)


def fragment_ops(family: ProductFamily) -> set[str]:
    """The ops a family defines: its fragment load (none when the product reads shared
    memory itself, wgmma), that of 8-bit operands it converts (mma's frag.ldbytes) and its
    product."""
    return {family.load_op, family.byte_load_op, family.product_op} - {None}


def test_the_registry_lists_each_family_once_under_its_own_name() -> None:
    names = [family.name for family in FAMILIES]
    assert names == ["wgmma", "wgmma_rs", "mma", "simt", "tf32", "wgmma8", "int8", "fp8"]
    assert all(family_named(family.name) is family for family in FAMILIES)
    assert LOAD_OPS == ("frag.ldmatrix", "frag.lds", "frag.ldtf32", "frag.ldbytes")
    assert PRODUCT_OPS == ("wgmma.mma", "wgmma.mma_rs", "frag.mma", "frag.fma")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_family_implements_every_hook(family: ProductFamily) -> None:
    assert ABSTRACT_HOOKS  # the base class declares its hooks abstract
    for hook in ABSTRACT_HOOKS:
        implementation = getattr(type(family), hook)
        assert not getattr(implementation, "__isabstractmethod__", False), hook
        assert inspect.getdoc(getattr(ProductFamily, hook)), f"{hook} is undocumented"
    for field in IDENTITY:
        # Only a family whose product reads shared memory itself has no fragment load.
        assert getattr(family, field) is not None or (field, family.fused_k_steps) == (
            "load_op", True), field
    assert family.k_step == family.instruction[2] or family.instruction == (1, 1, 1)
    assert family.movement in ("cp.async", "tma")
    assert issubclass(family.layout, DistributedLayout) and family.layout.kind == family.name
    assert isinstance(family.explain_text, ExplainText)
    assert family.granule_why.startswith(" (")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_family_defines_its_ops_with_their_semantics(family: ProductFamily) -> None:
    defs = {opdef.name: opdef for opdef in family.op_defs()}
    # Its fragment ops, and for wgmma the wait for groups left in flight, for mma the
    # conversion of an operand stored in another dtype (frag.cvt).
    assert set(defs) - fragment_ops(family) <= {"wgmma.wait", "frag.cvt"}
    assert fragment_ops(family) <= set(defs)
    for name, opdef in defs.items():
        assert opdef.evaluate is not None and opdef.check is not None, name
        assert name not in IR_OPS  # defined once: by the family, not the IR layer
        shared = [other for other in FAMILIES if name in {o.name for o in other.op_defs()}]
        # The catalogue holds the definition; an op families share runs through the
        # result layout's family, the others are the family's own.
        assert replace(OP_DEFS[name], evaluate=None) == replace(opdef, evaluate=None)
        # (one meaning shared by all, wgmma.wait's, is kept as it is).
        same = all({o.name: o for o in other.op_defs()}[name].evaluate is opdef.evaluate
                   for other in shared)
        assert (OP_DEFS[name].evaluate == opdef.evaluate) == same, name


def test_a_shared_op_runs_the_semantics_of_its_result_layouts_family() -> None:
    mma, tf32 = family_named("mma"), family_named("tf32")
    int8 = family_named("int8")
    fp8 = family_named("fp8")
    assert [f.name for f in FAMILIES if "frag.mma" in {o.name for o in f.op_defs()}] == [
        "mma", "tf32", "int8", "fp8"]
    # k16 of 16-bit halves, k8 of one f32, k32 of four i8 summed in integers, of four fp8
    assert len({mma.fragments, tf32.fragments, int8.fragments, fp8.fragments}) == 4
    assert int8.fragments.integer and not mma.fragments.integer


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_the_emitters_cover_the_family_ops_and_reach_the_backend(family: ProductFamily) -> None:
    assert fragment_ops(family) <= set(family.emitters)
    for name in family.emitters:
        assert name in EMITTERS, name


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
@pytest.mark.parametrize("k_major", [{"A": True, "B": False}, {"A": False, "B": True}],
                         ids=["A-k-B-n", "A-m-B-k"])
def test_the_read_enumeration_yields_lane_addresses_for_both_operands(
        family: ProductFamily, k_major: dict[str, bool]) -> None:
    if family.converts("A") and not k_major["A"]:
        pytest.skip(f"{family.name} reads a converted A k-contiguous only")
    plan = small_plan(family, k_major)
    elem_bytes = 2 if plan.dtype == "f16" else 4
    for op_plan in plan.operands:
        assert op_plan.k_major == k_major[op_plan.role]
        reads = list(family.operand_reads(plan, op_plan, op_plan.layout, elem_bytes))
        # A warp's lanes for fragment loads (and wgmma_rs's A pairs); the 8 rows of a core
        # matrix for wgmma's reads.
        lanes_read = family.load_op is not None or family.converts(op_plan.role)
        width = WARP_SIZE if lanes_read else 8
        assert reads and all(len(lanes) == width for lanes in reads)
        stage_bytes = op_plan.layout.size * elem_bytes
        assert all(0 <= a < stage_bytes for lanes in reads for a in lanes)
        # The enumeration starts with warp 0's reads at k 0.
        first = list(family.read_addresses(plan, op_plan, op_plan.layout, 0, 0, elem_bytes))
        assert first and first[0] == reads[0]
        degree = family.worst_read_degree(plan, op_plan, op_plan.layout, elem_bytes)
        assert degree >= 1
        assert family.read_access(op_plan.role, op_plan.layout)
        other = Swizzle(0) if op_plan.layout.swizzle.bits else Swizzle(
            1, {2: 3, 4: 2}[elem_bytes], 3)
        swizzled = op_plan.layout.with_swizzle(other)
        assert list(family.operand_reads(plan, op_plan, swizzled, elem_bytes)) != reads


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_explain_and_viz_answers_exist(family: ProductFamily) -> None:
    plan = small_plan(family, {"A": True, "B": False})
    accumulator = family.layout("C", plan.warps, plan.warp_tile)
    a, b = family.loads_per_k_step(plan)
    assert (a > 0 and b > 0) if family.load_op is not None else (a, b) == (0, 0)
    assert family.products_per_k_step(accumulator) > 0
    refusal = family.viz_refusal(plan, "kernel 'k'")
    assert refusal is None if family.name == "mma" else "kernel 'k' uses" in refusal
    assert set(family.explain_text.options) <= set(Options.__dataclass_fields__)


def test_family_of_reads_the_plan_kind() -> None:
    for family in FAMILIES:
        assert family_of(small_plan(family, {"A": True, "B": True})) is family


@pytest.mark.parametrize("dtype, f32_math, name", [
    ("f16", "ffma", "mma"), ("bf16", "ffma", "mma"), ("f16", "tf32", "mma"),
    ("bf16", "tf32", "mma"), ("f32", "ffma", "simt"), ("f32", "tf32", "tf32")])
def test_family_for_picks_by_dtype_and_f32_math(dtype: str, f32_math: str, name: str) -> None:
    assert family_for(dtype, f32_math).name == name


def test_family_for_defaults_to_exact_f32() -> None:
    assert family_for("f32").name == "simt"


@pytest.mark.parametrize("dtype", ["i4", "f64", "fp8"])
def test_an_unknown_dtype_is_refused_naming_the_dtypes_taken(dtype: str) -> None:
    with pytest.raises(KeyError) as info:
        family_for(dtype)
    assert info.value.args[0] == (f"tiles of {dtype} cannot be multiplied (the backend takes "
                                  "f16, bf16, f32, i8, f8e4m3, f8e5m2)")


def test_i8_tiles_take_the_int8_family() -> None:
    assert family_for("i8").name == "int8"


def test_a_shared_product_op_is_emitted_by_the_plan_family() -> None:
    """frag.mma belongs to mma and tf32: the backend's table dispatches it through the plan,
    so each family's own emitter (its type suffix) writes it."""
    assert EMITTERS["frag.mma"] not in (family_named("mma").emitters["frag.mma"],
                                        family_named("tf32").emitters["frag.mma"])
    assert EMITTERS["frag.lds"] is family_named("simt").emitters["frag.lds"]



def _lowered_plan(sample: str, dtype: str, arch: str = "sm_90", **options) -> TilingPlan:
    """The tiling plan of a sample read as ``dtype``, lowered for ``arch`` (sm_90: mma.sync)."""
    from tilec.pipeline import run_pipeline

    from .test_ptxas import load_sample
    consts = {k: options.pop(k) for k in ("BM", "BN", "BK")}
    kernel = run_pipeline(load_sample(sample, dtype).lower(**consts),
                          Options(arch=arch, stages=2, **options), keep_ir=True).kernel
    return kernel.schedule.tiling


@pytest.mark.parametrize("sample, dtype, options", [
    ("matmul", "f16", {}), ("matmul_bt", "bf16", {}), ("matmul", "f32", {"f32_math": "tf32"}),
    ("matmul_bt", "f32", {"f32_math": "tf32"})],
    ids=["mma-B-n", "mma-B-k", "tf32-B-n", "tf32-B-k"])
@pytest.mark.parametrize("tile, warps", [((128, 128, 64), (2, 2)), ((64, 256, 32), (1, 4)),
                                         ((128, 64, 128), (4, 1))], ids=str)
def test_the_worst_read_degree_scored_a_bank_class_at_a_time_is_every_reads(
        sample, dtype, options, tile, warps) -> None:
    """The ldmatrix families score one piece of each bank class (SmemLayout.bank_class):
    the same worst degree as every read of the enumeration, under every swizzle the pass
    tries (tf32's word reads of an mn-contiguous operand are scored whole)."""
    from tilec.target.layout import swizzle_candidates
    bm, bn, bk = tile
    plan = _lowered_plan(sample, dtype, BM=bm, BN=bn, BK=bk, warps=warps, **options)
    family = family_of(plan)
    assert family.name == ("tf32" if options else "mma")
    for op_plan in plan.operands:
        eb = op_plan.stored_bytes(plan.elem_bytes)
        for swizzle in swizzle_candidates(eb, family.swizzle_units):
            if swizzle.bits and swizzle.period > op_plan.layout.size:
                continue
            layout = op_plan.layout.with_swizzle(swizzle)
            every = max(family.read_degree(op_plan.k_major, lanes)
                        for lanes in family.operand_reads(plan, op_plan, layout, eb))
            assert family.worst_read_degree(plan, op_plan, layout, eb) == every, \
                (op_plan.role, str(swizzle))


@pytest.mark.parametrize("sample, dtype", [("matmul", "f16"), ("matmul_bt", "bf16"),
                                           ("fp8_gemm", "f8e4m3")],
                         ids=["wgmma-B-n", "wgmma-B-k", "wgmma8-B-k"])
@pytest.mark.parametrize("tile", [(128, 256, 64), (128, 192, 64), (192, 192, 64),
                                  (128, 96, 128), (64, 208, 64)], ids=str)
def test_wgmmas_worst_read_degree_from_one_piece_along_mn_is_every_reads(sample, dtype, tile):
    """wgmma scores the first core matrices along mn of each k chunk (the rest start whole
    swizzle periods later, wgmma.repeats_along_mn): the same worst degree as every read,
    in every span the operand's rows take, swizzled or not (the explain comparison)."""
    bm, bn, bk = tile
    plan = _lowered_plan(sample, dtype, arch="sm_90a", BM=bm, BN=bn, BK=bk)
    assert family_of(plan).name in ("wgmma", "wgmma8")
    _assert_worst_degree_is_every_reads(plan)


@pytest.mark.parametrize("tile", [(128, 128, 128), (64, 128, 64)], ids=str)
def test_wgmma_rs_scores_its_a_pairs_whole_and_b_a_piece_along_n(tile):
    """The register form reads A as byte pairs into registers, not as core matrices: its
    worst degree is every pair read's, B's from one piece along n, as wgmma's."""
    from tilec.kernel import load_file
    from tilec.pipeline import run_pipeline

    from .test_ptxas import SAMPLES
    bw, ba, bk = tile
    function = load_file(SAMPLES / "w8a16_swapped.py")["w8a16_swapped"]
    plan = run_pipeline(function.lower(BW=bw, BA=ba, BK=bk), Options(arch="sm_90a", stages=2),
                        keep_ir=True).kernel.schedule.tiling
    assert family_of(plan).name == "wgmma_rs"
    _assert_worst_degree_is_every_reads(plan)


def _assert_worst_degree_is_every_reads(plan: TilingPlan) -> None:
    from tilec.families import wgmma
    family = family_of(plan)
    for op_plan in plan.operands:
        eb = op_plan.stored_bytes(plan.elem_bytes)
        for candidate in family.layout_candidates(op_plan, eb):
            for layout in (candidate, candidate.with_swizzle(Swizzle(0))):
                d = wgmma.descriptor_fields(layout, op_plan.role, eb)
                assert wgmma.repeats_along_mn(d), (op_plan.role, str(layout))
                every = max(family.read_degree(op_plan.k_major, rows)
                            for rows in family.operand_reads(plan, op_plan, layout, eb))
                assert family.worst_read_degree(plan, op_plan, layout, eb) == every, \
                    (op_plan.role, str(layout))


def test_wgmmas_pieces_along_mn_repeat_only_a_whole_number_of_periods_apart():
    """The condition the one-piece scoring rests on: SBO (K-major) or LBO (MN-major) a
    multiple of 8 rows of the span; otherwise every piece is scored."""
    from tilec.families.wgmma import Descriptor, repeats_along_mn
    assert repeats_along_mn(Descriptor(True, 16, 1024, 8192, 128))
    assert repeats_along_mn(Descriptor(False, 8192, 1024, 8192, 128))
    assert repeats_along_mn(Descriptor(False, 2048, 256, 2048, 32))
    assert not repeats_along_mn(Descriptor(True, 16, 512, 8192, 128))
    assert not repeats_along_mn(Descriptor(False, 8192 + 128, 1024, 8192, 128))
