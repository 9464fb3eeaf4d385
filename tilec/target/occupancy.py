"""How many blocks of a kernel one SM holds at once, and how a grid of them falls into waves.

A grid of equal blocks runs in waves of ``SMs x resident blocks``: when the last wave is
nearly empty, most of the GPU waits on it (4096x4104x4096 in 128x256 tiles: 544 blocks, four
full waves of 132 and 16 blocks in a fifth, so 5 tile-times for 4.1 tiles' work a SM). A
persistent grid has one round of tiles per wave instead, with the same arithmetic.

The per-SM limits are the CUDA C++ Programming Guide's table of technical specifications per
compute capability ("Compute Capabilities"); registers are allocated per warp in units of
256 (a thread's count rounded up to 8), shared memory per block with 1 KiB the driver keeps
back. It imports nothing from the compiler: ``tilec explain`` and the bench read it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SMLimits:
    """One SM's resources on a target, and the SM count of the part most often met there
    (used where no GPU is present to ask)."""

    threads: int
    registers: int
    shared_bytes: int
    blocks: int
    sms: int
    part: str


SM_LIMITS = {
    "sm_80": SMLimits(threads=2048, registers=65536, shared_bytes=167936, blocks=32, sms=108,
                      part="an A100's"),
    "sm_86": SMLimits(threads=1536, registers=65536, shared_bytes=102400, blocks=16, sms=84,
                      part="an RTX 3090's"),
    "sm_90": SMLimits(threads=2048, registers=65536, shared_bytes=233472, blocks=32, sms=132,
                      part="an H100 SXM's or H200's"),
}
SM_LIMITS["sm_90a"] = SM_LIMITS["sm_90"]
SHARED_RESERVED_PER_BLOCK = 1024
REGISTER_UNIT = 256  # registers are allocated to a warp in units of this many
WARP = 32


@dataclass(frozen=True)
class Residency:
    """Blocks one SM holds at once, and the resource that caps them ("threads",
    "registers", "shared memory", "blocks", or "as compiled" where the kernel fixes it)."""

    blocks: int
    limit: str


def resident_blocks(arch: str, threads: int, registers: int, shared_bytes: int) -> Residency:
    """How many blocks of ``threads`` threads, ``registers`` registers a thread and
    ``shared_bytes`` of shared memory an SM of ``arch`` holds at once."""
    sm = SM_LIMITS[arch]
    warps = -(-threads // WARP)
    per_warp = -(-registers * WARP // REGISTER_UNIT) * REGISTER_UNIT
    caps = {
        "threads": sm.threads // (warps * WARP),
        "registers": sm.registers // (max(per_warp, REGISTER_UNIT) * warps),
        "shared memory": sm.shared_bytes // (shared_bytes + SHARED_RESERVED_PER_BLOCK),
        "blocks": sm.blocks,
    }
    limit = min(caps, key=caps.__getitem__)
    return Residency(caps[limit], limit)


@dataclass(frozen=True)
class Waves:
    """``work`` equal pieces (blocks, or a persistent grid's tiles) run ``per_wave`` at a
    time: ``count`` waves, the last holding ``last`` of them."""

    work: int
    per_wave: int

    @property
    def count(self) -> int:
        return -(-self.work // self.per_wave)

    @property
    def last(self) -> int:
        return self.work - (self.count - 1) * self.per_wave

    @property
    def fill(self) -> float:
        """The share of the SMs' time the pieces keep busy: work over count x per_wave."""
        return self.work / (self.count * self.per_wave) if self.work else 1.0
