"""Peeling a grid axis's partial last tile into a launch of its own (``Options.peel``).

Why: where N is a whole number of BN-wide tiles and a few columns more (2048x2056: 16 tiles
of 128 and 8 columns), the last column of tiles does a whole tile's work for those few
columns, and on a GPU whose SMs each take one tile at a time it can cost a whole wave:
2048³ ran at 600 TFLOP/s on an H100 where 2048x2056 ran at 402 (benchmarks/NOTES.md,
session 19). Peeled, the launch runs the whole tiles as one kernel over views of the
tensors that stop at the last whole tile, then the remainder as a second kernel over views
that start there, compiled with a narrow tile (:data:`REMAINDER_WIDTH`) and one tile a block.
Measured so far it does not pay enough to be chosen: 2048x2056x2048 peeled ran at 400.7
TFLOP/s against 403.7 whole (H100, 128x256 tiles in clusters of 2), the remainder's 16
narrow tiles, one block each over all of K, taking about as long as the wave they saved; in
session 20, 434.0 against 402.5 (ncu at locked clocks: the whole tiles 33.6 us, the
remainder 14.4), while 192x192 tiles, one wave of 121 with nothing to peel, ran at 1.23x the
unpeeled launch (benchmarks/NOTES.md). Splitting the remainder's tiles along K (8 slices a
tile, 128 blocks) did not shorten it: 14.4 us on the H100, 12.5 on an H200, with the SMs
active half of that and the warps waiting on global loads (the slices' partial sums), so it
was taken out again. It is an option (off by default) to experiment with.

What a program must be, for the launches to compute what the one would (:func:`peel_sites`):
the grid axis is ``cdiv(S, C)`` for a shape symbol S and a constant C named by one of the
program's constants; S is used nowhere else; every tensor with S in its shape is read and
written only by tile loads and stores (through transposes) whose index along S is
``i * C`` for that axis's grid variable i, spanning C; and i is used only so. Then a tile's
data lies wholly inside one part, each part sees the same program over its own S, and the
edge masks follow the views' shapes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from tilec.ir.core import Kernel, Op, Value, constant_value, defining_op, require_grid, uses
from tilec.ir.types import TensorType
from tilec.launch.binding import Bound

# The remainder's tile width along the peeled axis: the narrowest whose rows are a whole
# 128-byte TMA span (64 16-bit elements: the widest boxes), and a whole number of mma.sync
# tiles.
REMAINDER_WIDTH = 64
# Ops through which a tensor reaches its loads and stores without changing what it holds.
VIEW_OPS = ("tensor.transpose",)


@dataclass(frozen=True)
class PeelSite:
    """A grid axis the launch may peel: ``axis`` of the grid, over ``cdiv(symbol, step)``,
    ``step`` being the program's constant ``const``."""

    axis: int
    symbol: str
    step: int
    const: str


@dataclass(frozen=True)
class Peel:
    """A peeled launch's parts: the whole tiles' ``main`` elements of the symbol, then the
    ``rest`` in tiles ``width`` wide."""

    site: PeelSite
    main: int
    rest: int
    width: int

    def summary(self) -> str:
        """The bench's words: ``N peeled at 4096 (+8 in 64-wide tiles)``."""
        return (f"{self.site.symbol} peeled at {self.main} (+{self.rest} in {self.width}-wide "
                "tiles)")

    def describe(self) -> str:
        s = self.site
        return (f"{s.symbol} peeled at {self.main}: {self.main // s.step} whole {s.step}-wide "
                f"tiles, then the last {self.rest} in a launch of {self.width}-wide tiles "
                f"({s.const}={self.width}, one tile a block)")


def peel_sites(kernel: Kernel) -> tuple[tuple[PeelSite, ...], str]:
    """The grid axes a launch of ``kernel`` (the frontend's tile IR) may peel, and why each
    other axis may not, in words ("" when every axis may); the conditions are the
    module's."""
    grid = require_grid(kernel)
    sites, reasons = [], []
    for axis, size in enumerate(grid.operands):
        site, reason = _axis_site(kernel, grid, axis, size)
        if site is not None:
            sites.append(site)
        else:
            reasons.append(f"grid axis {axis}: {reason}")
    return tuple(sites), "; ".join(reasons)


def _axis_site(kernel: Kernel, grid: Op, axis: int,
               size: Value) -> tuple[Optional[PeelSite], str]:
    op = defining_op(size)
    if op is None or op.name != "arith.cdiv":
        return None, "not cdiv(a shape symbol, a constant)"
    symbol = next((s for s in kernel.symbols if kernel.symbol_value(s) is op.operands[0]),
                  None)
    step = constant_value(op.operands[1])
    const = op.operands[1].hint.split(".")[0]
    if symbol is None or not isinstance(step, int) or const not in kernel.consts:
        return None, "not cdiv(a shape symbol, a constant of the program's)"
    if len(uses(kernel, op.operands[0])) != 1:
        return None, f"{symbol} is used beside the grid's cdiv({symbol}, {const})"
    index = grid.results[axis]
    offsets = []
    for user, _ in uses(kernel, index):
        factors = [v for v in user.operands if v is not index]
        if user.name != "arith.mul" or len(factors) != 1 or constant_value(factors[0]) != step:
            return None, (f"the grid variable {index.hint} is used other than as "
                          f"{index.hint} * {const}")
        offsets.append(user.result)
    accessed = set()
    for param in kernel.params:
        if not (isinstance(param.type, TensorType) and symbol in param.type.shape):
            continue
        why = _tiles_along(kernel, kernel.param_value(param.name), symbol, step, offsets,
                           accessed)
        if why:
            return None, f"{param.name}: {why}"
    stray = [v for v in offsets if any(id(op) not in accessed for op, _ in uses(kernel, v))]
    if stray:
        return None, (f"{index.hint} * {const} is used other than as an index along "
                      f"{symbol}")
    return PeelSite(axis, symbol, step, const), ""


def _tiles_along(kernel: Kernel, tensor: Value, symbol: str, step: int,
                 offsets: list[Value], accessed: set[int]) -> str:
    """Why the tile accesses of ``tensor`` (and its views) along ``symbol`` are not each one
    ``step``-wide tile at one of ``offsets``, or ""; records the accesses in ``accessed``."""
    views = [tensor]
    while views:
        for op, position in uses(kernel, views.pop()):
            if op.name in VIEW_OPS:
                views.append(op.result)
                continue
            if op.name not in ("tile.load", "tile.store") or position != 0:
                return f"read by {op.name}, not only by tile loads and stores"
            rank = op.operands[0].type.rank
            tile = op.attrs.get("shape") if op.name == "tile.load" else \
                op.operands[-1].type.shape
            for dim in op.operands[0].type.dims_of(symbol):
                at = None if tile is None else len(tile) - rank + dim
                if not any(op.operands[1 + dim] is v for v in offsets) or \
                        at is None or at < 0 or tile[at] != step:
                    return (f"its {op.name} along {symbol} is not one {step}-wide tile at "
                            "the grid variable times the step")
            accessed.add(id(op))
    return ""


def plan_peel(sites: tuple[PeelSite, ...], sizes: dict[str, int]) -> Optional[Peel]:
    """The parts of a launch at these symbol sizes, or None where peeling gains nothing: no
    axis with a partial tile narrower than a tile's width in remainder tiles, and whole
    tiles before it. Of several, the axis whose partial tile is emptiest (the later on a
    tie)."""
    peels = []
    for site in sites:
        total = sizes[site.symbol]
        main = total // site.step * site.step
        rest = total - main
        width = -(-rest // REMAINDER_WIDTH) * REMAINDER_WIDTH
        if rest and main and width < site.step:
            peels.append(Peel(site, main, rest, width))
    return min(reversed(peels), key=lambda p: p.rest / p.site.step, default=None)


def peeled_dims(kernel: Kernel, symbol: str) -> dict[str, list[int]]:
    """The tensor parameters with ``symbol`` in their shape, each with those dims."""
    return {param.name: param.type.dims_of(symbol) for param in kernel.params
            if isinstance(param.type, TensorType) and symbol in param.type.shape}


def parts(peel: Peel) -> tuple[tuple[int, int], tuple[int, int]]:
    """(start, extent) along the peeled symbol of the whole tiles' part, then the rest's."""
    return (0, peel.main), (peel.main, peel.rest)


def peeled_bounds(kernel: Kernel, bound: Bound, peel: Peel) -> tuple[Bound, Bound]:
    """The arguments of the two launches: each tensor with the peeled symbol in its shape
    as a view of its first ``main`` elements along it, then of the rest."""
    symbol = peel.site.symbol
    dims = peeled_dims(kernel, symbol)
    bounds = []
    for start, extent in parts(peel):
        tensors = dict(bound.tensors)
        for name in dims.keys() & tensors.keys():
            for dim in dims[name]:
                tensors[name] = _view(tensors[name], dim, start, extent)
        bounds.append(Bound(tensors, dict(bound.scalars), {**bound.symbols, symbol: extent}))
    return bounds[0], bounds[1]


def _view(arg: Any, dim: int, start: int, extent: int) -> Any:
    """``arg`` (an ArrayArg) from ``start`` along ``dim``, ``extent`` long."""
    shape = list(arg.shape)
    shape[dim] = extent
    return dataclasses.replace(arg, ptr=arg.ptr + start * arg.strides[dim] * arg.itemsize,
                               shape=tuple(shape))


# Schedule options the remainder's narrow launch drops: its few tiles run one a block, in
# consumer warpgroups of 64 rows (a 64-row tile along a peeled M takes no other).
REMAINDER_RESETS = dict(persistent=False, cluster=1, cluster_n=1, stream_k=False, split_k=1,
                        consumers="cooperative", blocks_per_sm=1, warpgroup_rows=64)


def remainder_settings(peel: Peel, options: dict[str, Any],
                       consts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The options and constants the remainder's launch compiles with. Its operands are a
    few columns (or rows) of the tensors: under pack "auto" they are read in place, as a
    pack kernel's launch would cost more than their misaligned reads (pack "always"
    stays)."""
    pack = "off" if options.get("pack", "auto") == "auto" else options["pack"]
    return ({**options, **REMAINDER_RESETS, "pack": pack, "peel": False},
            {**consts, peel.site.const: peel.width})
