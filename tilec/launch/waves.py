"""A launch's blocks on the SMs: how many it makes over the program's tiles, how many an SM
holds at once, and how they fall into waves (a persistent grid's rounds of tiles), from the
compiled kernel and the tile axes (:func:`tilec.launch.binding.grid_size` on the lowered
kernel). ``tilec explain`` words it; the bench's config column summarises it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from tilec.ir.core import require_grid
from tilec.launch.binding import launch_grid, whole_cluster_tiles
from tilec.target.occupancy import SM_LIMITS, Residency, Waves, resident_blocks


def multiprocessors(arch: str) -> tuple[int, str]:
    """The SM count waves are counted on, and whose it is: this machine's GPU when there is
    one, else the part SM_LIMITS names for the target."""
    from tilec.runtime.driver import current_device, has_gpu
    if has_gpu():
        return current_device().multiprocessor_count, "this GPU's"
    limits = SM_LIMITS[arch]
    return limits.sms, limits.part


@dataclass(frozen=True)
class Launch:
    """A launch over ``tile_axes`` on ``sms`` SMs (``whose``): its ``blocks``, how many an
    SM holds, and whether they persist over the tiles (``split``: blocks a tile, split-K's
    slices; ``walked``: the tiles a persistent grid's blocks walk, its clusters' idle
    places past an odd M included)."""

    tile_axes: tuple[int, ...]
    blocks: int
    residency: Residency
    sms: int
    whose: str
    persistent: bool
    stream_k: bool
    split: int
    cluster: int
    cluster_n: int
    walked: int

    @property
    def tiles(self) -> int:
        return math.prod(self.tile_axes)

    @property
    def waves(self) -> Waves:
        """Waves of blocks, or a persistent grid's rounds of tiles (one round over the SMs
        where there are fewer tiles than places: the grid is then as small as the tiles,
        and the SMs it leaves idle are the round's lost share)."""
        if self.persistent:
            return Waves(self.walked, self.blocks if self.walked > self.blocks
                         else self.sms * self.residency.blocks)
        return Waves(self.blocks, self.sms * self.residency.blocks)


def launch_of(compiled: Any, tile_axes: Sequence[int], registers: int,
              sms: Optional[tuple[int, str]] = None) -> Launch:
    """The launch over ``tile_axes`` (the program's grid, as
    :func:`tilec.launch.binding.grid_size` evaluates it on the lowered kernel). The block's
    threads and ``registers`` a thread (ptxas's count, or the estimate) set the residency of
    a kernel that does not fix it; ``sms``: the SM count and whose it is (default
    :func:`multiprocessors`)."""
    kernel, arch = compiled.kernel, compiled.options.arch
    count, whose = sms if sms is not None else multiprocessors(arch)
    grid = launch_grid(list(tile_axes), kernel, count)
    roles = kernel.schedule.roles
    if roles is not None:
        residency = Residency(roles.blocks_per_sm, "as compiled")
    else:
        residency = resident_blocks(arch, compiled.rendered.threads, registers,
                                    compiled.rendered.smem_bytes)
    persistent = roles is not None and roles.persistent
    return Launch(tuple(tile_axes), math.prod(grid), residency, count, whose,
                  persistent=persistent,
                  stream_k=roles is not None and roles.stream_k,
                  split=require_grid(kernel).attrs.get("split_k") or 1,
                  cluster=roles.cluster if roles is not None else 1,
                  cluster_n=roles.cluster_n if roles is not None else 1,
                  walked=whole_cluster_tiles(tile_axes, kernel) if persistent
                  else math.prod(tile_axes))
