"""Compile options and the launch facts a kernel is specialised on.

Both are frozen, validate themselves, and together with the program and the compiler
version form the compile-cache key.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Optional

from tilec.target.layout import Swizzle
from tilec.target.occupancy import SHARED_RESERVED_PER_BLOCK, SM_LIMITS

# Per target: the PTX ISA version we emit and the shared memory a block may opt into.
ARCHS: dict[str, dict[str, int | str]] = {
    "sm_80": {"ptx_version": "8.0", "smem_optin": 166912},
    "sm_86": {"ptx_version": "8.0", "smem_optin": 101376},
    "sm_90": {"ptx_version": "8.0", "smem_optin": 232448},
    # Hopper's architecture-specific features (wgmma, setmaxnreg): PTX ISA 8.0, sm_90a only.
    "sm_90a": {"ptx_version": "8.0", "smem_optin": 232448},
}
MAX_REGISTERS_PER_THREAD = 255
L2_PREFETCH_BYTES = (0, 64, 128, 256)
PACK_POLICIES = ("auto", "always", "off")
# How a copy reads operand rows too misaligned for any cp.async (odd f16 strides: 2-byte
# rows): see Options.misaligned_copy.
MISALIGNED_COPIES = ("elements", "vectors", "words")
# How the epilogue stores 16-bit C rows too misaligned for 4-byte stores: Options.misaligned_store.
MISALIGNED_STORES = ("elements", "pairs", "rows")
MAX_SPLIT_K = 64
# Which products passes/swap_product.py computes transposed: Options.swap_product.
SWAP_PRODUCTS = ("auto", "always")
BLOCKS_PER_SM = (1, 2)
CLUSTER_SIZES = (1, 2, 4)  # blocks per cluster along M, and along N (sm_90a)
# The most blocks of a cluster (along M times along N) every sm_90 part launches (CUDA's
# portable cluster size).
MAX_CLUSTER_BLOCKS = 8
# Rows of the block tile a wgmma consumer warpgroup owns (sm_90a): one m64 instruction per
# k step, or two.
WARPGROUP_ROWS = (64, 128)
# TMA's swizzle span for the operands of warp-specialized (sm_90a) kernels: 0 lets the
# swizzle pass choose (the widest the tile's rows take), else 128, 64 or 32 bytes.
TMA_SWIZZLES = (0, 128, 64, 32)
# How a persistent warp-specialized kernel's consumer warpgroups share the tiles (RolesPlan).
CONSUMER_MODES = ("cooperative", "pingpong")
# How wgmma's fp8 products are summed: Options.fp8_accumulation.
FP8_ACCUMULATIONS = ("fast", "promoted")
# Shared memory per SM on sm_90 (228 KiB), of which the driver reserves 1 KiB per block.
SMEM_PER_SM, SMEM_RESERVED_PER_BLOCK = SM_LIMITS["sm_90"].shared_bytes, SHARED_RESERVED_PER_BLOCK
# How products of f32 tiles are computed: "ffma" exact f32 fma.rn.f32 (as cuBLAS SGEMM with
# TF32 off), "tf32" tensor cores (mma.sync m16n8k8 .tf32, inputs rounded to 10 mantissa bits).
F32_MATH = ("ffma", "tf32")
# What turns the lowered IR into PTX: "ptx" (backend/ptx.py, the default) or "llvm" (LLVM IR
# with NVVM intrinsics, compiled by LLVM's NVPTX target: backend/llvm/); LLVM's pipeline level.
BACKENDS = ("ptx", "llvm")
LLVM_OPT_LEVELS = (0, 1, 2, 3)


def target_arch(compute_capability: tuple[int, int]) -> str:
    """The newest target we emit that a device of this compute capability runs."""
    major, minor = compute_capability
    runnable = [a for a in ARCHS if arch_capability(a) <= (major, minor)
                and (not a.endswith("a") or arch_capability(a) == (major, minor))]
    if not runnable:
        raise ValueError(f"tilec needs compute capability 8.0 or newer, got {major}.{minor}")
    # An "a" target (sm_90a) runs only on its own capability, and is preferred there.
    return max(runnable, key=lambda a: (arch_capability(a), a.endswith("a")))


def arch_capability(arch: str) -> tuple[int, int]:
    """The compute capability a target needs: sm_86 -> (8, 6), sm_90a -> (9, 0)."""
    digits = int(arch[3:].rstrip("a"))
    return digits // 10, digits % 10
MAX_THREADS = 1024


@dataclass(frozen=True)
class TensorSpec:
    """How a tensor argument is laid out: which dim has unit stride (None: neither), and
    how many elements one aligned vector access may cover (1, 2, 4 or 8 for 16-bit).
    ``dtype``: the dtype the launch passes the tensor in when it converts it first (8-bit
    weights converted to f16 or bf16 at launch: ``passes/dequantize.py``), else None."""

    contiguous_dim: Optional[int] = 1
    vec_elems: int = 8
    dtype: Optional[str] = None


@dataclass(frozen=True)
class Spec:
    """Facts about the launch arguments: tensor layouts, and symbols known to divide a
    tile size (``("K", 32)`` means K % 32 == 0, so the K loop needs no edge masks)."""

    tensors: tuple[tuple[str, TensorSpec], ...] = ()
    divisible: tuple[tuple[str, int], ...] = ()

    def tensor(self, name: str, rank: int, elem_bytes: int) -> TensorSpec:
        for key, spec in self.tensors:
            if key == name:
                return spec
        # Compiling without arguments assumes what most callers pass: contiguous rows of a
        # 16-byte aligned array.
        return TensorSpec(rank - 1, max(1, 16 // elem_bytes))

    def divides(self, symbol: str, size: int) -> bool:
        return any(s == symbol and m % size == 0 for s, m in self.divisible)


# The options whose value is one of a few names, and the integer ones taking a few values:
# each checked alike, its message naming the field and what it takes.
_NAMED_CHOICES = (("pack", PACK_POLICIES), ("misaligned_copy", MISALIGNED_COPIES),
                  ("misaligned_store", MISALIGNED_STORES), ("f32_math", F32_MATH),
                  ("consumers", CONSUMER_MODES), ("fp8_accumulation", FP8_ACCUMULATIONS),
                  ("backend", BACKENDS), ("swap_product", SWAP_PRODUCTS))
_INTEGER_CHOICES = (("blocks_per_sm", BLOCKS_PER_SM), ("cluster", CLUSTER_SIZES),
                    ("cluster_n", CLUSTER_SIZES),
                    ("warpgroup_rows", WARPGROUP_ROWS), ("tma_swizzle", TMA_SWIZZLES),
                    ("llvm_opt", LLVM_OPT_LEVELS))


@dataclass(frozen=True)
class Options:
    arch: str = "sm_80"
    stages: int = 3
    warps: Optional[tuple[int, int]] = None  # None: the tiling pass chooses
    raster_group: int = 8
    swizzle: str | Swizzle = "auto"  # "auto", "off", or explicit parameters
    pipeline_fragments: bool = True  # load the next stage's first fragments a step early
    mma_order: str = "n"  # "n": consecutive mmas share B fragments; "m": they share A
    # cp.async's L2 prefetch-size hint in bytes (0: none; 64, 128 or 256, PTX ISA 9.7.9.25):
    # for memory-bound shapes, each request then fetches the rest of the line ahead.
    l2_prefetch: int = 0
    disable: tuple[str, ...] = ()
    verify: bool = False
    line_info: bool = True  # .file/.loc directives: profilers show DSL lines
    annotate: bool = False  # a comment before each op's PTX: DSL line, IR op, creating pass
    # Copy misaligned matmul operands into 16-byte aligned scratch at launch, and 8-bit weights
    # converted in the K loop into 16-bit scratch (tilec.launch.packing): "auto" when it pays
    # (and a weight the registers cannot convert always), "always", or "off".
    pack: str = "auto"
    # Operand copies of 16-bit rows too misaligned for cp.async (2-byte aligned: odd strides)
    # load through registers. "elements": one element a thread and access; "vectors": each
    # thread moves a 16-byte shared vector per access, loaded element by element (an eighth
    # of the addressing and masking), stored with one st.shared.v4; "words": the same
    # vectors read as the aligned 4-byte words that cover them (5 loads for 8 elements) and
    # shifted into place with prmt. For small latency-bound products (1000x1003x77) where
    # the instructions before the loads are the cost, not the bytes.
    misaligned_copy: str = "elements"
    # The epilogue's stores of 16-bit C rows that are only 2-byte aligned (odd strides):
    # "elements" stores each element alone; "pairs" checks each row's address at run time
    # and stores a register pair (neighbouring columns) with one 4-byte store where it is
    # 4-byte aligned: every other row of an odd stride. On an H100 the 2-byte stores of
    # 1000x1003x77's C cost 3.4 us of its 11.3 (7.9 with C's rows aligned).
    # "rows" (mma.sync kernels, passes/row_store.py): where C's 16-bit rows are not 16-byte
    # aligned, the tile is staged in shared memory and each warp stores whole rows.
    misaligned_store: str = "elements"
    # A launch's policy, like pack: run a grid axis's partial last tile as a launch of its
    # own in narrow tiles, after the whole tiles' launch (tilec.launch.peeling), where the
    # program allows it; the kernels compiled are the same either way.
    peel: bool = False
    # Blocks per output tile along K (passes/split_k.py): each sums a slice of the K loop and
    # the last to finish adds the slices up before the epilogue. For shapes with too few
    # output tiles to fill the GPU (skinny M, small M x N with long K). On sm_90a the
    # warp-specialized wgmma kernels take it as the mma.sync ones do.
    split_k: int = 1
    # Products of f32 operand tiles: "ffma" (exact f32) or "tf32" (tensor cores, each input
    # rounded to tf32 with cvt.rna first, f32 accumulation). f16/bf16 tiles ignore it.
    f32_math: str = "ffma"
    # Blocks of a warp-specialized (sm_90a) kernel resident on one SM: with 2, one block's
    # epilogue and pipeline fill overlap the other's products; the block then gets half the
    # register file and must fit half the shared memory.
    blocks_per_sm: int = 1
    # Warp-specialized (sm_90a) kernels: a grid of one block per SM (times blocks_per_sm)
    # looping over the output tiles, so one tile's epilogue overlaps the next one's loads.
    persistent: bool = False
    # Warp-specialized (sm_90a) kernels: blocks per thread-block cluster, along M. With 2 or
    # 4, the blocks of a cluster share their B tile (the swapped product's A, which is B):
    # each loads 1/cluster of its rows with TMA and multicasts them to all, dividing B's
    # traffic from L2 by the cluster. With persistent=True the cluster walks the output
    # tiles together, a cluster's M tiles of one N column at a time.
    cluster: int = 1
    # Warp-specialized (sm_90a) kernels: blocks per cluster along N, beside ``cluster``'s
    # along M (cuBLAS's 4x2 and 2x4 clusters). With 2 or 4 the blocks of one M row of the
    # cluster share their A tile as the blocks of one N column share B: each operand's
    # traffic from L2 is divided by the blocks sharing it, where one-dimensional clusters
    # divide only B's. A block hands each stage back to every block that multicasts into
    # it: cluster + cluster_n - 1 of them.
    cluster_n: int = 1
    # Persistent warp-specialized (sm_90a) kernels: "cooperative", the tile's consumer
    # warpgroups share each tile (warpgroup_rows each); "pingpong", two consumer warpgroups
    # each own a whole tile (BM = warpgroup_rows) and take the block's tiles in turn, their
    # mainloops handed over in order, so one's epilogue overlaps the other's products.
    consumers: str = "cooperative"
    # wgmma kernels (sm_90a): the rows of the block tile one consumer warpgroup owns. 64: one
    # m64nNk16 per k step, BM / 64 warpgroups a tile. 128: two m64 instructions per k step
    # into accumulators of their own (A's descriptors 64 rows apart), BM / 128 warpgroups:
    # cuBLAS's 256x128 cooperative tile on two warpgroups, or pingpong on 128-row tiles.
    # Each consumer thread then holds BN f32 accumulators, so BN is at most 128 or so.
    warpgroup_rows: int = 64
    # Warp-specialized (sm_90a) kernels: the span of TMA's swizzle for the operand tiles
    # (TMA_SWIZZLES; 0: the swizzle pass's choice). A span the tile's rows are not a whole
    # number of is a compile error naming the operand.
    tma_swizzle: int = 0
    # Persistent cooperative warp-specialized (sm_90a) kernels: stream-K (CUTLASS's "DP +
    # SK" hybrid, tilec/families/stream_k.py): whole tiles for all waves but the last one or
    # two, whose (tile, K step) work is divided evenly among the blocks; a tile split across
    # blocks meets in a workspace before its epilogue. Evens out a partial last wave.
    stream_k: bool = False
    # wgmma kernels (sm_90a), passes/swap_product.py: which products are computed
    # transposed, C.T = B.T @ A.T. "auto": those converting 8-bit weights (B) in the K loop,
    # which wgmma converts only as its A, in registers. "always": plain ones too, whose block
    # rows (BM) then run along wgmma's n, any multiple of 8 up to 256 rather than of 64: M =
    # 300 in two 152-row tiles rather than five of 64 or two of 192.
    swap_product: str = "auto"
    # fp8 products on wgmma (sm_90a): "fast", the sums kept in the tensor cores' accumulator
    # for the whole K loop (cuBLAS's use_fast_accum=True: its precision is below f32's);
    # "promoted", each K step's sums started afresh and added into a separate f32
    # accumulator (cuBLAS's default), at twice the accumulator registers
    # (passes/promote_accumulation.py).
    fp8_accumulation: str = "fast"
    # The backend writing the PTX, and for "llvm" the optimisation level of LLVM's pipeline.
    backend: str = "ptx"
    llvm_opt: int = 3
    spec: Spec = field(default_factory=Spec)

    def __post_init__(self) -> None:
        if isinstance(self.disable, str):  # one pass name, not its letters
            object.__setattr__(self, "disable", (self.disable,))
        if self.arch not in ARCHS:
            raise ValueError(f"unknown arch '{self.arch}' (supported: {', '.join(ARCHS)})")
        if not isinstance(self.stages, int) or self.stages < 1:
            raise ValueError(f"stages must be an integer >= 1, got {self.stages!r}")
        if self.raster_group < 1:
            raise ValueError(f"raster_group must be >= 1, got {self.raster_group}")
        if isinstance(self.swizzle, str) and self.swizzle not in ("auto", "off"):
            raise ValueError(f"swizzle must be 'auto', 'off' or a Swizzle, got {self.swizzle!r}")
        for name, choices in _NAMED_CHOICES:
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        for name, allowed in _INTEGER_CHOICES:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if not isinstance(self.peel, bool):
            raise ValueError(f"peel must be True or False, got {self.peel!r}")
        if (not isinstance(self.split_k, int) or isinstance(self.split_k, bool)
                or not 1 <= self.split_k <= MAX_SPLIT_K):
            raise ValueError(f"split_k must be an integer from 1 to {MAX_SPLIT_K}, got "
                             f"{self.split_k!r}")
        if self.l2_prefetch not in L2_PREFETCH_BYTES:
            raise ValueError(f"l2_prefetch must be one of {L2_PREFETCH_BYTES}, got "
                             f"{self.l2_prefetch!r}")
        if self.cluster * self.cluster_n > MAX_CLUSTER_BLOCKS:
            raise ValueError(f"cluster={self.cluster} and cluster_n={self.cluster_n} make "
                             f"clusters of {self.cluster * self.cluster_n} blocks; at most "
                             f"{MAX_CLUSTER_BLOCKS} launch on every sm_90 part")
        if self.cluster_blocks > 1 and self.blocks_per_sm > 1:
            # Not run on a GPU together: refused rather than risk a hang.
            given = (f"cluster={self.cluster} runs" if self.cluster_n == 1 else
                     f"cluster={self.cluster} and cluster_n={self.cluster_n} run")
            raise ValueError(f"{given} with one block per SM: it cannot be combined with "
                             "blocks_per_sm=2")
        if self.consumers == "pingpong" and (not self.persistent or self.blocks_per_sm > 1):
            # The warpgroups alternate over a persistent block's tiles: one tile a block
            # leaves nothing to alternate over, and two blocks an SM already overlap.
            raise ValueError("consumers='pingpong' alternates two warpgroups over a persistent "
                             "block's tiles: it needs persistent=True and blocks_per_sm=1")
        if self.stream_k and (not self.persistent or self.consumers != "cooperative"
                              or self.cluster_blocks > 1):
            # The units are walked by one block's producer and its cooperative consumers;
            # a cluster pair and pingpong's alternating warpgroups walk tiles of their own.
            raise ValueError("stream_k divides a persistent block's work in K steps: it needs "
                             "persistent=True, consumers='cooperative' and no cluster")
        if self.split_k > 1 and self.persistent:
            # Split-K's slices are blocks of their own, the last of a tile running its
            # epilogue while the others have left: a persistent block walks tiles instead
            # (stream_k divides its K steps). A cluster's pair shares a slice: its blocks
            # run the same K steps, and either may be its tile's last.
            raise ValueError("split_k gives each K slice a block of its own: it cannot be "
                             "combined with persistent=True (use stream_k=True)")
        if self.mma_order not in ("n", "m"):
            raise ValueError(f"mma_order must be 'n' or 'm', got {self.mma_order!r}")
        if self.warps is not None and (len(self.warps) != 2 or min(self.warps) < 1):
            raise ValueError(f"warps must be a pair of positive counts, got {self.warps!r}")

    @property
    def cluster_blocks(self) -> int:
        """The blocks of one thread-block cluster (along M times along N)."""
        return self.cluster * self.cluster_n

    @property
    def smem_limit(self) -> int:
        return int(ARCHS[self.arch]["smem_optin"])

    @property
    def ptx_version(self) -> str:
        return str(ARCHS[self.arch]["ptx_version"])

    def with_(self, **changes) -> "Options":
        return replace(self, **changes)


# The options that shape the warp-specialized sm_90a schedule (wgmma fed by TMA, a producer
# warpgroup beside the consumers), in words: a kernel without that schedule has nothing to
# apply them to. The llvm backend, which emits no such schedule, refuses them by name; on the
# PTX backend a kernel left to mma.sync ignores them (explain says so) but for cluster,
# refused where the ring is cp.async's (passes/double_buffer.py).
SCHEDULE_OPTIONS = {
    "persistent": "a grid of one block per SM looping over the output tiles",
    "cluster": "clusters of blocks sharing B through TMA multicast",
    "cluster_n": "clusters of blocks along N sharing A through TMA multicast",
    "consumers": "consumer warpgroups that take a persistent block's tiles in turn",
    "warpgroup_rows": "the rows each wgmma consumer warpgroup owns",
    "stream_k": "a persistent block's work divided in K steps",
    "blocks_per_sm": "warp-specialized blocks sharing an SM",
    "tma_swizzle": "the span of TMA's swizzle for the operand tiles",
}
SCHEDULE_DEFAULTS = {f.name: f.default for f in fields(Options) if f.name in SCHEDULE_OPTIONS}


def schedule_options_given(options: Options) -> list[str]:
    """The SCHEDULE_OPTIONS set away from their defaults, in SCHEDULE_OPTIONS' order."""
    return [name for name in SCHEDULE_OPTIONS
            if getattr(options, name) != SCHEDULE_DEFAULTS[name]]
