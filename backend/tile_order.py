"""How a persistent kernel's tile loop turns a linear tile index into the grid's ids, with
divisors the host prepares for each launch.

The order is :func:`tilec.backend.grid.grouped_coords`'s, batch by batch: tile t is batch
t / (tiles a batch), then within it group g = t' / (gn * group) of ``group`` rows of M
tiles (in a cluster, of clusters: gm and gn count those along M and N), row t'' % rows and column
t'' / rows of it, where rows is ``group`` but in the last group, which may be shorter.

The three divisors (tiles a batch, tiles a group, the last group's rows) are fixed for a
launch. Each comes as three hidden u32 parameters, the divisor, its magic number and its
shift (:func:`tilec.backend.divide.prepared`), so a tile's ids take multiply-highs instead
of runtime divisions, and the parameters stay in the constant bank rather than in registers
across the K loop. :func:`launch_values` is the host's side, :func:`coords` the kernel's;
the tests check the two against :func:`grouped_coords`'s order.
"""
from __future__ import annotations

from typing import Optional

from tilec.ir.core import Kernel, Op, require_grid

from . import divide
from .abi import AbiParam, folded_axes, param_type, tile_axes
from .grid import cluster_group

ROLE = "tile_order"
# Tiles a batch, tiles a raster group, the last group's rows.
DIVISORS = ("batch", "group", "last")
FIELDS = ("d", "magic", "shift")
U32 = param_type("i32")


def _source(divisor: str, field: str) -> str:
    # "$" is in no Python name: no program parameter can be called like one of these.
    return f"$tiles.{divisor}.{field}"


def batch_axis(grid: Op) -> Optional[int]:
    """A batched grid's batch axis (the tile axis the grouped order does not fold), or None."""
    folded = folded_axes(grid)
    return next((axis for axis in range(tile_axes(grid)) if axis not in folded), None)


def param_name(divisor: str, field: str) -> str:
    return f"tiles_{divisor}_{field}"


def divisors_used(kernel: Kernel) -> tuple[str, ...]:
    """The divisors a kernel's tile loop takes: none but in a persistent kernel, the batch
    only where the grid has one."""
    roles = kernel.schedule.roles
    if roles is None or not roles.persistent:
        return ()
    return DIVISORS if batch_axis(require_grid(kernel)) is not None else DIVISORS[1:]


def kernel_params(kernel: Kernel) -> tuple[AbiParam, ...]:
    """A persistent kernel's divisors, after the program's parameters; none else."""
    return tuple(AbiParam(param_name(divisor, field), U32, _source(divisor, field), ROLE)
                 for divisor in divisors_used(kernel) for field in FIELDS)


def group_rows(kernel: Kernel) -> int:
    """Rows of the tile loop's M units (tiles, or a cluster's M tiles) a raster group."""
    group = require_grid(kernel).attrs.get("raster_group") or 1
    cluster = kernel.schedule.roles.cluster
    return cluster_group(group, cluster) if cluster > 1 else group


def divisor_values(gm: int, gn: int, group: int) -> dict[str, int]:
    """The three divisors of a gm x gn grid (gm: M units) walked ``group`` rows a group."""
    last_first = (max(gm - 1, 0) // group) * group
    return {"batch": gm * gn, "group": gn * group, "last": gm - last_first}


def launch_values(kernel: Kernel, sizes: list[int]) -> dict[str, int]:
    """Each of ``kernel_params``' sources -> its value, for the grid's tile-axis ``sizes``."""
    first, second = folded_axes(require_grid(kernel))
    roles = kernel.schedule.roles
    gm = -(-sizes[first] // roles.cluster)
    gn = -(-sizes[second] // roles.cluster_n)
    values = divisor_values(gm, gn, group_rows(kernel))
    out = {}
    for divisor in divisors_used(kernel):
        magic, shift = divide.prepared(values[divisor])
        # The launcher passes i32 values; a magic number of 2^31 or more goes as the i32
        # of the same bits, which the kernel reads as .u32.
        out.update({_source(divisor, "d"): max(values[divisor], 1),
                    _source(divisor, "magic"): magic - (1 << 32) if magic >> 31 else magic,
                    _source(divisor, "shift"): shift})
    return out


def _divmod(ctx, x: str, divisor: str) -> tuple[str, str]:
    d, magic, shift = (ctx.workspace[_source(divisor, field)] for field in FIELDS)
    return divide.divmod_prepared(ctx, x, d, magic, shift)


def coords(ctx, tile: str, gm: str, group: int,
           batched: bool) -> tuple[Optional[str], str, str]:
    """(batch or None, M unit, N tile) of linear tile index ``tile`` (0 <= tile < the grid's
    tiles; ``gm``: the M units, a register). ``batched``: the grid has a batch axis
    (:func:`batch_axis`), the outermost part of the index, so the batch divisor
    (:func:`divisors_used`) is one of the kernel's parameters."""
    batch = None
    if batched:
        batch, tile = _divmod(ctx, tile, "batch")
    group_id, in_group = _divmod(ctx, tile, "group")
    first_m = ctx.int_op("mul.lo.s32", group_id, group)
    whole = ctx.w.reg("pred")
    ctx.w.emit(f"setp.le.s32 {whole}, {ctx.int_op('add.s32', first_m, group)}, {gm};")
    n_last, m_last = _divmod(ctx, in_group, "last")
    n_whole = ctx.div_const(in_group, group, nonnegative=True)
    m_whole = ctx.mod_const(in_group, group, nonnegative=True)
    pid_n, offset = ctx.w.reg("b32"), ctx.w.reg("b32")
    ctx.w.emit(f"selp.b32 {pid_n}, {n_whole}, {n_last}, {whole};")
    ctx.w.emit(f"selp.b32 {offset}, {m_whole}, {m_last}, {whole};")
    return batch, ctx.int_op("add.s32", first_m, offset), pid_n


def model_coords(tile: int, gm: int, gn: int, group: int) -> tuple[int, int, int]:
    """What :func:`coords` computes, in Python: (batch, M unit, N tile)."""
    values = divisor_values(gm, gn, group)
    batch, tile = divide.model_prepared(tile, values["batch"])
    group_id, in_group = divide.model_prepared(tile, values["group"])
    first_m = group_id * group
    if first_m + group <= gm:
        n, m = divmod(in_group, group)
    else:
        n, m = divide.model_prepared(in_group, values["last"])
    return batch, first_m + m, n
