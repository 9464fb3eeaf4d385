"""The FFMA family ("simt"): 16-byte ``ld.shared`` of each lane's operand elements
(``frag.lds``) + ``fma.rn.f32`` (``frag.fma``) on f32 tiles: exact f32 products, one rounding
per multiply-add, as cuBLAS SGEMM with TF32 off (``Options.f32_math = "ffma"``).

A warp is 4 x 8 lanes; a lane owns runs of SIMT_VEC consecutive rows (and columns) of C, the
runs one lane-grid span apart (16 rows, 32 columns). Runs of 4 make every shared-memory
fragment read a 16-byte vector, and the spacing makes the 8 lanes of a lane row read one
whole 128-byte line of B. Here: the layout (:class:`SimtLayout`), the loads of one k step
(:func:`simt_loads`) and their addresses, the emitters, the definitions of ``frag.lds`` and
``frag.fma`` with their CPU semantics, the explain text and viz's refusal. The CPU semantics
read the same layout functions as the emitters, so the backend and the CPU model cannot
drift.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from tilec.backend.context import Context, SmemView
from tilec.ir.core import Op
from tilec.ir.ops import OpDef, require
from tilec.ir.types import TileType
from tilec.ir.schedule import OperandPlan, TilingPlan
from tilec.target.layout import (WARP_SIZE, DistributedLayout, SmemLayout,
                                 broadcast_conflict_degree, offset_relation, operand_extent,
                                 operand_k_major, operand_storage_coord, warps_along)

from .fragments_common import operand_offset, relative_address
from .product import (ExplainShape, ExplainText, LanePiece, ProductFamily, Run,
                      check_operand_load, check_product, not_drawn)

if TYPE_CHECKING:
    import numpy as np

    from tilec.cpu.interpreter import InterpState

# The CPU semantics import numpy and the CPU model (tilec.cpu) where they run: compiling
# never runs them, and a cold `tilec compile` should not wait for numpy's import.

SIMT_LANES = (4, 8)
SIMT_VEC = 4
SIMT_K = 4  # k values per fragment load: one 16-byte vector along k


@dataclass(frozen=True)
class SimtLayout(DistributedLayout):
    """A tile distributed over warps for FFMA (fma.rn.f32) products.

    C: lane (r, c) holds rows ``r * 4 + 16 * i + {0..3}`` and columns
    ``c * 4 + 32 * j + {0..3}`` of its warp tile, registers row-major (column fastest).
    A (``[BM, SIMT_K]`` per k step): the lane's rows, register ``row * SIMT_K + k``.
    B (``[SIMT_K, BN]``): the lane's columns, register ``k * cols + col``.
    """

    operand: str
    warps: tuple[int, int]
    warp_tile: tuple[int, int]
    lane_grid = SIMT_LANES
    lane_step = (SIMT_VEC, SIMT_VEC)
    kind = "simt"

    @property
    def lane_rows(self) -> list[int]:
        """Rows of a lane's C (and A) elements, relative to its first row."""
        return _runs(self.warp_tile[0] // SIMT_LANES[0], SIMT_LANES[0] * SIMT_VEC)

    @property
    def lane_cols(self) -> list[int]:
        return _runs(self.warp_tile[1] // SIMT_LANES[1], SIMT_LANES[1] * SIMT_VEC)

    def register_offsets(self) -> list[tuple[int, int]]:
        if self.operand == "A":
            return [(row, k) for row in self.lane_rows for k in range(SIMT_K)]
        if self.operand == "B":
            return [(k, col) for k in range(SIMT_K) for col in self.lane_cols]
        return [(row, col) for row in self.lane_rows for col in self.lane_cols]

    @property
    def regs_per_thread(self) -> int:
        return len(self.cached_offsets())


def _runs(count: int, spacing: int) -> list[int]:
    return [run * spacing + i for run in range(count // SIMT_VEC) for i in range(SIMT_VEC)]


@dataclass(frozen=True)
class SimtLoad:
    """One 16-byte shared load of an FFMA operand's k step, for one lane: the (mn, k) of its
    first element relative to the lane's first (mn, k), the storage dim it runs along, and
    the registers its 4 elements fill."""

    mn: int
    k: int
    along_k: bool
    registers: tuple[int, ...]


@functools.lru_cache(maxsize=None)
def simt_loads(layout: SimtLayout, k_major: bool) -> tuple[SimtLoad, ...]:
    """The loads of one k step of operand ``layout.operand`` (A or B), in the order the
    backend issues them. With k contiguous in shared memory a load covers the SIMT_K values
    of one row (column); otherwise it covers one run of 4 rows (columns) at one k."""
    role = layout.operand
    mns = layout.lane_rows if role == "A" else layout.lane_cols

    def register(i: int, k: int) -> int:
        return i * SIMT_K + k if role == "A" else k * len(mns) + i

    if k_major:
        return tuple(SimtLoad(mn, 0, True, tuple(register(i, k) for k in range(SIMT_K)))
                     for i, mn in enumerate(mns))
    return tuple(SimtLoad(mns[i], k, False, tuple(register(i + q, k) for q in range(SIMT_VEC)))
                 for k in range(SIMT_K) for i in range(0, len(mns), SIMT_VEC))


def simt_lane_mn(role: str, lane: int) -> int:
    """The first row (A) or column (B) of a lane's elements within its warp tile."""
    lane_row, lane_col = divmod(lane, SIMT_LANES[1])
    return (lane_row if role == "A" else lane_col) * SIMT_VEC


def simt_load_addresses(smem: SmemLayout, fragment: SimtLayout, load: SimtLoad,
                        warp_index: int, k0: int, elem_bytes: int) -> list[int]:
    """Byte addresses the 32 lanes read in one FFMA operand load (warp ``warp_index`` along
    the operand's mn dim)."""
    role = fragment.operand
    extent = operand_extent(role, fragment.warp_tile)
    k_major = operand_k_major(role, smem)
    result = []
    for lane in range(WARP_SIZE):
        mn = warp_index * extent + simt_lane_mn(role, lane) + load.mn
        row, col = operand_storage_coord(k_major, mn, k0 + load.k)
        result.append(smem.offset(row, col) * elem_bytes)
    return result


# -- emitters ------------------------------------------------------------------------------

def _lane_offset(ctx: Context, view: SmemView, fragment: SimtLayout, mn_rel: int,
                 k: int) -> str:
    """Byte offset (from the stage start) of this lane's element (first mn + mn_rel, k)."""
    role = fragment.operand

    def compute() -> str:
        lane, _ = ctx.lane_warp()
        lane_cols = SIMT_LANES[1]
        if role == "A":
            lane_index = ctx.int_op("shr.u32", lane, lane_cols.bit_length() - 1)
        else:
            lane_index = ctx.int_op("and.b32", lane, lane_cols - 1)
        first = ctx.int_op("shl.b32", lane_index, SIMT_VEC.bit_length() - 1)
        return operand_offset(ctx, view, role, fragment.warps, fragment.warp_tile, first,
                              mn_rel, k)

    return ctx.w.once(("lds", id(view.buffer), role, mn_rel, k), compute)


def _all_lanes(view: SmemView, fragment: SimtLayout, load: SimtLoad, k0: int) -> list[int]:
    """The byte offsets every lane of every warp along the operand reads in one load."""
    return [a for w in range(warps_along(fragment.operand, fragment.warps))
            for a in simt_load_addresses(view.buffer.layout, fragment, load, w, k0,
                                         view.buffer.elem_bytes)]


def _lds(ctx: Context, op: Op) -> None:
    """``frag.lds``: one ld.shared.v4.f32 per SimtLoad (PTX ISA 9.7.9.8, ld)."""
    view: SmemView = ctx.get(op.operands[0])
    fragment: SimtLayout = op.result.type.layout
    k0 = op.attrs["k0"]
    loads = simt_loads(fragment, operand_k_major(fragment.operand, view.buffer.layout))
    reference = _all_lanes(view, fragment, loads[0], 0)
    regs: list[str] = [""] * fragment.regs_per_thread
    state: dict = {}
    for load in loads:
        relation = offset_relation(reference, _all_lanes(view, fragment, load, k0))
        address = relative_address(
            ctx, view, relation, state,
            lambda: _lane_offset(ctx, view, fragment, loads[0].mn, loads[0].k),
            lambda load=load: _lane_offset(ctx, view, fragment, load.mn, k0 + load.k))
        out = ctx.w.regs("f32", len(load.registers))
        ctx.w.emit(f"ld.shared.v4.f32 {{{', '.join(out)}}}, [{address}];")
        for index, reg in zip(load.registers, out):
            regs[index] = reg
    ctx.bind(op.result, regs)


def _fma(ctx: Context, op: Op) -> None:
    """``frag.fma``: fma.rn.f32 (PTX ISA 9.7.3.6) for every C element at every k."""
    a_regs, b_regs, acc = (ctx.get(v) for v in op.operands)
    layout: SimtLayout = op.result.type.layout
    rows, cols = len(layout.lane_rows), len(layout.lane_cols)
    steps = len(a_regs) // rows
    # Accumulate in place when nothing else reads the old accumulator (as frag.mma does).
    in_place = ctx.uses(op.operands[2]) == 1 and len(set(acc)) == len(acc)
    out = list(acc) if in_place else ctx.w.regs("f32", len(acc))
    current = list(acc)
    # k outermost: the 8 x 8 products of one k are independent, so each accumulator's
    # chain of dependent FMAs is interleaved with 63 others.
    for k in range(steps):
        for i in range(rows):
            for j in range(cols):
                index = i * cols + j
                ctx.w.emit(f"fma.rn.f32 {out[index]}, {a_regs[i * steps + k]}, "
                           f"{b_regs[k * cols + j]}, {current[index]};")
                current[index] = out[index]
    ctx.bind(op.result, out)


# -- explain ---------------------------------------------------------------------------------

def _run(offsets: Sequence[int]) -> Run:
    starts = [o for i, o in enumerate(offsets) if i == 0 or offsets[i - 1] != o - 1]
    spacing = starts[1] - starts[0] if len(starts) > 1 else 0
    return Run(len(starts), len(offsets) // len(starts), spacing)


def _runs_text(rows: Run, cols: Run) -> str:
    """``runs of 4 rows 16 apart, 4 columns 32 apart``; a single run is ``4 rows``."""
    parts = [f"{run.length} {noun}" + (f" {run.spacing} apart" if run.count > 1 else "")
             for run, noun in ((rows, "rows"), (cols, "columns"))]
    return ("runs of " if rows.count > 1 or cols.count > 1 else "") + ", ".join(parts)


# -- the family --------------------------------------------------------------------------------

# -- IR ops and their CPU semantics ----------------------------------------------------------
# What the executor does for these ops, from the layout functions above alone, never from
# the emitters:
#
# - frag.lds: for each warp and lane, the 16-byte vectors of the loads of one k step,
#   scattered into the registers the loads name; reading past the stage or a misaligned
#   vector is an error. The value is a tilec.cpu.executor.Fragment whose lanes are
#   [warps, 32, regs].
# - frag.fma: per lane, for k in order, acc = fma(a[i, k], b[k, j], acc) in f32 with one
#   rounding per multiply-add (the f32 product is exact in float64, the sum is rounded once
#   to f32 -- double rounding through float64 cannot change a round-to-nearest f32 result
#   here, as 2 * 24 + 1 bits fit in 53).


def _check_fma(op: Op) -> None:
    check_product(op)
    a, b, acc = (v.type for v in op.operands)
    require(a.dtype == b.dtype == acc.dtype, "FFMA products are f32 throughout")
    require([a.layout.operand, b.layout.operand, acc.layout.operand] == ["A", "B", "C"],
            "operands are A, B and C fragments")


@functools.lru_cache(maxsize=None)
def _lds_index(smem: SmemLayout, fragment: SimtLayout, k0: int,
               elem_bytes: int) -> tuple[np.ndarray, bool]:
    """Storage offset (within a stage) of every register ``[warps, 32, regs]`` one k step
    loads, and whether every vector is 16-byte aligned (ld.shared.v4 requires it)."""
    import numpy as np
    warps = fragment.warps[0] * fragment.warps[1]
    index = np.full((warps, WARP_SIZE, fragment.regs_per_thread), -1, dtype=np.int64)
    aligned = True
    for w in range(warps):
        along = w // fragment.warps[1] if fragment.operand == "A" else w % fragment.warps[1]
        for load in simt_loads(fragment, operand_k_major(fragment.operand, smem)):
            addresses = simt_load_addresses(smem, fragment, load, along, k0, elem_bytes)
            for lane, address in enumerate(addresses):
                aligned &= address % (SIMT_VEC * elem_bytes) == 0
                index[w, lane, list(load.registers)] = address // elem_bytes + np.arange(
                    SIMT_VEC)
    index.flags.writeable = False
    return index, aligned


def _fragment_tile(lanes: np.ndarray, fragment: SimtLayout, shape: tuple[int, ...]
                   ) -> np.ndarray:
    """The logical [BM, k] (A) or [k, BN] (B) tile the lanes hold, read off the first warp
    of each warp row (A) or column (B)."""
    import numpy as np
    tile = np.full(shape, np.nan, dtype=lanes.dtype)
    warps = fragment.warps[0] * fragment.warps[1]
    for w in range(warps):
        wm, wn = divmod(w, fragment.warps[1])
        if (fragment.operand == "A" and wn) or (fragment.operand == "B" and wm):
            continue
        for lane in range(WARP_SIZE):
            lane_row, lane_col = divmod(lane, fragment.lane_grid[1])
            for reg, (r, c) in enumerate(fragment.register_offsets()):
                if fragment.operand == "A":
                    if lane_col == 0:
                        tile[wm * fragment.warp_tile[0] + lane_row * SIMT_VEC + r, c] = \
                            lanes[w, lane, reg]
                elif lane_row == 0:
                    tile[r, wn * fragment.warp_tile[1] + lane_col * SIMT_VEC + c] = \
                        lanes[w, lane, reg]
    return tile


def _execute_lds(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    from tilec.cpu.executor import Fragment, read_fragment_lanes, smem_itemsize
    rtype: TileType = op.result.type
    lanes = read_fragment_lanes(
        state, op, operands[0], SimtLayout,
        lambda smem, fragment, k0: _lds_index(smem, fragment, k0, smem_itemsize(op)),
        "a 16-byte shared load is misaligned")
    fragment = rtype.layout
    fragment_value = _fragment_tile(lanes, fragment, tuple(rtype.shape)).view(Fragment)
    fragment_value.lanes = lanes
    return [fragment_value]


def _execute_fma(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    import numpy as np

    from tilec.cpu.executor import Fragment, checked_register_map
    a, b, acc = operands
    c_type: TileType = op.operands[2].type
    layout: SimtLayout = c_type.layout
    for which, value in (("A", a), ("B", b)):
        if not isinstance(value, Fragment) or value.lanes is None:
            raise state.error(op, f"operand {which} is not a fragment made by frag.lds")
    rows_map, cols_map = checked_register_map(state, op, layout, c_type.shape)
    warps, rows, cols = rows_map.shape[0], len(layout.lane_rows), len(layout.lane_cols)
    a_lanes = a.lanes.reshape(warps, WARP_SIZE, rows, SIMT_K).astype(np.float64)
    b_lanes = b.lanes.reshape(warps, WARP_SIZE, SIMT_K, cols).astype(np.float64)
    registers = acc[rows_map, cols_map].reshape(warps, WARP_SIZE, rows, cols)
    for k in range(SIMT_K):
        products = a_lanes[..., :, k, None] * b_lanes[..., None, k, :]
        registers = (registers.astype(np.float64) + products).astype(np.float32)
    result = np.empty(c_type.shape, dtype=np.float32)
    result[rows_map, cols_map] = registers.reshape(warps, WARP_SIZE, -1)
    return [result]


FRAG_LDS = OpDef("frag.lds", "each lane's rows (A) or columns (B) of a k step of an FFMA "
                 "operand, from shared memory in 16-byte vectors", 1, 1,
                 attrs=("operand", "k0"), check=check_operand_load, pure=True,
                 evaluate=_execute_lds)
FRAG_FMA = OpDef("frag.fma", "acc + a @ b over each lane's elements with fma.rn.f32, k in order",
                 3, 1, check=_check_fma, pure=True, evaluate=_execute_fma)


class Ffma(ProductFamily):
    """16-byte ld.shared + fma.rn.f32 on f32 tiles."""

    name = "simt"
    dtypes = ("f32",)
    f32_math = "ffma"
    k_step = SIMT_K
    granule = (SIMT_LANES[0] * SIMT_VEC, SIMT_LANES[1] * SIMT_VEC)
    granule_why = " (4 x 8 lanes, each owning runs of 4 rows and 4 columns)"
    instruction = (1, 1, 1)
    layout = SimtLayout
    load_op = "frag.lds"
    product_op = "frag.fma"
    read_name = "lds"
    explain_text = ExplainText("ld.shared.v4", "fma.rn.f32", "thread", "lds", "fma", "loads",
                               ())
    emitters = {"frag.lds": _lds, "frag.fma": _fma}

    def op_defs(self) -> tuple[OpDef, ...]:
        return FRAG_LDS, FRAG_FMA

    def fragment_registers(self, warp_rows: int, warp_cols: int) -> int:
        # A: SIMT_K values per row the lane owns; B: SIMT_K per column.
        return (warp_rows // SIMT_LANES[0] + warp_cols // SIMT_LANES[1]) * SIMT_K

    def read_addresses(self, plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                       warp_index: int, k0: int, elem_bytes: int) -> Iterator[list[int]]:
        fragment = SimtLayout(op_plan.role, plan.warps, plan.warp_tile)
        for load in simt_loads(fragment, operand_k_major(op_plan.role, layout)):
            yield simt_load_addresses(layout, fragment, load, warp_index, k0, elem_bytes)

    def read_access(self, role: str, layout: SmemLayout) -> str:
        return "ld.shared.v4"

    def read_degree(self, k_major: bool, addresses: Sequence[int]) -> int:
        # Lanes that read one address are served together (8 lanes share an A row).
        return broadcast_conflict_degree(addresses, 16)

    def loads_per_k_step(self, plan: TilingPlan) -> tuple[int, int]:
        """ld.shared.v4 per thread per k-step, A and B, as the backend issues them."""
        a, b = (len(simt_loads(SimtLayout(op.role, plan.warps, plan.warp_tile), op.k_major))
                for op in (plan.operand("A"), plan.operand("B")))
        return a, b

    def products_per_k_step(self, accumulator: DistributedLayout) -> int:
        """fma.rn.f32 per thread per k-step: every (row, column) of its C piece at every k."""
        return len(accumulator.lane_rows) * len(accumulator.lane_cols) * self.k_step

    def lane_piece(self, accumulator: DistributedLayout) -> Optional[LanePiece]:
        return LanePiece(accumulator.lane_grid,
                         (len(accumulator.lane_rows), len(accumulator.lane_cols)),
                         _run(accumulator.lane_rows), _run(accumulator.lane_cols))

    def warp_tile_text(self, h: ExplainShape) -> str:
        tm, tn = h.warp_tile
        text, lanes = self.explain_text, h.lanes
        rows, cols = lanes.shape
        article = "an" if str(rows).startswith("8") else "a"
        a, b = h.loads_per_k_step
        return (f"{tm} x {tn}: {lanes.lane_grid[0]} x {lanes.lane_grid[1]} lanes, each "
                f"{article} {rows} x {cols} piece of C ({_runs_text(lanes.rows, lanes.cols)}); "
                f"per k-step of {h.k_step}: {a + b} {text.load} (A {a}, B {b}) and "
                f"{h.products_per_k_step} {text.product} per {text.issuer}")

    def instruction_text(self, h: ExplainShape) -> tuple[str, str]:
        return ("instruction", f"fma.rn.f32, one multiply-add per thread (exact f32 "
                f"product, one rounding); {h.k_steps} k-steps of {h.k_step} per BK")

    def viz_refusal(self, plan: TilingPlan, kernel: str) -> Optional[str]:
        return not_drawn(plan, kernel, "FFMA", "ld.shared.v4 + fma.rn.f32")


FAMILY = Ffma()
