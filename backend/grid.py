"""The program ids of ``tile.grid`` from CUDA's block ids, written once for both backends.

Each backend hands its context (``int_op``, ``div_const``, ``mod_const``, ``mad`` in the
PTX mnemonics both contexts take) and how it reads a ``%ctaid`` axis; this module decides
which CUDA axis numbers which grid axis (:func:`tilec.backend.abi.folded_axes`, the layout
the launch grid of :mod:`tilec.launch.binding` is built from). The llvm backend once kept a
copy of it that folded a batched grid's first two axes (the batch and M) instead of M and N,
which computed the wrong tiles wherever the batch count differed from the tile counts.
"""
from __future__ import annotations

from typing import Callable

from tilec.ir.core import Op

from .abi import folded_axes, folds_tile_axes


def grouped_coords(ctx, gm, gn, pid, group: int):
    """The (m, n) tile of linear tile index ``pid`` of a ``gm`` x ``gn`` grid in grouped
    order: ``group`` block rows walk the N blocks together so that the A and B tiles they
    share stay in L2."""
    per_group = ctx.int_op("mul.lo.s32", gn, group)
    group_id = ctx.int_op("div.u32", pid, per_group)
    first_m = ctx.int_op("mul.lo.s32", group_id, group)
    rows_left = ctx.int_op("sub.s32", gm, first_m)
    group_rows = ctx.int_op("min.s32", rows_left, group)
    in_group = ctx.int_op("rem.u32", pid, per_group)
    pid_m = ctx.int_op("add.s32", first_m, ctx.int_op("rem.u32", in_group, group_rows))
    pid_n = ctx.int_op("div.u32", in_group, group_rows)
    return pid_m, pid_n


def cluster_group(group: int, cluster: int) -> int:
    """The raster group of a grid whose blocks walk clusters of ``cluster`` M tiles: the
    clusters of ``group`` rows of tiles, so that a group spans as many M tiles as without
    clusters. Counted in clusters, a cluster=2 kernel's raster group 16 read 32 rows of A
    tiles for each column of B tiles: at 4096^3 (128x256 tiles, persistent, H100, ncu at
    locked clocks) DRAM traffic rose 13% (L2 hit rate 76.6% against 83.7%) and the kernel
    took 216.6 us against 213.5 without the cluster; counted in rows, 214.1 us and the
    DRAM traffic of the kernel without."""
    return max(1, -(-group // cluster))


def cluster_units(ctx, gm, gn, cluster: int, cluster_n: int):
    """The grid's clusters along M and along N: ``gm`` and ``gn`` tiles in whole clusters of
    ``cluster`` x ``cluster_n`` (the launch rounds them up; the blocks past the grid compute
    nothing they store)."""
    if cluster > 1:
        gm = ctx.div_const(ctx.int_op("add.s32", gm, cluster - 1), cluster)
    if cluster_n > 1:
        gn = ctx.div_const(ctx.int_op("add.s32", gn, cluster_n - 1), cluster_n)
    return gm, gn


def cluster_tile(ctx, unit_m, unit_n, rank, cluster: int, cluster_n: int):
    """The (m, n) tile of the block of cluster ``rank`` (m + cluster * n, as %cluster_ctarank
    numbers a cluster of cluster x cluster_n blocks launched along x) in the cluster of
    ``unit_m``, ``unit_n``."""
    if cluster_n == 1:
        return ctx.mad(unit_m, cluster, rank), unit_n
    if cluster == 1:
        return unit_m, ctx.mad(unit_n, cluster_n, rank)
    return (ctx.mad(unit_m, cluster, ctx.mod_const(rank, cluster, nonnegative=True)),
            ctx.mad(unit_n, cluster_n, ctx.div_const(rank, cluster, nonnegative=True)))


def program_ids(ctx, op: Op, ctaid: Callable[[str], object], cluster: int = 1,
                cluster_n: int = 1) -> list:
    """The value of each of ``op``'s results (the grid's program ids), in order. Grouped
    rasterization folds two tile axes into CUDA's x (a batched grid's two besides the batch);
    the other axes (a batch, a split-K slice) take CUDA's y and z in order. ``ctaid("x")``
    reads the block id of an axis. In a thread-block cluster of ``cluster`` x ``cluster_n``
    (> 1) blocks the blocks of a cluster are consecutive ids taking consecutive M tiles of
    one N column (they share B), ``cluster_n`` such columns side by side (each M row of them
    shares A), so the raster walks clusters (the launch grid rounds the tiles up to whole
    clusters; a block past M or N computes nothing it stores), ``raster_group`` rows of tiles
    a group (:func:`cluster_group`)."""
    ids: list = [None] * len(op.results)
    if not folds_tile_axes(op):
        for axis, index in zip("xyz", range(len(op.results))):
            ids[index] = ctaid(axis)
        return ids
    pid = ctaid("x")
    group = op.attrs.get("raster_group")
    folded = folded_axes(op)
    gm, gn = (ctx.get(op.operands[axis]) for axis in folded)
    blocks = cluster * cluster_n
    if blocks > 1:
        units_m, units_n = cluster_units(ctx, gm, gn, cluster, cluster_n)
        rank = ctx.mod_const(pid, blocks, nonnegative=True)
        unit_m, unit_n = grouped_coords(ctx, units_m, units_n,
                                        ctx.div_const(pid, blocks, nonnegative=True),
                                        cluster_group(group, cluster))
        pid_m, pid_n = cluster_tile(ctx, unit_m, unit_n, rank, cluster, cluster_n)
    else:
        pid_m, pid_n = grouped_coords(ctx, gm, gn, pid, group)
    ids[folded[0]], ids[folded[1]] = pid_m, pid_n
    others = [axis for axis in range(len(op.results)) if axis not in folded]
    for cuda_axis, index in zip("yz", others):
        ids[index] = ctaid(cuda_axis)
    return ids
