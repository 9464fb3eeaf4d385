"""Executor semantics of the FFMA product kind (``frag.lds``, ``frag.fma``): what the lanes
load and compute, from the layout functions alone (:func:`tilec.target.layout.simt_loads`,
:func:`~tilec.target.layout.simt_load_addresses`, :class:`~tilec.target.layout.SimtLayout`), never from
the backend's code.

- ``frag.lds``: for each warp and lane, the 16-byte vectors of the loads of one k step,
  scattered into the registers the loads name; reading past the stage or a misaligned
  vector is an error. The value is a :class:`~tilec.cpu.executor.Fragment` whose ``lanes`` are
  ``[warps, 32, regs]``.
- ``frag.fma``: per lane, for k in order, ``acc = fma(a[i, k], b[k, j], acc)`` in f32 with
  one rounding per multiply-add (the f32 product is exact in float64, the sum is rounded
  once to f32 -- double rounding through float64 cannot change a round-to-nearest f32
  result here, as 2 * 24 + 1 bits fit in 53).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from tilec.cpu.executor import (Fragment, checked_register_map, read_fragment_lanes,
                                smem_itemsize)
from tilec.cpu.interpreter import InterpState, SemanticsFn
from tilec.ir.core import Op
from tilec.ir.types import TileType
from tilec.families.ffma import SIMT_K, SIMT_VEC, SimtLayout, simt_load_addresses, simt_loads
from tilec.target.layout import WARP_SIZE, SmemLayout, operand_k_major


@lru_cache(maxsize=None)
def _lds_index(smem: SmemLayout, fragment: SimtLayout, k0: int,
               elem_bytes: int) -> tuple[np.ndarray, bool]:
    """Storage offset (within a stage) of every register ``[warps, 32, regs]`` one k step
    loads, and whether every vector is 16-byte aligned (ld.shared.v4 requires it)."""
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


def _lds(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    rtype: TileType = op.result.type
    lanes = read_fragment_lanes(
        state, op, operands[0], SimtLayout,
        lambda smem, fragment, k0: _lds_index(smem, fragment, k0, smem_itemsize(op)),
        "a 16-byte shared load is misaligned")
    fragment = rtype.layout
    fragment_value = _fragment_tile(lanes, fragment, tuple(rtype.shape)).view(Fragment)
    fragment_value.lanes = lanes
    return [fragment_value]


def _fma(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
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


SEMANTICS: dict[str, SemanticsFn] = {"frag.lds": _lds, "frag.fma": _fma}
