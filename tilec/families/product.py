"""The product family base class: the hooks every instruction family provides.

A product family is how the warps of a block compute ``acc + a @ b`` on their fragments:
which instructions read the operands from shared memory and which multiply them. Each
family is one module (:mod:`.mma_sync`, :mod:`.ffma`, :mod:`.tf32`) holding its identity,
its fragment layout, the shared-memory addresses its loads read, its PTX emitters, its ops'
definitions and CPU semantics, its explain text and its viz answer; :mod:`.products` lists
them. A new family (wgmma) is a new module and one line in the registry.

The tiling pass reads the identity (dtypes, k step, granule, register estimate), the
swizzle pass and explain the read enumeration (:meth:`ProductFamily.read_addresses`), the
fragments pass the ops and layouts, the backend the emitters, the op catalogue
(:mod:`.catalogue`) the op definitions with their CPU semantics (:meth:`ProductFamily.op_defs`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator, Optional, Protocol, Sequence

from tilec.ir.core import Op
from tilec.ir.ops import OpDef, check_fragment_result, require
from tilec.ir.types import TileType
from tilec.ir.schedule import OperandPlan, TilingPlan
from tilec.target.layout import WARP_SIZE, DistributedLayout, SmemLayout, warps_along

if TYPE_CHECKING:
    from tilec.backend.context import Context
    from tilec.options import Options

Emitter = Callable[["Context", Op], None]


@dataclass(frozen=True)
class ExplainText:
    """The words ``tilec explain`` uses for a family's instructions."""

    load: str  # the PTX of one fragment load ("ldmatrix.x4")
    product: str  # the PTX of one product ("mma.sync")
    issuer: str  # who issues the per-k-step counts: "warp" or "thread"
    load_row: str  # the schedule table's names of the fragment ops
    product_row: str
    read_pieces: str  # what one k-step's fragment reads are made of ("pieces")
    options: tuple[str, ...]  # fields of Options that only this family's backend reads


class CopyShape(Protocol):
    """What the text hooks read of one operand's global-to-shared copy."""

    role: str  # "A" or "B"
    transposed: bool  # stored as the transpose of the logical tile


class ExplainShape(Protocol):
    """What the text hooks read of the block's hierarchy as ``tilec explain`` computes it
    (its ``Hierarchy``, which has these fields and more): the families sit below the tools,
    so they name the fields they use rather than import explain."""

    warp_tile: tuple[int, int]
    instruction: tuple[int, int, int]
    k_step: int  # k covered by one fragment load and one product
    k_steps: int  # k-steps per BK
    products_per_k_step: int
    loads_per_k_step: tuple[int, int]  # A and B
    copies: Sequence[CopyShape]
    lanes: Optional["LanePiece"]
    converted: dict[str, str]  # role -> the dtype an operand converted in registers is stored in


@dataclass(frozen=True)
class Run:
    """How a lane's rows (or columns) of C lie in its warp tile: ``count`` runs of
    ``length`` consecutive ones, each ``spacing`` after the previous."""

    count: int
    length: int
    spacing: int


@dataclass(frozen=True)
class LanePiece:
    """The part of its warp's C tile one lane computes (families whose lanes own C pieces)."""

    lane_grid: tuple[int, int]  # lanes along the warp tile's rows and columns
    shape: tuple[int, int]  # rows x columns of C per lane
    rows: Run
    cols: Run


class ProductFamily(ABC):
    """One instruction family. Subclasses set the identity below and implement the abstract
    hooks; one instance of each is registered in :data:`tilec.families.products.FAMILIES`."""

    def __repr__(self) -> str:
        return f"<product family {self.name}>"

    # -- identity ---------------------------------------------------------------------
    name: ClassVar[str]  # TilingPlan.kind and the layouts' kind: "mma", "simt", "tf32"
    dtypes: ClassVar[tuple[str, ...]]  # input dtypes the instruction multiplies
    f32_math: ClassVar[Optional[str]] = None  # the Options.f32_math selecting it (None: any)
    k_step: ClassVar[int]  # k covered by one fragment load and one product op
    granule: ClassVar[tuple[int, int]]  # a warp tile's rows and cols are multiples of these
    granule_why: ClassVar[str]  # why, in the words of the tiling pass's error
    instruction: ClassVar[tuple[int, int, int]]  # m, n, k of one instruction
    layout: ClassVar[type[DistributedLayout]]  # fragments' and accumulator's layout
    load_op: ClassVar[Optional[str]]  # the IR op loading a fragment (None: none, wgmma)
    # The IR op loading a fragment of an 8-bit operand that frag.cvt converts to the product's
    # 16-bit dtype (w8a16); None: the family takes no such operand.
    byte_load_op: ClassVar[Optional[str]] = None
    product_op: ClassVar[str]  # the IR op multiplying fragments into the accumulator
    read_name: ClassVar[str]  # the key of its fragment reads' figure in the conflict report
    # The byte units the candidate swizzles permute (tilec.target.layout.swizzle_candidates).
    swizzle_units: ClassVar[tuple[int, ...]] = (16,)
    explain_text: ClassVar[ExplainText]
    # The PTX emitters of its ops, op name -> emitter (tilec.backend.ptx's op table).
    emitters: ClassVar[dict[str, Emitter]]
    # The targets it runs on (None: every target tilec emits), and the data-movement family
    # that feeds its shared operands (tilec.families.movements).
    archs: ClassVar[Optional[tuple[str, ...]]] = None
    movement: ClassVar[str] = "cp.async"
    # True when one product op covers a whole stage of BK, reading the shared views itself
    # (wgmma); False when the fragments pass emits a load and a product per k step.
    fused_k_steps: ClassVar[bool] = False
    # The op that waits for products left in flight (wgmma's groups): with it, a pipeline
    # may let a stage's products run on while the next stage's are issued.
    in_flight_wait: ClassVar[Optional[str]] = None
    # The PTX ISA version its instructions need beyond the target's (fp8 mma.sync: 8.4);
    # the kernel's header names the higher of the two.
    ptx_version: ClassVar[Optional[str]] = None
    # The largest warp tile (elements) the tiling pass's own warp choice gives the family,
    # where ptxas spills above it though the register estimate fits (fp8 on sm_90: 64x64
    # tiles spill, 64x32 do not); None: the estimate decides. Explicit warps are kept.
    auto_warp_tile_limit: ClassVar[Optional[int]] = None

    # -- where it applies ------------------------------------------------------------------
    def applies(self, block: tuple[int, int, int], options: "Options",
                operands: Sequence[OperandPlan] = ()) -> bool:
        """Whether the family takes a block tile under these options, beyond its dtypes:
        families restricted to some targets (``archs``), tile shapes or operand layouts
        (``operands``: how each is stored and aligned) say so here, and the next family in
        the registry takes the block otherwise."""
        return self.archs is None or options.arch in self.archs

    def converts(self, role: str) -> bool:
        """Whether the family converts an 8-bit operand ``role`` in registers after loading
        it (w8a16): B through :attr:`byte_load_op` (mma.sync), A in wgmma's register form."""
        return role == "B" and self.byte_load_op is not None

    def operand_refusal(self, operands: Sequence[OperandPlan], options: "Options"
                        ) -> Optional[tuple[str, str]]:
        """Why the family, having taken the dtype, cannot read these operands (how they are
        stored) or run on this target: (message, hint) for the tiling pass's error at the
        ``@``; None when it can. Unlike :meth:`applies`, no other family is tried: the
        dtype has no other (8-bit operands read k-contiguous only)."""
        return None

    def make_instruction(self, block: tuple[int, int, int]) -> tuple[int, int, int]:
        """The m, n, k of one product instruction for this block (fixed for most)."""
        return self.instruction

    def choose_warps(self, bm: int, bn: int, options: Options) -> Optional[tuple[int, int]]:
        """The warp grid when the family fixes it (wgmma: 16 rows a warp, or 32 with
        ``options.warpgroup_rows`` 128); None lets tiling search for one."""
        return None

    def layout_candidates(self, op_plan: OperandPlan, elem_bytes: int
                          ) -> Optional[list[SmemLayout]]:
        """The shared layouts the family can read an operand in, when it restricts them
        (descriptor-read operands); None lets the swizzle pass search the XOR swizzles."""
        return None

    # -- registers ----------------------------------------------------------------------
    @abstractmethod
    def fragment_registers(self, warp_rows: int, warp_cols: int) -> int:
        """Registers one k step's A and B fragments take per thread."""

    def registers(self, warp_tile: tuple[int, int], overhead: int) -> int:
        """Registers a thread needs: accumulators, double-buffered fragments, overhead."""
        tm, tn = warp_tile
        return tm * tn // WARP_SIZE + 2 * self.fragment_registers(tm, tn) + overhead

    # -- shared-memory reads --------------------------------------------------------------
    @abstractmethod
    def read_addresses(self, plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                       warp_index: int, k0: int, elem_bytes: int) -> Iterator[list[int]]:
        """The lane byte addresses (from the stage start) of every fragment read the warp at
        ``warp_index`` along the operand's mn dim issues for the k step at ``k0``, with the
        operand stored as ``layout``: the one enumeration the swizzle pass scores, explain
        counts, the backend derives addresses from and the conflict tests check."""

    @abstractmethod
    def read_access(self, role: str, layout: SmemLayout) -> str:
        """The PTX name of the instruction reading operand ``role`` stored as ``layout``."""

    @abstractmethod
    def read_degree(self, k_major: bool, addresses: Sequence[int]) -> int:
        """The conflict degree of one read (1 = conflict-free), k contiguous or not."""

    def operand_reads(self, plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                       elem_bytes: int) -> Iterator[list[int]]:
        """Every fragment read of one stage of an operand: per warp along mn and k step."""
        for warp_index in range(warps_along(op_plan.role, plan.warps)):
            for k0 in range(0, plan.block[2], self.k_step):
                yield from self.read_addresses(plan, op_plan, layout, warp_index, k0,
                                               elem_bytes)

    def worst_read_degree(self, plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                          elem_bytes: int) -> int:
        """The worst conflict degree of the operand's fragment reads (the swizzle pass's)."""
        k_major = op_plan.k_major
        return max(self.read_degree(k_major, addresses)
                   for addresses in self.operand_reads(plan, op_plan, layout, elem_bytes))

    # -- IR ops and their CPU semantics -----------------------------------------------------
    @abstractmethod
    def op_defs(self) -> tuple[OpDef, ...]:
        """The definitions of the IR ops this family owns (:attr:`load_op` and
        :attr:`product_op`): type rule, traits and CPU semantics (``evaluate``, built on
        :mod:`tilec.cpu.executor`'s model). The op catalogue joins them to the generic ops.
        An op several families share (``frag.mma``) is defined alike by each but for its
        ``evaluate``: the registry runs the one of the family its result layout names."""

    # -- explain --------------------------------------------------------------------------
    @abstractmethod
    def loads_per_k_step(self, plan: TilingPlan) -> tuple[int, int]:
        """Fragment loads per k step (per issuer), of A and of B."""

    @abstractmethod
    def products_per_k_step(self, accumulator: DistributedLayout) -> int:
        """Product instructions per k step (per issuer), from the accumulator's layout."""

    def lane_piece(self, accumulator: DistributedLayout) -> Optional[LanePiece]:
        """What one lane computes, for families whose lanes own C pieces; else None."""
        return None

    @abstractmethod
    def warp_tile_text(self, h: ExplainShape) -> str:
        """explain's warp tile line, after "warp tile"."""

    @abstractmethod
    def instruction_text(self, h: ExplainShape) -> tuple[str, str]:
        """explain's next line: (label, text)."""

    # -- viz ------------------------------------------------------------------------------
    @abstractmethod
    def viz_refusal(self, plan: TilingPlan, kernel: str) -> Optional[str]:
        """None when ``tilec viz`` draws this family's bank maps and fragments; else why
        not, naming ``kernel`` (``kernel 'sgemm'``) and its instructions."""


def instruction_tile_text(h: ExplainShape) -> tuple[str, str]:
    """explain's instruction line for families whose one instruction covers an m x n x k
    tile (mma.sync, wgmma)."""
    return ("instruction tile", "m{}n{}k{}".format(*h.instruction)
            + f", {h.k_steps} k-steps per BK")


def check_fragment_load(op: Op) -> None:
    """The type rule of a fragment load: a shared tile in, a distributed operand out."""
    view = op.operands[0]
    require(isinstance(view.type, TileType) and view.type.space == "smem",
            "ldmatrix reads a shared tile")
    require(op.attrs["operand"] in ("A", "B"), "operand is A or B")
    check_fragment_result(op)


def check_operand_load(op: Op) -> None:
    """A fragment load whose result layout names the operand it loads (FFMA, tf32)."""
    check_fragment_load(op)
    require(op.result.type.layout.operand == op.attrs["operand"],
            "the result layout is the operand's")


def check_product(op: Op) -> None:
    """The type rule of a fragment product: ``acc + a @ b``, chained shapes."""
    a, b, acc = (v.type for v in op.operands)
    require(a.dtype == b.dtype, "mma operands share a dtype")
    require(acc == op.result.type, "mma returns the accumulator type")
    require(a.shape[1] == b.shape[0] and acc.shape == (a.shape[0], b.shape[1]),
            "mma fragment shapes do not chain")


def not_drawn(plan: TilingPlan, kernel: str, uses: str, instructions: str) -> str:
    """viz's refusal of a family it does not draw: what the kernel uses instead."""
    return (f"viz draws mma fragment layouts and ldmatrix bank maps; {kernel} uses {uses} "
            f"({plan.dtype} tiles: {instructions}, product kind '{plan.kind}'); see "
            "`tilec explain` for its bank conflicts")

