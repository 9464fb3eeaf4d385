"""What tilec runs for a case when neither the command line nor ``--autotune`` chooses:
the table entry for its family and problem class, then the rules that move it
(:func:`tuned_config`), in words (:func:`describe_tuned`)."""
from __future__ import annotations

from typing import Any, Optional

from tilec.benchmarking.cases import Case
from tilec.ir.types import DType

from .measure import (ONE_STEP_K, ONE_WAVE, SHORT_M, SKINNY_M, SMALL_TILES, large_tiles,
                      rows_aligned_at_launch, problem_class, rows_aligned, tile_count)
from .rounds import (_multicast_for_rows_off_lines, _narrower_for_the_last_wave, one_wave_tile,
                     _persistent_for_shallow_rounds, _tile_for_whole_waves)
from .skinny import SKINNY_ALIGNED_MIN_K, _short_tile, _skinny, _split_in_clusters
from .split import SPLIT_TILE, _sliced
from .swap import (SWAP_UNSPLIT_MAX_M, SWAP_UNSPLIT_MIN_K, SWAP_UNSPLIT_MIN_M, _swapped,
                   _swapped_pairs, _tall)
from .tables import (BATCHED_PERSISTENT, BATCHED_TILED, EIGHT_BIT_WGMMA, FAMILY, PROMOTED_MAX_BN,
                     PROMOTED_TILED, SHALLOW_DEEP_RING_ROUNDS, SHALLOW_DEEP_RING_STAGES, TILEC_AS,
                     TUNED)
from .trace import RULES, TRACE, took


def on_wgmma(arch: Optional[str], backend: str = "ptx") -> bool:
    """Whether rows compiled for ``arch`` by ``backend`` may run on sm_90a's wgmma families:
    the target, and a backend that emits them (the llvm backend does not: there the
    families decline every block, and its sm_90a rows run mma.sync, tuned as on sm_90)."""
    from tilec.families.wgmma import FAMILY as WGMMA
    return WGMMA.target_problem(arch, backend) is None


def tuned_config(case: Case, arch: Optional[str] = None, backend: str = "ptx",
                 fp8_accumulation: str = "fast", swap: bool = True) -> dict[str, Any]:
    """The tuned configuration of a case on a target: sm_90a's f16/bf16 rows run on wgmma
    (and its 8-bit rows on wgmma8) where the backend emits it (:func:`on_wgmma`); fp8 rows
    summed promoted take tiles with room for the second accumulator set; on a target whose
    shared memory cannot hold a configuration's ring, a shallower one
    (:func:`_within_shared_memory`). ``swap`` False: never the swapped product (for a
    program the swap_product pass does not swap)."""
    tuned = _tuned(case, arch, backend, fp8_accumulation, swap)
    fitted = _within_shared_memory(case, tuned, arch, backend)
    if fitted is not tuned:
        took("_within_shared_memory")
    return fitted


def tuned_rules(case: Case, arch: Optional[str] = None, backend: str = "ptx",
                fp8_accumulation: str = "fast", swap: bool = True
                ) -> tuple[dict[str, Any], tuple[str, str], list[str]]:
    """:func:`tuned_config`'s choice, the TUNED key it started from (:func:`_entry`) and the
    RULES that moved it off the entry, in the order they did."""
    trace: list[str] = []
    token = TRACE.set(trace)
    try:
        config = tuned_config(case, arch, backend, fp8_accumulation, swap)
    finally:
        TRACE.reset(token)
    return config, _entry(case, arch, backend), trace


def describe_tuned(case: Case, arch: Optional[str] = None, backend: str = "ptx",
                   fp8_accumulation: str = "fast", swap: bool = True) -> list[str]:
    """:func:`tuned_rules` in words, a line each: the table entry and its configuration,
    each rule that moved the case off it, the configuration chosen."""
    config, (family, problem), rules = tuned_rules(case, arch, backend, fp8_accumulation,
                                                   swap)
    table = TUNED.get((family, problem))
    lines = [f"{case.shape} {case.dtype} on {arch or 'any target'}: the {problem} class's "
             f"{family} entry (TUNED), {config_words(table) if table else 'none'}"]
    lines += [f"then {rule}: {RULES[rule]}" for rule in rules]
    if not rules:
        lines.append("no rule moved it")
    lines.append(f"chosen: {config_words(config)}")
    return lines


def config_words(config: dict[str, Any]) -> str:
    """``128x256x64, stages 3, persistent, raster_group 16``."""
    def value_words(value: Any) -> str:
        return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)
    tile = "x".join(str(config[knob]) for knob in ("BM", "BN", "BK") if knob in config)
    rest = [knob if value is True else f"{knob} {value_words(value)}"
            for knob, value in config.items() if knob not in ("BM", "BN", "BK")]
    return ", ".join([tile, *rest] if tile else rest)


def _entry(case: Case, arch: Optional[str], backend: str) -> tuple[str, str]:
    """The TUNED key a case starts from on a target: its product family, as the target runs
    it, and its problem class."""
    family, problem = FAMILY[case.dtype], problem_class(case)
    wgmma = on_wgmma(arch, backend)
    if family in EIGHT_BIT_WGMMA and wgmma and problem != "short":
        family = "wgmma8"
    if family == "mma" and wgmma:
        family = "wgmma"
    return family, problem


# The shallowest BK a ring is cut to, by element bytes: an mma.sync k step (k32 on 8-bit
# operands, k16 on 16-bit ones), a few FFMA k steps on f32.
LEAST_BK = {1: 32, 2: 16, 4: 8}


def _within_shared_memory(case: Case, config: dict[str, Any], arch: Optional[str],
                          backend: str) -> dict[str, Any]:
    """``config``, or its ring (BM x BK and BK x BN elements a stage) cut to ``arch``'s
    shared memory: fewer stages, down to two, then BK halved with the stages that keep the
    ring as deep in K, and fewer again. The mma.sync and FFMA tiles were tuned on an H100,
    whose blocks take 227 KiB: 128x256x128 in two stages needs 192 KiB, more than an A100's
    163 or an sm_86 GPU's 99. wgmma's rings (sm_90a) and an unknown target's stay as they
    are."""
    if arch is None or on_wgmma(arch, backend) or "BK" not in config:
        return config
    from tilec.options import Options
    from tilec.passes.tiling import ring_bytes
    limit = Options(arch=arch).smem_limit
    size = DType.parse(TILEC_AS.get(case.dtype, (case.dtype,))[0]).bytes  # tf32: f32's
    bk, stages = config["BK"], config["stages"]

    def ring(bk: int, stages: int) -> int:
        return ring_bytes((config["BM"], config["BN"], bk), size, size, stages)

    while ring(bk, stages) > limit:
        if stages > 2:
            stages -= 1
        elif bk // 2 >= LEAST_BK[size] and bk % 2 == 0:
            bk //= 2
            stages = config["stages"] * config["BK"] // bk
        else:
            return config  # nothing fits: the compiler's error says why
    return config if (bk, stages) == (config["BK"], config["stages"]) else \
        {**config, "BK": bk, "stages": stages}


def _tuned(case: Case, arch: Optional[str], backend: str,
           fp8_accumulation: str, swap: bool = True) -> dict[str, Any]:
    """:func:`tuned_config`'s choice, as tuned (on an H100 or H200)."""
    family, problem = _entry(case, arch, backend)
    if family == "wgmma":
        skinny = _skinny(case) if SHORT_M < case.M <= SKINNY_M else None
        if skinny is not None:
            return took("_skinny", skinny)
        tall = _tall(case) if problem == "ragged" else None
        if tall is not None:
            swapped = _swapped(case, tall) if swap else None
            return took("_swapped", swapped) if swapped is not None else \
                took("_tall", tall)
        swapped = _swapped(case) if swap and problem == "ragged" and not case.batched and \
            case.K >= SWAP_UNSPLIT_MIN_K and SWAP_UNSPLIT_MIN_M < case.M <= SWAP_UNSPLIT_MAX_M \
            else None
        if swapped is not None:
            return took("_swapped", swapped)
        if problem == "ragged" and large_tiles(case) < SMALL_TILES:
            few = _few_ragged_tiles(case)
            pairs = _swapped_pairs(case, few) if swap and not case.batched and \
                rows_aligned(case) else None
            return took("_swapped_pairs", pairs) if pairs is not None else few
    unpacked = _unpacked_rows(case, family, problem, backend) \
        if family in UNPACKED_ROWS_FAMILIES and not rows_aligned_at_launch(case) else None
    if unpacked is not None:
        return took("unpacked_rows", unpacked)
    config = dict(TUNED[family, problem])
    if case.batched and "split_k" in config:
        # The batch takes the grid's third axis, the one split-K would add (a batched
        # grid that splits is refused at compile time).
        took("batched_unsplit")
        del config["split_k"]
    if (family, problem) == ("wgmma", "short") and not case.batched:
        short = _short_tile(case, config)
        return short if short == config else took("_short_tile", short)
    if family == "wgmma8" and case.dtype != "i8" and fp8_accumulation == "promoted":
        config = took("promoted", dict(PROMOTED_TILED) if problem == "tiled" else
                       {**config, "BN": min(config["BN"], PROMOTED_MAX_BN)})
    if case.batched and (family, problem) in BATCHED_PERSISTENT and \
            large_tiles(case) > ONE_WAVE:
        config["persistent"] = took("batched_persistent", True)
    if case.batched and (family, problem) == ("wgmma", "tiled") and \
            large_tiles(case) > ONE_WAVE:
        config = took("batched_tiled", dict(BATCHED_TILED))
    if (family, problem) == ("wgmma", "shallow") and not case.batched and \
            tile_count(case, config) >= SHALLOW_DEEP_RING_ROUNDS * ONE_WAVE:
        config["stages"] = took("shallow_deep_ring", SHALLOW_DEEP_RING_STAGES)
    if config.get("persistent") and problem == "tiled" and large_tiles(case) <= ONE_WAVE:
        # A block gets one tile at most: nothing to run ahead into, only the tile loop's
        # cost. 2048^3 (64 tiles), one run: 0.958 / 0.946 of cuBLAS persistent against
        # 0.976 / 0.964 one tile a block (f16 / bf16).
        took("one_tile_a_block")
        del config["persistent"]
    if family == "wgmma":
        config = _wgmma_refinements(case, config)
    return config


def _few_ragged_tiles(case: Case) -> dict[str, Any]:
    """A ragged product of few tiles on wgmma's target: all of a shallow K in one step,
    the skinny tile (split along K or in clusters), SPLIT_TILE split, the skinny tile over
    aligned rows, else mma.sync's in-place tiles."""
    # A few tiles and K steps (1000x1003x77), H100, one run, f16 C: mma.sync's
    # 64x64x32 tiles reading the misaligned operands in place 13.4 us; packed first
    # 16.9; 128x128 packed 18.6 (unpacked 20.9); wgmma 64x128 packed 16.7. The pack
    # launches cost more than the aligned copies save here.
    if case.K <= ONE_STEP_K:
        # All of K in one step of one stage: the loads issued at once, one barrier.
        # 1000x1003x77 (152 configurations swept, one run): 64x128x80 with 2x4 warps
        # 11.4 us, BK 96 11.6, BK 128 12.2, 64x64x64 in 2 stages 12.5, the 64x64x32
        # 3-stage kernel 13.5 (cuBLAS 9.6).
        # The misaligned rows read as words (aligned 4-byte loads + prmt, 16-byte
        # shared vectors): 1064 -> 728 SASS instructions, 238 -> 127 registers; H100,
        # one run: 11.3 us against 11.8 element by element and 12.5 as vectors
        # (element loads into 16-byte vectors), cuBLAS 9.95; bench 0.88x cuBLAS
        # (0.84x by elements). What is left is C's 2-byte stores: with them off the
        # kernel takes 7.5 us, with C's rows 16-byte aligned 7.9.
        # C's rows (2-byte aligned) staged in shared memory and stored a row at a
        # time by each warp (passes/row_store.py), not scattered 2-byte pieces:
        # H100, one run (f16 and bf16 alike): 19.3 TFLOP/s (8.0 us), 1.23x cuBLAS;
        # misaligned_store pairs 15.3 (1.00x), elements 13.4 (0.87x); Triton 8.7.
        return took("one_step_k", _one_step(case))
    # A deep K: the skinny products' tiles (their M aside: these are few tiles
    # whatever the sizes), split along K (past SKINNY_M rows in SPLIT_TILE) or in
    # clusters; else SPLIT_TILE split where it fills the GPU (_sliced).
    skinny = _skinny(case) if case.M > SKINNY_M else None
    if skinny is not None:
        split = _split_in_clusters(case, skinny) \
            if skinny.get("cluster") and skinny["BM"] * skinny["BN"] < 128 * 128 \
            else None
        return took("_split_in_clusters", split) if split is not None else \
            took("_skinny", skinny)
    sliced = _sliced(case, dict(SPLIT_TILE))
    if "split_k" in sliced:
        return took("_sliced", sliced)
    shallow = _skinny(case, SKINNY_ALIGNED_MIN_K) if rows_aligned(case) else None
    if shallow is not None:
        return took("_skinny", shallow)
    return took("few_ragged_tiles", dict(IN_PLACE_TILE))


def _one_step(case: Case) -> dict[str, Any]:
    """All of a shallow K in one step of one stage (:func:`_few_ragged_tiles` measures it):
    64x128 tiles, misaligned rows read as words, C stored by rows."""
    return dict(BM=64, BN=128, BK=-(-case.K // 16) * 16, stages=1, warps=(2, 4), pack="off",
                misaligned_copy="words", misaligned_store="rows")


# mma.sync's tiles reading misaligned operands in place (:func:`_few_ragged_tiles`).
IN_PLACE_TILE = dict(BM=64, BN=64, BK=32, stages=3, warps=(2, 2), pack="off")


# The tensor-core families whose large tiles spill on rows the launch leaves misaligned.
UNPACKED_ROWS_FAMILIES = ("wgmma", "mma", "wgmma8", "int8", "fp8")


def _unpacked_rows(case: Case, family: str, problem: str,
                   backend: str) -> Optional[dict[str, Any]]:
    """A product whose misaligned rows the launch leaves as they are (too few elements to
    pack, or a batch of k-contiguous 8-bit B: :func:`rows_aligned_at_launch`), on mma.sync
    whatever the target (wgmma declines rows TMA cannot read): short M the short class's
    mma.sync entry (None where that is the family's own), a 16-bit product's shallow K in
    one step (:func:`_one_step`, whose row stores only the PTX backend emits), else the
    in-place tiles (IN_PLACE_TILE; one k32 step for 8-bit inputs). The larger tiles copy
    such rows element by element and spill: 128x192 on 1950x934x4 (wgmma's, run on
    mma.sync) took 255 registers and spilled 300 bytes; mma.sync's 128x128 228 on
    2481x1608x3, 128x256x128 on i8 199x1680x3 (a batch of 2) 1,260, and the short class's
    64x128 wgmma tile 264 on 63x5294x155 as mma.sync's 1x2 warps. Chosen by ptxas's counts,
    not timed (one operand under PACK_MIN_ELEMENTS makes most of these small)."""
    if problem == "short":
        return dict(TUNED["mma", "short"]) if family == "wgmma" else None
    sixteen_bit = family in ("wgmma", "mma")
    return _one_step(case) if sixteen_bit and case.K <= ONE_STEP_K and backend == "ptx" \
        else dict(IN_PLACE_TILE)


def _wgmma_refinements(case: Case, config: dict[str, Any]) -> dict[str, Any]:
    """A wgmma entry's tile moved where its rounds or waves fill the GPU badly: B's rows
    off lines multicast, a narrower tile for a thin last wave, whole rounds, slices
    along K, persistent tiles over a shallow K."""
    multicast = _multicast_for_rows_off_lines(case, config)
    moved = multicast or _narrower_for_the_last_wave(case, config)
    if moved != config:
        took("_multicast_for_rows_off_lines" if multicast else
              "_narrower_for_the_last_wave")
    config = moved
    # Slices that fill a wave come first (2048x1024x8192: 128 blocks, 64 tiles of
    # 128x256 split in two, against 96 tiles of 128x192), but for ONE_WAVE_TILES'
    # unsplit tiles where they fill it as well (:func:`_tile_for_whole_waves`).
    whole = _tile_for_whole_waves(case, config)
    sliced = _sliced(case, config)
    if whole != config and ("split_k" not in sliced or one_wave_tile(case, whole)):
        took("_tile_for_whole_waves")
        sliced = _sliced(case, whole)
    if "split_k" in sliced:
        took("_sliced")
    config = sliced
    shallow = _persistent_for_shallow_rounds(case, config)
    if shallow != config:
        config = took("_persistent_for_shallow_rounds", shallow)
    return config
