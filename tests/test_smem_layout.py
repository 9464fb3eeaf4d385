"""The kernel's shared-memory layout (tilec/target/smem.py): each buffer's offset and alignment,
checked against the addresses the backends' PTX uses, and the room check's what-if of a
staging tile against the layout the tma_store pass then produces."""
from __future__ import annotations

import re

import pytest

from tilec.backend.copies import STORE_VIAS
from tilec.options import Spec, TensorSpec
from tilec.target.smem import (BARRIER_BYTES, SMEM_ALIGN, STAGED_VIAS, STAGING_ALIGN,
                               SWIZZLE_ATOM_ALIGN, Placement, place, total_with_staging)
from tilec.tools.explain import explain

from .test_ptxas import load_sample

HOPPER = dict(arch="sm_90a", BM=128, BN=256, BK=64, stages=3, M=4096, N=4096, K=4096)


def base_register(ptx: str) -> str:
    (register,) = re.findall(r"mov\.u32 (%r\d+), tilec_smem;", ptx)
    return register


def test_ring_barriers_and_staging_of_a_warp_specialized_kernel():
    compiled = load_sample("gemm_epilogue", "f16").compile(**HOPPER)
    layout = place(compiled.kernel)
    # A: 3 stages of 128x64 f16, B: 3 of 256x64; both slabbed (TMA's swizzle: 1024-byte
    # stages); two rings of 3 mbarriers right after them; the 128x256 f16 staging tile on
    # the next 1024-byte boundary.
    assert [(op.name, placed) for op, placed in layout.buffers.items()] == [
        ("smem.alloc", Placement("ring", 0, 16384, 3, SWIZZLE_ATOM_ALIGN)),
        ("smem.alloc", Placement("ring", 49152, 32768, 3, SWIZZLE_ATOM_ALIGN)),
        ("mbar.alloc", Placement("barriers", 147456, BARRIER_BYTES, 3, BARRIER_BYTES)),
        ("mbar.alloc", Placement("barriers", 147480, BARRIER_BYTES, 3, BARRIER_BYTES)),
        ("tile.store", Placement("staging", 148480, 65536, 1, STAGING_ALIGN)),
    ]
    assert layout.total == 148480 + 65536 == compiled.rendered.smem_bytes
    assert layout.ring_align == SWIZZLE_ATOM_ALIGN

    ptx = compiled.ptx
    base = base_register(ptx)
    assert ".extern .shared .align 1024 .b8 tilec_smem[];" in ptx
    for op, placed in layout.buffers.items():
        assert placed.offset % placed.align == 0
        if placed.offset:  # the PTX addresses each buffer at its offset from the base
            assert re.search(rf"add\.s32 %r\d+, {base}, {placed.offset};", ptx), placed
    # Each barrier ring is initialised at its offset, one mbarrier every 8 bytes.
    for op, placed in layout.buffers.items():
        if placed.kind == "barriers":
            (register,) = re.findall(rf"add\.s32 (%r\d+), {base}, {placed.offset};\n"
                                     r"\t@%p\d+ mbarrier\.init", ptx)
            for stage in range(placed.stages):
                assert f"mbarrier.init.shared::cta.b64 [{register}+{stage * 8}], " \
                       f"{op.attrs['count']};" in ptx


def test_the_room_check_asks_where_a_staging_tile_would_go():
    function = load_sample("gemm_epilogue", "f16")
    staged = function.compile(**HOPPER).kernel
    direct = function.compile(disable=("tma_store",), **HOPPER).kernel
    staging = 128 * 256 * 2
    assert [p.kind for p in place(direct).buffers.values()] == ["ring"] * 2 + ["barriers"] * 2
    assert place(direct).total == 147504  # not a multiple of STAGING_ALIGN: rounded up
    assert total_with_staging(place(direct), staging) == place(staged).total == 214016


@pytest.mark.parametrize("backend", ["ptx", "llvm"])
def test_cp_async_rings_start_on_128_bytes_in_both_backends(backend):
    compiled = load_sample("matmul", "f16").compile(arch="sm_80", backend=backend)
    layout = place(compiled.kernel)
    (a, b) = layout.buffers.values()
    # A: 3 stages of 128x32 f16 (8 KiB each), B: 3 of 32x128; unslabbed: 128-byte stages.
    assert (a.offset, a.stage_bytes, a.stages, a.align) == (0, 8192, 3, SMEM_ALIGN)
    assert (b.offset, b.stage_bytes, b.stages, b.align) == (24576, 8192, 3, SMEM_ALIGN)
    assert layout.total == compiled.rendered.smem_bytes == 49152
    assert layout.ring_align == SMEM_ALIGN


def test_every_store_route_of_a_movement_family_is_placed_as_a_staging_tile():
    assert set(STORE_VIAS) == set(STAGED_VIAS)


def test_explain_shows_the_staging_tile_of_a_row_store():
    """C's rows 2-byte aligned: the tile is staged, then stored a row at a time (via rows).
    explain's table is the backend's layout, the staging tile included (it was left out when
    explain walked the kernel on its own and knew only the TMA store's)."""
    unaligned_c = Spec(tensors=(("A", TensorSpec(1, 8)), ("B", TensorSpec(1, 8)),
                                ("C", TensorSpec(1, 1))))
    options = {key: value for key, value in HOPPER.items() if key not in "MNK"}
    compiled = load_sample("gemm_epilogue", "f16").compile(spec=unaligned_c, **options)
    (store,) = [op for op in compiled.kernel.walk() if op.name == "tile.store"]
    assert store.attrs["via"] == "rows"
    shared = explain(compiled, ptxas=False).shared
    assert [b.name for b in shared.buffers][-1] == "sC"
    assert (shared.buffers[-1].offset, shared.buffers[-1].total_bytes) == (148480, 65536)
    assert shared.total_bytes == shared.backend_bytes == 214016
