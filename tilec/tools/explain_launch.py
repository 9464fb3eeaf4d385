"""``tilec explain``'s launch line: given the sizes, how many blocks the launch makes, how
many an SM holds at once, and how they fall into waves (:mod:`tilec.target.occupancy`).

A nearly empty last wave costs a whole wave's time: this line is where a ragged size's lost
speed shows before any GPU is involved.
"""
from __future__ import annotations

import math
from typing import Optional

from tilec.compiler import Compiled
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


def launch_text(compiled: Compiled, tile_axes: list[int], threads: int, registers: int,
                sms: Optional[tuple[int, str]] = None) -> str:
    """The launch over ``tile_axes`` (the program's grid, as
    :func:`tilec.launch.binding.grid_size` evaluates it on the lowered kernel) in words:
    blocks, residency and waves (a persistent grid's rounds of tiles). ``threads`` and
    ``registers`` a thread (ptxas's count, or the estimate) set the residency of a kernel
    that does not fix it; ``sms``: the SM count and whose it is (default
    :func:`multiprocessors`)."""
    kernel, arch = compiled.kernel, compiled.options.arch
    count, whose = sms if sms is not None else multiprocessors(arch)
    grid = launch_grid(list(tile_axes), kernel, count)
    blocks, tiles = math.prod(grid), math.prod(tile_axes)
    roles = kernel.schedule.roles
    if roles is not None:
        residency = Residency(roles.blocks_per_sm, "as compiled")
    else:
        residency = resident_blocks(arch, threads, registers, compiled.rendered.smem_bytes)
    on = f"{residency.blocks} resident an SM ({residency.limit}) on {count} SMs ({whose})"
    tiles_text = f"{tiles} output tiles ({' x '.join(map(str, tile_axes))})"
    if roles is not None and roles.persistent:
        rounds = Waves(tiles, blocks)
        text = (f"{tiles_text} over {blocks} persistent blocks, {on}: "
                f"{_waves_text(rounds, 'round', 'rounds of tiles')}")
        if roles.stream_k and rounds.last < blocks:
            text += "; stream-K shares the last round's K steps among all the blocks"
        return text
    split = blocks // tiles if tiles else 1
    what = (f"{blocks} blocks, {split} a tile (split-K)" if split > 1
            else f"{blocks} blocks, one a tile")
    waves = Waves(blocks, count * residency.blocks)
    return f"{tiles_text}: {what}, {on}: {_waves_text(waves, 'wave', 'waves')}"


def _waves_text(waves: Waves, one: str, many: str) -> str:
    if waves.count == 0:
        return f"no {many}"
    busy = f"({waves.last / waves.per_wave:.0%} of the GPU busy while it runs)"
    if waves.count == 1:
        return f"one {one}, {waves.last} of {waves.per_wave} {busy}"
    if waves.last == waves.per_wave:
        return f"{waves.count} full {many}"
    return f"{waves.count} {many}, the last {waves.last} of {waves.per_wave} {busy}"
