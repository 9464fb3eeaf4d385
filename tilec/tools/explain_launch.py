"""``tilec explain``'s launch line: given the sizes, how many blocks the launch makes, how
many an SM holds at once, and how they fall into waves (:mod:`tilec.target.occupancy`).

A nearly empty last wave costs a whole wave's time: this line is where a ragged size's lost
speed shows before any GPU is involved.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from tilec.compiler import Compiled
from tilec.ir.core import require_grid
from tilec.launch.binding import launch_grid
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
    slices)."""

    tile_axes: tuple[int, ...]
    blocks: int
    residency: Residency
    sms: int
    whose: str
    persistent: bool
    stream_k: bool
    split: int
    cluster: int

    @property
    def tiles(self) -> int:
        return math.prod(self.tile_axes)

    @property
    def waves(self) -> Waves:
        """Waves of blocks, or a persistent grid's rounds of tiles."""
        if self.persistent:
            return Waves(self.tiles, self.blocks)
        return Waves(self.blocks, self.sms * self.residency.blocks)


def launch_of(compiled: Compiled, tile_axes: Sequence[int], threads: int, registers: int,
              sms: Optional[tuple[int, str]] = None) -> Launch:
    """The launch over ``tile_axes`` (the program's grid, as
    :func:`tilec.launch.binding.grid_size` evaluates it on the lowered kernel). ``threads``
    and ``registers`` a thread (ptxas's count, or the estimate) set the residency of a
    kernel that does not fix it; ``sms``: the SM count and whose it is (default
    :func:`multiprocessors`)."""
    kernel, arch = compiled.kernel, compiled.options.arch
    count, whose = sms if sms is not None else multiprocessors(arch)
    grid = launch_grid(list(tile_axes), kernel, count)
    roles = kernel.schedule.roles
    if roles is not None:
        residency = Residency(roles.blocks_per_sm, "as compiled")
    else:
        residency = resident_blocks(arch, threads, registers, compiled.rendered.smem_bytes)
    return Launch(tuple(tile_axes), math.prod(grid), residency, count, whose,
                  persistent=roles is not None and roles.persistent,
                  stream_k=roles is not None and roles.stream_k,
                  split=require_grid(kernel).attrs.get("split_k") or 1,
                  cluster=roles.cluster if roles is not None else 1)


def launch_text(compiled: Compiled, tile_axes: Sequence[int], threads: int, registers: int,
                sms: Optional[tuple[int, str]] = None) -> str:
    """:func:`launch_of` in words: blocks, residency and waves (a persistent grid's rounds
    of tiles)."""
    launch = launch_of(compiled, tile_axes, threads, registers, sms)
    residency = launch.residency
    on = (f"{residency.blocks} resident an SM ({residency.limit}) on {launch.sms} SMs "
          f"({launch.whose})")
    tiles_text = f"{launch.tiles} output tiles ({' x '.join(map(str, launch.tile_axes))})"
    if launch.persistent:
        rounds = launch.waves
        text = (f"{tiles_text} over {launch.blocks} persistent blocks, {on}: "
                f"{_waves_text(rounds, 'round', 'rounds of tiles')}")
        if launch.stream_k and rounds.last < launch.blocks:
            text += "; stream-K shares the last round's K steps among all the blocks"
        return text
    what = (f"{launch.blocks} blocks, {launch.split} a tile (split-K)" if launch.split > 1
            else f"{launch.blocks} blocks, one a tile")
    if launch.cluster > 1 and launch.blocks > launch.tiles * launch.split:
        what += f" (M tiles rounded up to clusters of {launch.cluster})"
    return f"{tiles_text}: {what}, {on}: {_waves_text(launch.waves, 'wave', 'waves')}"


def _waves_text(waves: Waves, one: str, many: str) -> str:
    if waves.count == 0:
        return f"no {many}"
    busy = f"({waves.last / waves.per_wave:.0%} of the GPU busy while it runs)"
    if waves.count == 1:
        return f"one {one}, {waves.last} of {waves.per_wave} {busy}"
    if waves.last == waves.per_wave:
        return f"{waves.count} full {many}"
    return f"{waves.count} {many}, the last {waves.last} of {waves.per_wave} {busy}"
