"""Executor semantics of the tf32 product kind's fragment load (``frag.ldtf32``), from the
layout functions alone, never from the backend's code; its product is ``frag.mma``
(:mod:`tilec.cpu.executor`, fragments of kind ``tf32``).

- ``frag.ldtf32`` where k is contiguous in shared memory: what ldmatrix.x4 delivers
  (:func:`tilec.cpu.executor.ldmatrix_index` with 32-bit elements: lane ``l`` gets word
  ``l % 4`` of row ``l // 4`` of each matrix). Otherwise one 32-bit read per fragment
  register at :func:`~tilec.target.layout.tf32_word_addresses`. Misaligned ldmatrix rows and
  reads past the stage are errors.
- Then every register is rounded as ``cvt.rna.tf32.f32`` rounds (:func:`round_tf32`), so a
  product of these fragments is the product of tf32 inputs, accumulated in f32.

The value is a :class:`~tilec.cpu.executor.Fragment` whose ``lanes`` are ``[warps, 32, regs]``
(one f32 per register); its logical tile shows the first warp of each warp row (A) or
column (B), read off with :func:`~tilec.target.layout.tf32_operand_coord`.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from tilec.cpu.executor import (Fragment, ldmatrix_index, read_fragment_lanes,
                                smem_itemsize)
from tilec.cpu.interpreter import InterpState, SemanticsFn
from tilec.ir.core import Op
from tilec.ir.types import TileType
from tilec.families.tf32 import (Tf32Layout, tf32_operand_coord, tf32_registers,
                                 tf32_word_addresses)
from tilec.target.layout import WARP_SIZE, SmemLayout, operand_k_major

TF32_DROPPED_BITS = 13  # f32 has 23 mantissa bits, tf32 10


def round_tf32(values: np.ndarray) -> np.ndarray:
    """f32 values rounded to tf32 as ``cvt.rna.tf32.f32`` does: to the nearest value with 10
    mantissa bits, ties away from zero (adding half of the dropped range to the magnitude
    bits carries into the exponent where it must, up to infinity); NaN stays NaN."""
    values = np.asarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    half = np.uint32(1 << (TF32_DROPPED_BITS - 1))
    kept = np.uint32(~((1 << TF32_DROPPED_BITS) - 1) & 0xFFFFFFFF)
    rounded = ((bits + half) & kept).view(np.float32)
    return np.where(np.isnan(values), values, rounded)


@lru_cache(maxsize=None)
def _word_index(smem: SmemLayout, fragment: Tf32Layout, k0: int,
                elem_bytes: int) -> np.ndarray:
    """Storage offset (within a stage) of every register ``[warps, 32, regs]`` the 32-bit
    reads of one k step load."""
    role = fragment.operand
    warps = fragment.warps[0] * fragment.warps[1]
    regs = tf32_registers(role, fragment.warp_tile)
    index = np.empty((warps, WARP_SIZE, regs), dtype=np.int64)
    for w in range(warps):
        along = w // fragment.warps[1] if role == "A" else w % fragment.warps[1]
        for reg in range(regs):
            addresses = tf32_word_addresses(smem, role, fragment.warp_tile, along, reg, k0,
                                            elem_bytes)
            index[w, :, reg] = np.array(addresses) // elem_bytes
    index.flags.writeable = False
    return index


def _index(smem: SmemLayout, fragment: Tf32Layout, k0: int,
           elem_bytes: int) -> tuple[np.ndarray, bool]:
    """Every register's storage offset ``[warps, 32, regs]``, and whether ldmatrix's rows
    are aligned (always true for 32-bit reads)."""
    if operand_k_major(fragment.operand, smem):
        index, aligned = ldmatrix_index(smem, fragment.operand, fragment.warps,
                                         fragment.warp_tile, k0, elem_bytes)
        return index[..., 0], aligned
    return _word_index(smem, fragment, k0, elem_bytes), True


@lru_cache(maxsize=None)
def _tile_map(fragment: Tf32Layout) -> tuple[np.ndarray, ...]:
    """(warp, lane, reg) and the (row, col) they hold in the logical fragment tile, for the
    first warp of each warp row (A) or warp column (B)."""
    role = fragment.operand
    extent = fragment.warp_tile[0] if role == "A" else fragment.warp_tile[1]
    entries = []
    for along in range(fragment.warps[0] if role == "A" else fragment.warps[1]):
        warp = along * fragment.warps[1] if role == "A" else along
        for lane in range(WARP_SIZE):
            for reg in range(tf32_registers(role, fragment.warp_tile)):
                mn, k = tf32_operand_coord(role, lane, reg)
                mn += along * extent
                entries.append((warp, lane, reg, *((mn, k) if role == "A" else (k, mn))))
    return tuple(np.array(column, dtype=np.int64) for column in zip(*entries))


def _ldtf32(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    rtype: TileType = op.result.type
    lanes = round_tf32(read_fragment_lanes(
        state, op, operands[0], Tf32Layout,
        lambda smem, fragment, k0: _index(smem, fragment, k0, smem_itemsize(op)),
        "an ldmatrix row address is not 16-byte aligned"))
    fragment = rtype.layout
    warp, lane, reg, row, col = _tile_map(fragment)
    if row.max() >= rtype.shape[0] or col.max() >= rtype.shape[1]:
        raise state.error(op, f"{fragment} does not fit a {list(rtype.shape)} tile")
    tile = np.full(rtype.shape, np.nan, dtype=np.float32)
    tile[row, col] = lanes[warp, lane, reg]
    value = tile.view(Fragment)
    value.lanes = lanes
    return [value]


SEMANTICS: dict[str, SemanticsFn] = {"frag.ldtf32": _ldtf32}
