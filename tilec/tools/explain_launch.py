"""``tilec explain``'s launch line: given the sizes, how many blocks the launch makes, how
many an SM holds at once, and how they fall into waves (:mod:`tilec.launch.waves`).

A nearly empty last wave costs a whole wave's time: this line is where a ragged size's lost
speed shows before any GPU is involved.
"""
from __future__ import annotations

from typing import Optional, Sequence

from tilec.compiler import Compiled
from tilec.launch.waves import launch_of
from tilec.target.occupancy import Waves


def launch_text(compiled: Compiled, tile_axes: Sequence[int], registers: int,
                sms: Optional[tuple[int, str]] = None) -> str:
    """:func:`launch_of` in words: blocks, residency and waves (a persistent grid's rounds
    of tiles)."""
    launch = launch_of(compiled, tile_axes, registers, sms)
    residency = launch.residency
    on = (f"{residency.blocks} resident an SM ({residency.limit}) on {launch.sms} SMs "
          f"({launch.whose})")
    tiles_text = f"{launch.tiles} output tiles ({' x '.join(map(str, launch.tile_axes))})"
    rounded = (f" (M tiles rounded up to clusters of {launch.cluster})" if launch.cluster_n == 1
               else f" (tiles rounded up to clusters of {launch.cluster}x{launch.cluster_n})")
    if launch.persistent:
        rounds = launch.waves
        walked = rounded if launch.walked > launch.tiles else ""
        text = (f"{tiles_text} over {launch.blocks} persistent blocks{walked}, {on}: "
                f"{_waves_text(rounds, 'round', 'rounds of tiles')}")
        if launch.stream_k and rounds.last < launch.blocks:
            text += "; stream-K shares the last round's K steps among all the blocks"
        return text
    what = (f"{launch.blocks} blocks, {launch.split} a tile (split-K)" if launch.split > 1
            else f"{launch.blocks} blocks, one a tile")
    if launch.cluster * launch.cluster_n > 1 and launch.blocks > launch.tiles * launch.split:
        what += rounded
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
